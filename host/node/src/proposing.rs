//! How the Raft loop takes a turn's proposals: a leader appends its own
//! clients' and its followers' (each client's proposal once while it waits
//! in the log, see `retries`) as one batch; a follower sends its own to the
//! leader (see `forwarding`).

use wasmraft_raft::{Index, Message, MessageBody, NodeId, ProposeOutcome, Role, Term};

use crate::apply::ApplyTask;
use crate::envelope::Envelope;
use crate::forwarding::{self, Received};
use crate::raft_loop::{ProposeReply, RaftLoop, propose_error};
use crate::retries::{Plan, Slot};
use crate::transport::Transport;

/// A follower's batch this leader takes: where each command goes.
struct Taken {
    from: NodeId,
    seq: u64,
    slots: Vec<Slot>,
}

impl<T: Transport> RaftLoop<T> {
    /// A follower's proposals (kept for this turn's append, once each) or
    /// the leader's answer to this node's.
    pub(crate) fn take_forwarding(&mut self, m: Message, forwarded: &mut Vec<Received>) {
        match m.body {
            MessageBody::Propose { session, seq, commands } => {
                // Within u32: `Node::step` took this much of the budget.
                let bytes = forwarding::Budget::size(&commands).unwrap_or(0);
                if self.forwarding.is_new(m.from, session, seq) {
                    forwarded.push(Received { from: m.from, term: m.term, seq, commands, bytes });
                } else {
                    self.forwarded_budget.give_back(bytes.into());
                }
            }
            MessageBody::ProposeResponse { seq, outcome } => {
                // Registered before the append that carries the entries (it
                // comes after this answer) can commit them.
                for (index, reply) in self.forwarding.answered(m.from, seq, outcome) {
                    self.apply.send(ApplyTask::Await { index, term: m.term, reply });
                }
            }
            _ => {}
        }
    }

    /// Appends this turn's proposals, followers' first, as one batch if this
    /// node leads; else sends its own to the leader it knows of.
    pub(crate) fn propose(
        &mut self,
        proposals: Vec<(Vec<u8>, u64, u64, ProposeReply)>,
        forwarded: Vec<Received>,
        wall_ms: u64,
    ) {
        if proposals.is_empty() && forwarded.is_empty() {
            return;
        }
        let (me, (role, term)) = (self.raw.id(), self.raw.role_and_term());
        // A follower stamps nothing: that would anchor a term it does not
        // lead. The leader stamps what followers send it.
        let stamp = if role == Role::Leader { self.stamp_clock.stamp(term.0, self.now, wall_ms) } else { 0 };
        let mut plan = Plan::default();
        let (taken, bytes) = self.take_forwarded(forwarded, role, term, stamp, &mut plan);
        let own = proposals.into_iter().map(|(command, client_id, sequence, reply)| {
            (Envelope { timestamp_ms: stamp, client_id, sequence, command }.encode(), reply)
        });
        if role != Role::Leader {
            self.forward(own.collect(), term);
            return;
        }
        let own: Vec<(Slot, ProposeReply)> =
            own.map(|(command, reply)| (self.retries.place(&mut plan, command, term), reply)).collect();
        let first = if plan.commands.is_empty() {
            Ok(Index(0))
        } else {
            let commands = std::mem::take(&mut plan.commands);
            self.raw.propose(commands).map(|range| {
                self.commit_timer.proposed(range.end.0 - 1, self.now);
                range.start
            })
        };
        let first = match first {
            Ok(first) => first,
            Err(e) => {
                self.forwarded_budget.give_back(bytes);
                let batches: Vec<_> = taken.iter().map(|t| (t.from, t.seq)).collect();
                self.transport.send(forwarding::refused(me, term, &batches, &ProposeOutcome::NotLeader));
                let err = propose_error(e);
                for (_, reply) in own {
                    let _ = reply.send(Err(err.clone()));
                }
                return;
            }
        };
        self.retries.appended(&plan, first, term);
        let index_of = |slot: Slot| match slot {
            Slot::New(position) => Index(first.0 + position as u64),
            Slot::InLog(index) => index,
        };
        // Answered before the Ready sends the append carrying them.
        let mut last_theirs = Index(0);
        let answers: Vec<_> = taken
            .into_iter()
            .map(|t| {
                let at: Vec<Index> = t.slots.into_iter().map(index_of).collect();
                last_theirs = at.iter().copied().fold(last_theirs, Index::max);
                if let Some(&last) = at.iter().max() {
                    self.commits_awaited.entry(t.from).or_default().insert(last);
                }
                forwarding::placed(me, term, t.from, t.seq, at)
            })
            .collect();
        self.forwarded_budget.hold(last_theirs, bytes);
        self.transport.send(answers);
        for (slot, reply) in own {
            // Registered before the entries can commit (a later Ready), and
            // the apply channel is FIFO.
            self.apply.send(ApplyTask::Await { index: index_of(slot), term, reply });
        }
    }

    /// Followers' batches this leader appends (stamped, their commands
    /// placed in `plan`, and the budget they hold); the others are answered
    /// here with a refusal, and give their budget back.
    fn take_forwarded(
        &mut self,
        forwarded: Vec<Received>,
        role: Role,
        term: Term,
        stamp: u64,
        plan: &mut Plan,
    ) -> (Vec<Taken>, u64) {
        let me = self.raw.id();
        let (mut taken, mut held) = (Vec::new(), 0);
        let busy = role == Role::Leader && !forwarded.is_empty() && self.status.lock().apply_lag() > self.max_apply_lag;
        for mut batch in forwarded {
            let bytes = u64::from(batch.bytes);
            // A sender that knows a later term knows this node no longer leads.
            let refusal = if role != Role::Leader || batch.term > term {
                ProposeOutcome::NotLeader
            } else if busy {
                ProposeOutcome::Busy
            } else if let Err(reason) = forwarding::stamp(&mut batch.commands, stamp, self.max_request_bytes) {
                // Only a broken or hostile member sends this; its clients
                // time out.
                tracing::warn!(from = batch.from.0, %reason, "dropped proposals a follower forwarded");
                self.forwarded_budget.give_back(bytes);
                continue;
            } else {
                let slots = batch.commands.into_iter().map(|c| self.retries.place(plan, c, term)).collect();
                taken.push(Taken { from: batch.from, seq: batch.seq, slots });
                held += bytes;
                continue;
            };
            self.forwarded_budget.give_back(bytes);
            self.transport.send(forwarding::refused(me, term, &[(batch.from, batch.seq)], &refusal));
        }
        (taken, held)
    }

    /// Follower: sends this node's proposals to the leader it knows of, or
    /// refuses them if it knows none.
    fn forward(&mut self, proposals: Vec<(Vec<u8>, ProposeReply)>, term: Term) {
        let me = self.raw.id();
        match self.raw.leader() {
            Some(leader) if leader != me => {
                self.metrics.proposals_forwarded.fetch_add(proposals.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let messages = self.forwarding.send(me, leader, term, proposals);
                self.transport.send(messages);
            }
            _ => {
                let err = self.not_leader();
                for (_, reply) in proposals {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }
}
