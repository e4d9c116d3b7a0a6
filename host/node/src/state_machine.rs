//! The state machine behind a node, and how the node lets it read storage.

use std::sync::Arc;

use wasmraft_runtime::{
    ApplyBatch, Applier, EntryError, EntryInput, Fatal, QueryError, QueryPool, StateError, StateView, TickBatch, TickInput,
};
use wasmraft_storage::StateReader;

/// Applies committed entries. Implemented by the Wasm plugin runtime and by
/// native Rust state machines alike.
///
/// Contract: `apply` is called from one thread, in log order, with every
/// committed command exactly once per replica lifetime (after a restart,
/// from the durable applied index on). It must be deterministic: the same
/// entries over the same state give the same outcomes and writes on every
/// replica. It does not write storage itself: the node stores the returned
/// writes together with the applied index in one atomic write. `Err(Fatal)`
/// stops the node's apply loop; the entry is never skipped.
pub trait StateMachine: Send + 'static {
    /// Applies `entries` over `state` (the committed keyspace).
    fn apply(&mut self, state: Arc<dyn StateView>, entries: &[EntryInput]) -> Result<ApplyBatch, Fatal>;

    /// Called when the apply loop has nothing to do: a chance to prepare
    /// the next batch off the clients' path.
    fn idle(&mut self) -> Result<(), Fatal> {
        Ok(())
    }

    /// Applies a tick (see [`Applier::tick`]). Machines without timers
    /// write nothing and refuse every keep-alive.
    fn tick(&mut self, _state: Arc<dyn StateView>, tick: &TickInput) -> Result<TickBatch, Fatal> {
        let refused = EntryError::Rejected("this state machine has no timers".into());
        Ok(TickBatch { now_ms: tick.now_ms, renewed: vec![Err(refused); tick.renewals.len()], ..TickBatch::default() })
    }

    /// Whether the machine has timers: only then does its leader propose
    /// ticks.
    fn has_timers(&self) -> bool {
        false
    }
}

/// Answers read-only queries, concurrently with `apply`.
pub trait QueryHandler: Send + Sync + 'static {
    /// Answers `request` from `state`, which stays at one applied index for
    /// the whole call.
    fn query(&self, state: Arc<dyn StateView>, request: &[u8]) -> Result<Vec<u8>, QueryError>;
}

impl StateMachine for Applier {
    fn apply(&mut self, state: Arc<dyn StateView>, entries: &[EntryInput]) -> Result<ApplyBatch, Fatal> {
        Applier::apply(self, state, entries)
    }

    fn idle(&mut self) -> Result<(), Fatal> {
        self.prepare()
    }

    fn tick(&mut self, state: Arc<dyn StateView>, tick: &TickInput) -> Result<TickBatch, Fatal> {
        Applier::tick(self, state, tick)
    }

    fn has_timers(&self) -> bool {
        self.plugin().info().contract != wasmraft_runtime::CONTRACT_V1
    }
}

impl QueryHandler for QueryPool {
    fn query(&self, state: Arc<dyn StateView>, request: &[u8]) -> Result<Vec<u8>, QueryError> {
        QueryPool::query(self, state, request)
    }
}

/// Storage's state reader seen through the runtime's view trait.
pub(crate) struct StorageView(pub StateReader);

impl StateView for StorageView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.0.get(key).map_err(|e| StateError(e.to_string()))
    }

    fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        self.0.scan(start, end, reverse, visit).map_err(|e| StateError(e.to_string()))
    }
}
