//! How the KV plugin lays out etcd's data in the host store.
//!
//! ```text
//! \x00rev             the current revision (u64, big-endian)
//! \x00compact         the compacted revision: reads and watches below it fail
//! \x00alarm/ ...      etcd's alarms ([`crate::alarms`])
//! \x01 key            the key's current KeyValue, encoded without its key
//! \x02 rev sub        the revision log: the key changed at (rev, sub)
//! \x03 esc(key) rev   the key's version at rev: its KeyValue without the key,
//!                     or empty where the key was deleted
//! ```
//!
//! A read at the current revision is one point read of `\x01 key`, as
//! before history was kept; history serves reads at past revisions
//! ([`crate::history`]) and the revision log serves watchers and
//! compaction. `esc` keeps byte order and makes one key's versions
//! contiguous: every 0x00 becomes 0x00 0xff, and 0x00 0x01 ends the key.
//! See `docs/design/005-kv-history.md`.

use prost::Message;
use wasmraft_sdk::store;

use crate::pb::mvccpb::KeyValue;

const REVISION_KEY: &[u8] = b"\x00rev";
const COMPACT_KEY: &[u8] = b"\x00compact";
const CURRENT: u8 = 0x01;
pub(crate) const LOG: u8 = 0x02;
pub(crate) const HISTORY: u8 = 0x03;
/// etcd's store starts at revision 1 before any write.
const INITIAL_REVISION: i64 = 1;

fn current_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(CURRENT);
    k.extend_from_slice(key);
    k
}

/// `\x03 esc(key)`: the prefix of every stored version of `key`.
pub(crate) fn history_prefix(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 12);
    k.push(HISTORY);
    for &b in key {
        k.push(b);
        if b == 0 {
            k.push(0xff);
        }
    }
    k.extend_from_slice(&[0, 1]);
    k
}

/// Where the version of `key` at `revision` is stored.
pub(crate) fn history_key(key: &[u8], revision: i64) -> Vec<u8> {
    let mut k = history_prefix(key);
    k.extend_from_slice(&(revision as u64).to_be_bytes());
    k
}

/// The user key and revision of a history record's store key.
pub(crate) fn parse_history_key(stored: &[u8]) -> Option<(Vec<u8>, i64)> {
    let body = stored.strip_prefix(&[HISTORY])?;
    let (escaped, revision) = body.split_at_checked(body.len().checked_sub(8)?)?;
    let mut key = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.iter();
    while let Some(&b) = bytes.next() {
        if b != 0 {
            key.push(b);
            continue;
        }
        match bytes.next() {
            Some(0xff) => key.push(0),
            Some(1) if bytes.as_slice().is_empty() => {
                return Some((key, u64::from_be_bytes(revision.try_into().ok()?) as i64));
            }
            _ => return None,
        }
    }
    None
}

/// Where the revision log records the change at `(revision, sub)`.
pub(crate) fn log_key(revision: i64, sub: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(13);
    k.push(LOG);
    k.extend_from_slice(&(revision as u64).to_be_bytes());
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

/// The revision of a revision-log record's store key.
pub(crate) fn parse_log_key(stored: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = stored.get(1..9)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes) as i64)
}

/// The store bounds `[start, end)` in the history of an etcd range with a
/// non-empty `range_end` (`"\0"`: every key from `key` on).
pub(crate) fn history_bounds(key: &[u8], range_end: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let end = if range_end == [0] { vec![HISTORY + 1] } else { history_prefix(range_end) };
    (history_prefix(key), end)
}

/// Whether `key` lies in the etcd range `[start, range_end)`.
pub(crate) fn in_range(key: &[u8], start: &[u8], range_end: &[u8]) -> bool {
    match range_end {
        [] => key == start,
        [0] => key >= start,
        end => key >= start && key < end,
    }
}

/// The oldest revision reads and watchers may ask for (0: nothing compacted).
pub(crate) fn compacted_revision() -> i64 {
    store::get_u64(COMPACT_KEY).map_or(0, |r| r as i64)
}

