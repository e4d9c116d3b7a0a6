//! Linearizable reads on their way to the Raft loop, and one ReadIndex
//! round in flight at a time.
//!
//! A message to the loop per read woke the loop's thread once per read: a
//! futex wake on the caller's thread, a context switch on the loop's, about
//! a fifth of all CPU while serving reads. Reads now wait here, and only the
//! first since the loop last took them rings the loop (one message,
//! [`LoopMsg::ReadsWaiting`](crate::raft_loop::LoopMsg)). The loop starts a
//! round with every read waiting when none of its own is in flight; reads
//! that arrive during a round join the next one, as in etcd's read loop.
//! Each read still joins a round that starts after it arrived, so it stays
//! linearizable.

use parking_lot::Mutex;

use crate::error::Error;
use crate::raft_loop::IndexReply;

#[derive(Default)]
pub(crate) struct ReadQueue {
    inner: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    reads: Vec<IndexReply>,
    /// The loop was rung since it last took the reads: later ones need not.
    rung: bool,
    /// The loop stopped: reads are refused at once.
    closed: Option<Error>,
}

/// What the caller of [`ReadQueue::push`] does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ring {
    /// Tell the loop that reads wait.
    Loop,
    /// The loop knows already.
    Quiet,
}

impl ReadQueue {
    /// Adds a read: its reply comes once a round that started after now
    /// confirmed the read index. `Err` (with the reply dropped) once the
    /// loop has stopped.
    pub fn push(&self, reply: IndexReply) -> Result<Ring, Error> {
        let mut w = self.inner.lock();
        if let Some(e) = &w.closed {
            return Err(e.clone());
        }
        w.reads.push(reply);
        Ok(if std::mem::replace(&mut w.rung, true) { Ring::Quiet } else { Ring::Loop })
    }

    /// Takes every waiting read (the loop, to start a round with them); the
    /// next push rings again.
    pub fn take(&self) -> Vec<IndexReply> {
        let mut w = self.inner.lock();
        w.rung = false;
        std::mem::take(&mut w.reads)
    }

    /// The loop stops: waiting reads and every later one get `error`.
    pub fn close(&self, error: Error) {
        let reads = {
            let mut w = self.inner.lock();
            w.closed = Some(error.clone());
            std::mem::take(&mut w.reads)
        };
        for r in reads {
            let _ = r.send(Err(error.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;
    use wasmraft_raft::Index;

    use super::*;

    fn read() -> (IndexReply, oneshot::Receiver<Result<Index, Error>>) {
        oneshot::channel()
    }

    #[test]
    fn only_the_first_read_since_the_loop_took_them_rings_it() {
        let q = ReadQueue::default();
        let (a, _ra) = read();
        let (b, _rb) = read();
        assert_eq!(q.push(a).unwrap(), Ring::Loop);
        assert_eq!(q.push(b).unwrap(), Ring::Quiet);
        assert_eq!(q.take().len(), 2);
        assert!(q.take().is_empty());
        let (c, _rc) = read();
        assert_eq!(q.push(c).unwrap(), Ring::Loop, "taken reads reset the bell");
        // A take that finds nothing resets it too: a ring is never owed.
        q.take();
        let (d, _rd) = read();
        assert_eq!(q.push(d).unwrap(), Ring::Loop);
    }

    #[test]
    fn a_closed_queue_answers_waiting_reads_and_refuses_new_ones() {
        let q = ReadQueue::default();
        let (a, mut ra) = read();
        q.push(a).unwrap();
        q.close(Error::Stopped);
        assert!(matches!(ra.try_recv(), Ok(Err(Error::Stopped))));
        let (b, _rb) = read();
        assert!(matches!(q.push(b), Err(Error::Stopped)));
    }
}
