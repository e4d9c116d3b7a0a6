//! The encoding of typed values: compact JSON (feature `serde`, on by default).
//!
//! JSON is readable in `wasmraft query` output and in the keyspace, and
//! deterministic for deterministic types: struct fields in declaration order,
//! no whitespace. Two things make it vary, so avoid them in replicated state:
//! `HashMap`/`HashSet` (iteration order; use `BTreeMap`/`BTreeSet`) and
//! floating point (use integers, such as cents).
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use wasmraft_sdk::codec;
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! struct Deposit { account: String, amount: u64 }
//!
//! let bytes = codec::encode(&Deposit { account: "alice".into(), amount: 5 });
//! assert_eq!(bytes, br#"{"account":"alice","amount":5}"#);
//! let back: Deposit = codec::decode(&bytes).unwrap();
//! assert_eq!(back.amount, 5);
//! assert!(codec::decode::<Deposit>(b"{}").is_err());
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::DecodeError;

/// `value` as compact JSON.
///
/// # Panics
///
/// If `value` cannot be represented in JSON (a map whose keys are not
/// strings or numbers): a bug in the plugin, which fails the entry.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| panic!("cannot encode a value as JSON: {e}"))
}

/// Decodes JSON written by [`encode`] (or sent by a client).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    serde_json::from_slice(bytes).map_err(|e| DecodeError::new(e.to_string()))
}
