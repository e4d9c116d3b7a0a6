//! The log writer: a Ready's entries and hard state go to disk off the Raft
//! loop's thread. While an fsync runs, the loop goes on ticking and
//! answering heartbeats; were it to wait, a disk stalled for longer than an
//! election timeout would silence a follower (its leader then finds its
//! quorum gone and steps down) or a leader (its followers elect another).
//!
//! One write at a time, in order: the loop hands over the next Ready only
//! once the last is durable ([`LoopMsg::Persisted`]), and does the rest of
//! a Ready (sending what waits on the write, applying, `advance`) then.

use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use wasmraft_raft::{Entry, HardState};
use wasmraft_storage::Storage;

use crate::raft_loop::LoopMsg;

/// A Ready's writes.
pub(crate) struct LogWrite {
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
    pub sync: bool,
}

/// Where the Raft loop sends its writes; each one's end comes back to the
/// loop's inbox as [`LoopMsg::Persisted`] with how long it took.
pub(crate) enum LogWriter {
    /// Held until the deterministic simulation's world lets the disk finish
    /// it ([`LogWriter::finish_held`]); meanwhile the loop takes turns as it
    /// does while a real fsync runs.
    #[cfg_attr(not(test), allow(dead_code, reason = "only the simulation finishes held writes"))]
    Held { job: Option<LogWrite>, storage: Storage, done: Sender<LoopMsg> },
    /// On the writer thread (see [`LogWriter::thread`]).
    Thread { jobs: Sender<LogWrite> },
}

impl LogWriter {
    pub fn write(&mut self, write: LogWrite) {
        match self {
            LogWriter::Held { job, .. } => {
                assert!(job.is_none(), "log writer: a second write before the first ended");
                *job = Some(write);
            }
            // A writer thread that is gone panicked, and the node is fatal
            // already: the loop stops at its next turn.
            LogWriter::Thread { jobs } => {
                let _ = jobs.send(write);
            }
        }
    }

    /// The simulation's disk finishes the held write, if there is one.
    #[cfg(test)]
    pub fn finish_held(&mut self) {
        if let LogWriter::Held { job, storage, done } = self {
            if let Some(job) = job.take() {
                let _ = done.send(LoopMsg::Persisted(write(storage, job)));
            }
        }
    }

    /// A writer for a thread to run with [`run`]: it ends when the Raft loop
    /// drops its writer.
    pub fn thread() -> (LogWriter, Receiver<LogWrite>) {
        let (jobs, rx) = std::sync::mpsc::channel();
        (LogWriter::Thread { jobs }, rx)
    }
}

/// The writer thread's body.
pub(crate) fn run(storage: Storage, jobs: Receiver<LogWrite>, done: Sender<LoopMsg>) {
    for job in jobs {
        let result = write(&storage, job);
        let failed = result.is_err();
        if done.send(LoopMsg::Persisted(result)).is_err() || failed {
            return;
        }
    }
}

fn write(storage: &Storage, job: LogWrite) -> Result<Duration, String> {
    let started = Instant::now();
    storage
        .append(&job.entries, job.hard_state.as_ref(), job.sync)
        .map_err(|e| e.to_string())?;
    Ok(started.elapsed())
}
