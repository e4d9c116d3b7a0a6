//! Proposals made on a follower travel to the leader inside the Raft
//! stream, as in etcd: the follower sends each turn's proposals as one
//! `Propose` message, the leader stamps and appends them with its own and
//! answers with where they went, and the follower's own apply thread answers
//! the clients when it applies those entries. The leader does no
//! per-request work beyond the append, and only a position travels back.
//!
//! The answer travels on the data lane ahead of the append carrying the
//! entries, so a follower registers its waiters before it can apply them.
//! A batch the transport duplicates is appended once (`seq` increases
//! within a follower's session); one it loses, or whose answer it loses,
//! leaves its clients to time out, the outcome unknown to them.
//!
//! A leader admits followers' batches as it admits its own clients', into
//! the one budget of proposal bytes in flight (`max_pending_bytes`): a
//! batch takes its bytes as it arrives and gives them back once its
//! entries are applied here (see [`Budget`]). One that does not fit is
//! answered `busy` at once, so that its clients retry after a backoff
//! instead of timing out behind a queue deeper than the leader drains
//! within their timeout, and then adding their retries to it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmraft_raft::{Index, Message, MessageBody, NodeId, ProposeOutcome, Term};

use crate::envelope;
use crate::error::Error;
use crate::raft_loop::ProposeReply;

/// The most command bytes one `Propose` message carries; a turn's
/// proposals past it go as several messages.
const MESSAGE_BYTES: usize = 4 << 20;
/// A batch this many behind the newest from its sender is refused as a
/// possible duplicate (its clients time out).
const SEQ_WINDOW: u64 = 4096;
/// Sessions remembered per follower (a follower that restarted may still
/// have batches of its previous run in flight).
const SESSIONS_KEPT: usize = 4;

/// The batches a leader took from one session of a follower.
struct Seen {
    session: u64,
    newest: u64,
    /// Those within `SEQ_WINDOW` of `newest`.
    recent: BTreeSet<u64>,
}

impl Seen {
    fn take(&mut self, seq: u64) -> bool {
        if seq.saturating_add(SEQ_WINDOW) <= self.newest || !self.recent.insert(seq) {
            return false;
        }
        self.newest = self.newest.max(seq);
        while self.recent.first().is_some_and(|&s| s.saturating_add(SEQ_WINDOW) <= self.newest) {
            self.recent.pop_first();
        }
        true
    }
}

/// A batch of proposals a follower sent, still unanswered.
struct Unanswered {
    to: NodeId,
    replies: Vec<ProposeReply>,
}

/// A batch a leader took from a follower, to stamp and append.
pub(crate) struct Received {
    pub from: NodeId,
    /// The sender's term when it sent the batch.
    pub term: Term,
    pub seq: u64,
    pub commands: Vec<Vec<u8>>,
    /// What it holds of the leader's proposal budget.
    pub bytes: u32,
}

/// Both sides of forwarding, for one node.
pub(crate) struct Forwarding {
    /// This process's forwarding session.
    session: u64,
    next_seq: u64,
    unanswered: HashMap<u64, Unanswered>,
    /// When batches whose clients left were last forgotten.
    swept: Option<Instant>,
    /// What each follower's sessions sent this node, as leader, the
    /// latest session first.
    seen: HashMap<NodeId, Vec<Seen>>,
}

impl Forwarding {
    pub(crate) fn new(session: u64) -> Self {
        Self { session, next_seq: 1, unanswered: HashMap::new(), swept: None, seen: HashMap::new() }
    }

    /// Forwarding for this process: a session of its own, and batches
    /// numbered from a random point. An answer names only its batch's
    /// `seq`, so an answer meant for an earlier process of this node (in
    /// flight when it restarted) must find no batch of this one: numbered
    /// from 1 in both, it was taken for this process's batch of the same
    /// number, whose clients then waited for the other batch's entries and
    /// got their outcomes (a lease grant answered with a put's response).
    pub(crate) fn for_this_process() -> Self {
        // Below 2^63: room for every batch a process can send.
        Self { next_seq: (crate::node::random_id() >> 1).max(1), ..Self::new(crate::node::random_id()) }
    }

