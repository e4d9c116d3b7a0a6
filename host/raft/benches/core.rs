//! Cost of the core alone on a 3-node in-memory cluster (no I/O, no
//! encoding): a proposal round (propose -> replicate -> commit on the
//! leader), a ReadIndex batch, a heartbeat round.
//!
//! `cargo bench -p wasmraft-raft --bench core`

#![allow(missing_docs)]

#[path = "../tests/sim/storage.rs"]
mod storage;

use std::collections::VecDeque;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use storage::MemStorage;
use wasmraft_raft::{Config, Index, LogId, Message, NodeId, RawNode, ReadId, Role, SnapshotMeta};

struct Cluster {
    nodes: Vec<RawNode<MemStorage>>,
    queue: VecDeque<Message>,
    read_states: usize,
    leader: usize,
}

impl Cluster {
    fn new() -> Cluster {
        let nodes = (1..=3)
            .map(|id| {
                RawNode::new(
                    Config {
                        id: NodeId(id),
                        seed: 1,
                        ..Config::default()
                    },
                    MemStorage::new(&[1, 2, 3]),
                )
                .unwrap()
            })
            .collect();
        let mut c = Cluster {
            nodes,
            queue: VecDeque::new(),
            read_states: 0,
            leader: 0,
        };
        loop {
            for n in &mut c.nodes {
                n.tick();
            }
            c.settle();
            if let Some(l) = c.nodes.iter().position(|n| n.status().role == Role::Leader) {
                c.leader = l;
                return c;
            }
        }
    }

    fn drive(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        while n.has_ready() {
            let rd = n.ready();
            self.queue.extend(rd.messages.iter().cloned());
            n.reader_mut().persist(&rd);
            self.queue.extend(rd.persisted_messages.iter().cloned());
            self.read_states += rd.read_states.len();
            let applied = rd.committed_entries.last().map(|e| e.log_id.index);
            n.advance(rd);
            if let Some(a) = applied {
                n.applied_to(a);
            }
        }
    }

    fn settle(&mut self) {
        loop {
            for i in 0..self.nodes.len() {
                self.drive(i);
            }
            if self.queue.is_empty() {
                return;
            }
            while let Some(m) = self.queue.pop_front() {
                let to = m.to.0 as usize - 1;
                self.nodes[to].step(m).unwrap();
            }
        }
    }

    /// Keeps the in-memory logs short.
    fn compact(&mut self) {
        for n in &mut self.nodes {
            let st = n.status();
            let s = n.reader_mut();
            if st.applied.0 > s.snapshot_index().0 + 4096 {
                let term = s.entry(st.applied).unwrap().log_id.term;
                s.compact(SnapshotMeta {
                    last: LogId {
                        term,
                        index: st.applied,
                    },
                    membership: st.membership,
                });
            }
        }
    }
}

fn proposals(c: &mut Criterion) {
    let mut g = c.benchmark_group("propose");
    for batch in [1usize, 100] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch_{batch}"), |b| {
            let mut cl = Cluster::new();
            let cmds: Vec<Vec<u8>> = (0..batch).map(|i| vec![i as u8; 16]).collect();
            b.iter(|| {
                let r = cl.nodes[cl.leader].propose(cmds.clone()).unwrap();
                cl.settle();
                assert!(cl.nodes[cl.leader].status().commit >= Index(r.end.0 - 1));
                cl.compact();
            });
        });
    }
    g.finish();
}

fn read_index(c: &mut Criterion) {
    let mut g = c.benchmark_group("read_index");
    for batch in [1u64, 100] {
        g.throughput(Throughput::Elements(batch));
        g.bench_function(format!("batch_{batch}"), |b| {
            let mut cl = Cluster::new();
            let mut id = 0;
            b.iter(|| {
                let before = cl.read_states;
                for _ in 0..batch {
                    id += 1;
                    cl.nodes[cl.leader].read_index(ReadId(id)).unwrap();
                }
                cl.settle();
                assert_eq!(cl.read_states - before, batch as usize);
            });
        });
    }
    g.finish();
}

fn heartbeat(c: &mut Criterion) {
    // heartbeat_tick = 1: every leader tick sends one round to both followers.
    c.bench_function("heartbeat_round", |b| {
        let mut cl = Cluster::new();
        b.iter(|| {
            cl.nodes[cl.leader].tick();
            cl.settle();
        });
    });
}

criterion_group!(benches, proposals, read_index, heartbeat);
criterion_main!(benches);
