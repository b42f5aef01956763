//! Zero-page detection (the swap layer's `zeromap`/zero flag): decide at memory-bandwidth speed
//! whether a page holds only zero bytes, so the engine stores nothing for it (`swpout_zero`).
//!
//! The scan ORs 256-byte blocks into one accumulator and tests it once per block, so a page
//! that is not zero exits within the first block that has a set byte, and an all-zero page is
//! a straight streaming read. On x86_64 the AVX2 kernel is chosen at run time (the result of
//! `is_x86_feature_detected!` is cached by std); SSE2 is the x86_64 baseline; other targets use
//! a portable word loop that the compiler vectorises. No locks, no allocation.

const BLOCK: usize = 256;

/// True when every byte of `data` is zero (an empty slice is zero).
#[inline]
pub fn is_zero(data: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is available on this CPU (checked just above).
            return unsafe { x86::is_zero_avx2(data) };
        }
        // SAFETY: SSE2 is part of the x86_64 baseline.
        unsafe { x86::is_zero_sse2(data) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        is_zero_portable(data)
    }
}

/// The portable kernel: 256-byte blocks of eight-byte words ORed together, early exit per block.
#[cfg(any(test, not(target_arch = "x86_64")))]
pub(crate) fn is_zero_portable(data: &[u8]) -> bool {
    let mut blocks = data.chunks_exact(BLOCK);
    for b in &mut blocks {
        let mut acc = 0u64;
        for w in b.chunks_exact(8) {
            acc |= u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        }
        if acc != 0 {
            return false;
        }
    }
    tail_is_zero(blocks.remainder())
}

#[inline]
fn tail_is_zero(tail: &[u8]) -> bool {
    tail.iter().fold(0u8, |a, &b| a | b) == 0
}

/// The naive reference: any non-zero byte. Used by tests and the benchmark as the baseline.
pub fn is_zero_naive(data: &[u8]) -> bool {
    data.iter().all(|&b| b == 0)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{tail_is_zero, BLOCK};
    use std::arch::x86_64::*;

    /// # Safety
    /// - The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn is_zero_avx2(data: &[u8]) -> bool {
        let mut blocks = data.chunks_exact(BLOCK);
        for b in &mut blocks {
            let p = b.as_ptr() as *const __m256i;
            // SAFETY: `b` is exactly 256 bytes, so the eight unaligned 32-byte loads at
            // p..p+8 stay inside it; AVX2 is enabled for this function.
            let nz = unsafe {
                let a0 = _mm256_or_si256(_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)));
                let a1 = _mm256_or_si256(_mm256_loadu_si256(p.add(2)), _mm256_loadu_si256(p.add(3)));
                let a2 = _mm256_or_si256(_mm256_loadu_si256(p.add(4)), _mm256_loadu_si256(p.add(5)));
                let a3 = _mm256_or_si256(_mm256_loadu_si256(p.add(6)), _mm256_loadu_si256(p.add(7)));
                let acc = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
                _mm256_testz_si256(acc, acc) == 0
            };
            if nz {
                return false;
            }
        }
        tail_is_zero(blocks.remainder())
    }

    /// # Safety
    /// - The CPU must support SSE2 (always true on x86_64).
    #[target_feature(enable = "sse2")]
    pub(super) unsafe fn is_zero_sse2(data: &[u8]) -> bool {
        let mut blocks = data.chunks_exact(BLOCK);
        for b in &mut blocks {
            let p = b.as_ptr() as *const __m128i;
            // SAFETY: `b` is exactly 256 bytes = sixteen 16-byte unaligned loads at p..p+16.
            let nz = unsafe {
                let mut acc = _mm_loadu_si128(p);
                for i in 1..16 {
                    acc = _mm_or_si128(acc, _mm_loadu_si128(p.add(i)));
                }
                _mm_movemask_epi8(_mm_cmpeq_epi8(acc, _mm_setzero_si128())) != 0xffff
            };
            if nz {
                return false;
            }
        }
        tail_is_zero(blocks.remainder())
    }

    /// The SSE2 kernel, for the tests (safe: SSE2 is the x86_64 baseline).
    #[cfg(test)]
    pub(super) fn sse2(data: &[u8]) -> bool {
        // SAFETY: SSE2 is part of the x86_64 baseline.
        unsafe { is_zero_sse2(data) }
    }
}

/// The SSE2 kernel (x86_64 only), for the tests.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn is_zero_sse2(data: &[u8]) -> bool {
    x86::sse2(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    type Kernel = (&'static str, fn(&[u8]) -> bool);

    fn kernels() -> Vec<Kernel> {
        let mut v: Vec<Kernel> = vec![("dispatch", is_zero), ("portable", is_zero_portable)];
        #[cfg(target_arch = "x86_64")]
        v.push(("sse2", is_zero_sse2));
        v
    }

    #[test]
    fn one_nonzero_byte_at_every_position_class() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut page = vec![0u8; 4096 + 64];
        for (name, f) in kernels() {
            for len in [0usize, 1, 31, 255, 256, 257, 4095, 4096, 4096 + 63] {
                // Misaligned starts too.
                for start in [0usize, 1, 7, 33] {
                    let s = &mut page[start..start + len.min(4096 + 64 - start)];
                    s.fill(0);
                    assert!(f(s), "{name}: zero slice len {len}");
                    let n = s.len();
                    // Every position (first/last byte of a block, of a lane, of the tail...).
                    for pos in 0..n {
                        let v: u8 = rng.random_range(1..=255);
                        s[pos] = v;
                        assert_eq!(f(s), is_zero_naive(s), "{name}: len {n} pos {pos}");
                        assert!(!f(s), "{name}: len {n} pos {pos}");
                        s[pos] = 0;
                    }
                }
            }
        }
    }

    #[test]
    fn random_pages_agree_with_naive() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut page = vec![0u8; 4096];
        for _ in 0..2000 {
            page.fill(0);
            let k = rng.random_range(0..3);
            for _ in 0..k {
                let p = rng.random_range(0..4096);
                page[p] = rng.random();
            }
            for (name, f) in kernels() {
                assert_eq!(f(&page), is_zero_naive(&page), "{name}");
            }
        }
    }
}
