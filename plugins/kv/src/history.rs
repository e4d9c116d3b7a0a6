//! The past revisions: reads as of a revision, the changes since a revision
//! for watchers, compaction, and keyspace hashes.

use prost::Message;
use wasmraft_sdk::store;

use crate::KvError;
use crate::keyspace::{self, LOG, Revision, history_key, history_prefix, log_key, parse_history_key, parse_log_key};
use crate::ops::header;
use crate::pb::etcdserverpb::{CompactionRequest, CompactionResponse};
use crate::pb::kvplugin::{EventsRequest, EventsResponse, HashRequest, HashResponse};
use crate::pb::mvccpb::{Event, KeyValue, event::EventType};

pub(crate) const ERR_COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub(crate) const ERR_FUTURE: &str = "etcdserver: mvcc: required revision is a future revision";

/// Revision-log records a Compact removes at once; the rest go in steps.
const COMPACT_BATCH: u32 = 4096;
/// Every `STEP_EVERY` revisions, a write also removes up to `STEP_RECORDS`
/// compacted records, so that removal outpaces the history writes add.
const STEP_EVERY: i64 = 16;
const STEP_RECORDS: u32 = 64;
/// Events one answer holds by default, and at most.
const EVENTS_DEFAULT: usize = 1000;
const EVENTS_MAX: usize = 10_000;
/// Bytes of keys and values one events answer holds, past which it ends
/// at the next revision (one gRPC message stays far below clients' limits).
const EVENTS_MAX_BYTES: usize = 4 << 20;
/// Revision-log records one events answer looks at (bounds the work of a
/// narrow watcher far behind).
const EVENTS_SCAN_MAX: usize = 50_000;
/// Keys one hash answer covers.
const HASH_PAGE_KEYS: usize = 1000;

/// Refuses a read at `revision` (0 or less: the current one) unless it is
/// kept, and returns the revision to read at.
pub(crate) fn check_readable(revision: i64, rev: &Revision) -> Result<i64, KvError> {
    if revision <= 0 {
        return Ok(rev.current());
    }
    if revision > rev.current() {
        return Err(KvError::Rejected(ERR_FUTURE));
    }
    if revision < keyspace::compacted_revision() {
        return Err(KvError::Rejected(ERR_COMPACTED));
    }
    Ok(revision)
}

/// The version of `key` as of `revision`: its newest stored version at or
/// below it, unless that is a deletion.
pub(crate) fn get_at(key: &[u8], revision: i64) -> Option<KeyValue> {
    let found = store::scan(&history_prefix(key), &history_key(key, revision + 1), 1, true);
    let (_, bytes) = found.into_iter().next()?;
    keyspace::decode_version(key.to_vec(), &bytes)
}

/// The key-values of the etcd range as of `revision`, in key order.
pub(crate) fn range_at(key: &[u8], range_end: &[u8], revision: i64) -> Vec<KeyValue> {
    if range_end.is_empty() {
        return get_at(key, revision).into_iter().collect();
    }
    let (start, end) = keyspace::history_bounds(key, range_end);
    if start >= end {
        return Vec::new();
    }
    versions_at(&start, &end, revision, usize::MAX)
}

/// Up to `max_keys` key-values stored in `[start, end)` of the history, as
/// of `revision`, in key order.
fn versions_at(start: &[u8], end: &[u8], revision: i64, max_keys: usize) -> Vec<KeyValue> {
    let mut out = Vec::new();
    let mut key_now: Vec<u8> = Vec::new();
    let mut newest: Option<KeyValue> = None;
    // Each key's versions come oldest first: the last one at or below
    // `revision` is the key as of `revision`.
    for (stored, bytes) in store::range(start, end) {
        let (k, r) = parse_history_key(&stored).expect("corrupt history key in the store");
        if k != key_now {
            out.extend(newest.take());
            if out.len() >= max_keys {
                return out;
            }
            key_now.clone_from(&k);
        }
        if r <= revision {
            newest = keyspace::decode_version(k, &bytes);
        }
    }
    out.extend(newest);
    out
}

