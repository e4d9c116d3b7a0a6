//! The plugin contracts this host binds, `wasmraft:plugin@0.1.0`
//! (`wit/state-machine.wit`) and `@0.2.0` (`wit/v0.2.0/`, 0.1.0 plus
//! `timer` and `tick`), behind one face: the rest of the runtime works with
//! 0.1.0's types, and a 0.2.0 plugin's are converted at the call.

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use crate::applier::EntryInput;
use crate::bindings::{v1, v2};
use crate::ctx::PluginCtx;
use crate::error::PluginError;

/// The types the runtime works with (0.1.0's; 0.2.0 has the same shapes).
pub(crate) use v1::wasmraft::plugin::types as wit;

/// 0.2.0's types.
use v2::wasmraft::plugin::types as wit2;

/// The contract version a plugin was built for.
pub const CONTRACT_V1: &str = "0.1.0";
/// The contract version with timers.
pub const CONTRACT_V2: &str = "0.2.0";

/// A plugin's exports, checked and ready to instantiate, with where each
/// export is: found once, not by name and type check on every instance
/// (an apply call's instance is fresh each time).
pub(crate) enum Pre {
    V1(v1::StateMachinePre<PluginCtx>, v1::StateMachineIndices),
    V2(v2::StateMachinePre<PluginCtx>, v2::StateMachineIndices),
}

/// One instance's exports.
pub(crate) enum Bound {
    V1(v1::StateMachine),
    V2(v2::StateMachine),
}

/// A tick, as [`crate::Applier::tick`] is given it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickInput {
    /// The index of the tick's entry.
    pub index: u64,
    /// The term of the leader that proposed it.
    pub term: u64,
    /// Log time as the leader stamped it (the host raises it to the timer
    /// record's clock if that is later).
    pub now_ms: u64,
    /// The proposing leader's start plus one election timeout.
    pub grace_until_ms: u64,
    /// Keep-alives: what to renew and the log time the leader took it.
    pub renewals: Vec<(Vec<u8>, u64)>,
}

/// What a plugin's `tick` returned, in 0.1.0's types.
pub(crate) struct Ticked {
    pub renewed: Vec<Result<Vec<u8>, wit::ApplyError>>,
    pub events: Vec<wit::Event>,
}

/// Adds every import of both contracts to `linker`.
pub(crate) fn add_to_linker(linker: &mut wasmtime::component::Linker<PluginCtx>) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    v1::StateMachine::add_to_linker::<PluginCtx, HasSelf<PluginCtx>>(linker, |c| c)?;
    v2::StateMachine::add_to_linker::<PluginCtx, HasSelf<PluginCtx>>(linker, |c| c)
}

impl Pre {
    /// The newest contract whose exports the component has.
    pub fn new(pre: InstancePre<PluginCtx>) -> Result<Self, PluginError> {
        let v2 = v2::StateMachinePre::new(pre.clone())
            .and_then(|p| v2::StateMachineIndices::new(p.instance_pre()).map(|i| (p, i)));
        let e2 = match v2 {
            Ok((p, i)) => return Ok(Pre::V2(p, i)),
            Err(e) => e,
        };
        let v1 = v1::StateMachinePre::new(pre).and_then(|p| v1::StateMachineIndices::new(p.instance_pre()).map(|i| (p, i)));
        match v1 {
            Ok((p, i)) => Ok(Pre::V1(p, i)),
            Err(e1) => Err(PluginError::Incompatible(format!(
                "the component exports neither wasmraft:plugin@{CONTRACT_V2}'s state-machine ({e2:#}) nor @{CONTRACT_V1}'s ({e1:#})"
            ))),
        }
    }

