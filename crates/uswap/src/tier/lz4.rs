//! An LZ4 *block-format* compressor with a reusable hash table, so the pool's store path
//! allocates nothing per page (lz4_flex 0.11 allocates and zeroes an 8-16 KiB table on every
//! `compress_into`). Output is standard LZ4 blocks, decoded by lz4_flex's checked
//! `decompress_into` (which validates every offset and length).
//!
//! The compressor is the classic greedy LZ4 "fast" scheme: a 4096-entry hash of 4-byte
//! sequences, backward and forward match extension (8 bytes at a time), skip acceleration
//! over incompressible stretches, and the block-format end rules (the last 5 bytes are
//! literals, no match starts in the last 12 bytes, offsets below 64 KiB). Instead of clearing
//! the table on each call, positions are stored relative to a running base that moves past
//! every input, so stale entries are recognised as out of range (cleared only when the base
//! would wrap). No locks: a table belongs to one thread.

const HASH_LOG: u32 = 12;
const MIN_MATCH: usize = 4;
const LAST_LITERALS: usize = 5;
const MF_LIMIT: usize = 12;
const MAX_OFFSET: usize = 65535;
const SKIP_TRIGGER: u32 = 5;

/// A reusable compression state (16 KiB).
pub struct Lz4Table {
    table: Box<[u32; 1 << HASH_LOG]>,
    base: u32,
}

impl Default for Lz4Table {
    fn default() -> Self {
        Lz4Table { table: Box::new([0; 1 << HASH_LOG]), base: 1 }
    }
}

#[inline(always)]
fn read_u32(s: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]))
}

#[inline(always)]
fn hash(v: u32) -> usize {
    (v.wrapping_mul(2_654_435_761) >> (32 - HASH_LOG)) as usize
}

/// Length of the common prefix of `s[a..]` and `s[b..]`, not going past `limit` for `b`
/// (a < b).
#[inline(always)]
fn common(s: &[u8], mut a: usize, mut b: usize, limit: usize) -> usize {
    let start = b;
    while b + 8 <= limit {
        let x = u64::from_le_bytes(s[a..a + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_le_bytes(s[b..b + 8].try_into().unwrap_or([0; 8]));
        let d = x ^ y;
        if d != 0 {
            return b - start + (d.trailing_zeros() / 8) as usize;
        }
        a += 8;
        b += 8;
    }
    while b < limit && s[a] == s[b] {
        a += 1;
        b += 1;
    }
    b - start
}

struct Out<'a> {
    dst: &'a mut [u8],
    pos: usize,
}

impl Out<'_> {
    #[inline(always)]
    fn byte(&mut self, b: u8) -> Option<()> {
        *self.dst.get_mut(self.pos)? = b;
        self.pos += 1;
        Some(())
    }
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) -> Option<()> {
        self.dst.get_mut(self.pos..self.pos + b.len())?.copy_from_slice(b);
        self.pos += b.len();
        Some(())
    }
    #[inline(always)]
    fn len_ext(&mut self, mut n: usize) -> Option<()> {
        while n >= 255 {
            self.byte(255)?;
            n -= 255;
        }
        self.byte(n as u8)
    }
    fn sequence(&mut self, lit: &[u8], offset: usize, mlen: usize) -> Option<()> {
        let ml = mlen - MIN_MATCH;
        let token = ((lit.len().min(15) as u8) << 4) | ml.min(15) as u8;
        self.byte(token)?;
        if lit.len() >= 15 {
            self.len_ext(lit.len() - 15)?;
        }
        self.bytes(lit)?;
        self.bytes(&(offset as u16).to_le_bytes())?;
        if ml >= 15 {
            self.len_ext(ml - 15)?;
        }
        Some(())
    }
    fn last_literals(&mut self, lit: &[u8]) -> Option<()> {
        self.byte((lit.len().min(15) as u8) << 4)?;
        if lit.len() >= 15 {
            self.len_ext(lit.len() - 15)?;
        }
        self.bytes(lit)
    }
}

