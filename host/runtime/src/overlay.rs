//! Uncommitted writes of the batch being applied, layered over the committed
//! state, with an undo log so that a failed entry can be taken back.

use std::collections::{BTreeSet, HashMap};
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

/// Keys come from clients: each map's hash is seeded at random, so keys
/// that collide cannot be chosen without its seed, which nothing shows
/// (writes leave sorted). foldhash claims no more than that.
type Hasher = foldhash::fast::RandomState;

#[derive(Default)]
pub(crate) struct Overlay {
    /// The batch's writes by key. A hash map, not a B-tree: a put's reads
    /// and writes are point lookups, and a B-tree's key comparisons and node
    /// allocations were most of the overlay's cost.
    map: HashMap<Vec<u8>, Option<Vec<u8>>, Hasher>,
    /// The keys of `map` in order, made by the first scan or count of the
    /// batch and kept up to date from then on: batches of puts never make it.
    ordered: Option<BTreeSet<Vec<u8>>>,
    /// What each key of the current entry held in `map` before (outer `None`:
    /// absent from `map`), newest last.
    undo: Vec<(Vec<u8>, Option<Option<Vec<u8>>>)>,
    /// Writes are kept or dropped only as a whole (a batch call): no undo
    /// log, so no copy of each key for it. Until `clear`.
    whole: bool,
}

impl Overlay {
    pub fn get(&self, base: &dyn StateView, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match self.map.get(key) {
            Some(v) => Ok(v.clone()),
            None => base.get(key),
        }
    }

