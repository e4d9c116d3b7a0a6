use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::Instance;

use crate::contract::{Bound, TickInput, wit};
use crate::ctx::{CallFailure, PluginCtx, classify};
use crate::error::{EntryError, Fatal};
use crate::overlay::Write;
use crate::plugin::{MigrateParams, MigrateResults, Plugin, PluginInfo};
use crate::timer::TimerRecord;
use crate::view::{EmptyView, StateView};

/// A committed entry to apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInput {
    /// Log index.
    pub index: u64,
    /// Term of the leader that created it.
    pub term: u64,
    /// The leader's clock when it accepted the command, ms since the epoch.
    pub timestamp_ms: u64,
    /// The command bytes.
    pub command: Vec<u8>,
}

/// An event produced by an applied entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryEvent {
    /// The index of the entry that produced it.
    pub index: u64,
    /// The key watchers match against.
    pub key: Vec<u8>,
    /// The plugin-defined payload.
    pub payload: Vec<u8>,
}

/// The result of applying a batch: store `writes` together with the applied
/// index in one atomic write, then answer clients and publish `events`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyBatch {
    /// One outcome per entry, in order.
    pub outcomes: Vec<Result<Vec<u8>, EntryError>>,
    /// The net writes of the entries that succeeded, sorted by key.
    pub writes: Vec<Write>,
    /// Events of the entries that succeeded, in entry order.
    pub events: Vec<EntryEvent>,
    /// Fuel the plugin burned on the batch, every call counted (a batch
    /// that fails as a whole runs again entry by entry).
    pub fuel_used: u64,
}

type WitOutcome = Result<wit::Applied, wit::ApplyError>;

/// The result of applying a tick: store `writes` with the tick's index, then
/// answer the keep-alives and publish `events`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickBatch {
    /// The log time the tick ran at (the timer record's clock from now on).
    pub now_ms: u64,
    /// Whether the plugin's `tick` was called (its wake-up was due, or
    /// keep-alives were carried).
    pub ran: bool,
    /// Why the plugin's `tick` failed, if it did: its writes were dropped.
    pub failed: Option<EntryError>,
    /// One answer per keep-alive, in order.
    pub renewed: Vec<Result<Vec<u8>, EntryError>>,
    /// The net writes, sorted by key: the plugin's, and the timer record.
    pub writes: Vec<Write>,
    /// Events of the tick.
    pub events: Vec<EntryEvent>,
    /// Fuel the plugin burned.
    pub fuel_used: u64,
}

/// Applies committed entries. Owned by the apply thread: calls are
/// sequential.
///
/// Every call runs on a fresh instance. What a call leaves in linear memory
/// (heap growth, fragmentation, caches) would otherwise change the fuel and
/// memory the next entries use, and other replicas cut their batches
/// differently (and start from a fresh instance after a restart): an entry
/// near a limit could fail on one replica and not on another.
pub struct Applier {
    plugin: Arc<Plugin>,
    store: Store<PluginCtx>,
    instance: Bound,
    raw: Instance,
    /// The instance has run a call (or trapped): replace it before the next.
    used: bool,
    /// Fuel burned by the calls of the batch being applied.
    fuel_used: u64,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier").field("plugin", &self.plugin.info()).finish()
    }
}

impl Applier {
    /// Instantiates the plugin for applying.
    pub fn new(plugin: Arc<Plugin>) -> Result<Self, Fatal> {
        let (store, instance, raw) = plugin.instantiate(false).map_err(fatal_start)?;
        Ok(Self { plugin, store, instance, raw, used: false, fuel_used: 0 })
    }

    /// The plugin this applier runs.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// Applies `entries` in order over `view` (the committed state).
    ///
    /// An entry's outcome is defined as its outcome applied alone, on a
    /// fresh instance, with one entry's fuel. The batch is first offered to
    /// the plugin in one call on a fresh instance with one entry's fuel in
    /// total; if every entry succeeds within that budget, that is the
    /// answer (a plugin that keeps no state in memory between entries needs
    /// no more fuel or memory for an entry alone than for the batch up to
    /// it). Otherwise (an error, a trap, out of fuel or memory) the batch's
    /// writes are dropped and every entry runs alone on a fresh instance:
    /// each outcome is then the defined one, whatever the batching.
    pub fn apply(&mut self, view: Arc<dyn StateView>, entries: &[EntryInput]) -> Result<ApplyBatch, Fatal> {
        self.store.data_mut().view = view;
        self.store.data_mut().overlay.clear();
        self.fuel_used = 0;
        let result = self.apply_with_view(entries);
        // Release the view: it may pin a storage snapshot or lock.
        self.store.data_mut().view = Arc::new(EmptyView);
        result
    }

