//! Commands the node itself replicates through the log, beside plugin
//! commands: they never reach the plugin's `apply`.
//!
//! ```text
//! [0x80][node id: u64 BE][address: UTF-8]     the address of a member
//! [0x81][timestamp ms: u64 BE][plugin bytes]  deploy a plugin (stamped by the leader's Raft loop)
//! [0x82]                                      every replica hashes its keyspace here
//! [0x83][index: u64 BE][sha256: 32 bytes]     the leader's keyspace hash at `index`
//! [0x84][now ms: u64 BE][grace until ms: u64 BE][n: u32 BE]
//!       n × [at ms: u64 BE][key length: u16 BE][key]   a tick of the plugin's timer
//! ```
//!
//! Plugin commands start with their envelope's version byte (1), so the
//! first byte tells the two apart.

/// The first byte of an address command; system commands use 0x80..=0x8f.
pub const MARKER: u8 = 0x80;
const DEPLOY: u8 = 0x81;
const CHECK_HASH: u8 = 0x82;
const EXPECT_HASH: u8 = 0x83;
const TICK: u8 = 0x84;

/// A system command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SystemCommand {
    /// Member `id` is reachable at `address` (`host:port`).
    SetAddress {
        /// The member.
        id: u64,
        /// Its address.
        address: String,
    },
    /// Replace the plugin, on every replica at this entry's index.
    DeployPlugin {
        /// The proposer's clock, ms since the epoch: the clock `migrate` sees.
        timestamp_ms: u64,
        /// The component (or core module) bytes.
        wasm: Vec<u8>,
    },
    /// Every replica hashes its plugin keyspace once it has applied this
    /// entry.
    CheckHash,
    /// The leader's keyspace hash at `index` (a `CheckHash` entry): every
    /// replica compares its own.
    ExpectHash {
        /// The index of the `CheckHash` entry.
        index: u64,
        /// The leader's hash there.
        hash: [u8; 32],
    },
    /// Log time reached the plugin's wake-up, or keep-alives wait: every
    /// replica runs the plugin's `tick` at this index.
    Tick {
        /// Log time, as the leader stamped it.
        now_ms: u64,
        /// The proposing leader's start plus one election timeout.
        grace_until_ms: u64,
        /// Keep-alives: what to renew and when the leader took it.
        renewals: Vec<(Vec<u8>, u64)>,
    },
}

impl SystemCommand {
    /// The bytes stored in the log.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            SystemCommand::SetAddress { id, address } => {
                let mut out = vec![MARKER];
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(address.as_bytes());
                out
            }
            SystemCommand::DeployPlugin { timestamp_ms, wasm } => {
                let mut out = Vec::with_capacity(wasm.len() + 9);
                out.push(DEPLOY);
                out.extend_from_slice(&timestamp_ms.to_be_bytes());
                out.extend_from_slice(wasm);
                out
            }
            SystemCommand::CheckHash => vec![CHECK_HASH],
            SystemCommand::ExpectHash { index, hash } => {
                let mut out = vec![EXPECT_HASH];
                out.extend_from_slice(&index.to_be_bytes());
                out.extend_from_slice(hash);
                out
            }
            SystemCommand::Tick { now_ms, grace_until_ms, renewals } => {
                let mut out = vec![TICK];
                out.extend_from_slice(&now_ms.to_be_bytes());
                out.extend_from_slice(&grace_until_ms.to_be_bytes());
                out.extend_from_slice(&(renewals.len() as u32).to_be_bytes());
                for (key, at) in renewals {
                    out.extend_from_slice(&at.to_be_bytes());
                    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
                    out.extend_from_slice(key);
                }
                out
            }
        }
    }

    /// The leader timestamp a system command carries (a deploy's, a tick's).
    pub(crate) fn stamp(bytes: &[u8]) -> Option<u64> {
        match bytes {
            [DEPLOY | TICK, ts @ ..] if ts.len() >= 8 => Some(u64::from_be_bytes(ts[..8].try_into().expect("8 bytes"))),
            _ => None,
        }
    }

    /// Sets the timestamp of an encoded command that carries one; whether
    /// it did. The Raft loop stamps deploys with log time as it proposes them.
    pub(crate) fn restamp(bytes: &mut [u8], stamp_ms: u64) -> bool {
        match bytes {
            [DEPLOY, ts @ ..] if ts.len() >= 8 => {
                ts[..8].copy_from_slice(&stamp_ms.to_be_bytes());
                true
            }
            _ => false,
        }
    }

    /// Whether the entry must be applied at the end of its own batch: the
    /// ones that change the plugin or look at the state as of their index.
    pub(crate) fn ends_batch(bytes: &[u8]) -> bool {
        matches!(bytes.first(), Some(&DEPLOY) | Some(&CHECK_HASH) | Some(&TICK))
    }

    /// Reads a command back; `None` if `bytes` is not a system command.
    pub fn decode(bytes: &[u8]) -> Option<Result<Self, String>> {
        let (&kind, rest) = bytes.split_first()?;
        Some(match kind {
            MARKER => {
                if rest.len() < 8 {
                    Err("address command too short".into())
                } else {
                    let id = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
                    String::from_utf8(rest[8..].to_vec())
                        .map(|address| SystemCommand::SetAddress { id, address })
                        .map_err(|_| "address is not UTF-8".into())
                }
            }
            DEPLOY if rest.len() >= 8 => Ok(SystemCommand::DeployPlugin {
                timestamp_ms: u64::from_be_bytes(rest[..8].try_into().expect("8 bytes")),
                wasm: rest[8..].to_vec(),
            }),
            CHECK_HASH if rest.is_empty() => Ok(SystemCommand::CheckHash),
            TICK => decode_tick(rest),
            EXPECT_HASH if rest.len() == 40 => Ok(SystemCommand::ExpectHash {
                index: u64::from_be_bytes(rest[..8].try_into().expect("8 bytes")),
                hash: rest[8..].try_into().expect("32 bytes"),
            }),
            0x80..=0x8f => Err(format!("malformed or unknown system command 0x{kind:02x}")),
            _ => return None,
        })
    }
}

