//! Snapshots: asked for by the leader, installed by the follower.

use super::*;
use crate::{LogId, Membership, ProgressState, SnapshotMeta};

/// A 3-node cluster where node 3 missed entries the leader compacted away.
fn lagging_cluster() -> (Cluster, SnapshotMeta) {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.isolate(3);
    for i in 0..5u8 {
        c.node(1).propose(vec![vec![i]]).unwrap();
        c.settle();
    }
    let applied = c.node(1).status().applied;
    let term = c.node(1).status().term;
    let meta = SnapshotMeta {
        last: LogId {
            term,
            index: applied,
        },
        membership: Membership::new([1, 2, 3].map(NodeId)),
    };
    c.node(1).reader_mut().compact(meta.clone());
    (c, meta)
}

#[test]
fn leader_asks_for_a_snapshot_for_a_follower_behind_its_first_index() {
    let (mut c, meta) = lagging_cluster();
    c.heal();
    c.node(1).tick();
    // Heartbeat, then an optimistic append rejected with a hint, then the snapshot.
    let mut to_3: Vec<Message> = drive(c.node(1))
        .messages
        .into_iter()
        .filter(|m| m.to == NodeId(3))
        .collect();
    let mut snap = None;
    for _ in 0..3 {
        if let Some(m) = to_3
            .iter()
            .find(|m| matches!(m.body, MessageBody::InstallSnapshot { .. }))
        {
            snap = Some(m.body.clone());
            break;
        }
        for m in to_3.drain(..) {
            c.node(3).step(m).unwrap();
        }
        for m in drive(c.node(3)).all() {
            c.node(1).step(m).unwrap();
        }
        to_3 = drive(c.node(1))
            .messages
            .into_iter()
            .filter(|m| m.to == NodeId(3))
            .collect();
    }
    assert_eq!(
        snap,
        Some(MessageBody::InstallSnapshot { meta: meta.clone() })
    );
    let pr = &c.node(1).status().progress[&NodeId(3)];
    assert_eq!(
        pr.state,
        ProgressState::Snapshot {
            pending: meta.last.index
        }
    );
}

#[test]
fn follower_installs_a_snapshot_with_the_membership_of_its_meta() {
    // openraft 447dc11c: membership comes from the snapshot, not a stale log.
    let mut n = node(3, &[1, 2, 3]);
    let meta = SnapshotMeta {
        last: LogId::new(2, 10),
        membership: Membership::new([1, 3, 5].map(NodeId)),
    };
    n.step(msg(
        1,
        3,
        2,
        MessageBody::InstallSnapshot { meta: meta.clone() },
    ))
    .unwrap();
    let rd = n.ready();
    assert_eq!(rd.snapshot, Some(meta.clone()));
    assert!(rd.messages.is_empty());
    let ok = MessageBody::AppendResponse {
        reject: false,
        index: Index(10),
        hint: LogId::default(),
    };
    assert_eq!(
        rd.persisted_messages,
        vec![msg(3, 1, 2, ok)],
        "answered once installed"
    );
    n.reader_mut().persist(&rd);
    n.advance(rd);
    let st = n.status();
    assert_eq!(
        (st.commit, st.applied, st.last_index),
        (Index(10), Index(10), Index(10))
    );
    assert_eq!(st.membership, meta.membership);
}

#[test]
fn an_older_snapshot_after_a_newer_one_is_ignored() {
    // etcd-io/etcd#18055: two snapshots in quick succession.
    let mut n = node(3, &[1, 2, 3]);
    let new = SnapshotMeta {
        last: LogId::new(2, 10),
        membership: Membership::new([1, 2, 3].map(NodeId)),
    };
    let old = SnapshotMeta {
        last: LogId::new(2, 6),
        ..new.clone()
    };
    n.step(msg(1, 3, 2, MessageBody::InstallSnapshot { meta: new }))
        .unwrap();
    let _ = drive(&mut n);
    n.step(msg(1, 3, 2, MessageBody::InstallSnapshot { meta: old }))
        .unwrap();
    let rd = n.ready();
    assert_eq!(rd.snapshot, None);
    let ok = MessageBody::AppendResponse {
        reject: false,
        index: Index(10),
        hint: LogId::default(),
    };
    assert_eq!(rd.persisted_messages, vec![msg(3, 1, 2, ok)]);
    n.advance(rd);
}

#[test]
fn lagging_follower_catches_up_through_the_snapshot() {
    let (mut c, meta) = lagging_cluster();
    c.heal();
    // The cluster helper plays the driver: it does not stream data, so play
    // the follower's side by hand once the leader asks.
    for _ in 0..3 {
        c.node(1).tick();
        let out = drive(c.node(1));
        for m in out.all() {
            if let MessageBody::InstallSnapshot { .. } = m.body {
                c.node(3).step(m).unwrap();
                c.node(1).report_snapshot(NodeId(3), true);
            } else if let Some(n) = c.nodes.get_mut(&m.to.0) {
                n.step(m).unwrap();
            }
        }
        c.settle();
    }
    assert!(c.node(3).status().commit >= meta.last.index);
    assert_eq!(c.commit(3), c.commit(1));
}
