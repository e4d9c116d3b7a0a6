//! The per-instance host state and the host side of the WIT imports.

use std::sync::Arc;

use wasmtime::ResourceLimiter;

use crate::bindings::v1::wasmraft::plugin::{log, store, types};
use crate::bindings::v2::wasmraft::plugin as v2;
use crate::engine::InstanceSlot;
use crate::overlay::Overlay;
use crate::timer::{TIMER_KEY, TimerRecord, in_range};
use crate::wasi::{EntryEnv, WasiState};
use crate::view::{EmptyView, StateView};

/// A host-side failure raised inside an import: never a guest fault, so it
/// must not be recorded as the entry's outcome.
#[derive(Debug)]
pub(crate) struct HostFatal(pub String);

impl std::fmt::Display for HostFatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostFatal {}

/// A deterministic contract violation by the guest (a limit, a write during a
/// query): it fails the entry like a trap.
#[derive(Debug)]
pub(crate) struct GuestFault(pub String);

impl std::fmt::Display for GuestFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GuestFault {}

pub(crate) struct PluginCtx {
    pub plugin: Arc<str>,
    pub view: Arc<dyn StateView>,
    pub overlay: Overlay,
    pub read_only: bool,
    /// The last panic message the guest logged (the SDK's panic hook), used
    /// to explain the trap that follows.
    pub last_panic: Option<String>,
    pub limiter: Limiter,
    pub max_key: usize,
    pub max_value: usize,
    /// The entry the instance works on, as its WASI clock and random see it.
    pub env: Arc<EntryEnv>,
    /// WASI state, for plugins that import WASI.
    pub wasi: Option<WasiState>,
    /// This instance's place in the engine's pool.
    _slot: InstanceSlot,
}

impl PluginCtx {
    pub fn new(plugin: Arc<str>, config: &crate::PluginConfig, read_only: bool, wasi: bool, slot: InstanceSlot) -> Self {
        let env = Arc::new(EntryEnv::default());
        Self {
            wasi: wasi.then(|| WasiState::new(plugin.clone(), env.clone())),
            env,
            plugin,
            view: Arc::new(EmptyView),
            overlay: Overlay::default(),
            read_only,
            last_panic: None,
            limiter: Limiter { memory_limit: config.memory_limit_bytes },
            max_key: config.max_key_bytes,
            max_value: config.max_value_bytes,
            _slot: slot,
        }
    }

    fn check_key(&self, key: &[u8]) -> wasmtime::Result<()> {
        if key.len() > self.max_key {
            return Err(GuestFault(format!("key of {} bytes exceeds the limit of {}", key.len(), self.max_key)).into());
        }
        Ok(())
    }

    fn check_not_reserved(&self, key: &[u8]) -> wasmtime::Result<()> {
        if key == TIMER_KEY {
            return Err(GuestFault(format!(
                "the key {:?} is the host's timer record; use the timer interface",
                String::from_utf8_lossy(key)
            ))
            .into());
        }
        Ok(())
    }

    /// The timer record as this entry sees it (its own writes included).
    fn timer_record(&self) -> wasmtime::Result<TimerRecord> {
        match self.overlay.get(self.view.as_ref(), TIMER_KEY).map_err(fatal)? {
            None => Ok(TimerRecord::default()),
            Some(bytes) => TimerRecord::decode(&bytes).map_err(|e| HostFatal(format!("the timer record is corrupt: {e}")).into()),
        }
    }

    /// Writes the timer record through the overlay, as an entry's write.
    pub(crate) fn write_timer_record(&mut self, record: &TimerRecord) {
        self.overlay.write(TIMER_KEY.to_vec(), Some(record.encode()));
    }

    fn check_writable(&self, what: &str) -> wasmtime::Result<()> {
        if self.read_only {
            return Err(GuestFault(format!("store.{what} called during a query; queries are read-only")).into());
        }
        Ok(())
    }
}

fn fatal(e: crate::view::StateError) -> wasmtime::Error {
    HostFatal(e.0).into()
}

fn end_bound(end: &[u8]) -> Option<&[u8]> {
    if end.is_empty() { None } else { Some(end) }
}

impl types::Host for PluginCtx {}

impl store::Host for PluginCtx {
    fn get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        self.check_key(&key)?;
        if key == TIMER_KEY {
            return Ok(None);
        }
        self.overlay.get(self.view.as_ref(), &key).map_err(fatal)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.check_writable("put")?;
        self.check_key(&key)?;
        self.check_not_reserved(&key)?;
        if value.len() > self.max_value {
            return Err(GuestFault(format!(
                "value of {} bytes exceeds the limit of {}",
                value.len(),
                self.max_value
            ))
            .into());
        }
        self.overlay.write(key, Some(value));
        Ok(())
    }

    fn delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        self.check_writable("delete")?;
        self.check_key(&key)?;
        self.check_not_reserved(&key)?;
        self.overlay.write(key, None);
        Ok(())
    }

    fn scan(
        &mut self,
        start: Vec<u8>,
        end: Vec<u8>,
        limit: u32,
        reverse: bool,
    ) -> wasmtime::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if !in_range(&start, &end) {
            return self
                .overlay
                .scan(self.view.as_ref(), &start, end_bound(&end), limit as usize, reverse)
                .map_err(fatal);
        }
        // One more pair, in case the timer record is among them.
        let asked = if limit == 0 { 0 } else { limit as usize + 1 };
        let mut pairs =
            self.overlay.scan(self.view.as_ref(), &start, end_bound(&end), asked, reverse).map_err(fatal)?;
        pairs.retain(|(k, _)| k != TIMER_KEY);
        if limit != 0 {
            pairs.truncate(limit as usize);
        }
        Ok(pairs)
    }

    fn count(&mut self, start: Vec<u8>, end: Vec<u8>) -> wasmtime::Result<u64> {
        let n = self.overlay.count(self.view.as_ref(), &start, end_bound(&end)).map_err(fatal)?;
        let hidden = in_range(&start, &end) && self.overlay.get(self.view.as_ref(), TIMER_KEY).map_err(fatal)?.is_some();
        Ok(n - u64::from(hidden))
    }
}

