//! Commands the node itself replicates through the log, beside plugin
//! commands: they never reach the plugin's `apply`.
//!
//! ```text
//! [0x80][node id: u64 BE][address: UTF-8]     the address of a member
//! [0x81][timestamp ms: u64 BE][plugin bytes]  deploy a plugin (stamped by the leader's Raft loop)
//! [0x82]                                      every replica hashes its keyspace here
//! [0x83][index: u64 BE][sha256: 32 bytes]     the leader's keyspace hash at `index`
//! ```
//!
//! Plugin commands start with their envelope's version byte (1), so the
//! first byte tells the two apart.

/// The first byte of an address command; system commands use 0x80..=0x8f.
pub const MARKER: u8 = 0x80;
const DEPLOY: u8 = 0x81;
const CHECK_HASH: u8 = 0x82;
const EXPECT_HASH: u8 = 0x83;

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
        }
    }

    /// The leader timestamp a system command carries (a deploy's).
    pub(crate) fn stamp(bytes: &[u8]) -> Option<u64> {
        match bytes {
            [DEPLOY, ts @ ..] if ts.len() >= 8 => Some(u64::from_be_bytes(ts[..8].try_into().expect("8 bytes"))),
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
        matches!(bytes.first(), Some(&DEPLOY) | Some(&CHECK_HASH))
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
            EXPECT_HASH if rest.len() == 40 => Ok(SystemCommand::ExpectHash {
                index: u64::from_be_bytes(rest[..8].try_into().expect("8 bytes")),
                hash: rest[8..].try_into().expect("32 bytes"),
            }),
            0x80..=0x8f => Err(format!("malformed or unknown system command 0x{kind:02x}")),
            _ => return None,
        })
    }
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
        ] {
            assert_eq!(SystemCommand::decode(&c.encode()), Some(Ok(c)));
        }
        let env = crate::envelope::Envelope { timestamp_ms: 1, client_id: 0, sequence: 0, command: vec![] };
        assert_eq!(SystemCommand::decode(&env.encode()), None);
        assert!(matches!(SystemCommand::decode(&[MARKER, 1]), Some(Err(_))));
        assert!(matches!(SystemCommand::decode(&[EXPECT_HASH, 1]), Some(Err(_))));
        assert!(matches!(SystemCommand::decode(&[0x8f]), Some(Err(_))));
    }
}
