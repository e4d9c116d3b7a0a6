#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod kv;

pub use kv::{Error, Kv};
pub use wasmraft_node::{
    Applied, Consistency, EntryEvent, Error as NodeError, KV_PLUGIN, LocalCluster, Members, Node, NodeConfig,
    NodeStatus, PluginConfig, StartError,
};