    pub fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        if let Some(ordered) = &mut self.ordered
            && !self.map.contains_key(&key)
        {
            ordered.insert(key.clone());
        }
        if self.whole {
            self.map.insert(key, value);
            return;
        }
        let previous = self.map.insert(key.clone(), value);
        self.undo.push((key, previous));
    }

    /// From now until `clear`, no single entry's writes will be taken back.
    pub fn keep_or_drop_whole(&mut self) {
        debug_assert!(self.map.is_empty(), "an overlay turns whole-only before its first write");
        self.whole = true;
    }

    /// The current entry succeeded: its writes stay.
    pub fn commit_entry(&mut self) {
        self.undo.clear();
    }

    /// The current entry failed: take its writes back.
    pub fn rollback_entry(&mut self) {
        assert!(!self.whole, "rollback of one entry in an overlay kept or dropped whole");
        while let Some((key, previous)) = self.undo.pop() {
            match previous {
                Some(v) => {
                    self.map.insert(key, v);
                }
                None => {
                    self.map.remove(&key);
                    if let Some(ordered) = &mut self.ordered {
                        ordered.remove(&key);
                    }
                }
            }
        }
    }

    /// Takes back every write of the batch.
    pub fn clear(&mut self) {
        // A new map: a large batch's capacity is not kept for the next.
        self.map = HashMap::default();
        self.ordered = None;
        self.undo.clear();
        self.whole = false;
    }

    /// The batch's writes, in key order.
    pub fn take_writes(&mut self) -> Vec<Write> {
        debug_assert!(self.undo.is_empty(), "take_writes inside an entry");
        self.ordered = None;
        let mut writes: Vec<Write> =
            std::mem::take(&mut self.map).into_iter().map(|(key, value)| Write { key, value }).collect();
        writes.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        writes
    }

    /// Makes the ordered keys, if no scan has yet.
    fn order(&mut self) {
        if self.ordered.is_none() {
            self.ordered = Some(self.map.keys().cloned().collect());
        }
    }

    /// This batch's writes in `[start, end)`, in scan order, read as they
    /// are needed: a scan with a limit reads no more of them than it must.
    fn overlay_range<'a>(
        &'a self,
        start: &'a [u8],
        end: Option<&'a [u8]>,
        reverse: bool,
    ) -> Box<dyn Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a> {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let ordered = self.ordered.as_ref().expect("ordered by `order` before a range is read");
        let it = ordered
            .range::<[u8], _>((Bound::Included(start), upper))
            .map(|k| (k.as_slice(), self.map.get(k).expect("every ordered key is in the map").as_deref()));
        if reverse { Box::new(it.rev()) } else { Box::new(it) }
    }

    /// Up to `limit` pairs (0: all) of the merged view in `[start, end)`.
    pub fn scan(
        &mut self,
        base: &dyn StateView,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<Pair>, StateError> {
        // An empty or inverted range (a plugin may ask for one) holds
        // nothing; the map's range would panic on an inverted one.
        if end.is_some_and(|e| e <= start) {
            return Ok(Vec::new());
        }
        self.order();
        let mut ours = self.overlay_range(start, end, reverse).peekable();
        let limit = if limit == 0 { usize::MAX } else { limit };
        // `before(a, b)`: a comes first in scan order.
        let before = |a: &[u8], b: &[u8]| if reverse { a > b } else { a < b };
        let mut out: Vec<Pair> = Vec::new();
        let emit = |out: &mut Vec<Pair>, k: &[u8], v: Option<&[u8]>| {
            if let Some(v) = v {
                out.push((k.to_vec(), v.to_vec()));
            }
        };
        base.scan(start, end, reverse, &mut |bk, bv| {
            while out.len() < limit {
                match ours.peek() {
                    Some(&(k, v)) if before(k, bk) => {
                        emit(&mut out, k, v);
                        ours.next();
                    }
                    _ => break,
                }
            }
            if out.len() >= limit {
                return false;
            }
            match ours.peek() {
                Some(&(k, v)) if k == bk => {
                    emit(&mut out, bk, v);
                    ours.next();
                }
                _ => out.push((bk.to_vec(), bv.to_vec())),
            }
            out.len() < limit
        })?;
        while out.len() < limit {
            let Some((k, v)) = ours.next() else { break };
            emit(&mut out, k, v);
        }
        Ok(out)
    }

    /// The number of keys of the merged view in `[start, end)`.
    pub fn count(&mut self, base: &dyn StateView, start: &[u8], end: Option<&[u8]>) -> Result<u64, StateError> {
        if end.is_some_and(|e| e <= start) {
            return Ok(0);
        }
        self.order();
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
    use std::collections::BTreeMap;

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

    /// Random bases, overlays, ranges, limits and directions: the merged
    /// scan equals a scan of the writes applied to a copy of the base.
    #[test]
    fn scans_match_the_writes_applied_to_the_base() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..500 {
            let key = |i: u64| vec![b'a' + (i % 12) as u8];
            let mut base = MemoryView::default();
            for _ in 0..next(10) {
                base.0.insert(key(next(12)), b"base".to_vec());
            }
            let mut o = Overlay::default();
            let mut model = base.0.clone();
            for _ in 0..next(10) {
                let k = key(next(12));
                if next(3) == 0 {
                    o.write(k.clone(), None);
                    model.remove(&k);
                } else {
                    o.write(k.clone(), Some(b"new".to_vec()));
                    model.insert(k, b"new".to_vec());
                }
            }
            let (start, end) = (key(next(12)), key(next(12)));
            let end = (next(2) == 0).then_some(end.as_slice());
            let (limit, reverse) = (next(5) as usize, next(2) == 0);
            let mut want: Vec<Pair> = model
                .range(start.clone()..)
                .filter(|(k, _)| end.is_none_or(|e| k.as_slice() < e))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if reverse {
                want.reverse();
            }
            if limit > 0 {
                want.truncate(limit);
            }
            let all = model.range(start.clone()..).filter(|(k, _)| end.is_none_or(|e| k.as_slice() < e)).count();
            assert_eq!(o.count(&base, &start, end).unwrap(), all as u64, "{start:?}..{end:?}");
            assert_eq!(o.scan(&base, &start, end, limit, reverse).unwrap(), want, "{start:?}..{end:?} limit {limit} reverse {reverse}");
        }
    }

    /// Writes, rollbacks and range reads interleaved: the keys a range
    /// reads in order stay the keys written, however the first range read
    /// fell among the writes.
    #[test]
    fn range_reads_between_writes_and_rollbacks_see_exactly_the_writes_kept() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let base = MemoryView::default();
        for _ in 0..300 {
            let key = |i: u64| vec![b'a' + (i % 16) as u8];
            let mut o = Overlay::default();
            let (mut committed, mut entry) = (BTreeMap::new(), BTreeMap::new());
            for _ in 0..40 {
                match next(6) {
                    0 => {
                        o.commit_entry();
                        committed.append(&mut entry);
                    }
                    1 => {
                        o.rollback_entry();
                        entry.clear();
                    }
                    2 => {
                        let mut model = committed.clone();
                        model.extend(entry.clone());
                        let want: Vec<Pair> =
                            model.into_iter().filter_map(|(k, v): (Vec<u8>, Option<Vec<u8>>)| Some((k, v?))).collect();
                        assert_eq!(o.scan(&base, b"a", None, 0, false).unwrap(), want);
                        assert_eq!(o.count(&base, b"a", None).unwrap(), want.len() as u64);
                    }
                    _ => {
                        let (k, v) = (key(next(16)), (next(3) > 0).then(|| vec![b'0' + next(10) as u8]));
                        o.write(k.clone(), v.clone());
                        entry.insert(k, v);
                    }
                }
            }
            o.commit_entry();
            committed.append(&mut entry);
            let want: Vec<Write> = committed.into_iter().map(|(key, value)| Write { key, value }).collect();
            assert_eq!(o.take_writes(), want);
        }
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

    #[test]
    fn an_overlay_kept_or_dropped_whole_holds_the_same_writes_and_undoes_again_after_clear() {
        let base = base();
        let mut o = Overlay::default();
        o.keep_or_drop_whole();
        o.write(b"x".to_vec(), Some(b"1".to_vec()));
        o.write(b"a".to_vec(), None);
        o.write(b"x".to_vec(), Some(b"2".to_vec()));
        assert!(o.undo.is_empty());
        assert_eq!(o.get(&base, b"x").unwrap(), Some(b"2".to_vec()));
        assert_eq!(o.get(&base, b"a").unwrap(), None);
        o.commit_entry();
        let writes = o.take_writes();
        assert_eq!(writes, vec![Write { key: b"a".to_vec(), value: None }, Write { key: b"x".to_vec(), value: Some(b"2".to_vec()) }]);
        o.clear();
        o.write(b"y".to_vec(), Some(b"3".to_vec()));
        o.rollback_entry();
        assert_eq!(o.get(&base, b"y").unwrap(), None);
    }
}
