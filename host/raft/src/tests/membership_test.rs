//! Membership: joint consensus, auto-leave, learners, restarts.

use super::*;
use crate::{EntryPayload, Membership, MembershipChange, ProposeError};

fn ids(v: &[u64]) -> BTreeSet<NodeId> {
    v.iter().map(|&i| NodeId(i)).collect()
}

fn add_spare(c: &mut Cluster, id: u64) {
    c.nodes
        .insert(id, RawNode::new(cfg(id), MemStorage::new(&[])).unwrap());
}

#[test]
fn membership_change_waits_for_an_entry_of_the_leaders_term() {
    // raft-dev 2015 / atomix/copycat#23 / openraft #2051.
    let mut n = make_leader(node(1, &[1, 2, 3]), &[1, 2, 3]);
    assert_eq!(
        n.propose_membership(MembershipChange::AddLearner(NodeId(4))),
        Err(ProposeError::LeaderNotReady { commit: Index(0) })
    );
}

#[test]
fn one_membership_change_at_a_time() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.node(1)
        .propose_membership(MembershipChange::AddLearner(NodeId(4)))
        .unwrap();
    assert_eq!(
        c.node(1)
            .propose_membership(MembershipChange::AddLearner(NodeId(5))),
        Err(ProposeError::MembershipChangeInProgress)
    );
}

#[test]
fn adding_a_voter_goes_through_a_joint_configuration_and_leaves_it() {
    let mut c = Cluster::new(&[1, 2, 3]);
    add_spare(&mut c, 4);
    c.elect(1);
    let idx = c
        .node(1)
        .propose_membership(MembershipChange::AddVoter(NodeId(4)))
        .unwrap();
    c.settle();
    let applied: Vec<Membership> = c.applied[&1]
        .iter()
        .filter_map(|e| match &e.payload {
            EntryPayload::Membership(m) if e.log_id.index >= idx => Some(m.clone()),
            _ => None,
        })
        .collect();
    let joint = Membership {
        voters: ids(&[1, 2, 3, 4]),
        voters_outgoing: ids(&[1, 2, 3]),
        learners: ids(&[]),
    };
    assert_eq!(
        applied,
        vec![joint.clone(), joint.leave_joint()],
        "joint, then left automatically"
    );
    for id in 1..=4 {
        assert_eq!(
            c.node(id).status().membership,
            Membership::new(ids(&[1, 2, 3, 4])),
            "node {id}"
        );
    }
}

#[test]
fn joint_commit_needs_both_majorities() {
    // Replace {1,2,3} by {1,4,5}: while joint, {1,2,3} alone cannot commit.
    let mut c = Cluster::new(&[1, 2, 3]);
    add_spare(&mut c, 4);
    add_spare(&mut c, 5);
    c.elect(1);
    c.node(1)
        .propose_membership(MembershipChange::Replace {
            voters: ids(&[1, 4, 5]),
            learners: ids(&[]),
        })
        .unwrap();
    c.settle();
    assert!(
        c.node(1).status().membership.voters == ids(&[1, 4, 5])
            && !c.node(1).status().membership.is_joint()
    );
    // A joint configuration stops at the joint entry when the new half is cut off.
    let mut c = Cluster::new(&[1, 2, 3]);
    add_spare(&mut c, 4);
    add_spare(&mut c, 5);
    c.elect(1);
    c.isolate(4);
    c.isolate(5);
    c.node(1)
        .propose_membership(MembershipChange::Replace {
            voters: ids(&[1, 4, 5]),
            learners: ids(&[]),
        })
        .unwrap();
    c.settle();
    let st = c.node(1).status();
    assert!(
        st.membership.is_joint(),
        "the joint entry commits in {{1,2,3}}"
    );
    let before = st.commit;
    c.node(1).propose(vec![b"x".to_vec()]).ok();
    c.settle();
    assert_eq!(
        c.node(1).status().commit,
        before,
        "no majority of {{1,4,5}}: nothing commits"
    );
}

