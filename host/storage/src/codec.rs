//! The one place that knows how records are encoded (bincode 2.0.1, behind
//! this module so it can be replaced). Nothing another language reads is
//! encoded here.

use std::collections::BTreeSet;

use bincode::{Decode, Encode};
use wasmraft_raft::{Entry, EntryPayload, HardState, Index, LogId, Membership, NodeId, SnapshotMeta, Term};

use crate::error::StorageError;

const FORMAT: u8 = 1;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Frames `body` with the format version and a checksum.
fn frame(body: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(FORMAT);
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn unframe<'a>(what: &'static str, bytes: &'a [u8]) -> Result<&'a [u8], StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt { what, key: None, detail };
    if bytes.len() < 5 {
        return Err(corrupt(format!("record of {} bytes is shorter than its header", bytes.len())));
    }
    if bytes[0] != FORMAT {
        return Err(corrupt(format!("unknown record format {}", bytes[0])));
    }
    let want = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes"));
    let body = &bytes[5..];
    if crc32fast::hash(body) != want {
        return Err(corrupt("checksum mismatch".into()));
    }
    Ok(body)
}

fn encode<T: Encode>(value: &T) -> Vec<u8> {
    frame(bincode::encode_to_vec(value, config()).expect("encoding to a Vec cannot fail"))
}

fn decode<T: Decode<()>>(what: &'static str, bytes: &[u8]) -> Result<T, StorageError> {
    let body = unframe(what, bytes)?;
    // A corrupt length prefix must not make the decoder reserve gigabytes
    // (an abort, not an error). Nothing decodes to more than 8 bytes of
    // memory per byte of input (a varint u64 takes at least one), so the
    // decoder may claim at most that, rounded up to a power of two.
    let claim = body.len().saturating_mul(8).max(1 << 12);
    macro_rules! limited {
        ($($bits:literal)*) => {
            $(if claim <= 1usize << $bits {
                bincode::decode_from_slice(body, config().with_limit::<{ 1usize << $bits }>())
            } else)* {
                bincode::decode_from_slice(body, config().with_limit::<{ 1usize << 40 }>())
            }
        };
    }
    let (value, used) = limited!(12 14 16 18 20 22 24 26 28 30 32 34)
        .map_err(|e| StorageError::Corrupt { what, key: None, detail: e.to_string() })?;
    if used != body.len() {
        return Err(StorageError::Corrupt { what, key: None, detail: "trailing bytes".into() });
    }
    Ok(value)
}

#[derive(Encode, Decode)]
struct StoredMembership {
    voters: Vec<u64>,
    voters_outgoing: Vec<u64>,
    learners: Vec<u64>,
}

impl From<&Membership> for StoredMembership {
    fn from(m: &Membership) -> Self {
        let ids = |s: &BTreeSet<NodeId>| s.iter().map(|n| n.0).collect();
        Self { voters: ids(&m.voters), voters_outgoing: ids(&m.voters_outgoing), learners: ids(&m.learners) }
    }
}

impl From<StoredMembership> for Membership {
    fn from(m: StoredMembership) -> Self {
        let ids = |v: Vec<u64>| v.into_iter().map(NodeId).collect();
        Membership { voters: ids(m.voters), voters_outgoing: ids(m.voters_outgoing), learners: ids(m.learners) }
    }
}

#[derive(Encode, Decode)]
enum StoredPayload {
    Blank,
    Normal(Vec<u8>),
    Membership(StoredMembership),
}

#[derive(Encode, Decode)]
struct StoredEntry {
    term: u64,
    payload: StoredPayload,
}

pub(crate) fn encode_entry(e: &Entry) -> Vec<u8> {
    let payload = match &e.payload {
        EntryPayload::Blank => StoredPayload::Blank,
        EntryPayload::Normal(d) => StoredPayload::Normal(d.clone()),
        EntryPayload::Membership(m) => StoredPayload::Membership(m.into()),
    };
    encode(&StoredEntry { term: e.log_id.term.0, payload })
}

pub(crate) fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry, StorageError> {
    let stored: StoredEntry = decode("log entry", bytes).map_err(|e| at(e, format!("index {index}")))?;
    let payload = match stored.payload {
        StoredPayload::Blank => EntryPayload::Blank,
        StoredPayload::Normal(d) => EntryPayload::Normal(d),
        StoredPayload::Membership(m) => EntryPayload::Membership(m.into()),
    };
    Ok(Entry { log_id: LogId { term: Term(stored.term), index: Index(index) }, payload })
}

fn at(e: StorageError, key: String) -> StorageError {
    match e {
        StorageError::Corrupt { what, detail, .. } => StorageError::Corrupt { what, key: Some(key), detail },
        other => other,
    }
}

#[derive(Encode, Decode)]
struct StoredHardState {
    term: u64,
    vote: Option<u64>,
    commit: u64,
}

pub(crate) fn encode_hard_state(h: &HardState) -> Vec<u8> {
    encode(&StoredHardState { term: h.term.0, vote: h.vote.map(|v| v.0), commit: h.commit.0 })
}

pub(crate) fn decode_hard_state(bytes: &[u8]) -> Result<HardState, StorageError> {
    let s: StoredHardState = decode("hard state", bytes)?;
    Ok(HardState { term: Term(s.term), vote: s.vote.map(NodeId), commit: Index(s.commit) })
}

pub(crate) fn encode_membership(m: &Membership) -> Vec<u8> {
    encode(&StoredMembership::from(m))
}

pub(crate) fn decode_membership(bytes: &[u8]) -> Result<Membership, StorageError> {
    decode::<StoredMembership>("membership", bytes).map(Into::into)
}

