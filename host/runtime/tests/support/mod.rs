//! Shared helpers: plugin fixtures built by `cargo xtask plugins`, and a
//! runtime over an in-memory keyspace that applies writes as storage does.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use wasmraft_runtime::{Applier, ApplyBatch, EntryInput, MemoryView, Plugin, PluginConfig, PluginEngine, QueryPool};

pub fn fixture(name: &str) -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "plugin fixture {} is missing ({e}): run `cargo xtask plugins` first (scripts/test.sh does)",
            path.display()
        )
    })
}

pub fn kv_plugin() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/dist/kv.wasm");
    std::fs::read(path).expect("the embedded KV plugin")
}

/// Small limits so that hostile entries fail fast.
pub fn test_config() -> PluginConfig {
    PluginConfig { fuel_per_entry: 20_000_000, memory_limit_bytes: 16 << 20, ..PluginConfig::default() }
}

/// A replica: an applier over its own in-memory keyspace.
pub struct Replica {
    pub applier: Applier,
    pub queries: QueryPool,
    pub state: MemoryView,
    next_index: u64,
}

impl Replica {
    pub fn new(wasm: &[u8]) -> Self {
        Self::with_config(wasm, test_config())
    }

    pub fn with_config(wasm: &[u8], config: PluginConfig) -> Self {
        // Each replica gets its own engine: nothing is shared between them.
        let engine = PluginEngine::new(config).expect("engine");
        let plugin: Arc<Plugin> = Plugin::load(&engine, wasm).expect("plugin loads");
        Self {
            applier: Applier::new(plugin.clone()).expect("instantiate"),
            queries: QueryPool::new(plugin),
            state: MemoryView::default(),
            next_index: 1,
        }
    }

    /// The next entry gets log index `index` (a runtime restarted mid-log).
    pub fn skip_to(&mut self, index: u64) {
        self.next_index = index;
    }

    /// Applies `commands` as one batch and stores the writes.
    pub fn apply(&mut self, commands: &[Vec<u8>]) -> ApplyBatch {
        let entries: Vec<EntryInput> = commands
            .iter()
            .map(|c| {
                let index = self.next_index;
                self.next_index += 1;
                EntryInput { index, term: 1, timestamp_ms: 1_700_000_000_000 + index, command: c.clone() }
            })
            .collect();
        let batch = self.applier.apply(Arc::new(self.state.clone()), &entries).expect("no fatal failure");
        self.state.apply_writes(&batch.writes);
        batch
    }

    pub fn apply_one(&mut self, command: Vec<u8>) -> Result<Vec<u8>, wasmraft_runtime::EntryError> {
        self.apply(&[command]).outcomes.pop().expect("one outcome")
    }

    pub fn query(&self, request: &[u8]) -> Result<Vec<u8>, wasmraft_runtime::QueryError> {
        self.queries.query(Arc::new(self.state.clone()), request)
    }
}

pub fn text(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

impl Replica {
    /// Applies a tick at the next index and stores its writes.
    pub fn tick(&mut self, now_ms: u64, renewals: &[(&str, u64)]) -> wasmraft_runtime::TickBatch {
        let tick = wasmraft_runtime::TickInput {
            index: self.next_index,
            term: 1,
            now_ms,
            grace_until_ms: 0,
            renewals: renewals.iter().map(|(k, at)| (k.as_bytes().to_vec(), *at)).collect(),
        };
        self.next_index += 1;
        let batch = self.applier.tick(Arc::new(self.state.clone()), &tick).expect("no fatal failure");
        self.state.apply_writes(&batch.writes);
        batch
    }

    /// The timer record in the keyspace, if any.
    pub fn timer(&self) -> Option<wasmraft_runtime::TimerRecord> {
        wasmraft_runtime::TimerRecord::read(&self.state).expect("a readable record")
    }
}
