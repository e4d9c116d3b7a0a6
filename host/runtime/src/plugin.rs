use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::Store;
use std::path::Path;

use wasmtime::component::{Component, ComponentExportIndex, Instance, Linker};

use crate::cache::CompiledCache;
use crate::contract::{Bound, Pre};
use crate::ctx::{CallFailure, PluginCtx, classify};
use crate::engine::{Need, PluginEngine};
use crate::error::PluginError;

/// What a loaded plugin says about itself, and the hash of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    /// The plugin's name.
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The `wasmraft-sdk` version it was built with (empty if none).
    pub sdk_version: String,
    /// SHA-256 of the bytes it was loaded from, in hex.
    pub sha256: String,
    /// It exports `wasmraft:plugin/upgrade` (runs `migrate` when deployed).
    pub migrates: bool,
    /// It imports WASI, so it runs with the host's deterministic WASI.
    pub wasi: bool,
    /// The `wasmraft:plugin` contract version it was built for
    /// ([`crate::CONTRACT_V1`] or [`crate::CONTRACT_V2`], which has timers).
    pub contract: String,
}

/// A validated, compiled plugin, ready to instantiate. Share it with `Arc`.
pub struct Plugin {
    pub(crate) engine: PluginEngine,
    pre: Pre,
    /// `wasmraft:plugin/upgrade#migrate`, if exported.
    pub(crate) migrate: Option<ComponentExportIndex>,
    info: PluginInfo,
    name: Arc<str>,
    /// What each instance holds of the engine's pool.
    need: Need,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("info", &self.info).finish()
    }
}

const WASM_MAGIC: &[u8] = b"\0asm";
/// The layer and version fields of a core module's preamble.
const CORE_MODULE_VERSION: [u8; 4] = [1, 0, 0, 0];

impl Plugin {
    /// Validates and compiles a plugin.
    ///
    /// `bytes` may be a component, or a core module built by `wasmraft-sdk`
    /// (or any wit-bindgen guest) for `wasm32-unknown-unknown`, which is
    /// turned into a component here. The plugin must import nothing beyond
    /// the `state-machine` world and WASI: unknown imports are refused by
    /// name.
    pub fn load(engine: &PluginEngine, bytes: &[u8]) -> Result<Arc<Self>, PluginError> {
        Self::load_cached(engine, bytes, None)
    }

    /// Like [`Plugin::load`], reusing (and filling) a cache of compiled
    /// plugins in `cache_dir`.
    pub fn load_cached(engine: &PluginEngine, bytes: &[u8], cache_dir: Option<&Path>) -> Result<Arc<Self>, PluginError> {
        if bytes.len() < 8 || &bytes[..4] != WASM_MAGIC {
            return Err(PluginError::Invalid("the bytes are not WebAssembly (no \\0asm header)".into()));
        }
        let sha256 = hex::encode(Sha256::digest(bytes));
        let cache = cache_dir.map(CompiledCache::new);
        let component = match cache.as_ref().and_then(|c| c.load(engine, &sha256)) {
            Some(component) => component,
            None => {
                let component = compile(engine, bytes)?;
                if let Some(cache) = &cache {
                    cache.store(engine, &sha256, &component);
                }
                component
            }
        };
        let need = Need::of(&component);
        let wasi = crate::wasi::imports_wasi(&component);
        let mut linker = Linker::<PluginCtx>::new(&engine.engine);
        crate::contract::add_to_linker(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        if wasi {
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        }
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::Incompatible(format!("{e:#}")))?;
        let pre = Pre::new(pre)?;
        let contract = pre.contract().to_string();
        let migrate = UPGRADE_INTERFACES
            .iter()
            .find_map(|name| component.get_export_index(None, name))
            .and_then(|upgrade| component.get_export_index(Some(&upgrade), "migrate"));

        let mut plugin = Plugin {
            engine: engine.clone(),
            pre,
            migrate,
            info: PluginInfo {
                name: String::new(),
                version: String::new(),
                sdk_version: String::new(),
                sha256,
                migrates: migrate.is_some(),
                wasi,
                contract,
            },
            name: Arc::from("plugin"),
            need,
        };
        let (mut store, instance, raw) = plugin.instantiate(false).map_err(|f| match f {
            CallFailure::Guest(m) | CallFailure::Fatal(m) => PluginError::Start(m),
        })?;
        if let Some(index) = &plugin.migrate {
            raw.get_typed_func::<MigrateParams, MigrateResults>(&mut store, index).map_err(|e| {
                PluginError::Incompatible(format!("the upgrade interface's migrate has the wrong type: {e:#}"))
            })?;
        }
        plugin.reset_fuel(&mut store);
        let info = instance.call_info(&mut store).map_err(|e| PluginError::Start(format!("info(): {e:#}")))?;
        plugin.info.name = info.name;
        plugin.info.version = info.version;
        plugin.info.sdk_version = info.sdk_version;
        plugin.name = Arc::from(plugin.info.name.as_str());
        Ok(Arc::new(plugin))
    }

