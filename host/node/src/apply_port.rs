//! Where the Raft loop hands work to the apply side, and how the two
//! tell each other of progress without a thread hand-off per batch.

use std::sync::mpsc::Sender;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmraft_raft::SnapshotMeta;
use wasmraft_storage::StagedSnapshot;

use crate::apply::ApplyTask;

/// Where the Raft loop hands work to the apply side: the apply thread's
/// channel, or the simulation's apply step.
pub(crate) trait ApplyPort: Send {
    /// Queues `task`; tasks are carried out in the order they were sent.
    fn send(&mut self, task: ApplyTask);

    /// Installs a snapshot after every task sent before it, and returns once
    /// it is durable (the Raft loop acknowledges the snapshot after that).
    fn install_snapshot(&mut self, meta: SnapshotMeta, data: StagedSnapshot) -> Result<(), String>;
}

impl ApplyPort for Sender<ApplyTask> {
    fn send(&mut self, task: ApplyTask) {
        // The apply thread gone means the node is stopping or fatal; the
        // Raft loop learns so from the status at its next turn.
        let _ = Sender::send(self, task);
    }

    fn install_snapshot(&mut self, meta: SnapshotMeta, data: StagedSnapshot) -> Result<(), String> {
        let (done, wait) = std::sync::mpsc::channel();
        let _ = Sender::send(self, ApplyTask::InstallSnapshot { meta, data, done });
        wait.recv().map_err(|_| "the apply thread stopped".to_string())?
    }
}

/// An [`ApplyPort`] that holds clients' registrations (`Await`,
/// `AwaitRenewals`) until the next task that applies or drops entries,
/// and hands them over in one message with it. A registration alone woke
/// an idle apply thread for nothing: its entry applies only with a later
/// `Apply` (or is dropped by a snapshot), which the registration still
/// precedes.
pub(crate) struct RegistrationsHeld {
    port: Box<dyn ApplyPort>,
    held: Vec<ApplyTask>,
}

impl RegistrationsHeld {
    pub fn new(port: Box<dyn ApplyPort>) -> Self {
        Self { port, held: Vec::new() }
    }
}

impl ApplyPort for RegistrationsHeld {
    fn send(&mut self, task: ApplyTask) {
        match task {
            ApplyTask::Await { .. } | ApplyTask::AwaitRenewals { .. } => self.held.push(task),
            task if self.held.is_empty() => self.port.send(task),
            task => {
                self.held.push(task);
                self.port.send(ApplyTask::Many(std::mem::take(&mut self.held)));
            }
        }
    }

    fn install_snapshot(&mut self, meta: SnapshotMeta, data: StagedSnapshot) -> Result<(), String> {
        if !self.held.is_empty() {
            self.port.send(ApplyTask::Many(std::mem::take(&mut self.held)));
        }
        self.port.install_snapshot(meta, data)
    }
}

/// Whether the Raft loop waits to hear of the next applied batch.
///
/// The loop reads the applied index (`NodeStatus::applied`) at every turn,
/// so the apply worker sends it `LoopMsg::Applied` only when the loop asks:
/// when something it holds waits for applying to progress (the applying
/// budget, a tick, forwarded batches). A message per batch woke the loop's
/// thread for nothing most of the time. The loop asks before it reads the
/// index, and the worker looks after it has published it: either the loop
/// reads the new index or the worker finds the question.
#[derive(Debug, Default)]
pub(crate) struct AppliedWanted(AtomicBool);

impl AppliedWanted {
    /// The loop: tell me of the next batch (then read the applied index).
    pub fn ask(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// The worker, after publishing a batch: whether the loop asked since
    /// the last time.
    pub fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use wasmraft_raft::{Index, Term};

    use super::*;

    /// What reached the worker: each message, by the names of its tasks.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Vec<&'static str>>>>);

    fn names(task: &ApplyTask) -> Vec<&'static str> {
        match task {
            ApplyTask::Await { .. } => vec!["await"],
            ApplyTask::AwaitRenewals { .. } => vec!["renewals"],
            ApplyTask::Apply(_) => vec!["apply"],
            ApplyTask::InstallSnapshot { .. } => vec!["install"],
            ApplyTask::Fail => vec!["fail"],
            ApplyTask::Many(tasks) => tasks.iter().flat_map(names).collect(),
        }
    }

    impl ApplyPort for Recorder {
        fn send(&mut self, task: ApplyTask) {
            self.0.lock().push(names(&task));
        }

        fn install_snapshot(&mut self, _: SnapshotMeta, _: StagedSnapshot) -> Result<(), String> {
            unreachable!("not called by these tests")
        }
    }

    fn register(index: u64) -> ApplyTask {
        let (reply, _) = tokio::sync::oneshot::channel();
        ApplyTask::Await { index: Index(index), term: Term(1), reply }
    }

    #[test]
    fn registrations_wait_for_the_next_task_and_go_ahead_of_it_in_one_message() {
        let recorder = Recorder::default();
        let mut port = RegistrationsHeld::new(Box::new(recorder.clone()));
        port.send(register(1));
        port.send(ApplyTask::AwaitRenewals { index: Index(2), term: Term(1), replies: Vec::new() });
        assert!(recorder.0.lock().is_empty(), "a registration alone wakes no worker");
        port.send(ApplyTask::Apply(Vec::new()));
        port.send(ApplyTask::Apply(Vec::new()));
        port.send(register(3));
        port.send(ApplyTask::Fail);
        assert_eq!(*recorder.0.lock(), vec![vec!["await", "renewals", "apply"], vec!["apply"], vec!["await", "fail"]]);
    }

    #[test]
    fn the_loop_hears_of_an_applied_batch_once_per_question() {
        let wanted = AppliedWanted::default();
        assert!(!wanted.take(), "nobody asked");
        wanted.ask();
        wanted.ask();
        assert!(wanted.take());
        assert!(!wanted.take(), "one answer per question");
    }
}
