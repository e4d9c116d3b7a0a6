//! Typed tables: a key prefix, a key type and a value type.
//!
//! A [`Table`] keeps values of one type under one prefix of the keyspace,
//! encoded with [`codec`](crate::codec). Keys encode so that their byte
//! order is their natural order (integers big-endian), which makes scans
//! come out sorted.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use wasmraft_sdk::Table;
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! struct Account { balance: u64 }
//!
//! // Tables are cheap values: make them where they are needed.
//! fn accounts() -> Table<String, Account> {
//!     Table::new("account/")
//! }
//!
//! accounts().put("bob", &Account { balance: 5 });
//! accounts().put("ann", &Account { balance: 7 });
//! assert_eq!(accounts().get("bob").unwrap(), Some(Account { balance: 5 }));
//! assert_eq!(accounts().get("eve").unwrap(), None);
//! let names: Vec<String> = accounts().iter().map(|r| r.unwrap().0).collect();
//! assert_eq!(names, ["ann", "bob"]);
//!
//! // Integer keys sort numerically: 2 before 10.
//! let log: Table<u64, String> = Table::new("log/");
//! log.put(&10, &"ten".to_string());
//! log.put(&2, &"two".to_string());
//! let newest = log.iter().reverse().next().unwrap().unwrap();
//! assert_eq!(newest, (10, "ten".to_string()));
//! ```

use std::borrow::Borrow;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{DecodeError, codec, store};

/// A key that can be written into the keyspace.
pub trait EncodeKey {
    /// Appends this key's bytes to `out`.
    fn encode_key(&self, out: &mut Vec<u8>);
}

/// A key that can also be read back from the keyspace.
pub trait DecodeKey: EncodeKey + Sized {
    /// The key encoded in `bytes`, or `None` if they are not one.
    fn decode_key(bytes: &[u8]) -> Option<Self>;
}

impl EncodeKey for str {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes())
    }
}

impl EncodeKey for String {
    fn encode_key(&self, out: &mut Vec<u8>) {
        self.as_str().encode_key(out)
    }
}

impl DecodeKey for String {
    fn decode_key(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl EncodeKey for [u8] {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self)
    }
}

impl EncodeKey for Vec<u8> {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self)
    }
}

impl DecodeKey for Vec<u8> {
    fn decode_key(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

macro_rules! big_endian_key {
    ($($t:ty),*) => {$(
        impl EncodeKey for $t {
            fn encode_key(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes())
            }
        }
        impl DecodeKey for $t {
            fn decode_key(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_be_bytes(bytes.try_into().ok()?))
            }
        }
    )*};
}

big_endian_key!(u16, u32, u64, u128);

/// Values of type `V` under keys of type `K`, all under one key prefix.
///
/// Prefixes of different tables should not be prefixes of one another
/// (`"user/"` and `"user/admin/"` overlap: iterating the first would meet
/// the second's keys and fail to decode them).
pub struct Table<K, V> {
    prefix: Vec<u8>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        Self { prefix: self.prefix.clone(), _types: PhantomData }
    }
}

impl<K, V> std::fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("prefix", &String::from_utf8_lossy(&self.prefix)).finish()
    }
}

impl<K: DecodeKey, V: Serialize + DeserializeOwned> Table<K, V> {
    /// The table under `prefix`.
    pub fn new(prefix: impl Into<Vec<u8>>) -> Self {
        Self { prefix: prefix.into(), _types: PhantomData }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The full store key of `key`.
    pub fn store_key<Q: EncodeKey + ?Sized>(&self, key: &Q) -> Vec<u8>
    where
        K: Borrow<Q>,
    {
        let mut out = self.prefix.clone();
        key.encode_key(&mut out);
        out
    }

    /// The value under `key`; `Ok(None)` if there is none.
    pub fn get<Q: EncodeKey + ?Sized>(&self, key: &Q) -> Result<Option<V>, DecodeError>
    where
        K: Borrow<Q>,
    {
        store::get_as(&self.store_key(key))
    }

    /// Whether `key` has a value.
    pub fn contains<Q: EncodeKey + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        store::get(&self.store_key(key)).is_some()
    }

    /// Stores `value` under `key`.
    pub fn put<Q: EncodeKey + ?Sized>(&self, key: &Q, value: &V)
    where
        K: Borrow<Q>,
    {
        store::put(&self.store_key(key), &codec::encode(value))
    }

    /// Removes `key` (a missing key is fine).
    pub fn delete<Q: EncodeKey + ?Sized>(&self, key: &Q)
    where
        K: Borrow<Q>,
    {
        store::delete(&self.store_key(key))
    }

    /// How many entries the table holds (one host call, no decoding).
    pub fn len(&self) -> u64 {
        store::count(&self.prefix, &store::prefix_end(&self.prefix))
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry in key order, fetched in chunks (see [`store::Scan`]).
    /// An entry whose key or value does not decode yields an error.
    pub fn iter(&self) -> Iter<K, V> {
        Iter { scan: store::iter_prefix(&self.prefix), prefix_len: self.prefix.len(), _types: PhantomData }
    }
}

/// The entries of a [`Table`]; see [`Table::iter`].
pub struct Iter<K, V> {
    scan: store::Scan,
    prefix_len: usize,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Iter<K, V> {
    /// Iterates in descending key order instead.
    pub fn reverse(mut self) -> Self {
        self.scan = self.scan.reverse();
        self
    }

    /// Fetches `n` entries per host call.
    pub fn chunk_size(mut self, n: u32) -> Self {
        self.scan = self.scan.chunk_size(n);
        self
    }
}

impl<K: DecodeKey, V: DeserializeOwned> Iterator for Iter<K, V> {
    type Item = Result<(K, V), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (key, value) = self.scan.next()?;
        let name = || String::from_utf8_lossy(&key).into_owned();
        let Some(k) = K::decode_key(&key[self.prefix_len..]) else {
            return Some(Err(DecodeError::new(format!("key {:?} is not a key of this table", name()))));
        };
        Some(
            codec::decode(&value)
                .map(|v| (k, v))
                .map_err(|e| e.context(format_args!("stored value under {:?}", name()))),
        )
    }
}