impl Lz4Table {
    /// Compress `src` into `dst` as one LZ4 block; `None` if it does not fit in `dst` (the
    /// caller's way of saying "above the threshold") or `src` is 2 GiB or more.
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        let n = src.len();
        if n >= 1 << 31 {
            return None;
        }
        if u64::from(self.base) + n as u64 + 1 >= u64::from(u32::MAX) {
            self.table.fill(0);
            self.base = 1;
        }
        let base = self.base;
        self.base += n as u32 + 1;
        let mut out = Out { dst, pos: 0 };
        if n < MF_LIMIT + 1 {
            out.last_literals(src)?;
            return Some(out.pos);
        }
        let match_limit = n - MF_LIMIT; // a match must start before this
        let end_match = n - LAST_LITERALS; // and end at or before this
        let mut anchor = 0usize;
        let mut i = 1usize;
        self.table[hash(read_u32(src, 0))] = base;
        let mut attempts: u32 = 1 << SKIP_TRIGGER;
        while i < match_limit {
            let v = read_u32(src, i);
            let h = hash(v);
            let cand = self.table[h];
            self.table[h] = base + i as u32;
            let c = cand.wrapping_sub(base) as usize;
            if cand < base || c >= i || i - c > MAX_OFFSET || read_u32(src, c) != v {
                i += (attempts >> SKIP_TRIGGER) as usize;
                attempts += 1;
                continue;
            }
            attempts = 1 << SKIP_TRIGGER;
            // Extend backwards over pending literals, then forwards.
            let (mut s, mut m) = (i, c);
            while s > anchor && m > 0 && src[s - 1] == src[m - 1] {
                s -= 1;
                m -= 1;
            }
            let len = MIN_MATCH + common(src, c + MIN_MATCH, i + MIN_MATCH, end_match);
            let len = len + (i - s);
            out.sequence(&src[anchor..s], s - m, len)?;
            i = s + len;
            anchor = i;
            if i < match_limit {
                // Prime the table with a position inside the match (better ratio, as LZ4 does).
                self.table[hash(read_u32(src, i - 2))] = base + (i - 2) as u32;
            }
        }
        out.last_literals(&src[anchor..])?;
        Some(out.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(t: &mut Lz4Table, src: &[u8]) -> usize {
        let mut dst = vec![0u8; lz4_flex::block::get_maximum_output_size(src.len())];
        let n = t.compress(src, &mut dst).expect("fits the bound");
        let mut back = vec![0u8; src.len()];
        let m = lz4_flex::block::decompress_into(&dst[..n], &mut back).expect("valid LZ4");
        assert_eq!(m, src.len());
        assert!(back == src);
        n
    }

    #[test]
    fn edge_sizes_and_patterns() {
        let mut t = Lz4Table::default();
        for len in [0usize, 1, 4, 12, 13, 14, 20, 64, 4095, 4096, 65536, 70000, 2 << 20] {
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
    fn table_base_wraps() {
        let mut t = Lz4Table { base: u32::MAX - 5000, ..Lz4Table::default() };
        let src: Vec<u8> = (0..4096).map(|i| (i % 13) as u8).collect();
        for _ in 0..4 {
            round_trip(&mut t, &src);
        }
        assert!(t.base < 20000);
    }

    proptest! {
        #[test]
        fn matches_the_reference_decoder(
            chunks in proptest::collection::vec((any::<u8>(), 0usize..300, any::<bool>()), 0..40),
            seed in any::<u64>(),
        ) {
            // Mixtures of runs, repeats of earlier bytes and noise.
            let mut src = Vec::new();
            let mut x = seed | 1;
            for (b, n, rep) in chunks {
                if rep && src.len() > 8 {
                    let from = (x as usize) % src.len();
                    for k in 0..n { let v = src[from + k % (src.len() - from)]; src.push(v); }
                } else if b.is_multiple_of(3) {
                    src.extend(std::iter::repeat_n(b, n));
                } else {
                    for _ in 0..n { x ^= x << 13; x ^= x >> 7; x ^= x << 17; src.push(x as u8); }
                }
            }
            let mut t = Lz4Table::default();
            round_trip(&mut t, &src);
            round_trip(&mut t, &src);
        }
    }
}
