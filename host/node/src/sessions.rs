//! Client sessions: exactly-once application of retried proposals (Raft
//! thesis §6.3). A client tags each proposal with its id and a sequence
//! number that grows by one per new command; a retry reuses the number.
//! The replicated table keeps, per client, the last sequence applied and
//! its outcome, so a retry that commits twice (say across a leader change)
//! applies once and returns the first outcome.

use std::collections::HashMap;

use crate::error::Error;

/// Sessions idle this long (by the leader's entry timestamps) are dropped.
pub const SESSION_TTL_MS: u64 = 60 * 60 * 1000;
/// Expired sessions are swept when applying a command whose index is a
/// multiple of this, by its timestamp: the same on every replica.
pub const SWEEP_EVERY: u64 = 4096;

/// The last command applied for one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub sequence: u64,
    pub index: u64,
    pub timestamp_ms: u64,
    pub outcome: Result<Vec<u8>, Error>,
}

const OK: u8 = 0;
const INVALID: u8 = 1;
const REJECTED: u8 = 2;
const TRAP: u8 = 3;

impl Session {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, &[u8]) = match &self.outcome {
            Ok(r) => (OK, r),
            Err(Error::Invalid(m)) => (INVALID, m.as_bytes()),
            Err(Error::Rejected(m)) => (REJECTED, m.as_bytes()),
            Err(e) => (TRAP, match e {
                Error::PluginTrap(m) => m.as_bytes(),
                _ => b"failed",
            }),
        };
        let mut out = Vec::with_capacity(25 + body.len());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        out.push(tag);
        out.extend_from_slice(body);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < 25 {
            return Err(format!("session record of {} bytes is too short", bytes.len()));
        }
        let u = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let body = bytes[25..].to_vec();
        let text = || String::from_utf8_lossy(&body).into_owned();
        let outcome = match bytes[24] {
            OK => Ok(body.clone()),
            INVALID => Err(Error::Invalid(text())),
            REJECTED => Err(Error::Rejected(text())),
            TRAP => Err(Error::PluginTrap(text())),
            t => return Err(format!("unknown session outcome tag {t}")),
        };
        Ok(Self { sequence: u(0), index: u(8), timestamp_ms: u(16), outcome })
    }
}

/// What to do with a tagged command.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// New: apply it.
    Apply,
    /// Already applied at `index`: answer with this outcome, apply nothing.
    Duplicate { outcome: Result<Vec<u8>, Error>, index: u64 },
    /// Older than the last applied command of this client: refuse.
    Stale { last: u64 },
}

/// The sessions table, kept whole in memory by the apply thread and written
/// through to storage with each applied batch.
#[derive(Debug, Default)]
pub struct Sessions {
    table: HashMap<u64, Session>,
}

impl Sessions {
    pub fn load(records: Vec<(u64, Vec<u8>)>) -> Result<Self, String> {
        let mut table = HashMap::with_capacity(records.len());
        for (client, bytes) in records {
            table.insert(client, Session::decode(&bytes).map_err(|e| format!("client {client}: {e}"))?);
        }
        Ok(Self { table })
    }

    pub fn admit(&self, client: u64, sequence: u64) -> Admission {
        match self.table.get(&client) {
            Some(s) if s.sequence == sequence => Admission::Duplicate { outcome: s.outcome.clone(), index: s.index },
            Some(s) if s.sequence > sequence => Admission::Stale { last: s.sequence },
            _ => Admission::Apply,
        }
    }

    pub fn record(&mut self, client: u64, session: Session) {
        self.table.insert(client, session);
    }

    /// Removes sessions idle for longer than the TTL as of `now_ms`;
    /// returns the clients removed.
    pub fn sweep(&mut self, now_ms: u64) -> Vec<u64> {
        let expired: Vec<u64> = self
            .table
            .iter()
            .filter(|(_, s)| s.timestamp_ms.saturating_add(SESSION_TTL_MS) < now_ms)
            .map(|(c, _)| *c)
            .collect();
        for c in &expired {
            self.table.remove(c);
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_admission_follows_the_sequence() {
        let s = Session { sequence: 4, index: 10, timestamp_ms: 99, outcome: Err(Error::Rejected("no".into())) };
        assert_eq!(Session::decode(&s.encode()).unwrap(), s);
        let mut t = Sessions::default();
        assert_eq!(t.admit(1, 1), Admission::Apply);
        t.record(1, s.clone());
        assert_eq!(t.admit(1, 4), Admission::Duplicate { outcome: Err(Error::Rejected("no".into())), index: 10 });
        assert_eq!(t.admit(1, 3), Admission::Stale { last: 4 });
        assert_eq!(t.admit(1, 5), Admission::Apply);
        assert_eq!(t.sweep(99 + SESSION_TTL_MS), Vec::<u64>::new());
        assert_eq!(t.sweep(100 + SESSION_TTL_MS), vec![1]);
    }
}