pub(crate) fn set_compacted_revision(revision: i64) {
    store::put_u64(COMPACT_KEY, revision as u64);
}

/// The revision of one entry: reads see `base`; writes are stamped `base + 1`,
/// which becomes current only if something changed. `sub` numbers the
/// changes within the revision, in order.
pub(crate) struct Revision {
    pub base: i64,
    pub changed: bool,
    sub: u32,
    /// The index of the entry being applied (`None`: a query or a tick).
    entry: Option<u64>,
    /// Whether a NOSPACE alarm is active, once known ([`crate::alarms`]).
    pub nospace: Option<bool>,
}

/// What the last entry this instance applied left in the store: the
/// revision, and whether a NOSPACE alarm is active (if it was read). The
/// entry right after it in the log starts from exactly that state (entries
/// apply in log order, and a batch the host drops runs again from its
/// first entry, which finds no match here), so it need not read them again:
/// two store reads fewer per put in a batch. Taken by each entry that
/// begins, set again only by one that commits.
#[derive(Clone, Copy)]
struct AfterEntry {
    index: u64,
    revision: i64,
    nospace: Option<bool>,
}

thread_local! {
    static AFTER_ENTRY: std::cell::Cell<Option<AfterEntry>> = const { std::cell::Cell::new(None) };
}

impl Revision {
    /// For a query or a tick: read from the store.
    pub fn begin() -> Self {
        let base = store::get_u64(REVISION_KEY).map_or(INITIAL_REVISION, |r| r as i64);
        Self { base, changed: false, sub: 0, entry: None, nospace: None }
    }

    /// For the entry at `index`: from what the entry before it left, if
    /// this instance applied that one last.
    pub fn begin_entry(index: u64) -> Self {
        match AFTER_ENTRY.take() {
            Some(after) if index.checked_sub(1) == Some(after.index) => {
                Self { base: after.revision, changed: false, sub: 0, entry: Some(index), nospace: after.nospace }
            }
            _ => Self { entry: Some(index), ..Self::begin() },
        }
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
        // A tick's writes are not an entry's: what the last entry left is
        // no longer what the store holds.
        let after = self.entry.map(|index| AfterEntry { index, revision: self.current(), nospace: self.nospace });
        AFTER_ENTRY.set(after);
    }

    /// Records in the revision log that `key` changed at this revision.
    fn log(&mut self, key: &[u8]) -> i64 {
        let revision = self.write();
        store::put(&log_key(revision, self.sub), key);
        self.sub += 1;
        revision
    }
}

/// The key-value under `key`.
#[cfg(test)]
pub(crate) fn get(key: &[u8]) -> Option<KeyValue> {
    get_stored(key).map(|(kv, _)| kv)
}

/// The current version of `key`, with its record as stored: the key-value
/// encoded without its key (see [`with_key`]).
#[cfg(test)]
pub(crate) fn get_stored(key: &[u8]) -> Option<(KeyValue, Vec<u8>)> {
    store::get(&current_key(key)).map(|bytes| (decode(key.to_vec(), &bytes), bytes))
}

/// The record of `key`'s current version as stored (see [`with_key`]).
pub(crate) fn get_record(key: &[u8]) -> Option<Vec<u8>> {
    store::get(&current_key(key))
}

/// The fields of a stored record a put carries over, read without copying
/// its value out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Versions {
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
}

impl Versions {
    /// `record`'s fields, as decoding the whole key-value gives them.
    pub fn of(record: &[u8]) -> Versions {
        use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
        let mut v = Versions::default();
        let mut buf = record;
        // The store holds only what this plugin wrote (see `decode`).
        let corrupt = |e: &dyn std::fmt::Display| -> ! { panic!("corrupt key-value record in the store: {e}") };
        while !buf.is_empty() {
            let (tag, wire_type) = decode_key(&mut buf).unwrap_or_else(|e| corrupt(&e));
            let field = match tag {
                2 => &mut v.create_revision,
                4 => &mut v.version,
                6 => &mut v.lease,
                _ => {
                    skip_field(wire_type, tag, &mut buf, DecodeContext::default()).unwrap_or_else(|e| corrupt(&e));
                    continue;
                }
            };
            if wire_type != WireType::Varint {
                corrupt(&format_args!("field {tag} is not a varint"));
            }
            *field = decode_varint(&mut buf).unwrap_or_else(|e| corrupt(&e)) as i64;
        }
        v
    }
}

