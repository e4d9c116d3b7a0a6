use std::sync::Arc;
use std::time::Duration;

use crate::config::PluginConfig;
use crate::error::PluginError;

/// Linear memories and tables the live instances of one engine hold at
/// most (applier, queries, a plugin being loaded); an instantiation that
/// would pass them waits for an instance to end. A node runs a few
/// instances per plugin, two plugins during a deploy, and one per query
/// running at that moment. One thread holds at most four instances at
/// once (during a deploy: the old applier's, the new applier's and its
/// next, the one checking the load), so four of the largest plugin the
/// pool admits (it refuses a larger one when it loads) fit, and no thread
/// waits on itself.
pub(crate) const MEMORY_SLOTS: u32 = 64;
pub(crate) const TABLE_SLOTS: u32 = 512;
const _: () = assert!(4 * MEMORIES_PER_PLUGIN <= MEMORY_SLOTS && 4 * TABLES_PER_PLUGIN <= TABLE_SLOTS);
/// The most one plugin may have, as the store limiter allows (`ctx::Limiter`).
pub(crate) const MEMORIES_PER_PLUGIN: u32 = 10;
pub(crate) const TABLES_PER_PLUGIN: u32 = 100;
const CORE_INSTANCES_PER_PLUGIN: u32 = 100;
const TABLE_ELEMENTS: usize = 100_000;
/// Bytes at the start of each linear memory that are reset in place when
/// an instance ends, rather than handed back to the kernel: a plugin that
/// keeps its stack, data and working heap in them (the KV plugin: a 64 KiB
/// stack, `plugins/kv/build.rs`) starts each fresh instance on memory that
/// is already mapped, with no page faults. Only pages that are resident
/// are reset and stay so (`pagemap_scan` below): those some instance of the
/// slot wrote, not only the last one (the kernel reports every resident
/// page as written unless userfaultfd tracks it), so one large batch makes
/// every later instance of its slot reset what it touched. A slot holds at
/// most this much between instances: 128 MiB over all slots, a few MiB in
/// practice (the slots in use; a KV apply or query touches a few hundred
/// KiB).
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

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
    /// What live instances hold of the pool: its capacity is never what
    /// fails an instantiation.
    pub(crate) slots: Arc<InstanceSlots>,
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
            .max_wasm_stack(config.max_wasm_stack_bytes)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pooling(&config)));
        // For profiling plugins with `perf` (docs/writing-a-plugin.md): names
        // the compiled code, changes nothing of how it runs.
        if std::env::var_os("WASMRAFT_PLUGIN_PERF_MAP").is_some_and(|v| v == "1") {
            c.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = wasmtime::Engine::new(&c).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        start_watchdog_clock(&engine);
        Ok(Self { engine, config: Arc::new(config), slots: Arc::new(InstanceSlots::new(Need { memories: MEMORY_SLOTS, tables: TABLE_SLOTS })) })
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

/// The pooling allocator: every `apply` call runs on a fresh instance
/// (docs/plugin-platform.md, "Limits that hold the same on every replica"),
/// and with the default allocator each one mapped, protected and unmapped
/// its memory, then faulted its pages in again. The pool keeps memory slots
/// mapped and resets them in place. Its bounds sit at or above the store
/// limiter's (`ctx::Limiter`), so the limiter still decides every
/// deterministic limit, and [`InstanceSlots`] keeps the live instances
/// within its capacity. Each memory slot reserves address space (4 GiB plus
/// guard pages, as every instance did before), none of it resident until used.
fn pooling(config: &PluginConfig) -> wasmtime::PoolingAllocationConfig {
    // Twice the slots: see `InstanceSlots`. Every instance takes at least
    // one memory slot, so instances are bounded too.
    let (memories, tables) = (2 * MEMORY_SLOTS, 2 * TABLE_SLOTS);
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(memories)
        .total_core_instances(memories * CORE_INSTANCES_PER_PLUGIN)
        .total_memories(memories)
        .total_tables(tables)
        .max_core_instances_per_component(CORE_INSTANCES_PER_PLUGIN)
        .max_memories_per_component(MEMORIES_PER_PLUGIN)
        .max_tables_per_component(TABLES_PER_PLUGIN)
        .max_memories_per_module(MEMORIES_PER_PLUGIN)
        .max_tables_per_module(TABLES_PER_PLUGIN)
        .table_elements(TABLE_ELEMENTS)
        // Metadata of large plugins (an interpreter's tens of thousands of
        // functions): a bound, not a reservation.
        .max_core_instance_size(16 << 20)
        .max_component_instance_size(64 << 20)
        .max_memory_size(config.memory_limit_bytes.next_multiple_of(1 << 16))
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(16 << 10)
        // Reset only the resident pages, not the whole kept region (Linux
        // 6.7 and later; elsewhere all of it is zeroed, as before).
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// What one instance of a plugin holds of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Need {
    pub memories: u32,
    pub tables: u32,
}

impl Need {
    /// What `component` holds when instantiated (at least one memory slot,
    /// so that the slots bound instances too); the most a plugin may hold
    /// if that cannot be told.
    pub(crate) fn of(component: &wasmtime::component::Component) -> Need {
        match component.resources_required() {
            Some(r) => Need { memories: r.num_memories.max(1), tables: r.num_tables },
            None => Need { memories: MEMORIES_PER_PLUGIN, tables: TABLES_PER_PLUGIN },
        }
    }
}

/// Counts the memory and table slots live instances hold. A permit lives in
/// its store's data, which wasmtime drops just before it returns the
/// instance's slots to the pool: the pool has twice the slots, so that
/// instances ending and starting at the same moment never find it full.
#[derive(Debug)]
pub(crate) struct InstanceSlots {
    free: parking_lot::Mutex<Need>,
    freed: parking_lot::Condvar,
}

/// One live instance's permit; dropping it frees its slots.
#[derive(Debug)]
pub(crate) struct InstanceSlot {
    slots: Arc<InstanceSlots>,
    held: Need,
}

impl InstanceSlots {
    fn new(capacity: Need) -> Self {
        Self { free: parking_lot::Mutex::new(capacity), freed: parking_lot::Condvar::new() }
    }

    /// Takes `need`, waiting for instances to end if it is not free. `need`
    /// must be within the capacity ([`Need::exceeds_slots`]).
    pub(crate) fn take(self: &Arc<Self>, need: Need) -> InstanceSlot {
        let mut free = self.free.lock();
        while free.memories < need.memories || free.tables < need.tables {
            self.freed.wait(&mut free);
        }
        free.memories -= need.memories;
        free.tables -= need.tables;
        InstanceSlot { slots: self.clone(), held: need }
    }
}

impl Drop for InstanceSlot {
    fn drop(&mut self) {
        let mut free = self.slots.free.lock();
        free.memories += self.held.memories;
        free.tables += self.held.tables;
        drop(free);
        self.slots.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_take_past_the_free_slots_waits_until_an_instance_ends() {
        let slots = Arc::new(InstanceSlots::new(Need { memories: 3, tables: 4 }));
        let two = Need { memories: 2, tables: 1 };
        let first = slots.take(two);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || {
                let second = slots.take(two);
                tx.send(()).unwrap();
                second
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "only one memory slot is free");
        drop(first);
        rx.recv_timeout(Duration::from_secs(10)).expect("taken once the first ended");
        let second = waiter.join().unwrap();
        assert_eq!(*slots.free.lock(), Need { memories: 1, tables: 3 });
        drop(second);
        assert_eq!(*slots.free.lock(), Need { memories: 3, tables: 4 });
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
