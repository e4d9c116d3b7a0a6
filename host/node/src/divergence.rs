//! Divergence detection: replicas hash their plugin keyspace at the same
//! applied index and compare with the leader's hash.
//!
//! The leader proposes a `CheckHash` entry (every `hash_check_entries`
//! applied entries, or on request). Each replica hashes its keyspace right
//! after applying it. The leader then proposes its own hash in an
//! `ExpectHash` entry, and every replica that applies it compares. A
//! mismatch is reported loudly: in the node's status, in the log at error
//! level, and in the `wasmraft_keyspace_divergences_total` metric. Each
//! node's hash is in its status, so an operator (or `wasmraft check`) can
//! see which replica is the odd one out, the leader included.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::node::NodeStatus;
use crate::system::SystemCommand;

/// Hashes kept for comparison with the leader's.
const KEEP: usize = 64;



/// A node's latest keyspace hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashCheck {
    /// The index of the check entry the hash was taken at.
    pub index: u64,
    /// SHA-256 of the plugin keyspace there, in hex.
    pub sha256: String,
    /// Whether it matched the leader's, once the leader's hash applied.
    pub matches_leader: Option<bool>,
}

pub(crate) struct HashChecks {
    every: u64,
    /// A periodic check hashes the whole keyspace. Spread over the entries
    /// until the next one, it hashes at most about this many records per
    /// applied entry: a state of R records is checked every R / this
    /// entries when that is more than `every`, so the check's cost per
    /// entry stays the same however large the state grows (0: every
    /// `every` entries whatever the size).
    records_per_entry: u64,
    next_due: u64,
    own: BTreeMap<u64, [u8; 32]>,
}

impl HashChecks {
    /// Checks every `every` applied entries (0: only on request), less
    /// often for a state of more than `every * records_per_entry` records.
    pub fn new(every: u64, records_per_entry: u64, applied: u64) -> Self {
        Self { every, records_per_entry, next_due: applied.saturating_add(every), own: BTreeMap::new() }
    }

    /// Whether a periodic check is due (proposed by the leader only).
    pub fn due(&mut self, applied: u64, is_leader: bool) -> bool {
        if self.every == 0 || applied < self.next_due {
            return false;
        }
        self.next_due = applied + self.every;
        is_leader
    }

    /// Records this node's hash at `index`, taken over `records` records;
    /// on the leader, returns the entry that tells the others.
    pub fn record(&mut self, index: u64, hash: [u8; 32], records: u64, status: &Mutex<NodeStatus>) -> Option<SystemCommand> {
        self.schedule(index, records);
        self.own.insert(index, hash);
        while self.own.len() > KEEP {
            self.own.pop_first();
        }
        let mut status = status.lock();
        status.hash_checks += 1;
        status.hash_check = Some(HashCheck { index, sha256: hex(&hash), matches_leader: None });
        tracing::info!(index, sha256 = %hex(&hash), "keyspace hash");
        (status.role == wasmraft_raft::Role::Leader).then_some(SystemCommand::ExpectHash { index, hash })
    }

    /// After a check at `index` over `records` records: the next one is
    /// due `hash_check_entries` on, or later for a large state.
    fn schedule(&mut self, index: u64, records: u64) {
        if self.every > 0 {
            let spread = records.checked_div(self.records_per_entry).unwrap_or(0);
            self.next_due = self.next_due.max(index.saturating_add(self.every.max(spread)));
        }
    }

    /// Compares the leader's hash at `index` with this node's.
    pub fn compare(&mut self, index: u64, leader: &[u8; 32], status: &Mutex<NodeStatus>) {
        let Some(own) = self.own.get(&index) else {
            // Taken before a snapshot this node installed, or too long ago.
            tracing::debug!(index, "no own keyspace hash to compare with the leader's");
            return;
        };
        let matches = own == leader;
        let mut status = status.lock();
        if let Some(check) = status.hash_check.as_mut().filter(|c| c.index == index) {
            check.matches_leader = Some(matches);
        }
        if !matches {
            let message = format!(
                "keyspace diverged from the leader's at index {index}: this node's hash is {}, the leader's {}",
                hex(own),
                hex(leader)
            );
            tracing::error!(index, own = %hex(own), leader = %hex(leader), "{message}");
            status.divergences += 1;
            status.divergence = Some(message);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_state_is_checked_less_often_a_small_one_every_interval() {
        let mut checks = HashChecks::new(100, 4, 0);
        assert!(!checks.due(99, true));
        assert!(checks.due(100, true));
        // A small state: the next check 100 entries on.
        checks.schedule(101, 40);
        assert!(!checks.due(200, true));
        assert!(checks.due(201, true));
        // 4,000 records: hashed every 1,000 entries, about 4 per entry.
        checks.schedule(202, 4_000);
        assert!(!checks.due(1_201, true));
        assert!(checks.due(1_202, true));
        // Followers never propose.
        let mut follower = HashChecks::new(100, 4, 0);
        assert!(!follower.due(100, false));
        // Off stays off.
        let mut off = HashChecks::new(0, 4, 0);
        off.schedule(5, 1_000_000);
        assert!(!off.due(u64::MAX, true));
        // Without spreading: every 100 entries whatever the size.
        let mut fixed = HashChecks::new(100, 0, 0);
        fixed.schedule(100, 1_000_000);
        assert!(fixed.due(200, true));
    }
}