/// The encoding of a key-value whose record as stored is `stored`, with
/// `key` put back: the key is field 1, which prost encodes first, so this
/// is byte for byte what encoding the whole key-value gives, without
/// encoding it again.
pub(crate) fn with_key(key: &[u8], stored: &[u8], out: &mut Vec<u8>) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    // prost leaves an empty field out.
    if !key.is_empty() {
        encode_key(1, WireType::LengthDelimited, out);
        encode_varint(key.len() as u64, out);
        out.extend_from_slice(key);
    }
    out.extend_from_slice(stored);
}

/// The length of [`with_key`]'s bytes.
pub(crate) fn with_key_len(key: &[u8], stored: &[u8]) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    let key_field = if key.is_empty() { 0 } else { key_len(1) + encoded_len_varint(key.len() as u64) + key.len() };
    key_field + stored.len()
}

/// Stores `value` as the current version of `key`, stamped with this
/// entry's revision, and keeps it in the key's history; returns the record
/// stored: byte for byte prost's encoding of the key-value without its key
/// ([`record`]).
pub(crate) fn put(key: &[u8], versions: Versions, value: &[u8], rev: &mut Revision) -> Vec<u8> {
    let revision = rev.log(key);
    let stored = record(versions, revision, value);
    store::put(&current_key(key), &stored);
    store::put(&history_key(key, revision), &stored);
    stored
}

/// The encoding of `KeyValue { create_revision, mod_revision, version,
/// value, lease }` (no key), written from borrowed parts: the value is not
/// copied into a message first. prost writes fields in tag order and leaves
/// zeros and empty bytes out; so does this
/// (`tests::records_encode_as_prost_encodes_the_key_value`).
pub(crate) fn record(versions: Versions, mod_revision: i64, value: &[u8]) -> Vec<u8> {
    use prost::encoding::{WireType, encode_key, encode_varint, int64};
    let mut out = Vec::with_capacity(value.len() + 40);
    for (tag, n) in [(2, versions.create_revision), (3, mod_revision), (4, versions.version)] {
        if n != 0 {
            int64::encode(tag, &n, &mut out);
        }
    }
    if !value.is_empty() {
        encode_key(5, WireType::LengthDelimited, &mut out);
        encode_varint(value.len() as u64, &mut out);
        out.extend_from_slice(value);
    }
    if versions.lease != 0 {
        int64::encode(6, &versions.lease, &mut out);
    }
    out
}

/// Deletes `key` at this entry's revision, leaving a deletion in its history.
pub(crate) fn delete(key: &[u8], rev: &mut Revision) {
    let revision = rev.log(key);
    store::delete(&current_key(key));
    store::put(&history_key(key, revision), &[]);
}

/// Starts the history of a keyspace written by a KV plugin that kept none
/// (run on deploy, a no-op once history exists): each key's current
/// version becomes its first, and the current revision the compacted one.
pub(crate) fn start_history() {
    let Some(revision) = store::get_u64(REVISION_KEY) else { return };
    if store::get(COMPACT_KEY).is_some() {
        return;
    }
    let mut sub = 0u32;
    for (stored, bytes) in store::range(&[CURRENT], &[CURRENT + 1]) {
        let kv = decode(stored[1..].to_vec(), &bytes);
        store::put(&log_key(kv.mod_revision, sub), &kv.key);
        store::put(&history_key(&kv.key, kv.mod_revision), &bytes);
        sub = sub.wrapping_add(1);
    }
    set_compacted_revision(revision as i64);
}

/// The store bounds of an etcd range: `range_end` empty is the single key
/// (handled by callers), `"\0"` means every key from `key` on.
fn bounds(key: &[u8], range_end: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let start = current_key(key);
    let end = if range_end == [0] { vec![CURRENT + 1] } else { current_key(range_end) };
    (start < end).then_some((start, end))
}

