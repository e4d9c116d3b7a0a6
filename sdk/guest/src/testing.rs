//! Run a plugin natively in `cargo test`, against an in-memory host.
//!
//! Compiled for any target but `wasm32`, [`store`](crate::store),
//! [`events`](crate::events) and [`log`](crate::log) talk to an in-memory
//! host that belongs to the current thread (each `#[test]` runs on its own
//! thread, so tests never share state). [`TestHost`] drives a
//! [`StateMachine`] the way the real host does: entries get increasing
//! indexes and a clock, an entry that fails leaves no write and no event,
//! and a query that writes panics (the real host traps).
//!
//! What it does not model: fuel and memory limits, and panics, which here
//! fail the test instead of the entry. Run the plugin on a node
//! (`wasmraft dev --plugin`) to test those.
//!
//! ```
//! use wasmraft_sdk::testing::TestHost;
//! use wasmraft_sdk::{ApplyError, Entry, QueryError, StateMachine, store};
//!
//! struct Register;
//!
//! impl StateMachine for Register {
//!     fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
//!         store::put(b"value", &entry.command);
//!         if entry.command.is_empty() {
//!             // Refused after writing: the write is dropped.
//!             return Err(ApplyError::invalid("empty value"));
//!         }
//!         Ok(entry.index.to_string().into_bytes())
//!     }
//!
//!     fn query(_request: &[u8]) -> Result<Vec<u8>, QueryError> {
//!         Ok(store::get(b"value").unwrap_or_default())
//!     }
//! }
//!
//! let mut host = TestHost::<Register>::new();
//! assert_eq!(host.apply("a").unwrap(), b"1");
//! assert_eq!(host.apply("").unwrap_err(), ApplyError::invalid("empty value"));
//! assert_eq!(host.query("").unwrap(), b"a");
//! assert_eq!(host.apply("b").unwrap(), b"3", "the failed entry still took index 2");
//! ```

use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::{ApplyError, Entry, PluginInfo, QueryError, StateMachine};

/// A watcher event, as the host would publish it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The entry that produced it.
    pub index: u64,
    /// The key it concerns.
    pub key: Vec<u8>,
    /// The plugin's payload.
    pub payload: Vec<u8>,
}

/// An in-memory host for one [`StateMachine`], on the current thread.
///
/// Creating one clears the thread's store, so each test starts empty.
pub struct TestHost<S> {
    next_index: u64,
    now_ms: u64,
    #[cfg_attr(not(feature = "timers"), allow(dead_code))]
    grace_until_ms: u64,
    events: Vec<Event>,
    _plugin: PhantomData<fn() -> S>,
}

impl<S: StateMachine> Default for TestHost<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: StateMachine> TestHost<S> {
    /// An empty store; the first entry gets index 1 and the clock starts at
    /// 1 700 000 000 000 ms, advancing 1 ms per entry.
    pub fn new() -> Self {
        memory::reset();
        crate::events::take();
        Self { next_index: 1, now_ms: 1_700_000_000_000, grace_until_ms: 0, events: Vec::new(), _plugin: PhantomData }
    }

    /// Applies one entry holding `command`, as a committed entry would be.
    /// On error the entry's writes and events are discarded.
    pub fn apply(&mut self, command: impl AsRef<[u8]>) -> Result<Vec<u8>, ApplyError> {
        let entry =
            Entry { index: self.next_index, term: 1, timestamp_ms: self.now_ms, command: command.as_ref().to_vec() };
        self.next_index += 1;
        self.now_ms += 1;
        self.apply_entry(entry)
    }

    /// Applies `entry` as given (its index and clock are not checked).
    pub fn apply_entry(&mut self, entry: Entry) -> Result<Vec<u8>, ApplyError> {
        let index = entry.index;
        let outcome = memory::atomically(|| S::apply(entry));
        let events = crate::events::take();
        if outcome.is_ok() {
            self.events.extend(events.into_iter().map(|e| Event { index, key: e.key, payload: e.payload }));
        }
        outcome
    }

    /// Runs a query against the current state; a write in it panics.
    pub fn query(&self, request: impl AsRef<[u8]>) -> Result<Vec<u8>, QueryError> {
        let answer = memory::read_only(|| S::query(request.as_ref()));
        crate::events::take();
        answer
    }

    /// Runs [`StateMachine::migrate`] as a deploy over this keyspace would.
    /// On error its writes are discarded.
    pub fn migrate(&mut self, previous: &PluginInfo) -> Result<(), ApplyError> {
        let outcome = memory::atomically(|| S::migrate(previous));
        crate::events::take();
        outcome
    }

