use std::sync::{Arc, Mutex};

use wasmtime::Store;

use crate::contract::{Bound, wit};
use crate::ctx::{CallFailure, PluginCtx, classify};
use crate::error::{Fatal, QueryError};
use crate::plugin::Plugin;
use crate::view::{EmptyView, StateView};

type Instance = (Store<PluginCtx>, Bound, wasmtime::component::Instance);

/// Read-only plugin instances that answer queries, in parallel with each
/// other and with the applier. Each query takes an idle instance (or makes
/// one), runs with one entry's fuel, and gives it back unless it trapped.
pub struct QueryPool {
    plugin: Arc<Plugin>,
    idle: Mutex<Vec<Instance>>,
}

impl std::fmt::Debug for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryPool").field("plugin", &self.plugin.info()).finish()
    }
}

impl QueryPool {
    /// A pool for `plugin`; instances are made on demand.
    pub fn new(plugin: Arc<Plugin>) -> Self {
        Self { plugin, idle: Mutex::new(Vec::new()) }
    }

    /// The plugin this pool runs.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// Runs the plugin's `query` over `view`.
    pub fn query(&self, view: Arc<dyn StateView>, request: &[u8]) -> Result<Vec<u8>, QueryError> {
        let taken = self.idle.lock().expect("query pool lock").pop();
        let (mut store, instance, raw) = match taken {
            Some(i) => i,
            None => self.plugin.instantiate(true).map_err(|f| match f {
                CallFailure::Guest(m) | CallFailure::Fatal(m) => {
                    QueryError::Fatal(Fatal(format!("cannot instantiate the plugin: {m}")))
                }
            })?,
        };
        store.data_mut().view = view;
        store.data_mut().last_panic = None;
        self.plugin.reset_fuel(&mut store);
        let result = crate::applier::catch_engine_panic(|| instance.call_query(&mut store, request))?;
        store.data_mut().view = Arc::new(EmptyView);
        match result {
            Ok(answer) => {
                self.give_back((store, instance, raw));
                answer.map_err(|e| match e {
                    wit::QueryError::Invalid(m) => QueryError::Invalid(m),
                    wit::QueryError::Rejected(m) => QueryError::Rejected(m),
                })
            }
            Err(e) => {
                let last_panic = store.data_mut().last_panic.take();
                Err(match classify(e, last_panic) {
                    CallFailure::Guest(m) => QueryError::Trap(m),
                    CallFailure::Fatal(m) => QueryError::Fatal(Fatal(m)),
                })
            }
        }
    }

    fn give_back(&self, instance: Instance) {
        let mut idle = self.idle.lock().expect("query pool lock");
        if idle.len() < self.plugin.engine.config.query_instances {
            idle.push(instance);
        }
    }
}
