/// Limits and budgets of plugin execution.
///
/// These are part of the replicated environment: every replica of a cluster
/// must run with the same values (and the same wasmtime build), or a trap
/// that happens on one replica may not happen on another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginConfig {
    /// Fuel (roughly, wasm instructions) one entry or one query may use.
    pub fuel_per_entry: u64,
    /// The largest a plugin's linear memory may grow, in bytes.
    pub memory_limit_bytes: usize,
    /// The largest wasm stack, in bytes.
    pub max_wasm_stack_bytes: usize,
    /// The longest key a plugin may store. A guard on what a plugin writes,
    /// not a client limit: the node keeps it above its request limit.
    pub max_key_bytes: usize,
    /// The longest value a plugin may store (same).
    pub max_value_bytes: usize,
    /// Instances kept warm for queries.
    pub query_instances: usize,
    /// Wall-clock watchdog for one plugin call, in milliseconds. Fuel bounds
    /// a plugin's own work on every replica alike; this only catches a call
    /// that stalls this host (it is not deterministic, so tripping it stops
    /// this node's apply loop instead of failing the entry).
    pub watchdog_ms: u64,
}

impl Default for PluginConfig {
    fn default() -> Self {
        Self {
            fuel_per_entry: 50_000_000,
            memory_limit_bytes: 64 << 20,
            max_wasm_stack_bytes: 512 << 10,
            // The node's default request limit (1.5 MiB) plus 64 KiB.
            max_key_bytes: 1600 << 10,
            max_value_bytes: 1600 << 10,
            query_instances: 4,
            watchdog_ms: 30_000,
        }
    }
}

impl PluginConfig {
    /// Fuel the `migrate` export of a newly deployed plugin may use: a
    /// migration may rewrite the whole keyspace.
    pub fn fuel_per_migration(&self) -> u64 {
        self.fuel_per_entry.saturating_mul(100)
    }

    /// Checks that the values make sense together.
    pub fn validate(&self) -> Result<(), String> {
        if self.fuel_per_entry == 0 {
            return Err("fuel_per_entry must be positive".into());
        }
        if self.memory_limit_bytes < (1 << 16) {
            return Err("memory_limit_bytes must be at least one wasm page (64 KiB)".into());
        }
        if self.max_wasm_stack_bytes < (64 << 10) || self.max_wasm_stack_bytes > (1 << 20) {
            return Err("max_wasm_stack_bytes must be between 64 KiB and 1 MiB".into());
        }
        if self.max_key_bytes == 0 || self.max_value_bytes == 0 {
            return Err("max_key_bytes and max_value_bytes must be positive".into());
        }
        if self.watchdog_ms < 100 {
            return Err("watchdog_ms must be at least 100".into());
        }
        if self.query_instances == 0 {
            return Err("query_instances must be positive".into());
        }
        Ok(())
    }
}
