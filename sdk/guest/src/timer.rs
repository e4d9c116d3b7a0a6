//! Wake-ups in log time (the `timers` feature, `wasmraft:plugin@0.2.0`).
//!
//! A plugin has one wake-up. When log time reaches it, the leader proposes
//! a tick and every replica calls [`StateMachine::tick`](crate::StateMachine::tick)
//! at that entry; no replica acts on its own clock. The wake-up is part of
//! the replicated state: set by an entry (and undone if that entry fails),
//! kept in snapshots, taken over by every later leader.
//!
//! A plugin with many deadlines keeps them in a [`Deadlines`] index, and
//! after changing it sets the wake-up to the earliest with
//! [`Deadlines::rearm`] (once per entry or tick, not once per change: an
//! entry may change thousands):
//!
//! ```
//! use wasmraft_sdk::timer::{self, Deadlines};
//!
//! let expiries = Deadlines::new(b"expiry/");
//! expiries.set(b"session-b", 2_000);
//! expiries.set(b"session-a", 1_000);
//! expiries.rearm();
//! assert_eq!(timer::next(), Some(1_000));
//! // At log time 1 500 one is due.
//! assert_eq!(expiries.due(1_500, 10), [(1_000, b"session-a".to_vec())]);
//! expiries.remove(b"session-a", 1_000);
//! expiries.rearm();
//! assert_eq!(timer::next(), Some(2_000));
//! expiries.remove(b"session-b", 2_000);
//! expiries.rearm();
//! assert_eq!(timer::next(), None);
//! ```

#[cfg(target_arch = "wasm32")]
use crate::__bindings::wasmraft::plugin::timer as host;
#[cfg(not(target_arch = "wasm32"))]
use crate::testing::memory::timer as host;

/// Asks for a tick once log time reaches `at_ms` (ms since the Unix epoch),
/// replacing any earlier request. A time already past is due at once.
/// Panics (the host traps) during a query.
pub fn wake_at(at_ms: u64) {
    host::set(Some(at_ms));
}

/// Cancels the wake-up.
pub fn cancel() {
    host::set(None);
}

/// The current wake-up, if any.
pub fn next() -> Option<u64> {
    host::get()
}

/// Deadlines kept in the store under one prefix, as
/// `prefix ++ at_ms (8 bytes, big-endian) ++ key`, in time order.
/// [`Deadlines::rearm`] sets the plugin's wake-up to the earliest (or
/// cancels it), so one `Deadlines` should own the wake-up of a plugin.
#[derive(Clone, Debug)]
pub struct Deadlines {
    prefix: Vec<u8>,
}

impl Deadlines {
    /// Deadlines under `prefix`.
    pub fn new(prefix: impl AsRef<[u8]>) -> Self {
        Self { prefix: prefix.as_ref().to_vec() }
    }

    fn record(&self, key: &[u8], at_ms: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 8 + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(&at_ms.to_be_bytes());
        k.extend_from_slice(key);
        k
    }

    /// Adds a deadline for `key` at `at_ms` (a key may have several).
    pub fn set(&self, key: &[u8], at_ms: u64) {
        crate::store::put(&self.record(key, at_ms), b"");
    }

    /// Removes the deadline for `key` at `at_ms`, if there is one.
    pub fn remove(&self, key: &[u8], at_ms: u64) {
        crate::store::delete(&self.record(key, at_ms));
    }

    /// Up to `limit` deadlines at or before `now_ms`, earliest first, as
    /// `(at_ms, key)`. They stay until [`Deadlines::remove`]d.
    pub fn due(&self, now_ms: u64, limit: usize) -> Vec<(u64, Vec<u8>)> {
        crate::store::iter_prefix(&self.prefix)
            .map(|(k, _)| self.parse(&k))
            .take_while(|(at, _)| *at <= now_ms)
            .take(limit)
            .collect()
    }

    /// The earliest deadline, if any.
    pub fn first(&self) -> Option<(u64, Vec<u8>)> {
        crate::store::iter_prefix(&self.prefix).next().map(|(k, _)| self.parse(&k))
    }

    fn parse(&self, record: &[u8]) -> (u64, Vec<u8>) {
        let rest = &record[self.prefix.len()..];
        let at = u64::from_be_bytes(rest[..8].try_into().expect("a deadline record holds its time"));
        (at, rest[8..].to_vec())
    }

    /// Sets the wake-up to the earliest deadline, or cancels it.
    pub fn rearm(&self) {
        let first = self.first().map(|(at, _)| at);
        match first {
            // Unchanged: no write.
            _ if first == next() => {}
            Some(at) => wake_at(at),
            None => cancel(),
        }
    }
}