    fn apply_with_view(&mut self, entries: &[EntryInput]) -> Result<ApplyBatch, Fatal> {
        let inputs = entries;
        // A plugin with WASI reads the entry's clock, which is per call:
        // it gets one entry per call.
        if inputs.len() > 1 && !self.plugin.info().wasi {
            // The batch's writes stay only if every entry succeeds.
            self.store.data_mut().overlay.keep_or_drop_whole();
            if let Ok(results) = self.call(&inputs)? {
                if results.len() == inputs.len() && results.iter().all(|r| r.is_ok()) {
                    self.store.data_mut().overlay.commit_entry();
                    let outcomes = results.into_iter().map(|r| r.map_err(to_entry_error)).collect();
                    return Ok(self.finish(entries, outcomes));
                }
            }
            self.store.data_mut().overlay.clear();
        }

        let mut outcomes = Vec::with_capacity(inputs.len());
        for input in inputs.chunks(1) {
            let outcome = match self.call(input)? {
                Ok(mut results) if results.len() == 1 => results.pop().expect("one result").map_err(to_entry_error),
                Ok(results) => Err(EntryError::Trap(format!("plugin returned {} results for 1 entry", results.len()))),
                Err(trap) => Err(EntryError::Trap(trap)),
            };
            let overlay = &mut self.store.data_mut().overlay;
            if outcome.is_ok() { overlay.commit_entry() } else { overlay.rollback_entry() }
            outcomes.push(outcome);
        }
        Ok(self.finish(entries, outcomes))
    }

    fn finish(&mut self, entries: &[EntryInput], outcomes: Vec<Result<wit::Applied, EntryError>>) -> ApplyBatch {
        let mut events = Vec::new();
        let outcomes = outcomes
            .into_iter()
            .zip(entries)
            .map(|(outcome, entry)| {
                outcome.map(|applied| {
                    events.extend(applied.events.into_iter().map(|e| EntryEvent {
                        index: entry.index,
                        key: e.key,
                        payload: e.payload,
                    }));
                    applied.response
                })
            })
            .collect();
        let fuel_used = std::mem::take(&mut self.fuel_used);
        ApplyBatch { outcomes, writes: self.store.data_mut().overlay.take_writes(), events, fuel_used }
    }

    /// One `apply` call with a fresh fuel budget. `Ok(Err(trap))` is a guest
    /// fault (the instance is replaced before the next call).
    fn call(&mut self, entries: &[EntryInput]) -> Result<Result<Vec<WitOutcome>, String>, Fatal> {
        let at = match entries {
            [only] => Some((only.index, only.term, only.timestamp_ms)),
            _ => None,
        };
        self.guest_call(at, |instance, store| instance.call_apply(store, entries))
    }

    /// One call into the plugin, on a fresh instance with one entry's fuel,
    /// its WASI clock at entry `at` (index, term, ms) if one is given.
    /// `Ok(Err(trap))` is a guest fault.
    fn guest_call<R>(
        &mut self,
        at: Option<(u64, u64, u64)>,
        call: impl FnOnce(&Bound, &mut Store<PluginCtx>) -> wasmtime::Result<R>,
    ) -> Result<Result<R, String>, Fatal> {
        self.renew_if_used()?;
        self.used = true;
        self.plugin.reset_fuel(&mut self.store);
        self.store.data_mut().last_panic = None;
        if let Some((index, term, ms)) = at {
            self.store.data().env.enter(index, term, ms);
        }
        let (instance, store) = (&self.instance, &mut self.store);
        let result = catch_engine_panic(|| call(instance, store))?;
        let left = self.store.get_fuel().unwrap_or(0);
        self.fuel_used += self.plugin.fuel_per_entry().saturating_sub(left);
        self.store.data().env.reset();
        self.settle(result)
    }

