//! Write a [Wasmraft](https://github.com/wasmraft/wasmraft) state machine in Rust.
//!
//! Wasmraft runs Raft; your plugin is the state machine. Every command the
//! cluster commits reaches your plugin's `apply`, in log order, on every
//! replica, and reads are answered by its `query`. This page is a tutorial:
//! every example on it is compiled and run by `cargo test --doc`. The guide
//! `docs/writing-a-plugin.md` covers the rest of the way, from
//! `wasmraft plugin new` to a deploy.
//!
//! # 1. A plugin crate
//!
//! A plugin is a `cdylib` built for `wasm32-unknown-unknown`
//! (`wasmraft plugin new NAME` writes one for you):
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! wasmraft-sdk = "0.1"
//! serde = { version = "1", features = ["derive"] }
//! ```
//!
//! # 2. A state machine
//!
//! Implement [`StateMachine`] on a type and name it in [`export!`]. Both
//! functions are associated functions, not methods: a plugin keeps nothing
//! in memory between calls, because the host may replace its instance at
//! any time. Everything durable goes through [`store`].
//!
//! ```
//! use wasmraft_sdk::{ApplyError, Entry, QueryError, StateMachine, store};
//!
//! struct Counter;
//!
//! impl StateMachine for Counter {
//!     // A command is a number to add; the answer is the new total.
//!     fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
//!         let by: u64 = entry.text()?.trim().parse()?;
//!         let total = store::get_u64(b"total").unwrap_or(0);
//!         let total = total.checked_add(by).ok_or_else(|| ApplyError::rejected("overflow"))?;
//!         store::put_u64(b"total", total);
//!         Ok(total.to_string().into_bytes())
//!     }
//!
//!     fn query(_request: &[u8]) -> Result<Vec<u8>, QueryError> {
//!         Ok(store::get_u64(b"total").unwrap_or(0).to_string().into_bytes())
//!     }
//! }
//!
//! // Once per crate, at the top level.
//! wasmraft_sdk::export!(Counter);
//! # fn main() {
//! #     let mut host = wasmraft_sdk::testing::TestHost::<Counter>::new();
//! #     assert_eq!(host.apply("5").unwrap(), b"5");
//! #     assert!(host.apply("five").is_err());
//! # }
//! ```
//!
//! `entry.text()?` and `.parse()?` turn bad input into
//! [`ApplyError::Invalid`] through `From` impls; an error of any kind leaves
//! no write behind, so the entry either applies whole or not at all.
//!
//! # 3. Typed state
//!
//! With the `serde` feature (on by default) values can be any
//! `Serialize + Deserialize` type, stored as compact JSON ([`codec`]).
//! [`store::get_as`] / [`store::put_as`] work on single keys, and a
//! [`Table`] keeps one type under one key prefix. Commands decode the same
//! way with [`Entry::decode`]:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use wasmraft_sdk::{ApplyError, Entry, Table, bail, ensure};
//!
//! #[derive(Deserialize)]
//! #[serde(tag = "op", rename_all = "snake_case")]
//! enum Command {
//!     Register { user: String },
//!     AddPoints { user: String, points: u64 },
//! }
//!
//! #[derive(Serialize, Deserialize, Default)]
//! struct Player { points: u64, since_ms: u64 }
//!
//! fn players() -> Table<String, Player> {
//!     Table::new("player/")
//! }
//!
//! fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
//!     match entry.decode::<Command>()? {
//!         Command::Register { user } => {
//!             ensure!(!players().contains(&user), rejected, "{user} is already registered");
//!             players().put(&user, &Player { points: 0, since_ms: entry.timestamp_ms });
//!             Ok(b"registered".to_vec())
//!         }
//!         Command::AddPoints { user, points } => {
//!             let Some(mut player) = players().get(&user)? else {
//!                 bail!(rejected, "no player {user}");
//!             };
//!             player.points += points;
//!             players().put(&user, &player);
//!             Ok(player.points.to_string().into_bytes())
//!         }
//!     }
//! }
//!
//! # struct Game;
//! # impl wasmraft_sdk::StateMachine for Game {
//! #     fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> { apply(entry) }
//! #     fn query(_: &[u8]) -> Result<Vec<u8>, wasmraft_sdk::QueryError> { Ok(vec![]) }
//! # }
//! # let mut host = wasmraft_sdk::testing::TestHost::<Game>::new();
//! # host.apply(r#"{"op":"register","user":"ann"}"#).unwrap();
//! # assert_eq!(host.apply(r#"{"op":"add_points","user":"ann","points":3}"#).unwrap(), b"3");
//! # assert!(matches!(host.apply(r#"{"op":"add_points","user":"bob","points":3}"#), Err(ApplyError::Rejected(_))));
//! # assert!(matches!(host.apply("nonsense"), Err(ApplyError::Invalid(_))));
//! ```
//!
//! Keep replicated state deterministic: `BTreeMap` rather than `HashMap`,
//! integers rather than floats.
//!
//! # 4. Errors
//!
//! [`ApplyError`] has two kinds, and clients see the difference:
//! `Invalid` (the command is malformed: invalid argument) and `Rejected`
//! (well formed, but the rules refuse it: failed precondition). Build them
//! with [`ApplyError::invalid`] / [`ApplyError::rejected`], with
//! [`bail!`] / [`ensure!`], or with `?` on a [`DecodeError`], a UTF-8 error
//! or an integer parse error (all `Invalid`). [`QueryError`] mirrors it for
//! queries.
//!
//! A panic is a bug: it traps, which also fails only that entry (with the
//! panic message in the host log), but the client gets a less useful error.
//!
//! # 5. Scans
//!
//! [`store::iter_prefix`] and [`store::range`] iterate over a key range,
//! fetching it from the host in chunks; [`Table::iter`] does the same with
//! decoding. Stopping early reads (and spends fuel on) only what was needed:
//!
//! ```
//! use wasmraft_sdk::store;
//!
//! for i in 0..100u64 {
//!     store::put(format!("order/{i:03}").as_bytes(), b"open");
//! }
//! let latest: Vec<_> = store::iter_prefix(b"order/").reverse().take(3).map(|(k, _)| k).collect();
//! assert_eq!(latest, [b"order/099".to_vec(), b"order/098".to_vec(), b"order/097".to_vec()]);
//! ```
//!
//! # 6. Events
//!
//! [`events::emit`] publishes a change to `wasmraft watch` clients once
//! the entry has applied; a failed entry publishes nothing.
//!
//! # 7. Testing
//!
//! Off `wasm32` the store is an in-memory map of the current thread, so
//! plugin logic runs in plain `cargo test`. [`testing::TestHost`] applies
//! entries with the host's rules (increasing indexes, a clock, failed
//! entries leave nothing behind):
//!
//! ```
//! # use wasmraft_sdk::{ApplyError, Entry, QueryError, StateMachine, store};
//! # struct Counter;
//! # impl StateMachine for Counter {
//! #     fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
//! #         let by: u64 = entry.text()?.trim().parse()?;
//! #         let total = store::get_u64(b"total").unwrap_or(0) + by;
//! #         store::put_u64(b"total", total);
//! #         Ok(total.to_string().into_bytes())
//! #     }
//! #     fn query(_: &[u8]) -> Result<Vec<u8>, QueryError> {
//! #         Ok(store::get_u64(b"total").unwrap_or(0).to_string().into_bytes())
//! #     }
//! # }
//! use wasmraft_sdk::testing::TestHost;
//!
//! let mut host = TestHost::<Counter>::new();
//! assert_eq!(host.apply("5").unwrap(), b"5");
//! assert_eq!(host.apply("3").unwrap(), b"8");
//! assert!(matches!(host.apply("five"), Err(ApplyError::Invalid(_))));
//! assert_eq!(host.query("").unwrap(), b"8");
//! ```
//!
//! # 8. Upgrades: `migrate`
//!
//! When a new plugin is deployed through the log (`wasmraft plugin
//! deploy`), every replica calls its [`StateMachine::migrate`] once, before
//! the next entry, with the previous plugin's [`PluginInfo`]. It may rewrite
//! the keyspace; an error refuses the deploy and leaves the previous plugin
//! in charge. The default does nothing.
//!
//! ```
//! use wasmraft_sdk::{ApplyError, Entry, PluginInfo, QueryError, StateMachine, bail, store};
//!
//! struct Bank;
//!
//! impl StateMachine for Bank {
//!     fn apply(_entry: Entry) -> Result<Vec<u8>, ApplyError> { Ok(vec![]) }
//!     fn query(_request: &[u8]) -> Result<Vec<u8>, QueryError> { Ok(vec![]) }
//!
//!     fn migrate(previous: &PluginInfo) -> Result<(), ApplyError> {
//!         // Refuse to take over a keyspace some other plugin wrote.
//!         if previous.name != "bank" && store::count(b"", b"") > 0 {
//!             bail!(rejected, "the keyspace belongs to plugin {:?}", previous.name);
//!         }
//!         Ok(())
//!     }
//! }
//! # let mut host = wasmraft_sdk::testing::TestHost::<Bank>::new();
//! # let kv = PluginInfo { name: "kv".into(), version: "0.1.0".into(), sdk_version: "0.1.0".into() };
//! # assert!(host.migrate(&kv).is_ok());
//! # store::put(b"x", b"1");
//! # assert!(host.migrate(&kv).is_err());
//! ```
//!
//! # 9. Time
//!
//! With the `timers` feature the plugin is built for
//! `wasmraft:plugin@0.2.0` and may ask to be woken at a log time: the
//! `timer` module (`wake_at`, `cancel`, `next`, and `Deadlines`, an index of
//! many deadlines whose `rearm` sets the wake-up to the earliest) and
//! `StateMachine::tick`, which every replica runs at the leader's tick
//! entry once the wake-up is due. `plugins/examples/reminders` uses them.
//!
//! # The rules
//!
//! (The full contract is `wit/state-machine.wit`.)
//! - All durable state goes through [`store`]; memory is a cache at most.
//! - No clock but [`Entry::timestamp_ms`], no randomness, no I/O: every
//!   replica must compute the same result from the same entries.
//! - Each entry is atomic: an error, a panic or running out of fuel leaves
//!   no write and no event behind; the entries around it still apply.
//! - Each entry has a fuel budget and the instance a memory limit (node
//!   configuration, `[limits]`); exceeding either fails the entry.
#![deny(missing_docs)]

