//! The WebAssembly plugin host: loads a state-machine component, applies
//! committed entries to it and answers queries, deterministically.
//!
//! ```text
//! PluginEngine (one per process, deterministic wasmtime config)
//!   └─ Plugin::load(bytes)    validate, compile once, pre-instantiate, read info
//!        ├─ Applier           one instance, owned by the apply thread
//!        │    apply(view, entries) -> ApplyBatch { outcomes, writes, events }
//!        └─ QueryPool         instances that serve reads in parallel with apply
//!             query(view, request) -> bytes
//! ```
//!
//! The runtime never writes durable state itself. [`Applier::apply`] returns
//! the writes of the entries that succeeded as one [`ApplyBatch`]; the caller
//! stores them together with the applied index in one atomic write. Reads go
//! through a [`StateView`] the caller supplies, so this crate knows nothing of
//! RocksDB.
//!
//! Guarantees:
//! - **Each entry is atomic.** An entry that returns an error or traps leaves
//!   no write and no event; its neighbours in the batch still apply.
//! - **Deterministic outcomes.** NaN canonicalisation, no threads,
//!   deterministic relaxed SIMD, no copy-on-write heap images, fuel (not wall
//!   time) as the budget. A trap, running out of fuel or hitting the memory
//!   limit fails the entry with the same error on every replica.
//! - **Batching never changes an outcome.** A batch gets one entry's fuel;
//!   if anything in it traps, errs or runs out of fuel, the batch is re-run
//!   one entry at a time, each with its own budget (see [`Applier::apply`]).
//! - **Failures that are not deterministic are fatal**: a host-side read
//!   error or a failed memory allocation by the operating system returns
//!   [`Fatal`]; the caller must stop applying, never skip the entry.
#![deny(missing_docs)]

mod applier;
mod cache;
mod config;
mod contract;
mod ctx;
mod engine;
mod error;
mod overlay;
mod plugin;
mod query;
mod timer;
mod view;
mod wasi;

pub use applier::{ApplyBatch, Applier, EntryEvent, EntryInput, TickBatch};
pub use config::PluginConfig;
pub use contract::{CONTRACT_V1, CONTRACT_V2, TickInput};
pub use engine::PluginEngine;
pub use error::{EntryError, Fatal, PluginError, QueryError};
pub use overlay::Write;
pub use plugin::{Plugin, PluginInfo};
pub use query::QueryPool;
pub use timer::{TIMER_KEY, TimerRecord};
pub use view::{EmptyView, MemoryView, StateError, StateView};

mod bindings {
    pub mod v1 {
        wasmtime::component::bindgen!({
            path: "../../wit/state-machine.wit",
            world: "state-machine",
            imports: { default: trappable },
        });
    }
    pub mod v2 {
        wasmtime::component::bindgen!({
            path: "../../wit/v0.2.0/state-machine.wit",
            world: "state-machine",
            imports: { default: trappable },
        });
    }
}
