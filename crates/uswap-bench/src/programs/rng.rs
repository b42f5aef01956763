//! The deterministic stream behind every generated input of the program suite: the same seed
//! gives the same files, so an output can be checked byte for byte against a native run.
//!
//! Locking: none.

/// splitmix64: the deterministic stream behind every generated input.
pub struct Rng(u64);

impl Rng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