pub mod alloc;
#[cfg(feature = "serde")]
pub mod codec;
mod error;
pub mod events;
pub mod log;
pub mod store;
#[cfg(feature = "serde")]
mod table;
#[cfg(feature = "timers")]
pub mod timer;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use error::{ApplyError, DecodeError, QueryError, Refuse};
#[cfg(feature = "serde")]
pub use table::{DecodeKey, EncodeKey, Iter as TableIter, Table};

/// The version of this SDK, reported to the host in the plugin's info.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

#[doc(hidden)]
pub mod __bindings {
    #[cfg(not(feature = "timers"))]
    wit_bindgen::generate!({
        path: "../../wit",
        world: "upgradable-state-machine",
        pub_export_macro: true,
        export_macro_name: "__export_state_machine",
        default_bindings_module: "wasmraft_sdk::__bindings",
    });
    #[cfg(feature = "timers")]
    wit_bindgen::generate!({
        path: "../../wit/v0.2.0",
        world: "upgradable-state-machine",
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

impl Entry {
    /// The command as UTF-8 text; `?` turns an error into
    /// [`ApplyError::Invalid`].
    pub fn text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.command)
    }

    /// The command decoded with [`codec`] (JSON); `?` turns an error into
    /// [`ApplyError::Invalid`].
    #[cfg(feature = "serde")]
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, DecodeError> {
        codec::decode(&self.command).map_err(|e| e.context("malformed command"))
    }
}

/// What a plugin says about itself: the previous plugin, in
/// [`StateMachine::migrate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    /// Its name (the crate name, for plugins built with this SDK).
    pub name: String,
    /// Its version (the crate version).
    pub version: String,
    /// The `wasmraft-sdk` version it was built with; empty if none.
    pub sdk_version: String,
}

