//! Events for watchers.
//!
//! Events are buffered while an entry is applied and handed to the host with
//! the entry's result: an entry that fails publishes none.

use std::cell::RefCell;

use crate::__bindings::wasmraft::plugin::types::Event;

thread_local! {
    static PENDING: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

/// Publishes `payload` under `key` to clients watching that key or a prefix
/// of it, once the current entry has applied.
pub fn emit(key: &[u8], payload: &[u8]) {
    PENDING.with(|p| p.borrow_mut().push(Event { key: key.to_vec(), payload: payload.to_vec() }));
}

pub(crate) fn take() -> Vec<Event> {
    PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()))
}
