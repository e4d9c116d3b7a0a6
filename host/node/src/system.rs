//! Commands the node itself replicates through the log, beside plugin
//! commands: they never reach the plugin.
//!
//! ```text
//! [0x80][node id: u64 BE][address: UTF-8]     the address of a member
//! ```
//!
//! Plugin commands start with their envelope's version byte (1), so the
//! first byte tells the two apart.

/// The first byte of a system command.
pub const MARKER: u8 = 0x80;

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
        }
    }

    /// Reads a command back; `None` if `bytes` is not a system command.
    pub fn decode(bytes: &[u8]) -> Option<Result<Self, String>> {
        if bytes.first() != Some(&MARKER) {
            return None;
        }
        Some(if bytes.len() < 9 {
            Err("system command too short".into())
        } else {
            let id = u64::from_be_bytes(bytes[1..9].try_into().expect("8 bytes"));
            String::from_utf8(bytes[9..].to_vec())
                .map(|address| SystemCommand::SetAddress { id, address })
                .map_err(|_| "address is not UTF-8".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_plugin_envelopes_are_not_system_commands() {
        let c = SystemCommand::SetAddress { id: 4, address: "127.0.0.1:7382".into() };
        assert_eq!(SystemCommand::decode(&c.encode()), Some(Ok(c)));
        let env = crate::envelope::Envelope { timestamp_ms: 1, client_id: 0, sequence: 0, command: vec![] };
        assert_eq!(SystemCommand::decode(&env.encode()), None);
        assert!(matches!(SystemCommand::decode(&[MARKER, 1]), Some(Err(_))));
    }
}
