//! The tests' deterministic generator: xorshift64, so a failing case is
//! the same one on every run.

/// xorshift64 (Marsaglia 2003).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`. xorshift's state must not be 0, so the
    /// low bit is set: seeds 2k and 2k + 1 give the same sequence.
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// An index into something `n` long.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform in [lo, hi) (53 random bits).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_one_sequence_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        assert!(xs.iter().all(|&x| x == b.next_u64()));
        assert_ne!(
            xs[..10],
            (0..10).map(|_| Rng::new(7).next_u64()).collect::<Vec<_>>()[..]
        );
        let mut r = Rng::new(0);
        for _ in 0..1000 {
            let x = r.range(20.0, 60.0);
            assert!((20.0..60.0).contains(&x), "{x}");
            assert!(r.below(4) < 4);
        }
    }
}