/// Key-values in the etcd range, in key order, at most `limit` (0: all).
pub(crate) fn range(key: &[u8], range_end: &[u8], limit: u32, reverse: bool) -> Vec<KeyValue> {
    range_stored(key, range_end, limit, reverse).into_iter().map(|(key, record)| decode(key, &record)).collect()
}

/// [`range`]'s key-values as stored: each its key and its record (see
/// [`with_key`]), not decoded.
pub(crate) fn range_stored(key: &[u8], range_end: &[u8], limit: u32, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    if range_end.is_empty() {
        return store::get(&current_key(key)).map(|record| (key.to_vec(), record)).into_iter().collect();
    }
    let Some((start, end)) = bounds(key, range_end) else { return Vec::new() };
    let mut pairs = store::scan(&start, &end, limit, reverse);
    for (stored_key, _) in &mut pairs {
        stored_key.remove(0); // the `\x01` of `current_key`
    }
    pairs
}

/// The number of keys in the etcd range.
pub(crate) fn count(key: &[u8], range_end: &[u8]) -> i64 {
    if range_end.is_empty() {
        return i64::from(store::get(&current_key(key)).is_some());
    }
    match bounds(key, range_end) {
        Some((start, end)) => store::count(&start, &end) as i64,
        None => 0,
    }
}

/// A stored version: `None` for a deletion.
pub(crate) fn decode_version(key: Vec<u8>, bytes: &[u8]) -> Option<KeyValue> {
    (!bytes.is_empty()).then(|| decode(key, bytes))
}

pub(crate) fn decode(key: Vec<u8>, bytes: &[u8]) -> KeyValue {
    // The store holds only what this plugin wrote; a record that does not
    // decode means the keyspace is corrupt, which must not pass silently.
    let mut kv = KeyValue::decode(bytes).expect("corrupt key-value record in the store");
    kv.key = key;
    kv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_keys_keep_byte_order_and_parse_back() {
        let keys: [&[u8]; 7] = [b"", b"\x00", b"\x00\x00", b"\x00\x01", b"a", b"a\x00", b"a\x00b"];
        for pair in keys.windows(2) {
            assert!(history_key(pair[0], i64::MAX) < history_key(pair[1], 0), "{pair:?}");
        }
        for key in keys {
            assert_eq!(parse_history_key(&history_key(key, 42)), Some((key.to_vec(), 42)));
        }
        assert_eq!(parse_history_key(b"\x03a\x00\x02\0\0\0\0\0\0\0\x01"), None);
    }

    #[test]
    fn records_encode_as_prost_encodes_the_key_value() {
        let values: [&[u8]; 3] = [b"", b"v", &[7; 300]];
        for value in values {
            for (create, modr, version, lease) in [(0, 0, 0, 0), (5, 9, 3, 0), (1, 1, 1, 77), (i64::MAX, -1, 0, -5)] {
                let versions = Versions { create_revision: create, version, lease };
                let kv = KeyValue {
                    key: Vec::new(),
                    create_revision: create,
                    mod_revision: modr,
                    version,
                    value: value.to_vec(),
                    lease,
                };
                let stored = record(versions, modr, value);
                assert_eq!(stored, kv.encode_to_vec(), "{kv:?}");
                assert_eq!(Versions::of(&stored), versions);
            }
        }
    }

    #[test]
    fn a_range_in_history_holds_exactly_the_keys_of_the_range() {
        let (start, end) = history_bounds(b"a", b"b");
        for (key, inside) in [(&b"a"[..], true), (b"a\x00", true), (b"a\xff\xff", true), (b"b", false), (b"\x00", false)] {
            let k = history_key(key, 7);
            assert_eq!(k >= start && k < end, inside, "{key:?}");
        }
        let (start, end) = history_bounds(b"a", b"\x00");
        assert!(history_key(b"\xff\xff", 1) >= start && history_key(b"\xff\xff", 1) < end);
    }
}
