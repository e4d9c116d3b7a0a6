//! What the node wraps around a client's command before it enters the log.
//!
//! ```text
//! [version: u8 = 1][timestamp_ms: u64 BE][client_id: u64 BE][sequence: u64 BE][command...]
//! ```
//!
//! The leader stamps `timestamp_ms`, so every replica gives the plugin the
//! same clock. `client_id`/`sequence` (0 when unused) identify a proposal
//! for exactly-once retries.

const VERSION: u8 = 1;
/// The bytes of the header before a command.
pub const HEADER: usize = 1 + 8 * 3;

/// A command as it sits in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The leader's clock when it accepted the command.
    pub timestamp_ms: u64,
    /// The proposing client's id, or 0.
    pub client_id: u64,
    /// The client's sequence number for this command, or 0.
    pub sequence: u64,
    /// The plugin command.
    pub command: Vec<u8>,
}

/// The timestamp of an encoded envelope, without decoding the rest.
pub fn stamp(bytes: &[u8]) -> Option<u64> {
    match bytes {
        [VERSION, ts @ ..] if ts.len() >= HEADER - 1 => Some(u64::from_be_bytes(ts[..8].try_into().expect("8 bytes"))),
        _ => None,
    }
}

/// The client id and sequence of an encoded envelope, without decoding
/// the rest; `None` for one without a client (id 0) or not an envelope.
pub fn client_sequence(bytes: &[u8]) -> Option<(u64, u64)> {
    match bytes {
        [VERSION, rest @ ..] if rest.len() >= HEADER - 1 => {
            let word = |at: usize| u64::from_be_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
            let client = word(8);
            (client != 0).then(|| (client, word(16)))
        }
        _ => None,
    }
}

/// Sets the timestamp of an encoded envelope: a leader stamps the commands
/// a follower forwarded. Refuses bytes that are not an envelope.
pub fn restamp(bytes: &mut [u8], timestamp_ms: u64) -> Result<(), String> {
    match bytes {
        [VERSION, rest @ ..] if rest.len() >= HEADER - 1 => {
            rest[..8].copy_from_slice(&timestamp_ms.to_be_bytes());
            Ok(())
        }
        [VERSION, ..] => Err(format!("log command of {} bytes is shorter than its header", bytes.len())),
        [version, ..] => Err(format!("unknown log command version {version}")),
        [] => Err("an empty log command".into()),
    }
}

impl Envelope {
    /// The bytes stored in the log.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.command.len());
        out.push(VERSION);
        out.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        out.extend_from_slice(&self.client_id.to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.command);
        out
    }

    /// Reads an envelope back.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < HEADER {
            return Err(format!("log command of {} bytes is shorter than its header", bytes.len()));
        }
        if bytes[0] != VERSION {
            return Err(format!("unknown log command version {}", bytes[0]));
        }
        let u64_at = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Ok(Self { timestamp_ms: u64_at(1), client_id: u64_at(9), sequence: u64_at(17), command: bytes[HEADER..].to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_short_or_unknown_input() {
        let e = Envelope { timestamp_ms: 1_700_000_000_000, client_id: 7, sequence: 9, command: b"x".to_vec() };
        assert_eq!(Envelope::decode(&e.encode()).unwrap(), e);
        assert!(Envelope::decode(&[1, 2, 3]).is_err());
        let mut bad = e.encode();
        bad[0] = 2;
        assert!(Envelope::decode(&bad).unwrap_err().contains("version 2"));
    }

    #[test]
    fn restamping_sets_only_the_timestamp_and_refuses_what_is_no_envelope() {
        let e = Envelope { timestamp_ms: 0, client_id: 7, sequence: 9, command: b"xyz".to_vec() };
        let mut bytes = e.encode();
        restamp(&mut bytes, 1234).unwrap();
        assert_eq!(Envelope::decode(&bytes).unwrap(), Envelope { timestamp_ms: 1234, ..e });
        assert!(restamp(&mut [1, 2, 3], 5).unwrap_err().contains("shorter"));
        assert!(restamp(&mut [2; 40], 5).unwrap_err().contains("version 2"));
        assert!(restamp(&mut [], 5).is_err());
    }

    #[test]
    fn a_client_and_sequence_are_read_from_the_header() {
        let e = Envelope { timestamp_ms: 3, client_id: 7, sequence: 9, command: b"xyz".to_vec() };
        assert_eq!(client_sequence(&e.encode()), Some((7, 9)));
        assert_eq!(client_sequence(&Envelope { client_id: 0, ..e.clone() }.encode()), None, "no client");
        assert_eq!(client_sequence(&e.encode()[..HEADER - 1]), None, "short");
        assert_eq!(client_sequence(&[2; 40]), None, "another version");
    }
}
