use std::collections::BTreeMap;
use std::ops::Bound;

/// A read of committed state failed (storage I/O). Fatal to the apply loop.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("state read failed: {0}")]
pub struct StateError(pub String);

/// Read-only access to the committed plugin keyspace, supplied by the caller
/// (the node backs it with RocksDB). Implementations must be consistent for
/// the duration of one call: a query must see one applied index throughout.
pub trait StateView: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;

    /// Visits pairs with `start <= key < end` (`end` `None`: unbounded) in key
    /// order, descending if `reverse`, until `visit` returns `false`.
    fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError>;
}

/// A view with no keys: the state of a new cluster.
#[derive(Clone, Copy, Debug, Default)]
pub struct EmptyView;

impl StateView for EmptyView {
    fn get(&self, _key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(None)
    }

    fn scan(
        &self,
        _start: &[u8],
        _end: Option<&[u8]>,
        _reverse: bool,
        _visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        Ok(())
    }
}

/// An in-memory view, for tests and benchmarks of the runtime alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryView(pub BTreeMap<Vec<u8>, Vec<u8>>);

impl MemoryView {
    /// Applies the writes of an [`crate::ApplyBatch`], as a store would.
    pub fn apply_writes(&mut self, writes: &[crate::Write]) {
        for w in writes {
            match &w.value {
                Some(v) => self.0.insert(w.key.clone(), v.clone()),
                None => self.0.remove(&w.key),
            };
        }
    }
}

impl StateView for MemoryView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.0.get(key).cloned())
    }

    fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let range = self.0.range::<[u8], _>((Bound::Included(start), upper));
        if reverse {
            for (k, v) in range.rev() {
                if !visit(k, v) {
                    break;
                }
            }
        } else {
            for (k, v) in range {
                if !visit(k, v) {
                    break;
                }
            }
        }
        Ok(())
    }
}
