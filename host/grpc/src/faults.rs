//! Fault injection at the transport edge, for tests of real multi-process
//! clusters: drop every Raft message to and from chosen peers (a network
//! partition). Off unless the node's configuration enables it.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::RwLock;

/// The peers this node is cut off from. Cheap to clone; clones share state.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    enabled: bool,
    cut_off: Arc<RwLock<HashSet<u64>>>,
}

impl Faults {
    /// A switchboard; `enabled` false refuses every change.
    pub fn new(enabled: bool) -> Self {
        Self { enabled, cut_off: Arc::default() }
    }

    /// Whether messages to or from `peer` are dropped.
    pub fn is_cut_off(&self, peer: u64) -> bool {
        self.enabled && self.cut_off.read().contains(&peer)
    }

    /// Refuses unless fault injection is enabled.
    pub fn check_enabled(&self) -> Result<(), &'static str> {
        if self.enabled { Ok(()) } else { Err("fault injection is disabled on this node (set fault_injection = true)") }
    }

    /// Drops messages to and from `peers` from now on (empty: heal).
    pub fn cut_off(&self, peers: impl IntoIterator<Item = u64>) -> Result<(), &'static str> {
        self.check_enabled()?;
        *self.cut_off.write() = peers.into_iter().collect();
        Ok(())
    }
}