    /// Sorts a call's result into success, a guest fault (the instance is
    /// replaced before the next call) or a fatal host failure.
    fn settle<R>(&mut self, result: wasmtime::Result<R>) -> Result<Result<R, String>, Fatal> {
        match result {
            Ok(r) => Ok(Ok(r)),
            Err(e) => {
                let last_panic = self.store.data_mut().last_panic.take();
                match classify(e, last_panic) {
                    CallFailure::Guest(m) => Ok(Err(m)),
                    CallFailure::Fatal(m) => Err(Fatal(m)),
                }
            }
        }
    }

    /// Applies a tick entry over `view`. The timer record's clock becomes
    /// `max(tick.now_ms, clock)`: the log time the plugin sees, never lower
    /// than a past tick's. The plugin's `tick` runs only if its wake-up is
    /// due by then or keep-alives are carried; like an entry, an error or
    /// trap leaves no write of the plugin's. A 0.1.0 plugin has no `tick`:
    /// nothing is written and every keep-alive is refused.
    pub fn tick(&mut self, view: Arc<dyn StateView>, tick: &TickInput) -> Result<TickBatch, Fatal> {
        self.store.data_mut().view = view;
        self.store.data_mut().overlay.clear();
        self.fuel_used = 0;
        let result = self.tick_with_view(tick);
        self.store.data_mut().overlay.clear();
        self.store.data_mut().view = Arc::new(EmptyView);
        result
    }

    fn tick_with_view(&mut self, tick: &TickInput) -> Result<TickBatch, Fatal> {
        let refuse_all = |why: EntryError| tick.renewals.iter().map(|_| Err(why.clone())).collect();
        if self.plugin.info().contract == crate::CONTRACT_V1 {
            let why = EntryError::Rejected("the plugin has no timers (wasmraft:plugin@0.1.0)".into());
            return Ok(TickBatch { ran: false, failed: None, renewed: refuse_all(why), ..Default::default() });
        }
        let ctx = self.store.data();
        let record = TimerRecord::read(ctx.view.as_ref()).map_err(|e| Fatal(format!("reading the timer record: {}", e.0)))?;
        let record = record.unwrap_or_default();
        let now_ms = tick.now_ms.max(record.clock_ms);
        let due = record.wake_at_ms.is_some_and(|at| at <= now_ms) || !tick.renewals.is_empty();
        let mut batch = TickBatch { now_ms, ..Default::default() };
        if due {
            let at = Some((tick.index, tick.term, now_ms));
            let failure = match self.guest_call(at, |instance, store| instance.call_tick(store, tick, now_ms))? {
                Ok(Ok(ticked)) if ticked.renewed.len() == tick.renewals.len() => {
                    batch.renewed = ticked.renewed.into_iter().map(|r| r.map_err(to_entry_error)).collect();
                    batch.events = ticked
                        .events
                        .into_iter()
                        .map(|e| EntryEvent { index: tick.index, key: e.key, payload: e.payload })
                        .collect();
                    None
                }
                Ok(Ok(ticked)) => Some(EntryError::Trap(format!(
                    "tick answered {} renewals of {}",
                    ticked.renewed.len(),
                    tick.renewals.len()
                ))),
                Ok(Err(e)) => Some(to_entry_error(e)),
                Err(trap) => Some(EntryError::Trap(trap)),
            };
            let overlay = &mut self.store.data_mut().overlay;
            if let Some(why) = failure {
                overlay.rollback_entry();
                batch.renewed = refuse_all(why.clone());
                batch.failed = Some(why);
            } else {
                overlay.commit_entry();
            }
            batch.ran = true;
        }
        // The host's own write, whatever the plugin did: the clock moves on.
        let ctx = self.store.data_mut();
        let after = match ctx.overlay.get(ctx.view.as_ref(), crate::TIMER_KEY).map_err(|e| Fatal(e.0))? {
            Some(bytes) => TimerRecord::decode(&bytes).map_err(|e| Fatal(format!("the timer record is corrupt: {e}")))?,
            None => TimerRecord::default(),
        };
        ctx.write_timer_record(&TimerRecord { clock_ms: now_ms, ..after });
        ctx.overlay.commit_entry();
        batch.writes = ctx.overlay.take_writes();
        batch.fuel_used = std::mem::take(&mut self.fuel_used);
        Ok(batch)
    }

