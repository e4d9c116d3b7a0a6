//! Membership changes by joint consensus (thesis §4.3): a change of voters
//! goes through a joint configuration `C_old,new`; once it commits, the
//! leader appends `C_new` by itself (auto-leave). A configuration takes effect
//! on a node when the node learns it is committed (committed entries are never
//! truncated, so nothing needs to be rolled back), which is safe because any
//! two neighbouring configurations of the sequence `C_old`, `C_old,new`,
//! `C_new` share quorums.
//!
//! Rules: one change at a time (none while joint or while a membership entry
//! is uncommitted); the leader must have committed an entry of its term first
//! (the 2015 raft-dev single-server bug); learners never count.

use std::collections::BTreeSet;

use super::Raft;
use crate::error::ProposeError;
use crate::progress::{Progress, ProgressState};
use crate::storage::LogReader;
use crate::types::{Entry, EntryPayload, Index, LogId, Membership, MembershipChange, NodeId, Role};

impl<L: LogReader> Raft<L> {
    pub(crate) fn propose_membership(
        &mut self,
        change: MembershipChange,
    ) -> Result<Index, ProposeError> {
        self.check_can_propose()?;
        if !self.committed_in_term() {
            return Err(ProposeError::LeaderNotReady {
                commit: self.log.committed,
            });
        }
        if self.membership.is_joint() || !self.log.conf_entries.is_empty() {
            return Err(ProposeError::MembershipChangeInProgress);
        }
        let cur = &self.membership;
        let (mut voters, mut learners) = (cur.voters.clone(), cur.learners.clone());
        match change {
            MembershipChange::AddLearner(id) => {
                if voters.contains(&id) {
                    return Err(ProposeError::InvalidMembership(format!(
                        "node {id} is a voter"
                    )));
                }
                learners.insert(id);
            }
            MembershipChange::AddVoter(id) => {
                learners.remove(&id);
                voters.insert(id);
            }
            MembershipChange::RemoveNode(id) => {
                if !cur.contains(id) {
                    return Err(ProposeError::InvalidMembership(format!(
                        "node {id} is not a member"
                    )));
                }
                voters.remove(&id);
                learners.remove(&id);
            }
            MembershipChange::Replace {
                voters: v,
                learners: l,
            } => {
                if let Some(id) = v.intersection(&l).next() {
                    return Err(ProposeError::InvalidMembership(format!(
                        "node {id} is both voter and learner"
                    )));
                }
                voters = v;
                learners = l;
            }
        }
        if voters.contains(&NodeId(0)) || learners.contains(&NodeId(0)) {
            return Err(ProposeError::InvalidMembership("node id 0".into()));
        }
        if voters.is_empty() {
            return Err(ProposeError::InvalidMembership("no voters left".into()));
        }
        let next = if voters == cur.voters {
            if learners == cur.learners {
                return Err(ProposeError::InvalidMembership("no change".into()));
            }
            Membership {
                voters,
                voters_outgoing: BTreeSet::new(),
                learners,
            }
        } else {
            Membership {
                voters,
                voters_outgoing: cur.voters.clone(),
                learners,
            }
        };
        let index = self.log.last_index().next();
        let entry = Entry {
            log_id: LogId {
                term: self.term,
                index,
            },
            payload: EntryPayload::Membership(next),
        };
        self.append_entries(vec![entry]);
        Ok(index)
    }

    /// Makes the newest committed membership entry the configuration.
    pub(crate) fn apply_committed_membership(&mut self) {
        let committed = self.log.committed;
        let mut latest = None;
        while let Some(entry) = self.log.conf_entries.first_entry() {
            if *entry.key() > committed {
                break;
            }
            latest = Some(entry.remove());
        }
        if let Some(m) = latest {
            self.membership = m;
            self.on_membership_changed();
        }
    }

    pub(crate) fn on_membership_changed(&mut self) {
        match self.role {
            Role::Leader => {
                if !self.membership.is_voter(self.id) {
                    // Removed (or demoted) once C_new committed: step down,
                    // after telling the others that it committed. Stepping
                    // down clears the progress the broadcast after a commit
                    // goes by: they stayed in the joint configuration, and
                    // only one of them with this leader's whole log could
                    // win the next election.
                    for id in self.followers() {
                        let waits_for_snapshot =
                            self.progress.get(&id).is_some_and(|pr| matches!(pr.state, ProgressState::Snapshot { .. }));
                        if !waits_for_snapshot && !self.maybe_send_append(id, true) {
                            self.send_empty_append(id); // paused: probing, or a full window
                        }
                    }
                    self.become_follower(self.term, None);
                    return;
                }
                let members = self.membership.members();
                let next = self.log.last_index().next();
                for &id in &members {
                    self.progress.entry(id).or_insert_with(|| {
                        let mut pr = Progress::new(next, self.cfg.window());
                        pr.recent_active = true;
                        pr
                    });
                }
                let me = self.id;
                self.progress
                    .retain(|id, _| *id == me || members.contains(id));
                if self
                    .transferee
                    .is_some_and(|t| !self.membership.voters.contains(&t))
                {
                    self.transferee = None;
                }
            }
            Role::Candidate | Role::PreCandidate if !self.promotable() => {
                self.become_follower(self.term, None);
            }
            _ => {}
        }
    }

    /// Leader: a committed joint configuration is left by appending `C_new`.
    /// The caller broadcasts.
    pub(crate) fn maybe_leave_joint(&mut self) {
        if self.membership.is_joint()
            && self.log.conf_entries.is_empty()
            && self.transferee.is_none()
        {
            let index = self.log.last_index().next();
            let entry = Entry {
                log_id: LogId {
                    term: self.term,
                    index,
                },
                payload: EntryPayload::Membership(self.membership.leave_joint()),
            };
            self.log.append(vec![entry]);
        }
    }
}