#[derive(Encode, Decode)]
struct StoredSnapshotMeta {
    term: u64,
    index: u64,
    membership: StoredMembership,
}

pub(crate) fn encode_snapshot_meta(m: &SnapshotMeta) -> Vec<u8> {
    encode(&StoredSnapshotMeta { term: m.last.term.0, index: m.last.index.0, membership: (&m.membership).into() })
}

pub(crate) fn decode_snapshot_meta(bytes: &[u8]) -> Result<SnapshotMeta, StorageError> {
    let s: StoredSnapshotMeta = decode("snapshot metadata", bytes)?;
    Ok(SnapshotMeta { last: LogId::new(s.term, s.index), membership: s.membership.into() })
}

pub(crate) fn encode_log_id(id: &LogId) -> Vec<u8> {
    encode(&(id.term.0, id.index.0))
}

pub(crate) fn decode_log_id(what: &'static str, bytes: &[u8]) -> Result<LogId, StorageError> {
    let (term, index): (u64, u64) = decode(what, bytes)?;
    Ok(LogId::new(term, index))
}

pub(crate) fn encode_u64(v: u64) -> Vec<u8> {
    encode(&v)
}

pub(crate) fn decode_u64(what: &'static str, bytes: &[u8]) -> Result<u64, StorageError> {
    decode(what, bytes)
}

/// Decodes `data` as every kind of record: the fuzz entry (the cargo-fuzz
/// target in `fuzz/`). An even first byte frames the rest with a correct
/// checksum, so that the decoders behind the checksum run too.
#[cfg(feature = "fuzzing")]
pub fn decode_any(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let record = if mode % 2 == 0 { frame(body.to_vec()) } else { body.to_vec() };
    let _ = decode_entry(u64::from(mode), &record);
    let _ = decode_hard_state(&record);
    let _ = decode_membership(&record);
    let _ = decode_snapshot_meta(&record);
    let _ = decode_log_id("log id", &record);
    let _ = decode_u64("u64", &record);
    let _ = decode_plugin(&record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_a_flipped_bit_is_caught() {
        let e = Entry { log_id: LogId::new(3, 7), payload: EntryPayload::Normal(b"put a 1".to_vec()) };
        let mut bytes = encode_entry(&e);
        assert_eq!(decode_entry(7, &bytes).unwrap(), e);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let err = decode_entry(7, &bytes).unwrap_err();
        assert_eq!(err.to_string(), "corrupt log entry record at index 7: checksum mismatch");
    }

    /// Bytes from a disk are untrusted: any record, valid frame or not,
    /// decodes or is reported corrupt, never a panic or an abort. Bodies
    /// are framed with a correct checksum so that the decoder itself runs.
    #[test]
    fn arbitrary_records_never_panic() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let valid = [
            encode_entry(&Entry { log_id: LogId::new(3, 7), payload: EntryPayload::Normal(b"put a 1".to_vec()) }),
            encode_entry(&Entry { log_id: LogId::new(3, 8), payload: EntryPayload::Membership(Membership::new([NodeId(1)])) }),
            encode_hard_state(&HardState { term: Term(5), vote: Some(NodeId(2)), commit: Index(9) }),
            encode_membership(&Membership::new([NodeId(1), NodeId(2), NodeId(3)])),
            encode_log_id(&LogId::new(2, 4)),
        ];
        let mut runs = 0u64;
        for round in 0..20_000u64 {
            let body: Vec<u8> = if round % 2 == 0 {
                // A valid body with bytes flipped, cut or grown.
                let base = &valid[(next() % valid.len() as u64) as usize][5..];
                let mut b = base.to_vec();
                for _ in 0..1 + next() % 4 {
                    if b.is_empty() {
                        break;
                    }
                    let i = (next() % b.len() as u64) as usize;
                    b[i] = next() as u8;
                }
                b.truncate((next() % (b.len() as u64 + 2)) as usize);
                b
            } else {
                (0..next() % 40).map(|_| next() as u8).collect()
            };
            let record = frame(body);
            let _ = decode_entry(round, &record);
            let _ = decode_hard_state(&record);
            let _ = decode_membership(&record);
            let _ = decode_snapshot_meta(&record);
            let _ = decode_log_id("log id", &record);
            let _ = decode_plugin(&record);
            let _ = decode_entry(round, &record[..record.len().min(3)]);
            runs += 1;
        }
        assert_eq!(runs, 20_000);
    }

    #[test]
    fn truncated_and_unknown_format_records_are_corrupt() {
        assert!(decode_hard_state(&[1, 0]).is_err());
        let mut bytes = encode_hard_state(&HardState::default());
        bytes[0] = 9;
        assert!(decode_hard_state(&bytes).unwrap_err().to_string().contains("unknown record format 9"));
    }
}

#[derive(Encode, Decode)]
struct StoredPlugin {
    sha256: String,
    name: String,
    version: String,
    sdk_version: String,
    deployed_at: u64,
}

pub(crate) fn encode_plugin(p: &crate::DeployedPlugin) -> Vec<u8> {
    encode(&StoredPlugin {
        sha256: p.sha256.clone(),
        name: p.name.clone(),
        version: p.version.clone(),
        sdk_version: p.sdk_version.clone(),
        deployed_at: p.deployed_at,
    })
}

pub(crate) fn decode_plugin(bytes: &[u8]) -> Result<crate::DeployedPlugin, StorageError> {
    let s: StoredPlugin = decode("deployed plugin record", bytes)?;
    Ok(crate::DeployedPlugin {
        sha256: s.sha256,
        name: s.name,
        version: s.version,
        sdk_version: s.sdk_version,
        deployed_at: s.deployed_at,
    })
}
