//! The timer record: a plugin's wake-up and the log time its last tick saw,
//! kept by the host in the plugin's own keyspace under [`TIMER_KEY`].
//!
//! Being keyspace, it is written with the entry that sets it (and undone
//! with it), lands in the applied index's write batch, and travels in
//! snapshots, backups and hash checks like any other pair. The store hides
//! it from the plugin: `get` answers none, `scan` and `count` skip it, and
//! `put` or `delete` of it trap.
//!
//! ```text
//! [wake set: u8 0|1][wake-at ms: u64 BE][clock ms: u64 BE]
//! ```

use crate::overlay::Write;
use crate::view::{StateError, StateView};

/// Where the host keeps a plugin's timer record. Keys from `\xff\xff` up are
/// the host's.
pub const TIMER_KEY: &[u8] = b"\xff\xffwasmraft/timer";

const RECORD_LEN: usize = 17;

/// A plugin's wake-up and the log time of its last tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerRecord {
    /// When the plugin asked to be ticked, if it did.
    pub wake_at_ms: Option<u64>,
    /// The highest log time a tick has carried: a tick never runs earlier.
    pub clock_ms: u64,
}

impl TimerRecord {
    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_LEN);
        out.push(u8::from(self.wake_at_ms.is_some()));
        out.extend_from_slice(&self.wake_at_ms.unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&self.clock_ms.to_be_bytes());
        out
    }

    /// Reads a stored record; an error names what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() != RECORD_LEN || bytes[0] > 1 {
            return Err(format!("a timer record of {} bytes, not {RECORD_LEN}, or with a bad flag", bytes.len()));
        }
        let u = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(Self { wake_at_ms: (bytes[0] == 1).then(|| u(1)), clock_ms: u(9) })
    }

    /// The record in `view`, if any.
    pub fn read(view: &dyn StateView) -> Result<Option<Self>, StateError> {
        match view.get(TIMER_KEY)? {
            None => Ok(None),
            Some(bytes) => Self::decode(&bytes).map(Some).map_err(StateError),
        }
    }

    /// What an applied batch's writes (sorted by key, as
    /// [`crate::ApplyBatch::writes`]) did to the record: `None` if they left
    /// it alone, `Some(None)` if they deleted it.
    pub fn in_writes(writes: &[Write]) -> Result<Option<Option<Self>>, String> {
        let Ok(at) = writes.binary_search_by(|w| w.key.as_slice().cmp(TIMER_KEY)) else { return Ok(None) };
        match &writes[at].value {
            None => Ok(Some(None)),
            Some(bytes) => Self::decode(bytes).map(|r| Some(Some(r))),
        }
    }
}

/// Whether `[start, end)` (an empty `end`: unbounded) holds the record's key.
pub(crate) fn in_range(start: &[u8], end: &[u8]) -> bool {
    start <= TIMER_KEY && (end.is_empty() || TIMER_KEY < end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        for r in [
            TimerRecord::default(),
            TimerRecord { wake_at_ms: Some(5), clock_ms: 7 },
            TimerRecord { wake_at_ms: None, clock_ms: u64::MAX },
        ] {
            assert_eq!(TimerRecord::decode(&r.encode()), Ok(r));
        }
        assert!(TimerRecord::decode(&[0; 16]).is_err());
        let mut bad = TimerRecord::default().encode();
        bad[0] = 2;
        assert!(TimerRecord::decode(&bad).is_err());
    }

    #[test]
    fn the_record_is_found_among_sorted_writes() {
        let w = |k: &[u8], v: Option<Vec<u8>>| Write { key: k.to_vec(), value: v };
        let r = TimerRecord { wake_at_ms: Some(9), clock_ms: 1 };
        let writes = vec![w(b"a", Some(vec![1])), w(TIMER_KEY, Some(r.encode())), w(b"\xff\xffz", None)];
        assert_eq!(TimerRecord::in_writes(&writes), Ok(Some(Some(r))));
        assert_eq!(TimerRecord::in_writes(&writes[..1]), Ok(None));
        assert_eq!(TimerRecord::in_writes(&[w(TIMER_KEY, None)]), Ok(Some(None)));
        assert!(in_range(b"", b"") && in_range(b"\xff", b"") && !in_range(b"a", b"b"));
        assert!(!in_range(b"\xff\xffx", b"") && !in_range(b"", TIMER_KEY));
    }
}
