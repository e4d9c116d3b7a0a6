//! Progress lines for the slow steps of a start (opening a large data
//! directory, compiling a plugin, replaying the log), so that an operator
//! watching the log sees the node working rather than hung.

use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// How often a step still running says so.
const EVERY: Duration = Duration::from_secs(2);

/// Runs `step`, logging `what` every two seconds while it runs and how long
/// it took if that was over a second.
pub(crate) fn logged<R>(what: &str, step: impl FnOnce() -> R) -> R {
    let started = Instant::now();
    let (done, wait) = channel::<()>();
    let span = tracing::Span::current();
    let what_owned = what.to_string();
    let ticker = std::thread::Builder::new().name("progress".into()).spawn(move || {
        let _span = span.entered();
        loop {
            match wait.recv_timeout(EVERY) {
                Err(RecvTimeoutError::Timeout) => {
                    tracing::info!(seconds = started.elapsed().as_secs(), "still {what_owned}");
                }
                _ => return,
            }
        }
    });
    let result = step();
    drop(done);
    if let Ok(ticker) = ticker {
        let _ = ticker.join();
    }
    let took = started.elapsed();
    if took > Duration::from_secs(1) {
        tracing::info!(took_ms = took.as_millis() as u64, "done {what}");
    }
    result
}

/// Replaying committed entries after a start: a line every two seconds
/// until the state machine reaches the commit index known at start.
#[derive(Debug)]
pub(crate) struct Replay {
    until: u64,
    last_line: Instant,
    started: Instant,
}

impl Replay {
    /// Replays up to `until` (the commit index at start), from `applied`;
    /// None when there is nothing to replay.
    pub fn new(applied: u64, until: u64) -> Option<Self> {
        (applied < until).then(|| {
            tracing::info!(applied, commit = until, entries = until - applied, "replaying committed entries");
            let now = Instant::now();
            Replay { until, last_line: now, started: now }
        })
    }

    /// The state machine applied through `applied`; false once the replay
    /// is over.
    pub fn applied(&mut self, applied: u64) -> bool {
        if applied >= self.until {
            tracing::info!(applied, took_ms = self.started.elapsed().as_millis() as u64, "replayed committed entries");
            return false;
        }
        if self.last_line.elapsed() >= EVERY {
            self.last_line = Instant::now();
            tracing::info!(applied, commit = self.until, "replaying committed entries");
        }
        true
    }
}
