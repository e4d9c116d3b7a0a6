use std::sync::Arc;

use crate::config::PluginConfig;
use crate::error::PluginError;

/// A wasmtime engine configured for deterministic, bounded execution.
///
/// One per process; cheap to clone. Every replica must use the same
/// configuration for fuel counts and trap points to agree.
#[derive(Clone)]
pub struct PluginEngine {
    pub(crate) engine: wasmtime::Engine,
    pub(crate) config: Arc<PluginConfig>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine").field("config", &self.config).finish()
    }
}

impl PluginEngine {
    /// Builds the engine.
    pub fn new(config: PluginConfig) -> Result<Self, PluginError> {
        config.validate().map_err(PluginError::Config)?;
        let mut c = wasmtime::Config::new();
        c.wasm_component_model(true)
            // Determinism (wasmtime docs/examples-deterministic-wasm-execution.md).
            // (Threads and shared memory are not compiled into wasmtime here
            // at all: its `threads` feature is off.)
            .cranelift_nan_canonicalization(true)
            .relaxed_simd_deterministic(true)
            // Fuel is the replicated budget; epochs would be wall-clock based.
            .consume_fuel(true)
            // Copy-on-write heap images change instantiation fuel across
            // platforms (wasmtime#14331).
            .memory_init_cow(false)
            .max_wasm_stack(config.max_wasm_stack_bytes);
        let engine = wasmtime::Engine::new(&c).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        Ok(Self { engine, config: Arc::new(config) })
    }

    /// The limits this engine enforces.
    pub fn config(&self) -> &PluginConfig {
        &self.config
    }
}
