//! LZ4 block compression for the pool, on the reference C library (liblz4 1.10 through
//! `lz4-sys`), with a compression state owned by the caller so the store path allocates nothing
//! per page.
//!
//! lz4_flex 0.11 allocates and zeroes an 8-16 KiB hash table on every `compress_into`, which
//! the fault path (and a SIGBUS handler, where malloc is forbidden) cannot afford. liblz4's
//! `LZ4_compress_fast_extState_fastReset` takes the state from the caller and resets only what
//! it needs; `LZ4_decompress_safe` validates every offset and length and never writes outside
//! the destination. Both are exported by the static library `lz4-sys` builds; the two
//! state functions are declared here because `lz4-sys` does not bind them.
//!
//! No locks: a [`Lz4Table`] belongs to one thread (the pool keeps one per thread).

use std::ffi::{c_char, c_int, c_void};

// Make sure liblz4 is linked even though only the declarations below are used.
use lz4_sys as _;

extern "C" {
    fn LZ4_sizeofState() -> c_int;
    fn LZ4_initStream(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_compress_fast_extState_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        acceleration: c_int,
    ) -> c_int;
    fn LZ4_decompress_safe(src: *const c_char, dst: *mut c_char, compressed_size: c_int, dst_capacity: c_int) -> c_int;
    fn LZ4_compressBound(input_size: c_int) -> c_int;
}

/// A reusable LZ4 compression state (`LZ4_stream_t`, 16 KiB), 8-byte aligned as liblz4 needs.
pub struct Lz4Table {
    state: Box<[u64]>,
}

impl Default for Lz4Table {
    fn default() -> Self {
        // SAFETY: LZ4_sizeofState has no preconditions.
        let size = usize::try_from(unsafe { LZ4_sizeofState() }).unwrap_or(16 * 1024);
        let mut state = vec![0u64; size.div_ceil(8)].into_boxed_slice();
        // SAFETY: `state` is 8-byte aligned, at least LZ4_sizeofState() bytes long and
        // exclusively ours; LZ4_initStream only writes inside it.
        let ok = unsafe { LZ4_initStream(state.as_mut_ptr().cast(), state.len() * 8) };
        debug_assert!(!ok.is_null());
        Lz4Table { state }
    }
}

impl Lz4Table {
    /// Compress `src` into `dst` as one LZ4 block; `None` if it does not fit in `dst` (the
    /// caller's way of saying "above the threshold") or `src` is 2 GiB or more.
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        let n = c_int::try_from(src.len()).ok()?;
        let cap = c_int::try_from(dst.len()).unwrap_or(c_int::MAX);
        // SAFETY: the state was initialised by LZ4_initStream and is exclusively borrowed;
        // `src` is readable for `n` bytes and `dst` writable for `cap` bytes; liblz4 writes at
        // most `cap` bytes and returns 0 when the output does not fit.
        let r = unsafe {
            LZ4_compress_fast_extState_fastReset(
                self.state.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                n,
                cap,
                1,
            )
        };
        (r > 0).then_some(r as usize)
    }
}

/// Decompress one LZ4 block into `out`; true only if it decoded without error to exactly
/// `out.len()` bytes.
pub fn decompress_exact(src: &[u8], out: &mut [u8]) -> bool {
    let (Ok(n), Ok(cap)) = (c_int::try_from(src.len()), c_int::try_from(out.len())) else {
        return false;
    };
    // SAFETY: `src` is readable for `n` bytes and `out` writable for `cap` bytes;
    // LZ4_decompress_safe never reads or writes outside them and returns < 0 on malformed input.
    let r = unsafe { LZ4_decompress_safe(src.as_ptr().cast(), out.as_mut_ptr().cast(), n, cap) };
    r >= 0 && r as usize == out.len()
}

/// The largest compressed size of `n` input bytes.
pub(crate) fn max_compressed_size(n: usize) -> usize {
    let Ok(n) = c_int::try_from(n) else { return usize::MAX };
    // SAFETY: LZ4_compressBound is a pure function.
    let b = unsafe { LZ4_compressBound(n) };
    usize::try_from(b).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(t: &mut Lz4Table, src: &[u8]) -> usize {
        let mut dst = vec![0u8; max_compressed_size(src.len())];
        let n = t.compress(src, &mut dst).expect("fits the bound");
        let mut back = vec![0u8; src.len()];
        assert!(decompress_exact(&dst[..n], &mut back), "valid LZ4");
        assert!(back == src);
        // The block is standard LZ4: lz4_flex decodes it to the same bytes.
        let mut back2 = vec![0u8; src.len()];
        assert_eq!(lz4_flex::block::decompress_into(&dst[..n], &mut back2).ok(), Some(src.len()));
        assert!(back2 == src);
        n
    }

    #[test]
    fn edge_sizes_and_patterns() {
        let mut t = Lz4Table::default();
        for len in [1usize, 4, 12, 13, 14, 20, 64, 4095, 4096, 65536, 70000, 2 << 20] {
            let zeros = vec![0u8; len];
            let pat: Vec<u8> = (0..len).map(|i| (i % 7) as u8).collect();
            let text: Vec<u8> =
                b"the quick brown fox jumps over the lazy dog ".iter().copied().cycle().take(len).collect();
            let mut x = 1u64;
            let rnd: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            for src in [&zeros, &pat, &text, &rnd] {
                round_trip(&mut t, src);
            }
            if len >= 4096 {
                assert!(round_trip(&mut t, &zeros) < len / 100, "zeros compress");
            }
        }
    }

    #[test]
    fn too_small_destination_is_none() {
        let mut t = Lz4Table::default();
        let src: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut dst = vec![0u8; 1000];
        assert_eq!(t.compress(&src, &mut dst), None);
        let text = vec![b'a'; 4096];
        assert!(t.compress(&text, &mut dst).is_some());
    }

    #[test]
    fn corrupt_input_is_rejected_not_returned() {
        let mut t = Lz4Table::default();
        let src: Vec<u8> = b"hello hello hello hello hello hello".repeat(100);
        let mut dst = vec![0u8; max_compressed_size(src.len())];
        let n = t.compress(&src, &mut dst).unwrap();
        let mut out = vec![0u8; src.len()];
        // Truncated input, wrong output size: both refused.
        assert!(!decompress_exact(&dst[..n / 2], &mut out));
        let mut short = vec![0u8; src.len() - 1];
        assert!(!decompress_exact(&dst[..n], &mut short));
    }

    proptest! {
        #[test]
        fn any_input_round_trips(data in proptest::collection::vec(any::<u8>(), 1..9000), rep in 1usize..4) {
            let mut t = Lz4Table::default();
            let src: Vec<u8> = data.iter().copied().cycle().take(data.len() * rep).collect();
            round_trip(&mut t, &src);
        }
    }
}
