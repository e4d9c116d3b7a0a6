//! The simulated operator: grows the cluster by one node while faults
//! run, as `wasmraft member add-learner` and `member promote` do: the new
//! member's address through the log, then a learner, then a voter (joint
//! consensus). Each step goes to whichever node leads and is retried until
//! the leader's configuration shows it done.

use tokio::sync::oneshot;
use wasmraft_raft::{MembershipChange, NodeId, Role};

use crate::error::Error;
use crate::node::{Applied, Node};
use crate::raft_loop::LoopMsg;
use crate::system::SystemCommand;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Address,
    Learner,
    Voter,
    Done,
}

pub(super) struct Admin {
    joining: u64,
    step: Step,
    /// When to start, and when to retry.
    next_at: u64,
    /// Promote only after this time, so that the learner first catches up.
    promote_at: u64,
    waiting: Option<(oneshot::Receiver<Result<Applied, Error>>, u64)>,
}

impl Admin {
    pub fn new(joining: u64, start_at: u64, promote_at: u64) -> Admin {
        Admin { joining, step: Step::Address, next_at: start_at, promote_at, waiting: None }
    }

    pub fn done(&self) -> bool {
        self.step == Step::Done
    }

    /// Moves the operator on by one millisecond; `leader` is a node that
    /// believes it leads, if any.
    pub fn step(&mut self, now: u64, leader: Option<Node>) {
        if let Some((mut rx, sent_at)) = self.waiting.take() {
            match rx.try_recv() {
                Ok(Ok(_)) => {
                    self.step = self.next_step();
                    self.next_at = now;
                }
                Err(oneshot::error::TryRecvError::Empty) if now < sent_at + 600 => {
                    self.waiting = Some((rx, sent_at));
                    return;
                }
                // Refused, lost or timed out: look again, then retry.
                _ => self.next_at = now + 20,
            }
        }
        if self.step == Step::Done || now < self.next_at || (self.step == Step::Voter && now < self.promote_at) {
            return;
        }
        let Some(leader) = leader else { return };
        let st = leader.status();
        if st.role != Role::Leader {
            return;
        }
        let id = NodeId(self.joining);
        // Done already (an earlier attempt applied, its answer was lost)?
        let m = &st.membership;
        let already = match self.step {
            Step::Address => leader.addresses().contains_key(&self.joining),
            Step::Learner => m.contains(id),
            Step::Voter => m.voters.contains(&id) && m.voters_outgoing.is_empty(),
            Step::Done => true,
        };
        if already {
            self.step = self.next_step();
            return;
        }
        let (reply, rx) = oneshot::channel();
        let msg = match self.step {
            Step::Address => LoopMsg::ProposeSystem {
                data: SystemCommand::SetAddress { id: self.joining, address: format!("sim-node-{}", self.joining) }
                    .encode(),
                reply,
            },
            Step::Learner => LoopMsg::ChangeMembership { change: MembershipChange::AddLearner(id), reply },
            _ => LoopMsg::ChangeMembership { change: MembershipChange::AddVoter(id), reply },
        };
        let _ = leader.send(msg);
        self.waiting = Some((rx, now));
    }

    fn next_step(&self) -> Step {
        match self.step {
            Step::Address => Step::Learner,
            Step::Learner => Step::Voter,
            Step::Voter | Step::Done => Step::Done,
        }
    }
}
