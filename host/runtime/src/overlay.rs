//! Uncommitted writes of the batch being applied, layered over the committed
//! state, with an undo log so that a failed entry can be taken back.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::view::{StateError, StateView};

/// One write of an applied batch: `value` `None` deletes `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The key in the plugin keyspace.
    pub key: Vec<u8>,
    /// The new value, or `None` to delete.
    pub value: Option<Vec<u8>>,
}

type Pair = (Vec<u8>, Vec<u8>);

#[derive(Default)]
pub(crate) struct Overlay {
    map: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// What each key of the current entry held in `map` before (outer `None`:
    /// absent from `map`), newest last.
    undo: Vec<(Vec<u8>, Option<Option<Vec<u8>>>)>,
}

impl Overlay {
    pub fn get(&self, base: &dyn StateView, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match self.map.get(key) {
            Some(v) => Ok(v.clone()),
            None => base.get(key),
        }
    }

    pub fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let previous = self.map.insert(key.clone(), value);
        self.undo.push((key, previous));
    }

    /// The current entry succeeded: its writes stay.
    pub fn commit_entry(&mut self) {
        self.undo.clear();
    }

    /// The current entry failed: take its writes back.
    pub fn rollback_entry(&mut self) {
        while let Some((key, previous)) = self.undo.pop() {
            match previous {
                Some(v) => self.map.insert(key, v),
                None => self.map.remove(&key),
            };
        }
    }

    /// Takes back every write of the batch.
    pub fn clear(&mut self) {
        self.map.clear();
        self.undo.clear();
    }

    pub fn take_writes(&mut self) -> Vec<Write> {
        debug_assert!(self.undo.is_empty(), "take_writes inside an entry");
        std::mem::take(&mut self.map)
            .into_iter()
            .map(|(key, value)| Write { key, value })
            .collect()
    }

    fn overlay_range(&self, start: &[u8], end: Option<&[u8]>, reverse: bool) -> Vec<(&[u8], Option<&[u8]>)> {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let it = self
            .map
            .range::<[u8], _>((Bound::Included(start), upper))
            .map(|(k, v)| (k.as_slice(), v.as_deref()));
        if reverse { it.rev().collect() } else { it.collect() }
    }

    /// Up to `limit` pairs (0: all) of the merged view in `[start, end)`.
    pub fn scan(
        &self,
        base: &dyn StateView,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<Pair>, StateError> {
        let ours = self.overlay_range(start, end, reverse);
        let limit = if limit == 0 { usize::MAX } else { limit };
        // `before(a, b)`: a comes first in scan order.
        let before = |a: &[u8], b: &[u8]| if reverse { a > b } else { a < b };
        let mut out: Vec<Pair> = Vec::new();
        let mut next = 0; // next overlay item not yet merged
        let emit = |out: &mut Vec<Pair>, k: &[u8], v: Option<&[u8]>| {
            if let Some(v) = v {
                out.push((k.to_vec(), v.to_vec()));
            }
        };
        base.scan(start, end, reverse, &mut |bk, bv| {
            while next < ours.len() && before(ours[next].0, bk) && out.len() < limit {
                emit(&mut out, ours[next].0, ours[next].1);
                next += 1;
            }
            if out.len() >= limit {
                return false;
            }
            if next < ours.len() && ours[next].0 == bk {
                emit(&mut out, bk, ours[next].1);
                next += 1;
            } else {
                out.push((bk.to_vec(), bv.to_vec()));
            }
            out.len() < limit
        })?;
        while next < ours.len() && out.len() < limit {
            emit(&mut out, ours[next].0, ours[next].1);
            next += 1;
        }
        Ok(out)
    }

    /// The number of keys of the merged view in `[start, end)`.
    pub fn count(&self, base: &dyn StateView, start: &[u8], end: Option<&[u8]>) -> Result<u64, StateError> {
        let mut n: u64 = 0;
        base.scan(start, end, false, &mut |_, _| {
            n += 1;
            true
        })?;
        for (k, v) in self.overlay_range(start, end, false) {
            let in_base = base.get(k)?.is_some();
            match (in_base, v.is_some()) {
                (false, true) => n += 1,
                (true, false) => n -= 1,
                _ => {}
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::MemoryView;

    fn base() -> MemoryView {
        let mut m = MemoryView::default();
        for k in ["a", "c", "e", "g"] {
            m.0.insert(k.as_bytes().to_vec(), b"base".to_vec());
        }
        m
    }

    fn keys(pairs: &[Pair]) -> Vec<String> {
        pairs.iter().map(|(k, _)| String::from_utf8(k.clone()).unwrap()).collect()
    }

    #[test]
    fn scan_merges_overlay_writes_and_deletes_in_both_directions() {
        let base = base();
        let mut o = Overlay::default();
        o.write(b"b".to_vec(), Some(b"new".to_vec()));
        o.write(b"c".to_vec(), None);
        o.write(b"e".to_vec(), Some(b"over".to_vec()));
        o.write(b"h".to_vec(), Some(b"new".to_vec()));
        let fwd = o.scan(&base, b"a", None, 0, false).unwrap();
        assert_eq!(keys(&fwd), ["a", "b", "e", "g", "h"]);
        assert_eq!(fwd[2].1, b"over");
        let rev = o.scan(&base, b"a", Some(b"h"), 0, true).unwrap();
        assert_eq!(keys(&rev), ["g", "e", "b", "a"]);
        let limited = o.scan(&base, b"b", None, 2, false).unwrap();
        assert_eq!(keys(&limited), ["b", "e"]);
        assert_eq!(o.count(&base, b"a", None).unwrap(), 5);
        assert_eq!(o.count(&base, b"c", Some(b"f")).unwrap(), 1);
    }

    #[test]
    fn rollback_restores_the_previous_entry_state() {
        let base = base();
        let mut o = Overlay::default();
        o.write(b"x".to_vec(), Some(b"1".to_vec()));
        o.commit_entry();
        o.write(b"x".to_vec(), Some(b"2".to_vec()));
        o.write(b"a".to_vec(), None);
        o.write(b"y".to_vec(), Some(b"3".to_vec()));
        o.rollback_entry();
        assert_eq!(o.get(&base, b"x").unwrap(), Some(b"1".to_vec()));
        assert_eq!(o.get(&base, b"a").unwrap(), Some(b"base".to_vec()));
        assert_eq!(o.get(&base, b"y").unwrap(), None);
        assert_eq!(o.take_writes(), vec![Write { key: b"x".to_vec(), value: Some(b"1".to_vec()) }]);
    }
}