impl log::Host for PluginCtx {
    fn write(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        let plugin = &*self.plugin;
        match level {
            log::Level::Debug => tracing::debug!(plugin, "{message}"),
            log::Level::Info => tracing::info!(plugin, "{message}"),
            log::Level::Warn => tracing::warn!(plugin, "{message}"),
            log::Level::Error => {
                tracing::warn!(plugin, "{message}");
                if let Some(panic) = message.strip_prefix("panic: ") {
                    self.last_panic = Some(panic.to_string());
                }
            }
        }
        Ok(())
    }
}

// 0.2.0's imports: the same store and log, and the timer.

impl v2::types::Host for PluginCtx {}

impl v2::store::Host for PluginCtx {
    fn get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        store::Host::get(self, key)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        store::Host::put(self, key, value)
    }

    fn delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        store::Host::delete(self, key)
    }

    fn scan(&mut self, start: Vec<u8>, end: Vec<u8>, limit: u32, reverse: bool) -> wasmtime::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        store::Host::scan(self, start, end, limit, reverse)
    }

    fn count(&mut self, start: Vec<u8>, end: Vec<u8>) -> wasmtime::Result<u64> {
        store::Host::count(self, start, end)
    }
}

impl v2::log::Host for PluginCtx {
    fn write(&mut self, level: v2::log::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            v2::log::Level::Debug => log::Level::Debug,
            v2::log::Level::Info => log::Level::Info,
            v2::log::Level::Warn => log::Level::Warn,
            v2::log::Level::Error => log::Level::Error,
        };
        log::Host::write(self, level, message)
    }
}

impl v2::timer::Host for PluginCtx {
    fn set(&mut self, at_ms: Option<u64>) -> wasmtime::Result<()> {
        self.check_writable("timer.set")?;
        let record = TimerRecord { wake_at_ms: at_ms, ..self.timer_record()? };
        self.write_timer_record(&record);
        Ok(())
    }

    fn get(&mut self) -> wasmtime::Result<Option<u64>> {
        Ok(self.timer_record()?.wake_at_ms)
    }
}

/// Caps linear memory. Growth past the cap is a deterministic fault; an
/// operating-system failure to provide memory below the cap is not, and is
/// fatal to the node.
pub(crate) struct Limiter {
    memory_limit: usize,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            return Err(GuestFault(format!("memory limit of {} bytes exceeded", self.memory_limit)).into());
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(HostFatal(format!("the host could not grow plugin memory: {error:#}")).into())
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        const MAX_TABLE_ELEMENTS: usize = 100_000;
        if desired > MAX_TABLE_ELEMENTS {
            return Err(GuestFault(format!("table limit of {MAX_TABLE_ELEMENTS} elements exceeded")).into());
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        100
    }

    fn tables(&self) -> usize {
        100
    }

    fn memories(&self) -> usize {
        10
    }
}

/// Sorts an error out of a call into guest fault (deterministic, fails the
/// entry) or host fatal.
pub(crate) enum CallFailure {
    Guest(String),
    Fatal(String),
}

pub(crate) fn classify(error: wasmtime::Error, last_panic: Option<String>) -> CallFailure {
    if let Some(h) = error.downcast_ref::<HostFatal>() {
        return CallFailure::Fatal(h.0.clone());
    }
    if let Some(g) = error.downcast_ref::<GuestFault>() {
        return CallFailure::Guest(g.0.clone());
    }
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        let what = match trap {
            wasmtime::Trap::OutOfFuel => "out of fuel".to_string(),
            wasmtime::Trap::StackOverflow => "wasm stack overflow".to_string(),
            // The epoch is wall-clock time: where it stops a plugin differs
            // from replica to replica, so this can never be an entry's outcome.
            wasmtime::Trap::Interrupt => {
                return CallFailure::Fatal(
                    "the plugin watchdog interrupted a call that ran past its wall-clock limit".into(),
                );
            }
            other => other.to_string(),
        };
        return CallFailure::Guest(match last_panic {
            Some(p) => format!("{p} ({what})"),
            None => what,
        });
    }
    // Everything else comes from lifting the guest's results (a string that
    // is not UTF-8, a list out of bounds): deterministic, the guest's fault.
    CallFailure::Guest(format!("plugin broke the component ABI: {error:#}"))
}