/// A point in log time the host asks the plugin to act on (the `timers`
/// feature): its wake-up came due, or keep-alives wait to be recorded.
#[cfg(feature = "timers")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    /// The index of the log entry that carries the tick.
    pub index: u64,
    /// The term of the leader that proposed it.
    pub term: u64,
    /// Log time now (ms since the Unix epoch): never lower than an earlier
    /// tick's or entry's.
    pub now_ms: u64,
    /// The proposing leader's start plus one election timeout: expire
    /// nothing a client keeps alive before it, so that clients have time to
    /// find a new leader.
    pub grace_until_ms: u64,
    /// Keep-alives taken since the last tick, oldest first.
    pub renewals: Vec<Renewal>,
}

/// A keep-alive the leader took (the `timers` feature).
#[cfg(feature = "timers")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// What to renew, in the plugin's own terms.
    pub key: Vec<u8>,
    /// Log time when the leader took it.
    pub at_ms: u64,
}

/// A replicated state machine.
///
/// All functions are associated functions, not methods: a plugin keeps no
/// state in memory between calls, everything durable lives in [`store`].
pub trait StateMachine {
    /// Applies one committed entry and returns the bytes for the client.
    ///
    /// Returning an error (or panicking) discards every store write and
    /// event this entry made.
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError>;

    /// Answers a read-only request from the current state. A store write
    /// traps.
    fn query(request: &[u8]) -> Result<Vec<u8>, QueryError>;

