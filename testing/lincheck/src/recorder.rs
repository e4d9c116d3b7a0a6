//! Recording a history from concurrent (async or threaded) clients.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::history::{ClientId, History, Operation, Outcome};

/// Records operations as clients perform them; cheap to clone and share
/// across tasks and threads (an `Arc<Mutex<..>>` inside, held only to push or
/// resolve one entry).
///
/// Times are nanoseconds since the recorder was created, from
/// [`Instant`] (monotonic). An invocation is stamped when
/// [`invoke`](Recorder::invoke) is called, so call it *before* sending the
/// request; a response is stamped when [`OpHandle::ok`] is called, so call it
/// *after* receiving the reply. Wider intervals are always safe; narrower
/// ones can produce false alarms.
///
/// ```
/// use wasmraft_lincheck::{check, CheckOptions, ClientId, KvInput, KvModel, KvOutput, KvRecorder};
///
/// let recorder = KvRecorder::new();
/// let op = recorder.invoke(ClientId(1), KvInput::put("k", "v1"));
/// // ... send the put and await the reply ...
/// op.ok(KvOutput::Ok);
/// let op = recorder.invoke(ClientId(2), KvInput::get("k"));
/// op.ok(KvOutput::value("v1"));
/// let lost = recorder.invoke(ClientId(3), KvInput::put("k", "v2"));
/// lost.unknown(); // timed out: it may or may not have been applied
/// check::<KvModel>(&recorder.history(), &CheckOptions::default()).assert_ok();
/// ```
pub struct Recorder<I, O> {
    inner: Arc<Mutex<Inner<I, O>>>,
}

struct Inner<I, O> {
    base: Instant,
    /// `None`: a definitely-failed operation, left out of the history.
    ops: Vec<Option<Operation<I, O>>>,
}

impl<I, O> Recorder<I, O> {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        Recorder {
            inner: Arc::new(Mutex::new(Inner {
                base: Instant::now(),
                ops: Vec::new(),
            })),
        }
    }

    /// Records that `client` is about to send `input`. The operation counts
    /// as having an unknown outcome until the handle says otherwise, also if
    /// the handle is dropped (a cancelled future, a panicking task).
    pub fn invoke(&self, client: impl Into<ClientId>, input: I) -> OpHandle<I, O> {
        let now = Instant::now();
        let mut inner = self.lock();
        let invoke = nanos_since(inner.base, now);
        inner
            .ops
            .push(Some(Operation::unknown(client, input, invoke)));
        OpHandle {
            recorder: self.clone(),
            index: inner.ops.len() - 1,
        }
    }

    /// Number of operations recorded so far, definitely-failed ones excluded.
    pub fn len(&self) -> usize {
        self.lock().ops.iter().flatten().count()
    }

    /// Whether no operation has been recorded (definitely-failed ones excluded).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the history so far: operations still in flight have an
    /// unknown outcome, definitely-failed ones are left out.
    pub fn history(&self) -> History<I, O>
    where
        I: Clone,
        O: Clone,
    {
        self.lock().ops.iter().flatten().cloned().collect()
    }

    fn lock(&self) -> MutexGuard<'_, Inner<I, O>> {
        // A client task that panicked while holding the lock cannot have left
        // an entry half-written; keep recording.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<I, O> Default for Recorder<I, O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I, O> Clone for Recorder<I, O> {
    fn clone(&self) -> Self {
        Recorder {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<I, O> fmt::Debug for Recorder<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("operations", &self.len())
            .finish()
    }
}

/// An invoked operation, to be resolved once its outcome is known. Dropping
/// it unresolved leaves the outcome unknown.
#[must_use = "resolve the operation with ok(), unknown() or failed()"]
pub struct OpHandle<I, O> {
    recorder: Recorder<I, O>,
    index: usize,
}

impl<I, O> OpHandle<I, O> {
    /// The operation returned `output`: stamps the return time now.
    pub fn ok(self, output: O) {
        let now = Instant::now();
        let mut inner = self.recorder.lock();
        let at = nanos_since(inner.base, now);
        if let Some(op) = inner.ops[self.index].as_mut() {
            op.outcome = Outcome::Returned { at, output };
        }
    }

    /// The outcome is unknown (timeout, connection lost after sending): the
    /// operation may take effect at any later time, or never. When in doubt,
    /// use this.
    pub fn unknown(self) {}

    /// The operation definitely did not and never will take effect (rejected
    /// before it reached the log, e.g. `NotLeader` or a connection refused
    /// before sending); it is left out of the history. Marking an operation
    /// failed that did take effect makes the check unsound.
    pub fn failed(self) {
        self.recorder.lock().ops[self.index] = None;
    }
}

impl<I, O> fmt::Debug for OpHandle<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpHandle")
            .field("index", &self.index)
            .finish()
    }
}

fn nanos_since(base: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX - 1)
}