    /// Makes the fresh instance the next call needs now, so that the next
    /// batch does not wait for it (the apply loop calls this when idle).
    pub fn prepare(&mut self) -> Result<(), Fatal> {
        self.renew_if_used()
    }

    fn renew_if_used(&mut self) -> Result<(), Fatal> {
        if self.used {
            let (mut store, instance, raw) = self.plugin.instantiate(false).map_err(fatal_start)?;
            let old = self.store.data_mut();
            let ctx = store.data_mut();
            ctx.view = std::mem::replace(&mut old.view, Arc::new(EmptyView));
            ctx.overlay = std::mem::take(&mut old.overlay);
            self.store = store;
            self.instance = instance;
            self.raw = raw;
            self.used = false;
        }
        Ok(())
    }

    /// Runs the plugin's `migrate` export, if it has one, over `view`, as
    /// part of the entry `at` that deploys it: `previous` wrote the current
    /// keyspace. Returns the migration's writes (none without the export),
    /// or why the plugin refused or failed, which refuses the deploy.
    pub fn migrate(
        &mut self,
        view: Arc<dyn StateView>,
        previous: &PluginInfo,
        at: &EntryInput,
    ) -> Result<Result<Vec<Write>, EntryError>, Fatal> {
        let Some(index) = self.plugin.migrate else { return Ok(Ok(Vec::new())) };
        self.renew_if_used()?;
        self.used = true;
        self.store.data_mut().view = view;
        self.store.data_mut().overlay.clear();
        self.store.data_mut().last_panic = None;
        self.plugin.set_budget(&mut self.store, self.plugin.engine.config.fuel_per_migration());
        self.store.data().env.enter(at.index, at.term, at.timestamp_ms);
        let func = self
            .raw
            .get_typed_func::<MigrateParams, MigrateResults>(&mut self.store, &index)
            .map_err(|e| Fatal(format!("migrate was checked when the plugin loaded: {e:#}")))?;
        let previous = wit::PluginInfo {
            name: previous.name.clone(),
            version: previous.version.clone(),
            sdk_version: previous.sdk_version.clone(),
        };
        let store = &mut self.store;
        let result = catch_engine_panic(|| {
            let (out,) = func.call(&mut *store, (previous,))?;
            Ok(out)
        })?;
        let outcome = match self.settle(result)? {
            Ok(Ok(())) => {
                self.store.data_mut().overlay.commit_entry();
                Ok(self.store.data_mut().overlay.take_writes())
            }
            Ok(Err(e)) => Err(to_entry_error(e)),
            Err(trap) => Err(EntryError::Trap(trap)),
        };
        let ctx = self.store.data_mut();
        ctx.overlay.clear();
        ctx.view = Arc::new(EmptyView);
        ctx.env.reset();
        Ok(outcome)
    }

    /// Fuel one entry may use.
    pub fn fuel_per_entry(&self) -> u64 {
        self.plugin.fuel_per_entry()
    }
}

fn to_entry_error(e: wit::ApplyError) -> EntryError {
    match e {
        wit::ApplyError::Invalid(m) => EntryError::Invalid(m),
        wit::ApplyError::Rejected(m) => EntryError::Rejected(m),
    }
}

/// Runs a call into wasmtime, turning a panic inside the engine (a host
/// bug, not the entry's fault) into a fatal failure instead of unwinding
/// through the apply thread.
pub(crate) fn catch_engine_panic<R>(f: impl FnOnce() -> wasmtime::Result<R>) -> Result<wasmtime::Result<R>, Fatal> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        Fatal(format!("the plugin engine panicked: {message}"))
    })
}

/// A plugin that loaded once but cannot be instantiated again is a host
/// problem: nothing about the entry explains it.
fn fatal_start(f: CallFailure) -> Fatal {
    match f {
        CallFailure::Guest(m) | CallFailure::Fatal(m) => Fatal(format!("cannot instantiate the plugin: {m}")),
    }
}