#[test]
fn learners_receive_the_log_but_never_vote_or_count() {
    let mut c = Cluster::new(&[1, 2, 3]);
    add_spare(&mut c, 4);
    c.elect(1);
    c.node(1)
        .propose_membership(MembershipChange::AddLearner(NodeId(4)))
        .unwrap();
    c.settle();
    assert_eq!(c.commit(4), c.commit(1), "the learner caught up");
    c.isolate(2);
    c.isolate(3);
    let before = c.commit(1);
    c.node(1).propose(vec![b"x".to_vec()]).unwrap();
    c.settle();
    assert_eq!(c.commit(1), before, "leader + learner is not a quorum");
    for _ in 0..50 {
        c.node(4).tick();
        assert_eq!(
            c.node(4).status().role,
            Role::Follower,
            "a learner never campaigns"
        );
    }
}

#[test]
fn learner_stays_learner_and_joint_stays_joint_after_restart() {
    // openraft 39690593 and 6c0ccaf3: configuration comes back from storage.
    let mut c = Cluster::new(&[1, 2, 3]);
    add_spare(&mut c, 4);
    c.elect(1);
    c.node(1)
        .propose_membership(MembershipChange::AddLearner(NodeId(4)))
        .unwrap();
    c.settle();
    let storage = c.nodes.remove(&4).unwrap().into_reader();
    let n = RawNode::new(cfg(4), storage).unwrap();
    assert_eq!(n.status().membership.learners, ids(&[4]));
    // Joint after restart: cut the new voter so the configuration stays joint.
    c.node(1)
        .propose_membership(MembershipChange::Replace {
            voters: ids(&[1, 5, 6]),
            learners: ids(&[4]),
        })
        .unwrap();
    c.settle();
    assert!(c.node(2).status().membership.is_joint());
    let storage = c.nodes.remove(&2).unwrap().into_reader();
    let n = RawNode::new(cfg(2), storage).unwrap();
    assert!(
        n.status().membership.is_joint(),
        "a restarted node keeps the joint configuration"
    );
}

#[test]
fn removed_leader_steps_down_once_the_new_configuration_commits() {
    let mut c = Cluster::new(&[1, 2, 3, 4]);
    c.elect(1);
    c.node(1)
        .propose_membership(MembershipChange::RemoveNode(NodeId(1)))
        .unwrap();
    c.settle();
    let st = c.node(1).status();
    assert_eq!(st.role, Role::Follower);
    assert_eq!(st.membership.voters, ids(&[2, 3, 4]));
    for _ in 0..60 {
        c.tick_all(1);
    }
    assert!(
        (2..=4).any(|id| c.node(id).status().role == Role::Leader),
        "the rest elect a leader"
    );
    assert_ne!(c.node(1).status().role, Role::Leader);
}

#[test]
fn a_leader_removed_by_the_new_configuration_tells_the_others_it_committed() {
    let mut c = Cluster::new(&[1, 2, 3, 4]);
    c.elect(1);
    c.node(1)
        .propose_membership(MembershipChange::RemoveNode(NodeId(1)))
        .unwrap();
    c.settle();
    assert_eq!(c.node(1).status().role, Role::Follower);
    let commit = c.commit(1);
    for id in 2..=4 {
        let st = c.node(id).status();
        assert_eq!(st.commit, commit, "node {id}");
        assert_eq!(st.membership.voters, ids(&[2, 3, 4]), "node {id}");
        assert!(st.membership.voters_outgoing.is_empty(), "node {id} is still in the joint configuration");
    }
}

#[test]
fn invalid_changes_are_refused() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    assert!(matches!(
        c.node(1)
            .propose_membership(MembershipChange::RemoveNode(NodeId(9))),
        Err(ProposeError::InvalidMembership(_))
    ));
    assert!(matches!(
        c.node(1)
            .propose_membership(MembershipChange::AddLearner(NodeId(2))),
        Err(ProposeError::InvalidMembership(_))
    ));
    assert!(matches!(
        c.node(1).propose_membership(MembershipChange::Replace {
            voters: ids(&[]),
            learners: ids(&[1])
        }),
        Err(ProposeError::InvalidMembership(_))
    ));
}