    /// Name, version, SDK version and hash.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// A fresh instance with its own store. Instantiation sees the WASI
    /// of no entry (clock 0), so that it is the same whenever it happens.
    pub(crate) fn instantiate(&self, read_only: bool) -> Result<(Store<PluginCtx>, Bound, Instance), CallFailure> {
        let slot = self.engine.slots.take(self.need);
        let ctx = PluginCtx::new(self.name.clone(), &self.engine.config, read_only, self.info.wasi, slot);
        ctx.env.reset();
        let mut store = Store::new(&self.engine.engine, ctx);
        store.limiter(|c| &mut c.limiter);
        self.reset_fuel(&mut store);
        let (instance, raw) = self.pre.instantiate(&mut store).map_err(|e| classify(e, None))?;
        Ok((store, instance, raw))
    }

    /// Gives the next call one entry's fuel and a fresh watchdog deadline.
    pub(crate) fn reset_fuel(&self, store: &mut Store<PluginCtx>) {
        self.set_budget(store, self.engine.config.fuel_per_entry);
    }

    pub(crate) fn set_budget(&self, store: &mut Store<PluginCtx>, fuel: u64) {
        store.set_fuel(fuel).expect("fuel is enabled in the engine configuration");
        store.set_epoch_deadline(self.engine.watchdog_ticks());
    }

    pub(crate) fn fuel_per_entry(&self) -> u64 {
        self.engine.config.fuel_per_entry
    }
}

/// The interface of the optional `migrate` export, in each contract (its
/// types have the same shapes in both).
const UPGRADE_INTERFACES: [&str; 2] = ["wasmraft:plugin/upgrade@0.2.0", "wasmraft:plugin/upgrade@0.1.0"];
pub(crate) type MigrateParams = (crate::contract::wit::PluginInfo,);
pub(crate) type MigrateResults = (Result<(), crate::contract::wit::ApplyError>,);

fn compile(engine: &PluginEngine, bytes: &[u8]) -> Result<Component, PluginError> {
    let component_bytes;
    let bytes = if bytes[4..8] == CORE_MODULE_VERSION {
        component_bytes = componentize(bytes)?;
        &component_bytes[..]
    } else {
        bytes
    };
    Component::new(&engine.engine, bytes).map_err(|e| PluginError::Invalid(format!("{e:#}")))
}

/// Wraps a core module that carries wit-bindgen's component type section
/// into a component.
fn componentize(module: &[u8]) -> Result<Vec<u8>, PluginError> {
    // The encoder indexes into sections it trusts; a truncated or crafted
    // module can make it panic. A plugin's bytes are untrusted input: they
    // are validated first, and a panic that gets past that is a refusal,
    // never a crash.
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(module)
        .map_err(|e| PluginError::Invalid(format!("not a valid core module: {e}")))?;
    let encoded = std::panic::catch_unwind(|| {
        wit_component::ComponentEncoder::default().module(module).and_then(|e| e.validate(true).encode())
    })
    .map_err(|_| PluginError::Invalid("a malformed core module (the component encoder could not read it)".into()))?;
    encoded
        .map_err(|e| {
            PluginError::Invalid(format!(
                "a core module must be built with wasmraft-sdk or wit-bindgen for the \
                 wasmraft:plugin world, and could not be turned into a component: {e:#}"
            ))
        })
}
