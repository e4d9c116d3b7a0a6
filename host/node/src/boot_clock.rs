//! The machine's boot clock, which measures a node's downtime across a
//! restart: no wall-clock step moves it (see `timers::StampClock`).

use std::time::Instant;

use wasmraft_storage::BootTime;

/// A clock that counts from the machine's boot and that no wall-clock step
/// moves: across a restart without a reboot, it gives the time the node
/// was down even if the wall clock stepped meanwhile (or while the node
/// was paused before it died, before it could note the step).
#[derive(Clone, Copy, Debug)]
pub(crate) enum BootClock {
    /// Linux's `CLOCK_BOOTTIME` (which counts suspend too), for the boot
    /// the kernel's `boot_id` names.
    Machine { boot_id: [u8; 16] },
    /// A simulated machine's: ms since `zero`, the boot `boot_id` names.
    #[cfg(test)]
    Simulated { boot_id: [u8; 16], zero: Instant },
    /// None to be had: the time since a note is the wall clock's advance.
    Unknown,
}

impl BootClock {
    /// This machine's, if it has one.
    pub fn of_this_machine() -> Self {
        match machine_boot_id() {
            Some(boot_id) if boot_ns().is_some() => BootClock::Machine { boot_id },
            _ => {
                tracing::warn!(
                    "no boot clock: after a restart, the time since the last note of log time is taken from the wall clock"
                );
                BootClock::Unknown
            }
        }
    }

    /// A simulated machine that booted at `zero`.
    #[cfg(test)]
    pub fn simulated(zero: Instant) -> Self {
        BootClock::Simulated { boot_id: [0; 16], zero }
    }

    /// The clock as it read at `now`, in ms: rounded up for a note
    /// (`Round::Up`: the time since it then never exceeds the real one),
    /// down for a reading against a note. A machine's clock is read after
    /// `now`: the monotonic clock's advance since is taken off, measured
    /// so that the reading errs the same way as its rounding.
    pub fn read(&self, now: Instant, round: Round) -> Option<BootTime> {
        match *self {
            BootClock::Machine { boot_id } => {
                let late = || nanos(Instant::now().saturating_duration_since(now));
                let ms = match round {
                    // The advance measured first, so no more than the real one.
                    Round::Up => {
                        let late = late();
                        boot_ns()?.saturating_sub(late).div_ceil(1_000_000)
                    }
                    Round::Down => {
                        let boot = boot_ns()?;
                        boot.saturating_sub(late()) / 1_000_000
                    }
                };
                Some(BootTime { boot_id, ms })
            }
            #[cfg(test)]
            BootClock::Simulated { boot_id, zero } => {
                Some(BootTime { boot_id, ms: now.saturating_duration_since(zero).as_millis() as u64 })
            }
            BootClock::Unknown => None,
        }
    }
}

/// Which way [`BootClock::read`] rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    Up,
    Down,
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The kernel's id of this boot: a UUID, as 16 bytes.
fn machine_boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: Vec<u8> = text.trim().bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0; 16];
    for (byte, pair) in id.iter_mut().zip(hex.chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(id)
}

/// `CLOCK_BOOTTIME` in ns.
#[cfg(target_os = "linux")]
fn boot_ns() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (rc == 0).then(|| (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64))
}

#[cfg(not(target_os = "linux"))]
fn boot_ns() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_linux_machine_has_a_boot_clock_that_goes_forward() {
        let machine = BootClock::of_this_machine();
        assert!(matches!(machine, BootClock::Machine { boot_id } if boot_id != [0; 16]), "{machine:?}");
        let now = Instant::now();
        let (down, up) = (machine.read(now, Round::Down).expect("reads"), machine.read(now, Round::Up).expect("reads"));
        assert_eq!(down.boot_id, up.boot_id);
        assert!(down.ms > 0 && up.ms >= down.ms, "{down:?}, rounded up {up:?}");
        // Read later, the clock as it was at `now` stays where it was.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let again = machine.read(now, Round::Down).expect("reads");
        assert!(again.ms <= up.ms, "{again:?} read later for the same moment, against {up:?}");
        assert!(machine.read(Instant::now(), Round::Down).expect("reads").ms >= down.ms + 20);
    }
}
