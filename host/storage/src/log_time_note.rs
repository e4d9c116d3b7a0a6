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

/// What a write to the log does to the note of log time on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NoteChange {
    /// Leaves it as it is.
    #[default]
    Keep,
    /// Writes this note in its place.
    Write(LogTimeNote),
    /// Removes it: log time is no longer known (a rewind to a log that
    /// holds no stamp).
    Remove,
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
    /// Stored under two keys, so that a binary from before boot clocks,
    /// which reads a note of exactly 16 bytes, still starts on a data
    /// directory a later one wrote: log time and the wall clock (16 bytes),
    /// and, if known, the same 16 bytes followed by the boot id and the
    /// boot clock (40). The second counts only while its first 16 bytes
    /// match the first key's: an older binary may have written a newer
    /// note since, and left a boot time that is not that note's.
    pub(crate) fn encode(&self) -> ([u8; 16], Option<[u8; 40]>) {
        let mut note = [0; 16];
        note[..8].copy_from_slice(&self.log_time_ms.to_be_bytes());
        note[8..].copy_from_slice(&self.wall_ms.to_be_bytes());
        let boot = self.boot.map(|boot| {
            let mut with_boot = [0; 40];
            with_boot[..16].copy_from_slice(&note);
            with_boot[16..32].copy_from_slice(&boot.boot_id);
            with_boot[32..].copy_from_slice(&boot.ms.to_be_bytes());
            with_boot
        });
        (note, boot)
    }

    /// The note from its two keys' values: an error for a note of a
    /// length other than 16 (or 40, with its boot time in the same key, as
    /// the first builds with boot clocks wrote it). A boot time of another
    /// length is left out, with a warning: the wall clock measures then.
    pub(crate) fn decode(note: &[u8], boot: Option<&[u8]>) -> Result<Self, String> {
        let u64_at = |bytes: &[u8], at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let boot_time = |b: &[u8]| BootTime { boot_id: b[16..32].try_into().expect("16 bytes"), ms: u64_at(b, 32) };
        let (note, boot) = match note.len() {
            16 => {
                let boot = boot.and_then(|b| {
                    if b.len() != 40 {
                        tracing::warn!(bytes = b.len(), "a log-time note's boot time is not 40 bytes: left out");
                        return None;
                    }
                    (b[..16] == *note).then(|| boot_time(b))
                });
                (note, boot)
            }
            40 => (&note[..16], Some(boot_time(note))),
            n => return Err(format!("{n} bytes, not 16")),
        };
        Ok(Self { log_time_ms: u64_at(note, 0), wall_ms: u64_at(note, 8), boot })
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
            let (plain, with_boot) = note.encode();
            assert_eq!(LogTimeNote::decode(&plain, with_boot.as_ref().map(|b| &b[..])), Ok(note));
        }
        for len in [0, 8, 15, 17, 39, 41] {
            assert!(LogTimeNote::decode(&vec![1; len], None).is_err(), "{len} bytes");
        }
        // A boot time of another length is left out.
        for len in [0, 16, 39, 41] {
            let read = LogTimeNote::decode(&[1; 16], Some(&vec![1; len])).unwrap();
            assert_eq!(read.boot, None, "boot time of {len} bytes");
        }
        // The first builds with boot clocks kept it in the note's key.
        let note = LogTimeNote { log_time_ms: 3, wall_ms: 4, boot: Some(boot) };
        let (plain, with_boot) = note.encode();
        assert_eq!(with_boot.unwrap()[..16], plain);
        assert_eq!(LogTimeNote::decode(&with_boot.unwrap(), None), Ok(note));
    }

    /// A note an older binary wrote over a later one's keeps the later
    /// one's boot time from counting.
    #[test]
    fn a_boot_time_of_another_note_does_not_count() {
        let old = LogTimeNote { log_time_ms: 10, wall_ms: 20, boot: Some(BootTime { boot_id: [3; 16], ms: 5 }) };
        let (_, with_boot) = old.encode();
        let (newer, _) = LogTimeNote { log_time_ms: 11, wall_ms: 21, boot: None }.encode();
        let read = LogTimeNote::decode(&newer, with_boot.as_ref().map(|b| &b[..])).unwrap();
        assert_eq!(read, LogTimeNote { log_time_ms: 11, wall_ms: 21, boot: None });
    }
}
