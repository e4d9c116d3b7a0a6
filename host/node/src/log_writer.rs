//! The log writer: a Ready's entries and hard state go to disk off the Raft
//! loop's thread. While an fsync runs, the loop goes on ticking and
//! answering heartbeats; were it to wait, a disk stalled for longer than an
//! election timeout would silence a follower (its leader then finds its
//! quorum gone and steps down) or a leader (its followers elect another).
//!
//! One write at a time, in order: the loop hands over the next Ready only
//! once the last is durable ([`LoopMsg::Persisted`]), and does the rest of
//! a Ready (applying, `advance`) then. What the peers wait for, the answers
//! that may leave only once the write is durable, the writer sends itself
//! when the transport gives it a [`MessageSink`]: a follower's answer to an
//! append then leaves as soon as its fsync ends, without first waking the
//! Raft loop's thread.

use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use wasmraft_raft::{Entry, HardState, Message};
use wasmraft_storage::{NoteChange, Storage};

use crate::raft_loop::LoopMsg;
use crate::transport::MessageSink;

/// A Ready's writes.
pub(crate) struct LogWrite {
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
    /// What becomes of the note of log time, durably with the entries.
    pub note: NoteChange,
    pub sync: bool,
    /// Messages to send once the writes are durable.
    pub answers: Vec<Message>,
}

/// A write that ended durable.
#[derive(Debug)]
pub(crate) struct Written {
    /// How long it took.
    pub took: Duration,
    /// Its answers, if the writer had no sink to send them: the loop sends them.
    pub unsent: Vec<Message>,
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
                let _ = done.send(LoopMsg::Persisted(write(storage, job, None)));
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

/// The writer thread's body: answers go out through `sink` if there is one.
pub(crate) fn run(storage: Storage, jobs: Receiver<LogWrite>, done: Sender<LoopMsg>, sink: Option<Box<dyn MessageSink>>) {
    for job in jobs {
        let result = write(&storage, job, sink.as_deref());
        let failed = result.is_err();
        if done.send(LoopMsg::Persisted(result)).is_err() || failed {
            return;
        }
    }
}

/// Makes `job` durable, then sends its answers through `sink` (none if the
/// write failed: the node stops) or hands them back unsent.
fn write(storage: &Storage, job: LogWrite, sink: Option<&dyn MessageSink>) -> Result<Written, String> {
    let started = Instant::now();
    storage
        .append_noted(&job.entries, job.hard_state.as_ref(), job.note, job.sync)
        .map_err(|e| e.to_string())?;
    let took = started.elapsed();
    match sink {
        Some(sink) if !job.answers.is_empty() => {
            sink.send(job.answers);
            Ok(Written { took, unsent: Vec::new() })
        }
        _ => Ok(Written { took, unsent: job.answers }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use wasmraft_raft::{EntryPayload, Index, LogId, MessageBody, NodeId, Term};
    use wasmraft_storage::StorageOptions;

    use super::*;

    /// Each send: the log's last index at that moment, and the messages.
    type Sends = Vec<(Index, Vec<Message>)>;

    /// Records what it is given, with the log's last index at that moment.
    #[derive(Clone, Default)]
    struct Recorder {
        sent: Arc<Mutex<Sends>>,
        storage: Arc<Mutex<Option<Storage>>>,
    }

    impl MessageSink for Recorder {
        fn send(&self, messages: Vec<Message>) {
            let last = self.storage.lock().as_ref().expect("storage").log_bounds().1;
            self.sent.lock().push((last, messages));
        }
    }

    fn entry(index: u64) -> Entry {
        Entry { log_id: LogId { term: Term(1), index: Index(index) }, payload: EntryPayload::Blank }
    }

    fn answer(index: u64) -> Message {
        Message {
            from: NodeId(2),
            to: NodeId(1),
            term: Term(1),
            body: MessageBody::AppendResponse { reject: false, index: Index(index), hint: LogId::default() },
        }
    }

    fn job(index: u64) -> LogWrite {
        LogWrite { entries: vec![entry(index)], hard_state: None, note: NoteChange::Keep, sync: true, answers: vec![answer(index)] }
    }

    fn written(msg: LoopMsg) -> Result<Written, String> {
        match msg {
            LoopMsg::Persisted(result) => result,
            _ => panic!("the writer sends only Persisted"),
        }
    }

    #[test]
    fn answers_leave_from_the_writer_once_their_entries_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 2, StorageOptions::default()).unwrap();
        let sink = Recorder::default();
        *sink.storage.lock() = Some(storage.clone());
        let (jobs_tx, jobs) = std::sync::mpsc::channel();
        let (done, persisted) = std::sync::mpsc::channel();
        let writer = {
            let (storage, sink) = (storage.clone(), sink.clone());
            std::thread::spawn(move || run(storage, jobs, done, Some(Box::new(sink))))
        };
        for index in 1..=3 {
            jobs_tx.send(job(index)).unwrap();
            let w = written(persisted.recv().unwrap()).unwrap();
            assert!(w.unsent.is_empty(), "a writer with a sink hands nothing back");
        }
        drop(jobs_tx);
        writer.join().unwrap();
        let sent = sink.sent.lock().clone();
        assert_eq!(sent.len(), 3);
        for (i, (last, messages)) in sent.into_iter().enumerate() {
            let index = i as u64 + 1;
            assert_eq!(messages, vec![answer(index)]);
            assert!(last >= Index(index), "answer {index} left before its entry was written (log ends at {last})");
        }
    }

    #[test]
    fn without_a_sink_the_answers_come_back_to_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 2, StorageOptions::default()).unwrap();
        let w = write(&storage, job(1), None).unwrap();
        assert_eq!(w.unsent, vec![answer(1)]);
        assert_eq!(storage.log_bounds().1, Index(1));
    }

    #[test]
    fn a_failed_write_sends_no_answer_and_stops_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 2, StorageOptions::default()).unwrap();
        let sink = Recorder::default();
        *sink.storage.lock() = Some(storage.clone());
        storage.crash_after_writes(1);
        let (jobs_tx, jobs) = std::sync::mpsc::channel();
        let (done, persisted) = std::sync::mpsc::channel();
        for index in 1..=3 {
            jobs_tx.send(job(index)).unwrap();
        }
        drop(jobs_tx);
        run(storage, jobs, done, Some(Box::new(sink.clone())));
        assert!(written(persisted.recv().unwrap()).is_ok());
        assert!(written(persisted.recv().unwrap()).is_err());
        assert!(persisted.recv().is_err(), "the writer stops after a failed write");
        let sent = sink.sent.lock().clone();
        assert_eq!(sent.len(), 1, "only the durable write's answer left");
        assert_eq!(sent[0].1, vec![answer(1)]);
    }
}
