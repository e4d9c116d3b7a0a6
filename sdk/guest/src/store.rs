//! The plugin's durable keyspace, kept by the host.
//!
//! Keys sort as unsigned bytes. Writes of the entry being applied are visible
//! to its own later reads at once; they become durable only if the entry
//! succeeds. During a query the store is read-only: a write traps.
//!
//! Compiled for any target but `wasm32`, these functions use an in-memory
//! store of the current thread instead of the host, so that plugin logic
//! runs in plain `cargo test`; see [`testing`](crate::testing).
//!
//! ```
//! use wasmraft_sdk::store;
//!
//! store::put(b"user/ann", b"1");
//! store::put(b"user/bob", b"2");
//! store::put_u64(b"users", 2);
//! let names: Vec<Vec<u8>> = store::iter_prefix(b"user/").map(|(k, _)| k).collect();
//! assert_eq!(names, [b"user/ann".to_vec(), b"user/bob".to_vec()]);
//! assert_eq!(store::get_u64(b"users"), Some(2));
//! ```

use std::collections::VecDeque;

#[cfg(target_arch = "wasm32")]
use crate::__bindings::wasmraft::plugin::store as host;
#[cfg(not(target_arch = "wasm32"))]
use crate::testing::memory as host;

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
///
/// One call returns its whole answer at once; for ranges that may be large
/// prefer [`range`] or [`iter_prefix`], which page through it.
pub fn scan(start: &[u8], end: &[u8], limit: u32, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    host::scan(start, end, limit, reverse)
}

/// Every pair whose key starts with `prefix`, in key order, in one call.
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

/// The value under `key`, decoded with [`codec`](crate::codec) (compact
/// JSON); `Ok(None)` if the key is missing. A value that does not decode is
/// an error naming the key; `?` turns it into an `Invalid` error.
#[cfg(feature = "serde")]
pub fn get_as<T: serde::de::DeserializeOwned>(key: &[u8]) -> Result<Option<T>, crate::DecodeError> {
    match get(key) {
        None => Ok(None),
        Some(bytes) => crate::codec::decode(&bytes)
            .map(Some)
            .map_err(|e| e.context(format_args!("stored value under {:?}", String::from_utf8_lossy(key)))),
    }
}

/// Stores `value` under `key`, encoded with [`codec`](crate::codec).
#[cfg(feature = "serde")]
pub fn put_as<T: serde::Serialize + ?Sized>(key: &[u8], value: &T) {
    put(key, &crate::codec::encode(value))
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

/// Every pair with `start <= key < end` (empty `end`: no upper bound), as an
/// iterator that asks the host for [`Scan::chunk_size`] pairs at a time.
pub fn range(start: &[u8], end: &[u8]) -> Scan {
    Scan {
        start: start.to_vec(),
        end: end.to_vec(),
        reverse: false,
        chunk: Scan::DEFAULT_CHUNK,
        page: VecDeque::new(),
        done: false,
    }
}

/// Every pair whose key starts with `prefix`, paged like [`range`].
pub fn iter_prefix(prefix: &[u8]) -> Scan {
    range(prefix, &prefix_end(prefix))
}

/// An iterator over a key range that fetches it from the host in chunks, so
/// that stopping early (`take(10)`, `find`) reads, and spends fuel on, only
/// the chunks it needs. Made by [`range`] and [`iter_prefix`].
///
/// It sees the store as it is when each chunk is fetched: writes made while
/// iterating may or may not show up, as in most key-value stores.
#[derive(Debug)]
pub struct Scan {
    start: Vec<u8>,
    end: Vec<u8>,
    reverse: bool,
    chunk: u32,
    page: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

impl Scan {
    const DEFAULT_CHUNK: u32 = 64;

    /// Iterates in descending key order instead.
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// Fetches `n` pairs per host call (at least 1; 64 by default).
    pub fn chunk_size(mut self, n: u32) -> Self {
        self.chunk = n.max(1);
        self
    }

    fn fetch(&mut self) {
        let page = scan(&self.start, &self.end, self.chunk, self.reverse);
        self.done = page.len() < self.chunk as usize;
        if let Some((last, _)) = page.last() {
            if self.reverse {
                // `end` is exclusive: the next page ends just below `last`.
                // The empty key is the smallest there is; nothing lies below.
                if last.is_empty() {
                    self.done = true;
                }
                self.end = last.clone();
            } else {
                // The smallest key after `last`.
                self.start = last.clone();
                self.start.push(0);
            }
        }
        self.page = page.into();
    }
}

impl Iterator for Scan {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.page.is_empty() && !self.done {
            self.fetch();
        }
        self.page.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_page_through_the_whole_range_in_both_directions() {
        for i in 0u8..10 {
            put(&[b'k', i], &[i]);
        }
        put(b"l", b"after");
        put(b"j", b"before");
        let forward: Vec<u8> = iter_prefix(b"k").chunk_size(3).map(|(_, v)| v[0]).collect();
        assert_eq!(forward, (0..10).collect::<Vec<_>>());
        let backward: Vec<u8> = iter_prefix(b"k").chunk_size(3).reverse().map(|(_, v)| v[0]).collect();
        assert_eq!(backward, (0..10).rev().collect::<Vec<_>>());
        // A chunk size that divides the range exactly ends cleanly too.
        assert_eq!(iter_prefix(b"k").chunk_size(5).count(), 10);
        assert_eq!(range(b"", b"").chunk_size(4).count(), 12);
        assert_eq!(range(b"", b"").reverse().chunk_size(4).count(), 12);
    }

    #[test]
    fn prefix_end_skips_trailing_ff() {
        assert_eq!(prefix_end(b"a"), b"b");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff, 0xff]), b"");
    }
}
