//! A fixed-size bitset: the set of linearized operations of one partition.

/// `n` bits, all clear at first. Equal sets hash equally, so it can key the
/// search cache together with a model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Bitset {
    words: Box<[u64]>,
}

impl Bitset {
    pub(crate) fn new(bits: usize) -> Self {
        Bitset {
            words: vec![0; bits.div_ceil(64)].into_boxed_slice(),
        }
    }

    pub(crate) fn set(&mut self, bit: usize) {
        self.words[bit / 64] |= 1 << (bit % 64);
    }

    pub(crate) fn clear(&mut self, bit: usize) {
        self.words[bit / 64] &= !(1 << (bit % 64));
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, bit: usize) -> bool {
        self.words[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Heap bytes held, for the cache's memory estimate.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::Bitset;

    #[test]
    fn set_clear_and_equality() {
        let mut a = Bitset::new(130);
        let mut b = Bitset::new(130);
        for bit in [0, 63, 64, 129] {
            a.set(bit);
            assert!(a.contains(bit));
        }
        assert_ne!(a, b);
        for bit in [129, 64, 63, 0] {
            b.set(bit);
        }
        assert_eq!(a, b);
        a.clear(64);
        assert!(!a.contains(64) && a.contains(63) && a.contains(129));
        assert_eq!(a.heap_bytes(), 24);
    }
}
