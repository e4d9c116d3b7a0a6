//! The keys and values of the benchmark's requests.
//!
//! Keys are fixed-size, zero-padded decimal numbers: key 42 at
//! `--key-size 8` is `00000042`. They are readable, sort in numeric order,
//! and `wasmraft get 00000042` finds one. (etcd's tool writes the number as
//! varint bytes padded with zeros to the same size; only the size matters to
//! the servers.)

use anyhow::bail;

/// A small, fast pseudo-random generator (SplitMix64): the benchmark needs
/// uniform key numbers, not cryptographic randomness.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`; equal seeds give equal sequences.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `[0, n)` (Lemire's multiply-shift; `n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Chooses the key of each request from a key space of `space` keys.
#[derive(Debug, Clone)]
pub struct KeyGen {
    size: usize,
    space: u64,
    sequential: bool,
}

impl KeyGen {
    /// Keys of `size` bytes numbered `0..space`; request `n` gets key
    /// `n % space` when `sequential`, a uniformly random one otherwise.
    ///
    /// Fails when `size` decimal digits cannot number `space` distinct keys.
    pub fn new(size: usize, space: u64, sequential: bool) -> anyhow::Result<Self> {
        if size == 0 {
            bail!("--key-size must be at least 1");
        }
        if space == 0 {
            bail!("--key-space must be at least 1");
        }
        if size < 20 && 10u64.pow(size as u32) < space {
            bail!("--key-size {size} numbers at most 10^{size} distinct keys, fewer than --key-space {space}");
        }
        Ok(Self { size, space, sequential })
    }

    /// The number of keys.
    pub fn space(&self) -> u64 {
        self.space
    }

    /// Whether keys are taken in order rather than at random.
    pub fn sequential(&self) -> bool {
        self.sequential
    }

    /// The same keys, taken in order.
    pub fn in_order(&self) -> KeyGen {
        KeyGen { sequential: true, ..self.clone() }
    }

    /// The key number of request `n` (counted from 0 across all clients).
    pub fn index(&self, n: u64, rng: &mut Rng) -> u64 {
        if self.sequential { n % self.space } else { rng.below(self.space) }
    }

    /// Key number `index`, zero-padded to the key size.
    pub fn key(&self, index: u64) -> Vec<u8> {
        format!("{index:0width$}", width = self.size).into_bytes()
    }
}

/// A value of `size` printable random bytes; one value is written by every
/// put, as etcd's tool does.
pub fn value(size: usize, seed: u64) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = Rng::new(seed);
    (0..size).map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_zero_padded_to_the_key_size() {
        let keys = KeyGen::new(8, 100, true).unwrap();
        assert_eq!(keys.key(0), b"00000000");
        assert_eq!(keys.key(42), b"00000042");
        assert_eq!(keys.key(99), b"00000099");
        let wide = KeyGen::new(3, 1000, true).unwrap();
        assert_eq!(wide.key(999), b"999");
        assert!(wide.key(7).len() == 3);
    }

    #[test]
    fn sequential_keys_wrap_around_the_key_space() {
        let keys = KeyGen::new(8, 3, true).unwrap();
        let mut rng = Rng::new(1);
        let seen: Vec<u64> = (0..7).map(|n| keys.index(n, &mut rng)).collect();
        assert_eq!(seen, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn random_keys_stay_in_the_key_space_and_cover_it() {
        let keys = KeyGen::new(8, 10, false).unwrap();
        let mut rng = Rng::new(7);
        let mut hits = [0u32; 10];
        for n in 0..10_000 {
            let i = keys.index(n, &mut rng);
            assert!(i < 10);
            hits[i as usize] += 1;
        }
        // Uniform: each of 10 keys about 1000 times.
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }

    #[test]
    fn the_key_size_must_number_the_key_space() {
        assert!(KeyGen::new(2, 100, false).is_ok());
        let err = KeyGen::new(2, 101, false).unwrap_err().to_string();
        assert!(err.contains("--key-size 2"), "{err}");
        assert!(KeyGen::new(0, 1, false).is_err());
        assert!(KeyGen::new(8, 0, false).is_err());
        assert!(KeyGen::new(25, u64::MAX, false).is_ok());
    }

    #[test]
    fn values_have_the_value_size_and_are_printable() {
        assert!(value(0, 1).is_empty());
        let v = value(256, 1);
        assert_eq!(v.len(), 256);
        assert!(v.iter().all(u8::is_ascii_alphanumeric));
        assert_eq!(v, value(256, 1));
    }
}
