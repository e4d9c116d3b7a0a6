//! How the KV plugin lays out etcd's data in the host store.
//!
//! `\x00rev` holds the current revision (8 bytes, big-endian); every user key
//! `k` lives at `\x01k` as an encoded `mvccpb.KeyValue` without its key.

use prost::Message;
use wasmraft_sdk::store;

use crate::pb::mvccpb::KeyValue;

const REVISION_KEY: &[u8] = b"\x00rev";
const DATA_PREFIX: u8 = 0x01;
/// etcd's store starts at revision 1 before any write.
const INITIAL_REVISION: i64 = 1;

fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(DATA_PREFIX);
    k.extend_from_slice(key);
    k
}

/// The revision of one entry: reads see `base`; writes are stamped `base + 1`,
/// which becomes current only if something changed.
pub(crate) struct Revision {
    pub base: i64,
    pub changed: bool,
}

impl Revision {
    pub fn begin() -> Self {
        let base = store::get_u64(REVISION_KEY).map_or(INITIAL_REVISION, |r| r as i64);
        Self { base, changed: false }
    }

    /// The revision writes of this entry carry.
    pub fn write(&mut self) -> i64 {
        self.changed = true;
        self.base + 1
    }

    /// The revision a response header reports.
    pub fn current(&self) -> i64 {
        if self.changed { self.base + 1 } else { self.base }
    }

    pub fn commit(self) {
        if self.changed {
            store::put_u64(REVISION_KEY, (self.base + 1) as u64);
        }
    }
}

/// The key-value under `key`.
pub(crate) fn get(key: &[u8]) -> Option<KeyValue> {
    store::get(&data_key(key)).map(|bytes| decode(key.to_vec(), &bytes))
}

pub(crate) fn put(kv: &KeyValue) {
    let stored = KeyValue { key: Vec::new(), ..kv.clone() };
    store::put(&data_key(&kv.key), &stored.encode_to_vec());
}

pub(crate) fn delete(key: &[u8]) {
    store::delete(&data_key(key));
}

/// The store bounds of an etcd range: `range_end` empty is the single key
/// (handled by callers), `"\0"` means every key from `key` on.
fn bounds(key: &[u8], range_end: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let start = data_key(key);
    let end = if range_end == [0] { vec![DATA_PREFIX + 1] } else { data_key(range_end) };
    (start < end).then_some((start, end))
}

/// Key-values in the etcd range, in key order, at most `limit` (0: all).
pub(crate) fn range(key: &[u8], range_end: &[u8], limit: u32, reverse: bool) -> Vec<KeyValue> {
    if range_end.is_empty() {
        return get(key).into_iter().collect();
    }
    let Some((start, end)) = bounds(key, range_end) else { return Vec::new() };
    store::scan(&start, &end, limit, reverse)
        .into_iter()
        .map(|(k, v)| decode(k[1..].to_vec(), &v))
        .collect()
}

/// The number of keys in the etcd range.
pub(crate) fn count(key: &[u8], range_end: &[u8]) -> i64 {
    if range_end.is_empty() {
        return i64::from(store::get(&data_key(key)).is_some());
    }
    match bounds(key, range_end) {
        Some((start, end)) => store::count(&start, &end) as i64,
        None => 0,
    }
}

fn decode(key: Vec<u8>, bytes: &[u8]) -> KeyValue {
    // The store holds only what this plugin wrote; a record that does not
    // decode means the keyspace is corrupt, which must not pass silently.
    let mut kv = KeyValue::decode(bytes).expect("corrupt key-value record in the store");
    kv.key = key;
    kv
}
