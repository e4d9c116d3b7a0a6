//! Requests on their way to the Raft loop that ring it once per batch.
//!
//! A message to the loop per request woke the loop's thread once per
//! request: a futex wake on the caller's thread and a context switch on the
//! loop's, about a fifth of all CPU while serving linearizable reads, and
//! one wake per proposal while the loop waits for an fsync only to hold
//! the proposal until it ends. Linearizable reads and client proposals now
//! wait in a queue each, and only the first since the loop last took them
//! rings the loop (one message). The loop takes them when it can use them:
//! reads when no ReadIndex round of its own is in flight (those that come
//! meanwhile start the next round, as in etcd's read loop), proposals when
//! no log write is in flight and the next one has room.

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::error::Error;

pub(crate) struct LoopQueue<T> {
    inner: Mutex<Waiting<T>>,
}

struct Waiting<T> {
    items: VecDeque<T>,
    /// The loop was rung since it last took every item: later ones need not.
    rung: bool,
    /// The loop stopped: requests are refused at once.
    closed: Option<Error>,
}

impl<T> Default for LoopQueue<T> {
    fn default() -> Self {
        LoopQueue { inner: Mutex::new(Waiting { items: VecDeque::new(), rung: false, closed: None }) }
    }
}

/// What the caller of [`LoopQueue::push`] does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ring {
    /// Tell the loop that requests wait.
    Loop,
    /// The loop knows already.
    Quiet,
}

impl<T> LoopQueue<T> {
    /// Adds a request for the loop. `Err` (with the request dropped) once
    /// the loop has stopped.
    pub fn push(&self, item: T) -> Result<Ring, Error> {
        let mut w = self.inner.lock();
        if let Some(e) = &w.closed {
            return Err(e.clone());
        }
        w.items.push_back(item);
        Ok(if std::mem::replace(&mut w.rung, true) { Ring::Quiet } else { Ring::Loop })
    }

    /// Takes every waiting request; the next push rings again.
    pub fn take(&self) -> Vec<T> {
        let mut w = self.inner.lock();
        w.rung = false;
        w.items.drain(..).collect()
    }

    /// Takes requests in order while `room` says the next fits. If some
    /// are left the loop must come back for them (see
    /// [`is_waiting`](Self::is_waiting)): no push rings it meanwhile.
    pub fn take_while(&self, mut room: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut w = self.inner.lock();
        let mut taken = Vec::new();
        while let Some(item) = w.items.front() {
            if !room(item) {
                break;
            }
            taken.extend(w.items.pop_front());
        }
        if w.items.is_empty() {
            w.rung = false;
        }
        taken
    }

    /// Whether requests wait.
    pub fn is_waiting(&self) -> bool {
        !self.inner.lock().items.is_empty()
    }

    /// The loop stops: later pushes get `error`; the requests that wait
    /// are returned, to be answered.
    pub fn close(&self, error: Error) -> Vec<T> {
        let mut w = self.inner.lock();
        w.closed = Some(error);
        w.items.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_request_since_the_loop_took_them_rings_it() {
        let q = LoopQueue::default();
        assert_eq!(q.push(1).unwrap(), Ring::Loop);
        assert_eq!(q.push(2).unwrap(), Ring::Quiet);
        assert_eq!(q.take(), [1, 2]);
        assert!(!q.is_waiting());
        assert_eq!(q.push(3).unwrap(), Ring::Loop, "taken requests reset the bell");
    }

    #[test]
    fn requests_left_behind_ring_no_one_until_the_loop_takes_the_last() {
        let q = LoopQueue::default();
        for i in 0..4 {
            q.push(i).unwrap();
        }
        let mut room = 2;
        let two = q.take_while(|_| {
            room -= 1;
            room >= 0
        });
        assert_eq!(two, [0, 1]);
        assert!(q.is_waiting());
        assert_eq!(q.push(4).unwrap(), Ring::Quiet, "the loop knows that requests wait");
        assert_eq!(q.take_while(|_| true), [2, 3, 4]);
        assert_eq!(q.push(5).unwrap(), Ring::Loop);
    }

    #[test]
    fn a_closed_queue_gives_back_what_waits_and_refuses_new_requests() {
        let q = LoopQueue::default();
        q.push(1).unwrap();
        assert_eq!(q.close(Error::Stopped), [1]);
        assert!(matches!(q.push(2), Err(Error::Stopped)));
    }
}