    /// Sets the clock the next entries see (`Entry::timestamp_ms`).
    pub fn set_time_ms(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// Sets the `grace_until_ms` the next ticks carry (a new leader's start
    /// plus an election timeout; 0 unless set).
    #[cfg(feature = "timers")]
    pub fn set_grace_until_ms(&mut self, grace_until_ms: u64) {
        self.grace_until_ms = grace_until_ms;
    }

    /// Moves log time to `now_ms` (never back) and, if the plugin's
    /// wake-up is due by then, applies a tick as the host would; its
    /// outcome, or `None` if nothing was due (the `timers` feature).
    #[cfg(feature = "timers")]
    pub fn advance_to(&mut self, now_ms: u64) -> Option<Result<(), ApplyError>> {
        self.now_ms = self.now_ms.max(now_ms);
        let due = memory::timer::get().is_some_and(|at| at <= self.now_ms);
        due.then(|| self.run_tick(Vec::new()).map(drop))
    }

    /// Applies a tick now that carries keep-alives, as `(key, taken at
    /// ms)`: one answer each (the `timers` feature).
    #[cfg(feature = "timers")]
    pub fn renew(&mut self, renewals: &[(&[u8], u64)]) -> Result<Vec<Result<Vec<u8>, ApplyError>>, ApplyError> {
        let renewals = renewals.iter().map(|(key, at_ms)| crate::Renewal { key: key.to_vec(), at_ms: *at_ms }).collect();
        self.run_tick(renewals)
    }

    #[cfg(feature = "timers")]
    fn run_tick(&mut self, renewals: Vec<crate::Renewal>) -> Result<Vec<Result<Vec<u8>, ApplyError>>, ApplyError> {
        let tick =
            crate::Tick { index: self.next_index, term: 1, now_ms: self.now_ms, grace_until_ms: self.grace_until_ms, renewals };
        self.next_index += 1;
        let outcome = memory::atomically(|| S::tick(&tick));
        let events = crate::events::take();
        if outcome.is_ok() {
            self.events.extend(events.into_iter().map(|e| Event { index: tick.index, key: e.key, payload: e.payload }));
        }
        outcome
    }

    /// The events of the entries applied so far, and forgets them.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// A copy of the whole keyspace.
    pub fn state(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        memory::dump()
    }
}

/// The in-memory host store behind [`crate::store`] off `wasm32`.
pub(crate) mod memory {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeMap;
    use std::ops::Bound;

    thread_local! {
        static STORE: RefCell<BTreeMap<Vec<u8>, Vec<u8>>> = const { RefCell::new(BTreeMap::new()) };
        static READ_ONLY: Cell<bool> = const { Cell::new(false) };
        static WAKE_UP: Cell<Option<u64>> = const { Cell::new(None) };
    }

    pub fn reset() {
        STORE.with(|s| s.borrow_mut().clear());
        WAKE_UP.with(|w| w.set(None));
    }

    /// The in-memory host's wake-up, behind [`crate::timer`].
    #[cfg(feature = "timers")]
    pub mod timer {
        pub fn set(at_ms: Option<u64>) {
            super::writable();
            super::WAKE_UP.with(|w| w.set(at_ms));
        }

        pub fn get() -> Option<u64> {
            super::WAKE_UP.with(std::cell::Cell::get)
        }
    }

    pub fn dump() -> BTreeMap<Vec<u8>, Vec<u8>> {
        STORE.with(|s| s.borrow().clone())
    }

    /// Runs `f`; if it fails, puts the store back as it was.
    pub fn atomically<T, E>(f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let before = dump();
        let wake_up = WAKE_UP.with(Cell::get);
        let outcome = f();
        if outcome.is_err() {
            STORE.with(|s| *s.borrow_mut() = before);
            WAKE_UP.with(|w| w.set(wake_up));
        }
        outcome
    }

    pub fn read_only<T>(f: impl FnOnce() -> T) -> T {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                READ_ONLY.with(|r| r.set(false));
            }
        }
        READ_ONLY.with(|r| r.set(true));
        let _reset = Reset;
        f()
    }

    fn writable() {
        // The real host traps a write during a query.
        assert!(!READ_ONLY.with(Cell::get), "the store is read-only during a query");
    }

    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        STORE.with(|s| s.borrow().get(key).cloned())
    }

    pub fn put(key: &[u8], value: &[u8]) {
        writable();
        STORE.with(|s| s.borrow_mut().insert(key.to_vec(), value.to_vec()));
    }

    pub fn delete(key: &[u8]) {
        writable();
        STORE.with(|s| s.borrow_mut().remove(key));
    }

    type Range<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

    fn bounds<'a>(start: &'a [u8], end: &'a [u8]) -> Option<Range<'a>> {
        if !end.is_empty() && end <= start {
            return None;
        }
        let upper = if end.is_empty() { Bound::Unbounded } else { Bound::Excluded(end) };
        Some((Bound::Included(start), upper))
    }

    pub fn scan(start: &[u8], end: &[u8], limit: u32, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(range) = bounds(start, end) else { return Vec::new() };
        let limit = if limit == 0 { usize::MAX } else { limit as usize };
        STORE.with(|s| {
            let s = s.borrow();
            let pairs = s.range::<[u8], _>(range).map(|(k, v)| (k.clone(), v.clone()));
            if reverse { pairs.rev().take(limit).collect() } else { pairs.take(limit).collect() }
        })
    }

    pub fn count(start: &[u8], end: &[u8]) -> u64 {
        let Some(range) = bounds(start, end) else { return 0 };
        STORE.with(|s| s.borrow().range::<[u8], _>(range).count() as u64)
    }
}