    /// Follower: the messages that carry `proposals` (encoded entries and
    /// their clients) from `me` to `leader`, in `term`.
    pub(crate) fn send(
        &mut self,
        me: NodeId,
        leader: NodeId,
        term: Term,
        proposals: Vec<(Vec<u8>, ProposeReply)>,
    ) -> Vec<Message> {
        let mut messages = Vec::new();
        let mut commands = Vec::new();
        let mut replies = Vec::new();
        let mut bytes = 0;
        let mut proposals = proposals.into_iter().peekable();
        while let Some((command, reply)) = proposals.next() {
            bytes += command.len();
            commands.push(command);
            replies.push(reply);
            let full = proposals.peek().is_some_and(|(next, _)| bytes + next.len() > MESSAGE_BYTES);
            if full || proposals.peek().is_none() {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.unanswered.insert(seq, Unanswered { to: leader, replies: std::mem::take(&mut replies) });
                let body = MessageBody::Propose { session: self.session, seq, commands: std::mem::take(&mut commands) };
                messages.push(Message { from: me, to: leader, term, body });
                bytes = 0;
            }
        }
        messages
    }

    /// Follower: the leader's answer to batch `seq`. The clients of an
    /// appended batch come back with the index of their entry, to wait for
    /// it; those of a refused one are answered here. An answer from a node
    /// the batch did not go to, or to no batch, is ignored.
    pub(crate) fn answered(&mut self, from: NodeId, seq: u64, outcome: ProposeOutcome) -> Vec<(Index, ProposeReply)> {
        if self.unanswered.get(&seq).is_none_or(|b| b.to != from) {
            return Vec::new();
        }
        let batch = self.unanswered.remove(&seq).expect("just seen");
        let refusal = match outcome {
            ProposeOutcome::Appended { first } => {
                return (first.0..).map(Index).zip(batch.replies).collect();
            }
            ProposeOutcome::Placed { at } if at.len() == batch.replies.len() => {
                return at.into_iter().zip(batch.replies).collect();
            }
            // Only a broken leader answers so; where they went is unknown.
            ProposeOutcome::Placed { .. } => Error::Timeout,
            ProposeOutcome::NotLeader => Error::NotLeader { leader: None },
            ProposeOutcome::Busy => Error::Busy("the leader has more proposals queued than it takes; retry later".into()),
        };
        for reply in batch.replies {
            let _ = reply.send(Err(refusal.clone()));
        }
        Vec::new()
    }

    /// Forgets batches whose clients all stopped waiting (their answer
    /// never came), at most once a second.
    pub(crate) fn forget_abandoned(&mut self, now: Instant) {
        if self.unanswered.is_empty() || self.swept.is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        self.swept = Some(now);
        self.unanswered.retain(|_, b| b.replies.iter().any(|r| !r.is_closed()));
    }

    /// Batches sent and not answered yet.
    #[cfg(test)]
    pub(crate) fn unanswered(&self) -> usize {
        self.unanswered.len()
    }

    /// Leader: whether the batch `seq` of `session` from `from` is new: a
    /// duplicate is not appended again. Batches may arrive out of order
    /// (a message taken while earlier ones wait for the disk).
    pub(crate) fn is_new(&mut self, from: NodeId, session: u64, seq: u64) -> bool {
        let sessions = self.seen.entry(from).or_default();
        if let Some(seen) = sessions.iter_mut().find(|s| s.session == session) {
            return seen.take(seq);
        }
        sessions.insert(0, Seen { session, newest: seq, recent: BTreeSet::from([seq]) });
        sessions.truncate(SESSIONS_KEPT);
        true
    }
}

/// Leader: followers' batches against the node's budget of proposal
/// bytes in flight, shared with its own clients' requests. A batch takes
/// its bytes as it arrives ([`Budget::take`]) and gives them back when it
/// is refused or a duplicate, or once its entries are applied on this node;
/// all at once if this node stops leading (what it appended may never
/// apply here).
pub(crate) struct Budget {
    bytes: Arc<tokio::sync::Semaphore>,
    /// Appended batches' bytes by the last index they wait for, in order.
    appended: VecDeque<(u64, u64)>,
}

impl Budget {
    pub(crate) fn new(bytes: Arc<tokio::sync::Semaphore>) -> Self {
        Self { bytes, appended: VecDeque::new() }
    }

    /// The bytes a batch of `commands` holds.
    pub(crate) fn size(commands: &[Vec<u8>]) -> Option<u32> {
        u32::try_from(commands.iter().map(|c| c.len() as u64).sum::<u64>()).ok()
    }

