//! The note of log time a node leaves for its restart: log time against
//! its wall clock and, where the machine has one, its boot clock.

/// Log time against a node's clocks at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogTimeNote {
    /// Log time, in ms.
    pub log_time_ms: u64,
    /// The wall clock, in ms since the Unix epoch.
    pub wall_ms: u64,
    /// The boot clock, if the machine has one.
    pub boot: Option<BootTime>,
}

/// A reading of a clock that runs from the machine's boot and that no
/// wall-clock step moves (Linux's `CLOCK_BOOTTIME`), with the boot it
/// counts from: two readings of one boot give the real time between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootTime {
    /// The kernel's id of the boot.
    pub boot_id: [u8; 16],
    /// Since the boot, in ms.
    pub ms: u64,
}

impl LogTimeNote {
    /// Log time, the wall clock, then (if known) the boot id and the boot
    /// clock: 16 or 40 bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        out.extend_from_slice(&self.log_time_ms.to_be_bytes());
        out.extend_from_slice(&self.wall_ms.to_be_bytes());
        if let Some(boot) = self.boot {
            out.extend_from_slice(&boot.boot_id);
            out.extend_from_slice(&boot.ms.to_be_bytes());
        }
        out
    }

    /// None for any other length. A 16-byte note (written before boot
    /// clocks were noted) has no boot time.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let u64_at = |at: usize| Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        let boot = match bytes.len() {
            16 => None,
            40 => Some(BootTime { boot_id: bytes[16..32].try_into().ok()?, ms: u64_at(32)? }),
            _ => return None,
        };
        Some(Self { log_time_ms: u64_at(0)?, wall_ms: u64_at(8)?, boot })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_decode_to_what_was_encoded_and_other_lengths_are_refused() {
        let boot = BootTime { boot_id: [7; 16], ms: u64::MAX };
        for note in [
            LogTimeNote { log_time_ms: 1, wall_ms: 2, boot: None },
            LogTimeNote { log_time_ms: u64::MAX, wall_ms: 0, boot: Some(boot) },
        ] {
            assert_eq!(LogTimeNote::decode(&note.encode()), Some(note));
        }
        for len in [0, 8, 15, 17, 39, 41, 64] {
            assert_eq!(LogTimeNote::decode(&vec![1; len]), None, "{len} bytes");
        }
    }
}