/// The changes in the requested range from `start_revision` on.
pub(crate) fn events(r: &EventsRequest, rev: &Revision) -> EventsResponse {
    let compacted = keyspace::compacted_revision();
    let mut resp = EventsResponse { header: header(rev), ..Default::default() };
    if r.start_revision < compacted {
        resp.compact_revision = compacted;
        return resp;
    }
    let limit = match r.limit as usize {
        0 => EVENTS_DEFAULT,
        n => n.min(EVENTS_MAX),
    };
    let mut looked = 0;
    let mut bytes = 0;
    let mut last_revision = 0;
    for (stored, key) in store::range(&log_key(r.start_revision.max(1), 0), &[LOG + 1]) {
        let revision = parse_log_key(&stored).expect("corrupt revision-log key in the store");
        if revision != last_revision && (resp.events.len() >= limit || looked >= EVENTS_SCAN_MAX || bytes >= EVENTS_MAX_BYTES) {
            resp.more = true;
            resp.next_revision = revision;
            return resp;
        }
        looked += 1;
        last_revision = revision;
        if !keyspace::in_range(&key, &r.key, &r.range_end) {
            continue;
        }
        let version = store::get(&history_key(&key, revision)).unwrap_or_default();
        let (kind, kv) = match keyspace::decode_version(key.clone(), &version) {
            Some(kv) => (EventType::Put, kv),
            None => (EventType::Delete, KeyValue { key: key.clone(), mod_revision: revision, ..Default::default() }),
        };
        let prev_kv = if r.prev_kv { get_at(&key, revision - 1) } else { None };
        bytes += kv.key.len() + kv.value.len() + prev_kv.as_ref().map_or(0, |p| p.value.len());
        resp.events.push(Event { r#type: kind as i32, kv: Some(kv), prev_kv });
    }
    resp
}

/// Compacts the history at `r.revision`: reads and watchers below it are
/// refused from now on, and the versions no read can reach any more are
/// removed, a batch now and the rest as later writes go (see
/// [`remove_compacted_step`]).
pub(crate) fn compact(r: &CompactionRequest, rev: &Revision) -> Result<CompactionResponse, KvError> {
    if r.revision <= keyspace::compacted_revision() {
        return Err(KvError::Rejected(ERR_COMPACTED));
    }
    if r.revision > rev.current() {
        return Err(KvError::Rejected(ERR_FUTURE));
    }
    keyspace::set_compacted_revision(r.revision);
    remove_compacted(COMPACT_BATCH);
    Ok(CompactionResponse { header: header(rev) })
}

/// Part of the removal a compaction left, on every `STEP_EVERY`-th
/// revision: deterministic, so every replica removes the same records at
/// the same entry.
pub(crate) fn remove_compacted_step(rev: &Revision) {
    if rev.changed && rev.current() % STEP_EVERY == 0 {
        remove_compacted(STEP_RECORDS);
    }
}

/// Removes up to `budget` revision-log records below the compacted
/// revision, oldest first, and the versions no read can reach any more.
/// For the change of key `k` at revision `r`: every older version of `k`
/// (a version kept by an earlier compaction goes once a newer one is
/// itself compacted), and the version at `r` if a later one at or below the
/// compacted revision supersedes it or it is a deletion. Returns how many
/// records it removed.
fn remove_compacted(budget: u32) -> usize {
    let target = keyspace::compacted_revision();
    if target <= 1 {
        return 0;
    }
    let batch = store::scan(&[LOG], &log_key(target, 0), budget, false);
    for (stored, key) in &batch {
        let revision = parse_log_key(stored).expect("corrupt revision-log key in the store");
        for (older, _) in store::scan(&history_prefix(key), &history_key(key, revision), 0, false) {
            store::delete(&older);
        }
        let version = history_key(key, revision);
        let superseded = !store::scan(&history_key(key, revision + 1), &history_key(key, target + 1), 1, false).is_empty();
        if superseded || store::get(&version).is_some_and(|v| v.is_empty()) {
            store::delete(&version);
        }
        store::delete(stored);
    }
    batch.len()
}

/// One page of the keyspace hash as of a revision (see `HashRequest`).
pub(crate) fn hash(r: &HashRequest, rev: &Revision) -> Result<HashResponse, KvError> {
    let revision = check_readable(r.revision, rev)?;
    let mut crc = r.crc;
    let mut last_key = Vec::new();
    let mut hashed = 0;
    let mut hash_one = |kv: &KeyValue| {
        let value = KeyValue { key: Vec::new(), ..kv.clone() }.encode_to_vec();
        for part in [&(kv.key.len() as u32).to_be_bytes()[..], &kv.key, &(value.len() as u32).to_be_bytes(), &value] {
            crc = crc32c(crc, part);
        }
    };
    // Each page starts after the last key of the one before, so that a
    // keyspace of any size is hashed in answers of bounded work.
    let mut start = r.after.clone();
    start.push(0);
    if r.after.is_empty() {
        start = vec![0];
    }
    let page = if revision == rev.current() {
        keyspace::range(&start, &[0], HASH_PAGE_KEYS as u32, false)
    } else {
        let (from, end) = keyspace::history_bounds(&start, &[0]);
        versions_at(&from, &end, revision, HASH_PAGE_KEYS)
    };
    for kv in &page {
        hash_one(kv);
        hashed += 1;
        last_key.clone_from(&kv.key);
    }
    if hashed < HASH_PAGE_KEYS {
        last_key.clear();
    }
    Ok(HashResponse {
        header: header(rev),
        crc,
        last_key,
        compact_revision: keyspace::compacted_revision(),
    })
}

/// CRC-32C (Castagnoli), bitwise: the hash runs rarely and on bounded pages.
fn crc32c(crc: u32, bytes: &[u8]) -> u32 {
    let mut crc = !crc;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::crc32c;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(0, b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(crc32c(0, b"1234"), b"56789"), 0xe306_9283);
    }
}