    pub fn contract(&self) -> &'static str {
        match self {
            Pre::V1(..) => CONTRACT_V1,
            Pre::V2(..) => CONTRACT_V2,
        }
    }

    pub fn instantiate(&self, store: &mut Store<PluginCtx>) -> wasmtime::Result<(Bound, Instance)> {
        match self {
            Pre::V1(p, indices) => {
                let raw = p.instance_pre().instantiate(&mut *store)?;
                Ok((Bound::V1(indices.load(store, &raw)?), raw))
            }
            Pre::V2(p, indices) => {
                let raw = p.instance_pre().instantiate(&mut *store)?;
                Ok((Bound::V2(indices.load(store, &raw)?), raw))
            }
        }
    }
}

type Outcomes = Vec<Result<wit::Applied, wit::ApplyError>>;

impl Bound {
    pub fn call_apply(&self, store: &mut Store<PluginCtx>, entries: &[EntryInput]) -> wasmtime::Result<Outcomes> {
        match self {
            Bound::V1(i) => {
                let entries: Vec<wit::Entry> = entries
                    .iter()
                    .map(|e| wit::Entry { index: e.index, term: e.term, timestamp_ms: e.timestamp_ms, command: e.command.clone() })
                    .collect();
                i.call_apply(store, &entries)
            }
            Bound::V2(i) => {
                let entries: Vec<wit2::Entry> = entries
                    .iter()
                    .map(|e| wit2::Entry { index: e.index, term: e.term, timestamp_ms: e.timestamp_ms, command: e.command.clone() })
                    .collect();
                let out = i.call_apply(store, &entries)?;
                Ok(out
                    .into_iter()
                    .map(|r| r.map(|a| wit::Applied { response: a.response, events: events(a.events) }).map_err(apply_error))
                    .collect())
            }
        }
    }

    pub fn call_query(&self, store: &mut Store<PluginCtx>, request: &[u8]) -> wasmtime::Result<Result<Vec<u8>, wit::QueryError>> {
        match self {
            Bound::V1(i) => i.call_query(store, request),
            Bound::V2(i) => Ok(i.call_query(store, request)?.map_err(|e| match e {
                wit2::QueryError::Invalid(m) => wit::QueryError::Invalid(m),
                wit2::QueryError::Rejected(m) => wit::QueryError::Rejected(m),
            })),
        }
    }

    pub fn call_info(&self, store: &mut Store<PluginCtx>) -> wasmtime::Result<wit::PluginInfo> {
        match self {
            Bound::V1(i) => i.call_info(store),
            Bound::V2(i) => {
                let p = i.call_info(store)?;
                Ok(wit::PluginInfo { name: p.name, version: p.version, sdk_version: p.sdk_version })
            }
        }
    }

    /// A 0.1.0 plugin has no `tick` (the caller does not call it).
    pub fn call_tick(
        &self,
        store: &mut Store<PluginCtx>,
        tick: &TickInput,
        now_ms: u64,
    ) -> wasmtime::Result<Result<Ticked, wit::ApplyError>> {
        let Bound::V2(i) = self else {
            return Err(wasmtime::Error::msg("a wasmraft:plugin@0.1.0 plugin has no tick"));
        };
        let input = wit2::Tick {
            index: tick.index,
            term: tick.term,
            now_ms,
            grace_until_ms: tick.grace_until_ms,
            renewals: tick.renewals.iter().map(|(key, at)| wit2::Renewal { key: key.clone(), at_ms: *at }).collect(),
        };
        i.call_tick(store, &input).map(|r| {
            r.map(|t| Ticked {
                renewed: t.renewed.into_iter().map(|r| r.map_err(apply_error)).collect(),
                events: events(t.events),
            })
            .map_err(apply_error)
        })
    }
}

fn apply_error(e: wit2::ApplyError) -> wit::ApplyError {
    match e {
        wit2::ApplyError::Invalid(m) => wit::ApplyError::Invalid(m),
        wit2::ApplyError::Rejected(m) => wit::ApplyError::Rejected(m),
    }
}

fn events(events: Vec<wit2::Event>) -> Vec<wit::Event> {
    events.into_iter().map(|e| wit::Event { key: e.key, payload: e.payload }).collect()
}