    /// Takes room for a batch of `commands` as it arrives, or refuses it
    /// (`false`): its sender is answered `busy`.
    pub(crate) fn take(bytes: &tokio::sync::Semaphore, commands: &[Vec<u8>]) -> bool {
        match Self::size(commands) {
            Some(0) => true,
            Some(n) => bytes.try_acquire_many(n).map(tokio::sync::SemaphorePermit::forget).is_ok(),
            None => false,
        }
    }

    /// Gives back what [`Budget::take`] took for `commands`, which went
    /// no further (no room in the Raft loop's inbox).
    pub(crate) fn untake(bytes: &tokio::sync::Semaphore, commands: &[Vec<u8>]) {
        bytes.add_permits(Self::size(commands).unwrap_or(0) as usize);
    }

    /// Gives back what a batch that was not appended held.
    pub(crate) fn give_back(&self, bytes: u64) {
        if bytes > 0 {
            self.bytes.add_permits(bytes as usize);
        }
    }

    /// Holds `bytes` of batches appended up to `last` until it is applied.
    pub(crate) fn hold(&mut self, last: Index, bytes: u64) {
        if bytes > 0 {
            self.appended.push_back((last.0, bytes));
        }
    }

    /// Whether appended batches hold room until they are applied.
    pub(crate) fn holds(&self) -> bool {
        !self.appended.is_empty()
    }

    /// Gives back what batches applied by `applied` held, or everything if
    /// this node no longer `leads`.
    pub(crate) fn applied(&mut self, applied: u64, leads: bool) {
        while let Some(&(last, bytes)) = self.appended.front() {
            if leads && last > applied {
                break;
            }
            self.appended.pop_front();
            self.give_back(bytes);
        }
    }
}

/// Leader: the answer to batch `seq` from `to`, whose commands went to
/// the indexes `at`, in order.
pub(crate) fn placed(me: NodeId, term: Term, to: NodeId, seq: u64, at: Vec<Index>) -> Message {
    let consecutive = at.windows(2).all(|w| w[1].0 == w[0].0 + 1);
    let outcome = match at.first() {
        Some(&first) if consecutive => ProposeOutcome::Appended { first },
        _ => ProposeOutcome::Placed { at },
    };
    Message { from: me, to, term, body: MessageBody::ProposeResponse { seq, outcome } }
}

/// Leader: the answers refusing `batches` (sender and `seq`).
pub(crate) fn refused(me: NodeId, term: Term, batches: &[(NodeId, u64)], refusal: &ProposeOutcome) -> Vec<Message> {
    batches
        .iter()
        .map(|&(to, seq)| Message { from: me, to, term, body: MessageBody::ProposeResponse { seq, outcome: refusal.clone() } })
        .collect()
}

