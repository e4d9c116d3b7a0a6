//! Majority and joint-majority math (§5, thesis §4.3): commit indexes, vote
//! tallies and read/lease confirmation all go through these functions, so
//! every decision follows the current (possibly joint) configuration and
//! learners are never counted.

use std::collections::BTreeSet;

use crate::types::{Membership, NodeId};

/// The outcome of a vote tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VoteResult {
    /// A quorum granted.
    Won,
    /// A quorum can no longer be reached.
    Lost,
    /// Undecided yet.
    Pending,
}

/// The largest value `v` such that a majority of `voters` has a value `>= v`.
/// An empty set returns `u64::MAX` so that it never limits a joint minimum.
pub(crate) fn majority_value(voters: &BTreeSet<NodeId>, value: impl Fn(NodeId) -> u64) -> u64 {
    if voters.is_empty() {
        return u64::MAX;
    }
    let mut values: Vec<u64> = voters.iter().map(|&id| value(id)).collect();
    values.sort_unstable_by(|a, b| b.cmp(a));
    values[voters.len() / 2]
}

/// [`majority_value`] over a (possibly joint) configuration: both halves.
pub(crate) fn quorum_value(m: &Membership, value: impl Fn(NodeId) -> u64) -> u64 {
    let incoming = majority_value(&m.voters, &value);
    let outgoing = majority_value(&m.voters_outgoing, &value);
    let v = incoming.min(outgoing);
    // A configuration without voters decides nothing.
    if v == u64::MAX { 0 } else { v }
}

/// Tallies votes of one majority configuration.
pub(crate) fn majority_vote(
    voters: &BTreeSet<NodeId>,
    vote: impl Fn(NodeId) -> Option<bool>,
) -> VoteResult {
    if voters.is_empty() {
        return VoteResult::Won;
    }
    let (mut yes, mut missing) = (0, 0);
    for &id in voters {
        match vote(id) {
            Some(true) => yes += 1,
            Some(false) => {}
            None => missing += 1,
        }
    }
    let q = voters.len() / 2 + 1;
    if yes >= q {
        VoteResult::Won
    } else if yes + missing >= q {
        VoteResult::Pending
    } else {
        VoteResult::Lost
    }
}

/// Tallies votes of a (possibly joint) configuration: both halves must win.
pub(crate) fn quorum_vote(m: &Membership, vote: impl Fn(NodeId) -> Option<bool>) -> VoteResult {
    if m.voters.is_empty() && m.voters_outgoing.is_empty() {
        return VoteResult::Lost;
    }
    let a = majority_vote(&m.voters, &vote);
    let b = majority_vote(&m.voters_outgoing, &vote);
    match (a, b) {
        (VoteResult::Won, VoteResult::Won) => VoteResult::Won,
        (VoteResult::Lost, _) | (_, VoteResult::Lost) => VoteResult::Lost,
        _ => VoteResult::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<NodeId> {
        ids.iter().map(|&i| NodeId(i)).collect()
    }

    #[test]
    fn majority_value_picks_the_median_of_a_majority() {
        let v = |id: NodeId| [0, 5, 3, 9, 1, 7][id.0 as usize];
        assert_eq!(majority_value(&set(&[1, 2, 3]), v), 5);
        assert_eq!(majority_value(&set(&[1, 2, 3, 4]), v), 3);
        assert_eq!(majority_value(&set(&[1, 2, 3, 4, 5]), v), 5);
        assert_eq!(majority_value(&set(&[]), v), u64::MAX);
    }

    #[test]
    fn joint_value_is_the_minimum_of_both_halves() {
        let v = |id: NodeId| [0, 5, 3, 9, 1, 7][id.0 as usize];
        let m = Membership {
            voters: set(&[1, 2, 3]),
            voters_outgoing: set(&[3, 4, 5]),
            learners: set(&[]),
        };
        assert_eq!(quorum_value(&m, v), 5);
        let m = Membership {
            voters: set(&[1, 2, 4]),
            voters_outgoing: set(&[2, 4, 5]),
            learners: set(&[]),
        };
        assert_eq!(quorum_value(&m, v), 3);
        assert_eq!(quorum_value(&Membership::default(), v), 0);
    }

    #[test]
    fn joint_vote_needs_both_halves() {
        let m = Membership {
            voters: set(&[1, 2, 3]),
            voters_outgoing: set(&[4, 5, 6]),
            learners: set(&[]),
        };
        let yes = |ids: &'static [u64]| {
            move |id: NodeId| {
                if ids.contains(&id.0) {
                    Some(true)
                } else {
                    None
                }
            }
        };
        assert_eq!(quorum_vote(&m, yes(&[1, 2])), VoteResult::Pending);
        assert_eq!(quorum_vote(&m, yes(&[1, 2, 4, 5])), VoteResult::Won);
        let no = |id: NodeId| if id.0 >= 5 { Some(false) } else { Some(true) };
        assert_eq!(quorum_vote(&m, no), VoteResult::Lost);
        assert_eq!(
            quorum_vote(&Membership::default(), yes(&[])),
            VoteResult::Lost
        );
    }
}
