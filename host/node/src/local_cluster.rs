//! An in-process cluster: several nodes in one process, their Raft messages
//! passed through channels instead of the network. For tests, benchmarks of
//! everything but gRPC, and applications that want replication across
//! directories (disks) of one machine.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use wasmraft_raft::{Message, MessageBody, NodeId};

use crate::config::NodeConfig;
use crate::error::{Error, StartError};
use crate::node::Node;
use crate::transport::{MessageSink, SnapshotDone, SnapshotLoader, Transport};

type Registry = Arc<RwLock<HashMap<NodeId, Node>>>;
/// Directed links that drop every message: (from, to).
type Cuts = Arc<RwLock<HashSet<(u64, u64)>>>;

/// Delivers messages straight into the recipient node's inbox, except on
/// links the test has cut (fault injection at the transport edge).
#[derive(Clone)]
struct LocalTransport {
    id: u64,
    registry: Registry,
    cuts: Cuts,
}

impl MessageSink for LocalTransport {
    fn send(&self, messages: Vec<Message>) {
        let nodes = self.registry.read();
        let cuts = self.cuts.read();
        for m in messages {
            if cuts.contains(&(self.id, m.to.0)) {
                continue;
            }
            // A stopped node is simply unreachable: its messages are lost.
            if let Some(node) = nodes.get(&m.to) {
                node.step(m);
            }
        }
    }
}

impl Transport for LocalTransport {
    fn send(&mut self, messages: Vec<Message>) {
        MessageSink::send(self, messages);
    }

    fn sink(&self) -> Option<Box<dyn MessageSink>> {
        Some(Box::new(self.clone()))
    }

    fn send_snapshot(&mut self, message: Message, load: SnapshotLoader, done: SnapshotDone) {
        if self.cuts.read().contains(&(self.id, message.to.0)) {
            done(false);
            return;
        }
        let registry = self.registry.clone();
        std::thread::spawn(move || {
            let target = registry.read().get(&message.to).cloned();
            let (Some(node), Ok(mut reader)) = (target, load()) else {
                return done(false);
            };
            let MessageBody::InstallSnapshot { meta } = &message.body else {
                return done(false);
            };
            // Part by part, as the gRPC transport streams it.
            let staged = node.stage_snapshot(meta).and_then(|mut staging| {
                while let Some(part) = reader.next_part()? {
                    staging.add(part)?;
                }
                staging.finish()
            });
            match staged {
                Ok(staged) => {
                    node.receive_snapshot(message, staged);
                    done(true);
                }
                Err(e) => {
                    tracing::warn!(to = message.to.0, error = %e, "sending a snapshot failed");
                    done(false);
                }
            }
        });
    }
}

/// Nodes 1..=n of one cluster, in this process. Dropping it stops them all.
pub struct LocalCluster {
    registry: Registry,
    cuts: Cuts,
    configs: Vec<NodeConfig>,
    wasm: Vec<u8>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster").field("nodes", &self.registry.read().len()).finish()
    }
}

impl std::fmt::Debug for LocalTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalTransport")
    }
}

impl LocalCluster {
    /// Starts `n` nodes running `wasm`, node `i` keeping its data in
    /// `dir/node-i`. `configure` may adjust each node's configuration (the
    /// id, data directory and bootstrap voters are set for it).
    pub fn start(
        n: u64,
        dir: &Path,
        wasm: &[u8],
        configure: impl Fn(&mut NodeConfig),
    ) -> Result<Self, StartError> {
        let registry: Registry = Arc::default();
        let cuts: Cuts = Arc::default();
        let mut configs = Vec::new();
        for id in 1..=n {
            let mut config = NodeConfig::default();
            configure(&mut config);
            config.id = id;
            config.data_dir = dir.join(format!("node-{id}"));
            config.bootstrap_voters = (1..=n).collect();
            let transport = LocalTransport { id, registry: registry.clone(), cuts: cuts.clone() };
            let node = Node::start_with_transport(config.clone(), wasm, transport)?;
            registry.write().insert(NodeId(id), node);
            configs.push(config);
        }
        Ok(Self { registry, cuts, configs, wasm: wasm.to_vec() })
    }

    /// Starts node `id` again from its data directory after [`Self::stop`].
    pub fn restart(&mut self, id: u64) -> Result<Node, StartError> {
        let config = self.configs[(id - 1) as usize].clone();
        let transport = LocalTransport { id, registry: self.registry.clone(), cuts: self.cuts.clone() };
        let node = Node::start_with_transport(config, &self.wasm, transport)?;
        self.registry.write().insert(NodeId(id), node.clone());
        Ok(node)
    }

    /// The running nodes, in id order.
    pub fn nodes(&self) -> Vec<Node> {
        let mut nodes: Vec<Node> = self.registry.read().values().cloned().collect();
        nodes.sort_by_key(Node::id);
        nodes
    }

    /// The node that currently leads, waiting for an election if needed.
    pub async fn leader(&self) -> Result<Node, Error> {
        let any = self.nodes().into_iter().next().ok_or(Error::Stopped)?;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let leader = any.wait_for_leader().await?;
            if let Some(node) = self.nodes().into_iter().find(|n| n.id() == leader && n.status().leader == Some(NodeId(leader))) {
                return Ok(node);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Cuts node `id` off from every other node, both ways (it keeps
    /// running and answering its clients).
    pub fn isolate(&self, id: u64) {
        let ids: Vec<u64> = self.registry.read().keys().map(|n| n.0).chain(1..=self.configs.len() as u64).collect();
        let mut cuts = self.cuts.write();
        for other in ids.into_iter().filter(|o| *o != id) {
            cuts.insert((id, other));
            cuts.insert((other, id));
        }
    }

    /// Cuts only the messages from `from` to `to` (an asymmetric partition).
    pub fn cut(&self, from: u64, to: u64) {
        self.cuts.write().insert((from, to));
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.cuts.write().clear();
    }

    /// Stops node `id` (as a crash would: it answers nothing more). Drop
    /// every handle to it before [`Self::restart`], which reopens its data.
    pub fn stop(&self, id: u64) {
        // The registry's lock is released before the node's threads are
        // joined: its Raft thread may be waiting on that lock to send.
        let node = self.registry.write().remove(&NodeId(id));
        if let Some(node) = node {
            node.shutdown();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let nodes: Vec<Node> = self.registry.write().drain().map(|(_, n)| n).collect();
        for n in nodes {
            n.shutdown();
        }
    }
}
