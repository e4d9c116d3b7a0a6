//! The plugin's durable keyspace, kept by the host.
//!
//! Keys sort as unsigned bytes. Writes of the entry being applied are visible
//! to its own later reads at once; they become durable only if the entry
//! succeeds. During a query the store is read-only: a write traps.

use crate::__bindings::wasmraft::plugin::store as host;

/// The value under `key`, if any.
pub fn get(key: &[u8]) -> Option<Vec<u8>> {
    host::get(key)
}

/// Stores `value` under `key`.
pub fn put(key: &[u8], value: &[u8]) {
    host::put(key, value)
}

/// Removes `key` (a missing key is fine).
pub fn delete(key: &[u8]) {
    host::delete(key)
}

/// Up to `limit` pairs (0: no limit) with `start <= key < end` in key order,
/// descending when `reverse`. An empty `end` means no upper bound.
pub fn scan(start: &[u8], end: &[u8], limit: u32, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    host::scan(start, end, limit, reverse)
}

/// Every pair whose key starts with `prefix`, in key order.
pub fn scan_prefix(prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    scan(prefix, &prefix_end(prefix), 0, false)
}

/// How many keys lie in `[start, end)` (empty `end`: no upper bound).
pub fn count(start: &[u8], end: &[u8]) -> u64 {
    host::count(start, end)
}

/// The value under `key` as a big-endian `u64`; `None` if missing or not 8 bytes.
pub fn get_u64(key: &[u8]) -> Option<u64> {
    get(key).and_then(|v| Some(u64::from_be_bytes(v.try_into().ok()?)))
}

/// Stores `value` under `key` as 8 big-endian bytes (so they sort numerically).
pub fn put_u64(key: &[u8], value: u64) {
    put(key, &value.to_be_bytes())
}

/// The value under `key` as UTF-8 text; `None` if missing or not UTF-8.
pub fn get_string(key: &[u8]) -> Option<String> {
    get(key).and_then(|v| String::from_utf8(v).ok())
}

/// The smallest key greater than every key that starts with `prefix`, for use
/// as a scan's `end`; empty (no bound) when no such key exists.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}
