//! An in-process cluster: several nodes in one process, their Raft messages
//! passed through channels instead of the network. For tests, benchmarks of
//! everything but gRPC, and applications that want replication across
//! directories (disks) of one machine.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use wasmraft_raft::{Message, NodeId};

use crate::config::NodeConfig;
use crate::error::{Error, StartError};
use crate::node::Node;
use crate::transport::Transport;

type Registry = Arc<RwLock<HashMap<NodeId, Node>>>;

/// Delivers messages straight into the recipient node's inbox.
struct LocalTransport {
    registry: Registry,
}

impl Transport for LocalTransport {
    fn send(&mut self, messages: Vec<Message>) {
        let nodes = self.registry.read();
        for m in messages {
            // A stopped node is simply unreachable: its messages are lost.
            if let Some(node) = nodes.get(&m.to) {
                node.step(m);
            }
        }
    }
}

/// Nodes 1..=n of one cluster, in this process. Dropping it stops them all.
pub struct LocalCluster {
    nodes: Vec<Node>,
    registry: Registry,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster").field("nodes", &self.nodes.len()).finish()
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
        let mut nodes = Vec::new();
        for id in 1..=n {
            let mut config = NodeConfig::default();
            configure(&mut config);
            config.id = id;
            config.data_dir = dir.join(format!("node-{id}"));
            config.bootstrap_voters = (1..=n).collect();
            let node = Node::start_with_transport(config, wasm, LocalTransport { registry: registry.clone() })?;
            registry.write().insert(NodeId(id), node.clone());
            nodes.push(node);
        }
        Ok(Self { nodes, registry })
    }

    /// The running nodes, in id order.
    pub fn nodes(&self) -> Vec<Node> {
        let registry = self.registry.read();
        self.nodes.iter().filter(|n| registry.contains_key(&NodeId(n.id()))).cloned().collect()
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

    /// Stops node `id` (as a crash would: it answers nothing more).
    pub fn stop(&self, id: u64) {
        if let Some(node) = self.registry.write().remove(&NodeId(id)) {
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
