//! The term of every log entry, in memory: where each term's run of entries
//! starts.
//!
//! The Raft core asks for terms all the time (the entry before each append
//! it sends, conflict searches, commit checks). Read from RocksDB, each
//! lookup decoded a whole entry, which for a 1.4 MiB value cost a block
//! decompression and a copy on the leader's Raft loop, and under large
//! values those lookups alone delayed its ticks by hundreds of
//! milliseconds. A Raft log's terms never decrease with the index, so a
//! handful of runs describe the whole log: one per term that wrote entries.

use wasmraft_raft::{Index, Term};

use crate::error::StorageError;

/// The first index of each term's run, in index order (and so term order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TermIndex {
    starts: Vec<(Index, Term)>,
}

impl TermIndex {
    /// Rebuilds the index of the entries in `[first, last]` from `read`,
    /// which reads one entry's term from disk: a bisection between entries
    /// of different terms finds each boundary in a few reads, so opening a
    /// long log reads a few dozen entries, not all of them. A term lower
    /// than an earlier entry's is corruption, reported as such.
    pub(crate) fn build(
        first: Index,
        last: Index,
        mut read: impl FnMut(Index) -> Result<Term, StorageError>,
    ) -> Result<TermIndex, StorageError> {
        let mut index = TermIndex::default();
        if first > last {
            return Ok(index);
        }
        let (t_first, t_last) = (read(first)?, read(last)?);
        index.starts.push((first, t_first));
        let mut pending = vec![(first, t_first, last, t_last)];
        // Depth first, right half pushed first: boundaries come out in order.
        while let Some((lo, t_lo, hi, t_hi)) = pending.pop() {
            if t_lo == t_hi {
                continue;
            }
            if t_lo > t_hi {
                return Err(StorageError::Corrupt {
                    what: "log",
                    key: Some(format!("index {}", hi.0)),
                    detail: format!("term {} after term {} at index {}", t_hi.0, t_lo.0, lo.0),
                });
            }
            if hi.0 == lo.0 + 1 {
                index.starts.push((hi, t_hi));
                continue;
            }
            let mid = Index(lo.0 + (hi.0 - lo.0) / 2);
            let t_mid = read(mid)?;
            pending.push((mid, t_mid, hi, t_hi));
            pending.push((lo, t_lo, mid, t_mid));
        }
        Ok(index)
    }

    /// The term of the entry at `index`, if the index knows one. The caller
    /// checks that `index` is within the log's bounds.
    pub(crate) fn term(&self, index: Index) -> Option<Term> {
        let after = self.starts.partition_point(|(start, _)| *start <= index);
        after.checked_sub(1).map(|i| self.starts[i].1)
    }

    /// Records entries written from `start` on, with the given terms in
    /// index order: entries from `start` on that were replaced are forgotten.
    pub(crate) fn appended(&mut self, start: Index, terms: impl IntoIterator<Item = Term>) {
        let keep = self.starts.partition_point(|(s, _)| *s < start);
        self.starts.truncate(keep);
        for (offset, term) in terms.into_iter().enumerate() {
            if self.starts.last().map(|(_, t)| *t) != Some(term) {
                self.starts.push((Index(start.0 + offset as u64), term));
            }
        }
    }

    /// Forgets the runs wholly before `first` (the log was compacted to it).
    pub(crate) fn compacted_to(&mut self, first: Index) {
        let covering = self.starts.partition_point(|(s, _)| *s <= first).saturating_sub(1);
        self.starts.drain(..covering);
    }

    /// Forgets every entry (a snapshot replaced the log).
    pub(crate) fn clear(&mut self) {
        self.starts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms_of(log: &[u64]) -> impl FnMut(Index) -> Result<Term, StorageError> + '_ {
        // Index 10 is the first entry.
        |i| Ok(Term(log[(i.0 - 10) as usize]))
    }

    #[test]
    fn a_built_index_gives_every_entrys_term() {
        let logs: [&[u64]; 5] = [
            &[1],
            &[3, 3, 3, 3],
            &[1, 2, 2, 2, 2, 2, 2, 5, 5, 6],
            &[1, 2, 3, 4, 5, 6, 7, 8],
            &[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 9],
        ];
        for log in logs {
            let mut reads = 0;
            let mut read = terms_of(log);
            let index = TermIndex::build(Index(10), Index(9 + log.len() as u64), |i| {
                reads += 1;
                read(i)
            })
            .unwrap();
            for (i, t) in log.iter().enumerate() {
                assert_eq!(index.term(Index(10 + i as u64)), Some(Term(*t)), "{log:?} at {i}");
            }
            let runs = index.starts.len();
            assert_eq!(runs, 1 + log.windows(2).filter(|w| w[0] != w[1]).count());
            // A few reads per boundary, not one per entry.
            assert!(reads <= 2 + runs * 5, "{reads} reads for {log:?}");
        }
        let empty = TermIndex::build(Index(5), Index(4), |_| unreachable!()).unwrap();
        assert_eq!(empty.term(Index(5)), None);
    }

    #[test]
    fn a_term_that_goes_down_is_corruption() {
        let log = [1, 3, 2, 4];
        let err = TermIndex::build(Index(10), Index(13), terms_of(&log)).unwrap_err();
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn appends_replace_the_suffix_and_compaction_keeps_the_covering_run() {
        let mut index = TermIndex::default();
        index.appended(Index(1), [Term(1), Term(1), Term(2), Term(2), Term(2)]);
        assert_eq!(index.term(Index(2)), Some(Term(1)));
        assert_eq!(index.term(Index(5)), Some(Term(2)));
        // A conflict from index 4 on: entries 4.. now have term 3.
        index.appended(Index(4), [Term(3), Term(3)]);
        assert_eq!(index.term(Index(3)), Some(Term(2)));
        assert_eq!(index.term(Index(4)), Some(Term(3)));
        // Same term as the run before: no new run.
        index.appended(Index(6), [Term(3)]);
        assert_eq!(index.starts.len(), 3);
        index.compacted_to(Index(5));
        assert_eq!(index.starts, vec![(Index(4), Term(3))]);
        assert_eq!(index.term(Index(6)), Some(Term(3)));
        index.clear();
        assert_eq!(index.term(Index(6)), None);
    }
}
