//! The provided model: a map of independent registers with etcd semantics.

use std::fmt;

use crate::history::{History, Operation};
use crate::model::Model;
use crate::recorder::Recorder;

/// A key-value request. Keys and values are strings: cluster tests encode
/// them to bytes for the KV plugin and decode responses back (a corrupted
/// value decodes to something that was never written, which the checker
/// reports).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvInput {
    /// Read the key; responds [`KvOutput::Value`].
    Get {
        /// The key.
        key: String,
    },
    /// Overwrite the key; responds [`KvOutput::Ok`].
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: String,
    },
    /// Remove the key (a later `Get` sees `None`); responds [`KvOutput::Ok`].
    Delete {
        /// The key.
        key: String,
    },
    /// Append to the value (an absent key counts as empty); responds
    /// [`KvOutput::Ok`]. Not an etcd operation; useful for list-append
    /// workloads where every write leaves a trace.
    Append {
        /// The key.
        key: String,
        /// The suffix.
        value: String,
    },
    /// Compare-and-swap, as an etcd Txn does it: put `value` only if the key
    /// holds `expected` (`None`: only if it is absent); responds
    /// [`KvOutput::Swapped`].
    Cas {
        /// The key.
        key: String,
        /// What the key must hold for the swap.
        expected: Option<String>,
        /// The new value.
        value: String,
    },
}

impl KvInput {
    /// `Get { key }`.
    pub fn get(key: impl Into<String>) -> Self {
        KvInput::Get { key: key.into() }
    }

    /// `Put { key, value }`.
    pub fn put(key: impl Into<String>, value: impl Into<String>) -> Self {
        KvInput::Put {
            key: key.into(),
            value: value.into(),
        }
    }

    /// `Delete { key }`.
    pub fn delete(key: impl Into<String>) -> Self {
        KvInput::Delete { key: key.into() }
    }

    /// `Append { key, value }`.
    pub fn append(key: impl Into<String>, value: impl Into<String>) -> Self {
        KvInput::Append {
            key: key.into(),
            value: value.into(),
        }
    }

    /// `Cas { key, expected, value }`.
    pub fn cas(key: impl Into<String>, expected: Option<&str>, value: impl Into<String>) -> Self {
        KvInput::Cas {
            key: key.into(),
            expected: expected.map(str::to_owned),
            value: value.into(),
        }
    }

    /// The key the request addresses.
    pub fn key(&self) -> &str {
        match self {
            KvInput::Get { key }
            | KvInput::Put { key, .. }
            | KvInput::Delete { key }
            | KvInput::Append { key, .. }
            | KvInput::Cas { key, .. } => key,
        }
    }
}

/// `get("k")`, `put("k", "v")`, `delete("k")`, `append("k", "v")`.
impl fmt::Display for KvInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvInput::Get { key } => write!(f, "get({key:?})"),
            KvInput::Put { key, value } => write!(f, "put({key:?}, {value:?})"),
            KvInput::Delete { key } => write!(f, "delete({key:?})"),
            KvInput::Append { key, value } => write!(f, "append({key:?}, {value:?})"),
            KvInput::Cas { key, expected, value } => write!(f, "cas({key:?}, {expected:?}, {value:?})"),
        }
    }
}

/// A key-value response.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvOutput {
    /// A write was applied.
    Ok,
    /// A read saw this value (`None`: the key is absent).
    Value(Option<String>),
    /// A compare-and-swap did (`true`) or did not swap.
    Swapped(bool),
}

impl KvOutput {
    /// `Value(Some(value))`.
    pub fn value(value: impl Into<String>) -> Self {
        KvOutput::Value(Some(value.into()))
    }

    /// `Value(None)`: the key is absent.
    pub fn absent() -> Self {
        KvOutput::Value(None)
    }
}

/// `ok`, `"v"`, or `absent`.
impl fmt::Display for KvOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvOutput::Ok => f.write_str("ok"),
            KvOutput::Value(Some(v)) => write!(f, "{v:?}"),
            KvOutput::Value(None) => f.write_str("absent"),
            KvOutput::Swapped(true) => f.write_str("swapped"),
            KvOutput::Swapped(false) => f.write_str("not swapped"),
        }
    }
}

/// A history of key-value operations.
pub type KvHistory = History<KvInput, KvOutput>;

/// A recorder of key-value operations.
pub type KvRecorder = Recorder<KvInput, KvOutput>;

/// Independent registers, one per key, each starting absent: the semantics of
/// etcd's single-key `Put`/`Range`/`DeleteRange` (plus [`KvInput::Append`]).
/// Partitioned by key.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvModel;

impl Model for KvModel {
    type Key = String;
    type State = Option<String>;
    type Input = KvInput;
    type Output = KvOutput;

    fn partition(input: &KvInput) -> String {
        input.key().to_owned()
    }

    fn init() -> Option<String> {
        None
    }

    fn step(
        state: &Option<String>,
        input: &KvInput,
        output: Option<&KvOutput>,
    ) -> Option<Option<String>> {
        // A response of the wrong kind (a get answered `ok`) is rejected as
        // well: it is a recording bug, and the explanation shows it.
        match (input, output) {
            (KvInput::Get { .. }, None) => Some(state.clone()),
            (KvInput::Get { .. }, Some(KvOutput::Value(seen))) => {
                (seen == state).then(|| state.clone())
            }
            (KvInput::Put { value, .. }, None | Some(KvOutput::Ok)) => Some(Some(value.clone())),
            (KvInput::Delete { .. }, None | Some(KvOutput::Ok)) => Some(None),
            (KvInput::Append { value, .. }, None | Some(KvOutput::Ok)) => {
                let mut next = state.clone().unwrap_or_default();
                next.push_str(value);
                Some(Some(next))
            }
            // An unknown swap happened, so it swapped if it could.
            (KvInput::Cas { expected, value, .. }, None) => {
                Some(if state == expected { Some(value.clone()) } else { state.clone() })
            }
            (KvInput::Cas { expected, value, .. }, Some(KvOutput::Swapped(swapped))) => {
                match (state == expected, swapped) {
                    (true, true) => Some(Some(value.clone())),
                    (false, false) => Some(state.clone()),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Drops unknown reads, and unknown puts/deletes that no read observed.
    ///
    /// Why a blind write `w` nobody observed can go: take a linearization that
    /// includes `w`. Every read between `w` and the next write returns what
    /// `w` wrote, and none does, so there are none; the next write (a put or
    /// delete, as the partition has no appends) overwrites whatever it finds.
    /// Removing `w` leaves every other step legal.
    fn can_drop_unknown(
        op: &Operation<KvInput, KvOutput>,
        ops: &[&Operation<KvInput, KvOutput>],
    ) -> bool {
        let observed = |written: Option<&String>| {
            ops.iter().any(|o| {
                matches!((&o.input, o.output()), (KvInput::Get { .. }, Some(KvOutput::Value(seen))) if seen.as_ref() == written)
            })
        };
        // Appends and swaps depend on the state they find: an unknown
        // write before them may be what made them legal.
        let appends = || {
            ops.iter()
                .any(|o| matches!(o.input, KvInput::Append { .. } | KvInput::Cas { .. }))
        };
        match &op.input {
            KvInput::Get { .. } => true,
            KvInput::Put { value, .. } => !appends() && !observed(Some(value)),
            KvInput::Delete { .. } => !appends() && !observed(None),
            KvInput::Append { .. } | KvInput::Cas { .. } => false,
        }
    }
}