    /// Adapts the keyspace left by `previous`, once on every replica, when
    /// this plugin is deployed through the log and before it applies any
    /// entry. Reads and writes the store like an entry; an error (or panic)
    /// refuses the deploy, leaving no write and the previous plugin in
    /// charge. The default accepts any keyspace as it is.
    fn migrate(previous: &PluginInfo) -> Result<(), ApplyError> {
        let _ = previous;
        Ok(())
    }

    /// Acts on log time `tick.now_ms` (the `timers` feature): called on
    /// every replica at the tick's entry, when the wake-up set with
    /// [`timer::wake_at`] is due, or keep-alives are carried. Returns one
    /// answer per keep-alive. Runs like an entry: an error (or panic)
    /// leaves no write and no event, and the host retries a second later.
    /// Do a bounded amount of work; set the wake-up to `now_ms` if more is
    /// due. The default refuses keep-alives and cancels the wake-up.
    #[cfg(feature = "timers")]
    fn tick(tick: &Tick) -> Result<Vec<Result<Vec<u8>, ApplyError>>, ApplyError> {
        timer::cancel();
        Ok(tick.renewals.iter().map(|_| Err(ApplyError::rejected("this plugin takes no keep-alives"))).collect())
    }
}

/// Exports a [`StateMachine`] as the plugin's `upgradable-state-machine`
/// world (`apply`, `query`, `info` and `upgrade.migrate`).
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

            $crate::__export_tick!($state_machine);
        }

        impl $crate::__private::UpgradeGuest for __WasmraftExport {
            fn migrate(
                previous: $crate::__private::WitPluginInfo,
            ) -> ::std::result::Result<(), $crate::__private::WitApplyError> {
                $crate::__private::migrate::<$state_machine>(previous)
            }
        }

        $crate::__bindings::__export_state_machine!(__WasmraftExport with_types_in $crate::__bindings);
    };
}

/// The `tick` export, with the `timers` feature.
#[cfg(feature = "timers")]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_tick {
    ($state_machine:ty) => {
        fn tick(
            tick: $crate::__private::WitTick,
        ) -> ::std::result::Result<$crate::__private::WitTicked, $crate::__private::WitApplyError> {
            $crate::__private::tick::<$state_machine>(tick)
        }
    };
}

/// Without the `timers` feature, no `tick` export.
#[cfg(not(feature = "timers"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_tick {
    ($state_machine:ty) => {};
}

#[doc(hidden)]
pub mod __private {
    pub use super::__bindings::exports::wasmraft::plugin::upgrade::Guest as UpgradeGuest;
    pub use super::wit::{
        Applied as WitApplied, ApplyError as WitApplyError, Entry as WitEntry, PluginInfo as WitPluginInfo,
        QueryError as WitQueryError,
    };
    use super::*;

    pub fn apply<S: StateMachine>(entries: Vec<WitEntry>) -> Vec<Result<WitApplied, WitApplyError>> {
        install_panic_hook();
        let mut results = Vec::with_capacity(entries.len());
        for e in entries {
            let entry = Entry { index: e.index, term: e.term, timestamp_ms: e.timestamp_ms, command: e.command };
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

    pub fn migrate<S: StateMachine>(previous: WitPluginInfo) -> Result<(), WitApplyError> {
        install_panic_hook();
        let previous = PluginInfo { name: previous.name, version: previous.version, sdk_version: previous.sdk_version };
        let outcome = S::migrate(&previous).map_err(Into::into);
        crate::events::take(); // the host has nowhere to send them
        outcome
    }

    #[cfg(feature = "timers")]
    pub use super::wit::{Tick as WitTick, Ticked as WitTicked};

    #[cfg(feature = "timers")]
    pub fn tick<S: StateMachine>(t: WitTick) -> Result<WitTicked, WitApplyError> {
        install_panic_hook();
        let tick = Tick {
            index: t.index,
            term: t.term,
            now_ms: t.now_ms,
            grace_until_ms: t.grace_until_ms,
            renewals: t.renewals.into_iter().map(|r| Renewal { key: r.key, at_ms: r.at_ms }).collect(),
        };
        let outcome = S::tick(&tick);
        let events = crate::events::take();
        match outcome {
            Ok(renewed) => Ok(WitTicked { renewed: renewed.into_iter().map(|r| r.map_err(Into::into)).collect(), events }),
            Err(e) => Err(e.into()),
        }
    }

    pub fn info(name: &str, version: &str) -> WitPluginInfo {
        WitPluginInfo { name: name.to_string(), version: version.to_string(), sdk_version: SDK_VERSION.to_string() }
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
