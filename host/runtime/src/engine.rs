use std::sync::Arc;
use std::time::Duration;

use crate::config::PluginConfig;
use crate::error::PluginError;

/// How often the watchdog's clock advances.
pub(crate) const WATCHDOG_TICK: Duration = Duration::from_millis(50);

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
    /// Builds the engine and starts its watchdog clock.
    pub fn new(config: PluginConfig) -> Result<Self, PluginError> {
        config.validate().map_err(PluginError::Config)?;
        let mut c = wasmtime::Config::new();
        c.wasm_component_model(true)
            // Determinism (wasmtime docs/examples-deterministic-wasm-execution.md).
            // (Threads and shared memory are not compiled into wasmtime here
            // at all: its `threads` feature is off.)
            .cranelift_nan_canonicalization(true)
            .relaxed_simd_deterministic(true)
            // Fuel is the replicated budget; epochs are only a local,
            // wall-clock watchdog (they stop at different points on
            // different replicas).
            .consume_fuel(true)
            .epoch_interruption(true)
            // Copy-on-write heap images change instantiation fuel across
            // platforms (wasmtime#14331), and made the fresh instance of an
            // apply call no cheaper here.
            .memory_init_cow(false)
            .max_wasm_stack(config.max_wasm_stack_bytes);
        let engine = wasmtime::Engine::new(&c).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        start_watchdog_clock(&engine);
        Ok(Self { engine, config: Arc::new(config) })
    }

    /// The limits this engine enforces.
    pub fn config(&self) -> &PluginConfig {
        &self.config
    }

    /// Watchdog ticks a call may take.
    pub(crate) fn watchdog_ticks(&self) -> u64 {
        (self.config.watchdog_ms / WATCHDOG_TICK.as_millis() as u64).max(1)
    }

    /// A fingerprint of this wasmtime build and configuration: compiled
    /// plugins are only reused by an identical engine.
    pub(crate) fn compatibility_hash(&self) -> String {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

/// Advances the engine's epoch every [`WATCHDOG_TICK`] for as long as the
/// engine lives (the thread holds only a weak reference).
fn start_watchdog_clock(engine: &wasmtime::Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new().name("wasm-watchdog".into()).spawn(move || {
        loop {
            std::thread::sleep(WATCHDOG_TICK);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the plugin watchdog clock; long plugin calls will not be caught");
    }
}