/// A tick's fields, every length checked (a malformed one is refused, and
/// refused alike on every replica).
fn decode_tick(rest: &[u8]) -> Result<SystemCommand, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let bytes = rest.get(at..at + n).ok_or("a truncated tick command")?;
        at += n;
        Ok(bytes)
    };
    let u64_of = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
    let now_ms = u64_of(take(8)?);
    let grace_until_ms = u64_of(take(8)?);
    let n = u32::from_be_bytes(take(4)?.try_into().expect("4 bytes"));
    let mut renewals = Vec::new();
    for _ in 0..n {
        let at_ms = u64_of(take(8)?);
        let len = u16::from_be_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
        renewals.push((take(len)?.to_vec(), at_ms));
    }
    if at != rest.len() {
        return Err("trailing bytes after a tick command".to_string());
    }
    Ok(SystemCommand::Tick { now_ms, grace_until_ms, renewals })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_plugin_envelopes_are_not_system_commands() {
        for c in [
            SystemCommand::SetAddress { id: 4, address: "127.0.0.1:7382".into() },
            SystemCommand::DeployPlugin { timestamp_ms: 5, wasm: b"\0asm...".to_vec() },
            SystemCommand::CheckHash,
            SystemCommand::ExpectHash { index: 7, hash: [9; 32] },
            SystemCommand::Tick { now_ms: 10, grace_until_ms: 11, renewals: vec![] },
            SystemCommand::Tick { now_ms: 10, grace_until_ms: 11, renewals: vec![(b"lease 1".to_vec(), 9), (vec![], 3)] },
        ] {
            assert_eq!(SystemCommand::decode(&c.encode()), Some(Ok(c)));
        }
        let env = crate::envelope::Envelope { timestamp_ms: 1, client_id: 0, sequence: 0, command: vec![] };
        assert_eq!(SystemCommand::decode(&env.encode()), None);
        assert!(matches!(SystemCommand::decode(&[MARKER, 1]), Some(Err(_))));
        assert!(matches!(SystemCommand::decode(&[EXPECT_HASH, 1]), Some(Err(_))));
        assert!(matches!(SystemCommand::decode(&[0x8f]), Some(Err(_))));
        let tick = SystemCommand::Tick { now_ms: 1, grace_until_ms: 2, renewals: vec![(b"k".to_vec(), 3)] }.encode();
        for cut in 1..tick.len() {
            assert!(matches!(SystemCommand::decode(&tick[..cut]), Some(Err(_))), "cut at {cut}");
        }
        assert!(matches!(SystemCommand::decode(&[&tick[..], b"x"].concat()), Some(Err(_))), "trailing bytes");
        assert_eq!(SystemCommand::stamp(&tick), Some(1));
    }
}
