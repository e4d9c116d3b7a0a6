//! Plugins deployed through the log: every replica validates the plugin in
//! the entry, runs its `migrate` export and switches to it at that entry's
//! index, or refuses it there (and keeps the old one) with the same error.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use wasmraft_runtime::{Applier, EntryInput, Plugin, PluginEngine, PluginError, PluginInfo, QueryPool, StateView, Write};
use wasmraft_storage::DeployedPlugin;

use crate::state_machine::{QueryHandler, StateMachine};

/// The largest plugin that can be deployed through the log.
pub const MAX_PLUGIN_BYTES: usize = 48 << 20;

/// The query side of the running plugin, swapped when a deploy applies or
/// a snapshot installs. A query takes the plugin and its state snapshot
/// under the read lock; the switch writes the new state and swaps the
/// plugin under the write lock. So no query sees the new plugin over the
/// old state or the old plugin over the new state, and none holds the lock
/// while it runs.
pub(crate) type SharedQueries = Arc<RwLock<Arc<dyn QueryHandler>>>;

/// What a node needs to load plugins: one engine, and where compiled
/// plugins are cached.
#[derive(Clone, Debug)]
pub(crate) struct Loader {
    pub engine: PluginEngine,
    pub cache_dir: PathBuf,
}

impl Loader {
    /// Validates and compiles `wasm` (or takes it from the cache).
    pub fn load(&self, wasm: &[u8]) -> Result<Arc<Plugin>, PluginError> {
        if wasm.len() > MAX_PLUGIN_BYTES {
            return Err(PluginError::Invalid(format!(
                "plugin of {} bytes exceeds the limit of {MAX_PLUGIN_BYTES}",
                wasm.len()
            )));
        }
        Plugin::load_cached(&self.engine, wasm, Some(&self.cache_dir))
    }
}

/// A deploy that passed validation and migration, waiting for its storage
/// write.
pub(crate) struct Prepared {
    pub record: DeployedPlugin,
    pub wasm: Vec<u8>,
    pub migration: Vec<Write>,
    pub applier: Applier,
    pub queries: Arc<dyn QueryHandler>,
}

/// Loads the plugin of a deploy entry and runs its migration over `view`.
/// `Ok(Err(reason))` refuses the deploy (the same on every replica);
/// `Err` is a failure of this host.
pub(crate) fn prepare(
    loader: &Loader,
    wasm: Vec<u8>,
    at: &EntryInput,
    view: Arc<dyn StateView>,
    previous: &PluginInfo,
) -> Result<Result<Prepared, String>, String> {
    let plugin = match loader.load(&wasm) {
        Ok(p) => p,
        // The engine itself failing says nothing about the plugin.
        Err(e @ PluginError::Engine(_)) | Err(e @ PluginError::Config(_)) => return Err(e.to_string()),
        Err(e) => return Ok(Err(format!("plugin refused: {e}"))),
    };
    let mut applier = Applier::new(plugin.clone()).map_err(|f| f.0)?;
    let migration = match applier.migrate(view, previous, at).map_err(|f| f.0)? {
        Ok(writes) => writes,
        Err(e) => return Ok(Err(format!("plugin refused: its migration failed: {e}"))),
    };
    let info = plugin.info();
    let record = DeployedPlugin {
        sha256: info.sha256.clone(),
        name: info.name.clone(),
        version: info.version.clone(),
        sdk_version: info.sdk_version.clone(),
        deployed_at: at.index,
    };
    let queries: Arc<dyn QueryHandler> = Arc::new(QueryPool::new(plugin));
    Ok(Ok(Prepared { record, wasm, migration, applier, queries }))
}

/// Builds the apply and query sides of a plugin loaded at start-up or from a
/// snapshot.
pub(crate) fn instantiate(plugin: Arc<Plugin>) -> Result<(Box<dyn StateMachine>, Arc<dyn QueryHandler>), String> {
    let applier = Applier::new(plugin.clone()).map_err(|f| f.0)?;
    Ok((Box::new(applier), Arc::new(QueryPool::new(plugin))))
}
