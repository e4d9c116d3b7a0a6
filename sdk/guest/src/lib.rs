//! Write a [Wasmraft](https://github.com/wasmraft/wasmraft) state machine in Rust.
//!
//! A plugin is one type that implements [`StateMachine`] and one call to
//! [`export!`]. Build it for `wasm32-unknown-unknown`; the host turns the
//! module into a component when it loads it.
//!
//! ```ignore
//! use wasmraft_sdk::{store, ApplyError, Entry, QueryError, StateMachine};
//!
//! struct Counter;
//!
//! impl StateMachine for Counter {
//!     fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
//!         let text = std::str::from_utf8(&entry.command).unwrap_or("");
//!         let by: u64 = text.parse().map_err(|_| ApplyError::invalid("expected a number"))?;
//!         let total = store::get_u64(b"total").unwrap_or(0) + by;
//!         store::put_u64(b"total", total);
//!         Ok(total.to_string().into_bytes())
//!     }
//!
//!     fn query(_request: &[u8]) -> Result<Vec<u8>, QueryError> {
//!         Ok(store::get_u64(b"total").unwrap_or(0).to_string().into_bytes())
//!     }
//! }
//!
//! wasmraft_sdk::export!(Counter);
//! ```
//!
//! The rules a plugin lives by (see `wit/state-machine.wit`):
//! - all durable state goes through [`store`]; memory is a cache at most;
//! - no clock but [`Entry::timestamp_ms`], no randomness, no I/O;
//! - an entry that returns an error, panics or runs out of fuel leaves no
//!   write and no event behind; the entries around it still apply.
#![deny(missing_docs)]

mod error;
pub mod events;
pub mod log;
pub mod store;

pub use error::{ApplyError, QueryError};

/// The version of this SDK, reported to the host in the plugin's info.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

#[doc(hidden)]
pub mod __bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "state-machine",
        pub_export_macro: true,
        export_macro_name: "__export_state_machine",
        default_bindings_module: "wasmraft_sdk::__bindings",
    });
}

use __bindings::wasmraft::plugin::types as wit;

/// One committed log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Position in the replicated log; strictly increasing.
    pub index: u64,
    /// Term of the leader that created the entry.
    pub term: u64,
    /// The leader's clock when it accepted the command (ms since the Unix
    /// epoch): the only clock a plugin may use.
    pub timestamp_ms: u64,
    /// The command bytes the client proposed.
    pub command: Vec<u8>,
}

/// A replicated state machine.
///
/// Both functions are associated functions, not methods: a plugin keeps no
/// state in memory between calls, everything durable lives in [`store`].
pub trait StateMachine {
    /// Applies one committed entry and returns the bytes for the client.
    ///
    /// Returning an error (or panicking) discards every store write and
    /// event this entry made.
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError>;

    /// Answers a read-only request from the current state.
    fn query(request: &[u8]) -> Result<Vec<u8>, QueryError>;
}

/// Exports a [`StateMachine`] as the plugin's `state-machine` world.
///
/// Use it once per plugin crate, at the top level: `wasmraft_sdk::export!(MyType);`.
#[macro_export]
macro_rules! export {
    ($state_machine:ty) => {
        #[doc(hidden)]
        struct __WasmraftExport;

        impl $crate::__bindings::Guest for __WasmraftExport {
            fn apply(
                entries: ::std::vec::Vec<$crate::__private::WitEntry>,
            ) -> ::std::vec::Vec<::std::result::Result<$crate::__private::WitApplied, $crate::__private::WitApplyError>>
            {
                $crate::__private::apply::<$state_machine>(entries)
            }

            fn query(
                request: ::std::vec::Vec<u8>,
            ) -> ::std::result::Result<::std::vec::Vec<u8>, $crate::__private::WitQueryError> {
                $crate::__private::query::<$state_machine>(&request)
            }

            fn info() -> $crate::__private::WitPluginInfo {
                $crate::__private::info(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
            }
        }

        $crate::__bindings::__export_state_machine!(__WasmraftExport with_types_in $crate::__bindings);
    };
}

#[doc(hidden)]
pub mod __private {
    pub use super::wit::{
        Applied as WitApplied, ApplyError as WitApplyError, Entry as WitEntry,
        PluginInfo as WitPluginInfo, QueryError as WitQueryError,
    };
    use super::*;

    pub fn apply<S: StateMachine>(entries: Vec<WitEntry>) -> Vec<Result<WitApplied, WitApplyError>> {
        install_panic_hook();
        let mut results = Vec::with_capacity(entries.len());
        for e in entries {
            let entry = Entry {
                index: e.index,
                term: e.term,
                timestamp_ms: e.timestamp_ms,
                command: e.command,
            };
            let outcome = S::apply(entry);
            // Events belong to their entry: a failed entry publishes none.
            let events = crate::events::take();
            results.push(match outcome {
                Ok(response) => Ok(WitApplied { response, events }),
                Err(e) => Err(e.into()),
            });
        }
        results
    }

    pub fn query<S: StateMachine>(request: &[u8]) -> Result<Vec<u8>, WitQueryError> {
        install_panic_hook();
        let answer = S::query(request).map_err(Into::into);
        crate::events::take(); // a query publishes nothing
        answer
    }

    pub fn info(name: &str, version: &str) -> WitPluginInfo {
        WitPluginInfo {
            name: name.to_string(),
            version: version.to_string(),
            sdk_version: SDK_VERSION.to_string(),
        }
    }

    /// Sends a panic's message to the host log before the module traps, so
    /// the entry's error says why (with `panic = "abort"` it is lost otherwise).
    fn install_panic_hook() {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                crate::log::error(&format!("panic: {info}"));
            }));
        });
    }
}