/// Leader: stamps a follower's commands, each checked as this node's
/// clients' are: an envelope within `max_request_bytes`. A batch with one
/// that is not is refused whole.
pub(crate) fn stamp(commands: &mut [Vec<u8>], stamp: u64, max_request_bytes: usize) -> Result<(), String> {
    let limit = max_request_bytes.saturating_add(envelope::HEADER);
    if let Some(c) = commands.iter().find(|c| c.len() > limit) {
        return Err(format!("a command of {} bytes, past max_request_bytes", c.len()));
    }
    commands.iter_mut().try_for_each(|c| envelope::restamp(c, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn proposals(sizes: &[usize]) -> (Vec<(Vec<u8>, ProposeReply)>, Vec<oneshot::Receiver<Result<crate::node::Applied, Error>>>) {
        sizes
            .iter()
            .map(|&n| {
                let (tx, rx) = oneshot::channel();
                ((vec![0; n], tx), rx)
            })
            .unzip()
    }

    #[test]
    fn a_turn_of_proposals_goes_as_few_messages_as_their_size_allows() {
        let mut f = Forwarding::new(7);
        let (batch, _rx) = proposals(&[10, 20, 30]);
        let m = f.send(NodeId(2), NodeId(1), Term(3), batch);
        assert_eq!(m.len(), 1);
        assert!(matches!(&m[0].body, MessageBody::Propose { session: 7, seq: 1, commands } if commands.len() == 3));
        let (batch, _rx) = proposals(&[MESSAGE_BYTES / 2, MESSAGE_BYTES / 2, 1, MESSAGE_BYTES + 1]);
        let m = f.send(NodeId(2), NodeId(1), Term(3), batch);
        let counts: Vec<_> = m
            .iter()
            .map(|m| match &m.body {
                MessageBody::Propose { seq, commands, .. } => (*seq, commands.len()),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(counts, [(2, 2), (3, 1), (4, 1)], "split where the next would pass the limit; a large one alone");
        assert_eq!(f.unanswered(), 4);
    }

    #[test]
    fn an_answer_gives_each_client_its_index_or_the_refusal() {
        let mut f = Forwarding::new(7);
        let (batch, _rx) = proposals(&[1, 1, 1]);
        f.send(NodeId(2), NodeId(1), Term(3), batch);
        assert!(f.answered(NodeId(3), 1, ProposeOutcome::Appended { first: Index(9) }).is_empty(), "not sent there");
        let placed: Vec<_> = f.answered(NodeId(1), 1, ProposeOutcome::Appended { first: Index(9) }).into_iter().map(|(i, _)| i.0).collect();
        assert_eq!(placed, [9, 10, 11]);
        assert!(f.answered(NodeId(1), 1, ProposeOutcome::Appended { first: Index(9) }).is_empty(), "answered once");

        let (batch, mut rx) = proposals(&[1]);
        f.send(NodeId(2), NodeId(1), Term(3), batch);
        assert!(f.answered(NodeId(1), 2, ProposeOutcome::Busy).is_empty());
        assert!(matches!(rx[0].try_recv(), Ok(Err(Error::Busy(_)))));
        assert_eq!(f.unanswered(), 0);
    }

    #[test]
    fn batches_whose_clients_left_are_forgotten() {
        let mut f = Forwarding::new(7);
        let (batch, rx) = proposals(&[1, 1]);
        f.send(NodeId(2), NodeId(1), Term(3), batch);
        let (batch, _kept) = proposals(&[1]);
        f.send(NodeId(2), NodeId(1), Term(3), batch);
        drop(rx);
        f.forget_abandoned(Instant::now());
        assert_eq!(f.unanswered(), 1);
    }

    #[test]
    fn an_answer_meant_for_an_earlier_process_of_this_node_answers_none_of_its_batches() {
        let mut before = Forwarding::for_this_process();
        let mut after = Forwarding::for_this_process();
        let (reply, _rx) = oneshot::channel();
        let sent = before.send(NodeId(2), NodeId(1), Term(1), vec![(vec![1], reply)]);
        let MessageBody::Propose { seq, .. } = sent[0].body else { panic!("not a batch") };
        let (reply, _rx) = oneshot::channel();
        after.send(NodeId(2), NodeId(1), Term(1), vec![(vec![2], reply)]);
        assert!(after.answered(NodeId(1), seq, ProposeOutcome::Appended { first: Index(4) }).is_empty());
        assert_eq!(after.unanswered(), 1, "this process's batch still waits for its own answer");
        assert_eq!(before.answered(NodeId(1), seq, ProposeOutcome::Appended { first: Index(4) }).len(), 1);
    }

    #[test]
    fn a_leader_appends_each_batch_once_and_a_new_session_starts_over() {
        let mut f = Forwarding::new(1);
        assert!(f.is_new(NodeId(2), 50, 1));
        assert!(!f.is_new(NodeId(2), 50, 1), "a duplicate");
        assert!(f.is_new(NodeId(2), 50, 3));
        assert!(f.is_new(NodeId(2), 50, 2), "overtaken, and still new");
        assert!(!f.is_new(NodeId(2), 50, 2) && !f.is_new(NodeId(2), 50, 3), "duplicates out of order");
        assert!(f.is_new(NodeId(3), 50, 1), "another follower");
        assert!(f.is_new(NodeId(2), 51, 1), "the follower restarted");
        assert!(!f.is_new(NodeId(2), 50, 3), "its previous run is remembered");
        assert!(f.is_new(NodeId(2), 50, 10 + SEQ_WINDOW));
        assert!(!f.is_new(NodeId(2), 50, 10), "too far behind to tell from a duplicate");
        assert!(f.is_new(NodeId(2), 50, 11), "just within the window");
    }

    #[test]
    fn a_leader_s_budget_is_held_until_the_batches_apply_or_it_stops_leading() {
        let bytes = Arc::new(tokio::sync::Semaphore::new(100));
        let mut budget = Budget::new(bytes.clone());
        assert!(Budget::take(&bytes, &[vec![0; 30], vec![0; 30]]));
        assert!(!Budget::take(&bytes, &[vec![0; 50]]), "60 of 100 are taken");
        assert!(Budget::take(&bytes, &[]), "an empty batch needs no room");
        budget.hold(Index(5), 60);
        assert!(Budget::take(&bytes, &[vec![0; 40]]));
        budget.hold(Index(9), 40);
        assert_eq!(bytes.available_permits(), 0);
        budget.applied(4, true);
        assert_eq!(bytes.available_permits(), 0, "nothing applied yet");
        budget.applied(8, true);
        assert_eq!(bytes.available_permits(), 60, "the first batch applied");
        budget.applied(8, false);
        assert_eq!(bytes.available_permits(), 100, "no longer leading: all given back");
        assert!(Budget::take(&bytes, &[vec![0; 70]]));
        budget.give_back(70);
        assert_eq!(bytes.available_permits(), 100, "a refused batch gives back at once");
    }

    #[test]
    fn a_follower_s_commands_are_stamped_only_if_every_one_is_an_envelope_within_the_limit() {
        let command = |n: usize| crate::envelope::Envelope { timestamp_ms: 0, client_id: 1, sequence: 2, command: vec![7; n] }.encode();
        let mut ok = vec![command(3), command(100)];
        stamp(&mut ok, u64::MAX, 100).unwrap();
        assert!(ok.iter().all(|c| crate::envelope::stamp(c) == Some(u64::MAX)));

        let mut huge = vec![command(3), command(101)];
        assert!(stamp(&mut huge, 5, 100).unwrap_err().contains("past max_request_bytes"));
        for garbage in [vec![0xff; 40], vec![], vec![1, 2, 3]] {
            assert!(stamp(&mut [command(3), garbage], 5, 100).is_err());
        }
        assert!(stamp(&mut [command(1)], 5, usize::MAX).is_ok(), "no overflow at the largest limit");
    }

    #[test]
    fn answers_say_where_each_batch_went_in_the_shortest_form() {
        let answer = |at: &[u64]| placed(NodeId(1), Term(5), NodeId(2), 4, at.iter().copied().map(Index).collect()).body;
        let outcome = |outcome| MessageBody::ProposeResponse { seq: 4, outcome };
        assert_eq!(answer(&[10, 11, 12]), outcome(ProposeOutcome::Appended { first: Index(10) }));
        assert_eq!(answer(&[10, 7, 11]), outcome(ProposeOutcome::Placed { at: vec![Index(10), Index(7), Index(11)] }));
        let refusals = refused(NodeId(1), Term(5), &[(NodeId(2), 4), (NodeId(3), 9)], &ProposeOutcome::NotLeader);
        let to: Vec<_> = refusals.iter().map(|m| (m.to.0, m.body.clone())).collect();
        assert_eq!(
            to,
            [
                (2, MessageBody::ProposeResponse { seq: 4, outcome: ProposeOutcome::NotLeader }),
                (3, MessageBody::ProposeResponse { seq: 9, outcome: ProposeOutcome::NotLeader }),
            ]
        );
    }

    #[test]
    fn a_follower_s_clients_wait_where_the_leader_placed_each() {
        let mut f = Forwarding::new(7);
        let (batch, _rx) = proposals(&[10, 10, 10]);
        f.send(NodeId(2), NodeId(1), Term(1), batch);
        let at = vec![Index(9), Index(4), Index(10)];
        let placed: Vec<_> = f.answered(NodeId(1), 1, ProposeOutcome::Placed { at }).into_iter().map(|(i, _)| i.0).collect();
        assert_eq!(placed, [9, 4, 10]);
        let (batch, mut rx) = proposals(&[10, 10]);
        f.send(NodeId(2), NodeId(1), Term(1), batch);
        assert!(f.answered(NodeId(1), 2, ProposeOutcome::Placed { at: vec![Index(3)] }).is_empty(), "one index for two");
        assert!(matches!(rx[0].try_recv(), Ok(Err(Error::Timeout))));
    }
}
