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
            Some(boot_id) if boot_ms().is_some() => BootClock::Machine { boot_id },
            _ => {
                tracing::info!(
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

    /// The clock at `now` (only a simulated one reads `now`).
    #[cfg_attr(not(test), allow(unused_variables))]
    pub fn read(&self, now: Instant) -> Option<BootTime> {
        match *self {
            BootClock::Machine { boot_id } => Some(BootTime { boot_id, ms: boot_ms()? }),
            #[cfg(test)]
            BootClock::Simulated { boot_id, zero } => {
                Some(BootTime { boot_id, ms: now.saturating_duration_since(zero).as_millis() as u64 })
            }
            BootClock::Unknown => None,
        }
    }
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

/// `CLOCK_BOOTTIME` in ms.
#[cfg(target_os = "linux")]
fn boot_ms() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000 + ts.tv_nsec as u64 / 1_000_000)
}

#[cfg(not(target_os = "linux"))]
fn boot_ms() -> Option<u64> {
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
        let first = machine.read(Instant::now()).expect("CLOCK_BOOTTIME reads");
        let second = machine.read(Instant::now()).expect("CLOCK_BOOTTIME reads");
        assert_eq!(first.boot_id, second.boot_id);
        assert!(second.ms >= first.ms && first.ms > 0, "{first:?} then {second:?}");
    }
}
