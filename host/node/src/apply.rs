//! The apply thread: runs committed entries through the state machine,
//! stores their writes with the applied index atomically, then answers the
//! clients that proposed them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use wasmraft_raft::{EntryPayload, Index, LogId, Term};
use wasmraft_runtime::{EntryEvent, EntryInput, StateView};
use wasmraft_storage::{StateWrite, Storage};

use crate::envelope::Envelope;
use crate::error::Error;
use crate::node::{Applied, NodeStatus};
use crate::raft_loop::{LoopMsg, ProposeReply};
use crate::state_machine::{StateMachine, StorageView};

pub(crate) enum ApplyTask {
    /// A client waits for the entry proposed at `index` in `term`.
    Await { index: Index, term: Term, reply: ProposeReply },
    /// Committed entries, in log order.
    Apply(Vec<wasmraft_raft::Entry>),
}

pub(crate) struct ApplyWorker {
    pub state_machine: Box<dyn StateMachine>,
    pub storage: Storage,
    pub tasks: Receiver<ApplyTask>,
    pub raft: Sender<LoopMsg>,
    pub applied: watch::Sender<u64>,
    pub events: broadcast::Sender<Arc<EntryEvent>>,
    pub status: Arc<Mutex<NodeStatus>>,
    pub waiters: BTreeMap<Index, (Term, ProposeReply)>,
    pub last_applied: LogId,
}

impl ApplyWorker {
    pub fn run(mut self) {
        while let Ok(task) = self.tasks.recv() {
            match task {
                ApplyTask::Await { index, term, reply } => {
                    if index <= self.last_applied.index {
                        // Cannot happen (registration precedes commit); be safe.
                        let _ = reply.send(Err(Error::ProposalDropped));
                    } else {
                        self.waiters.insert(index, (term, reply));
                    }
                }
                ApplyTask::Apply(entries) => {
                    if let Err(fatal) = self.apply(entries) {
                        tracing::error!(error = %fatal, "apply failed; this node stops applying");
                        self.status.lock().fatal = Some(fatal.clone());
                        for (_, (_, reply)) in std::mem::take(&mut self.waiters) {
                            let _ = reply.send(Err(Error::Fatal(fatal.clone())));
                        }
                        return;
                    }
                }
            }
        }
    }

    fn apply(&mut self, entries: Vec<wasmraft_raft::Entry>) -> Result<(), String> {
        let entries: Vec<_> = entries.into_iter().filter(|e| e.log_id.index > self.last_applied.index).collect();
        let Some(last) = entries.last().map(|e| e.log_id) else { return Ok(()) };
        // Decode the commands; entries without one (the leader's no-op,
        // membership changes) still advance the applied index.
        let mut inputs = Vec::with_capacity(entries.len());
        let mut positions = Vec::with_capacity(entries.len()); // entry -> Some(input index) | Err
        for e in &entries {
            match &e.payload {
                EntryPayload::Normal(bytes) => match Envelope::decode(bytes) {
                    Ok(env) => {
                        positions.push(Ok(Some(inputs.len())));
                        inputs.push(EntryInput {
                            index: e.log_id.index.0,
                            term: e.log_id.term.0,
                            timestamp_ms: env.timestamp_ms,
                            command: env.command,
                        });
                    }
                    Err(m) => positions.push(Err(Error::Invalid(m))),
                },
                _ => positions.push(Ok(None)),
            }
        }
        let batch = if inputs.is_empty() {
            Default::default()
        } else {
            let view: Arc<dyn StateView> = Arc::new(StorageView(self.storage.apply_reader()));
            self.state_machine.apply(view, &inputs).map_err(|f| f.0)?
        };
        self.storage
            .apply(last, batch.writes.iter().map(|w| StateWrite { key: &w.key, value: w.value.as_deref() }))
            .map_err(|e| e.to_string())?;
        self.last_applied = last;

        let mut outcomes = batch.outcomes.into_iter();
        for (e, pos) in entries.iter().zip(positions) {
            let result = match pos {
                Ok(Some(_)) => outcomes
                    .next()
                    .expect("one outcome per input")
                    .map(|response| Applied { index: e.log_id.index.0, response })
                    .map_err(Error::from),
                Ok(None) => Err(Error::ProposalDropped),
                Err(err) => Err(err),
            };
            if let Some((term, reply)) = self.waiters.remove(&e.log_id.index) {
                // Another leader's entry at this index means ours was dropped.
                let _ = reply.send(if term == e.log_id.term { result } else { Err(Error::ProposalDropped) });
            }
        }
        // Waiters below the applied index whose entries never came belong to
        // a log suffix that was replaced.
        let stale: Vec<Index> = self.waiters.range(..=last.index).map(|(i, _)| *i).collect();
        for i in stale {
            if let Some((_, reply)) = self.waiters.remove(&i) {
                let _ = reply.send(Err(Error::ProposalDropped));
            }
        }
        for ev in batch.events {
            let _ = self.events.send(Arc::new(ev));
        }
        self.status.lock().applied = last.index.0;
        self.applied.send_replace(last.index.0);
        let _ = self.raft.send(LoopMsg::Applied(last.index));
        Ok(())
    }
}
