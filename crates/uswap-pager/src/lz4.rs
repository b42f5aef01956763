//! An allocation-free LZ4 block compressor for the fault path.
//!
//! `lz4_flex::block::compress_into` allocates its 16 KiB hash table on the heap on every call,
//! which a SIGBUS handler must not do (the interrupted thread may hold the malloc lock). This is
//! a small greedy LZ4 block encoder whose hash table is passed in by the caller (a preallocated
//! per-buffer table); its output is the standard LZ4 block format, decoded by
//! `lz4_flex::block::decompress_into` (which does not allocate).
//!
//! Locking: none (pure functions over caller buffers).

/// Entries in a compression hash table.
pub const HASH_ENTRIES: usize = 4096;
const MIN_MATCH: usize = 4;
const MFLIMIT: usize = 12;
const LAST_LITERALS: usize = 5;

#[inline]
fn read32(s: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]])
}

#[inline]
fn hash(v: u32) -> usize {
    (v.wrapping_mul(2_654_435_761) >> 20) as usize
}

struct Out<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Out<'_> {
    #[inline]
    fn byte(&mut self, b: u8) -> Option<()> {
        *self.buf.get_mut(self.pos)? = b;
        self.pos += 1;
        Some(())
    }
    #[inline]
    fn bytes(&mut self, b: &[u8]) -> Option<()> {
        self.buf.get_mut(self.pos..self.pos + b.len())?.copy_from_slice(b);
        self.pos += b.len();
        Some(())
    }
    #[inline]
    fn len_ext(&mut self, mut n: usize) -> Option<()> {
        while n >= 255 {
            self.byte(255)?;
            n -= 255;
        }
        self.byte(n as u8)
    }
    fn sequence(&mut self, lit: &[u8], m: Option<(u16, usize)>) -> Option<()> {
        let ll = lit.len();
        let ml = m.map(|(_, l)| l - MIN_MATCH).unwrap_or(0);
        let token = ((ll.min(15) as u8) << 4) | (ml.min(15) as u8);
        self.byte(token)?;
        if ll >= 15 {
            self.len_ext(ll - 15)?;
        }
        self.bytes(lit)?;
        if let Some((off, _)) = m {
            self.bytes(&off.to_le_bytes())?;
            if ml >= 15 {
                self.len_ext(ml - 15)?;
            }
        }
        Some(())
    }
}

/// Compress `src` into `dst` as one LZ4 block using `table` as scratch. Returns the compressed
/// length, or `None` when the output does not fit in `dst` (store the data raw then).
pub fn compress(src: &[u8], dst: &mut [u8], table: &mut [u32; HASH_ENTRIES]) -> Option<usize> {
    let n = src.len();
    let mut out = Out { buf: dst, pos: 0 };
    if n < MFLIMIT + 1 {
        out.sequence(src, None)?;
        return Some(out.pos);
    }
    table.fill(0);
    let mflimit = n - MFLIMIT;
    let matchlimit = n - LAST_LITERALS;
    let mut anchor = 0usize;
    let mut i = 1usize;
    table[hash(read32(src, 0))] = 0;
    while i < mflimit {
        let seq = read32(src, i);
        let h = hash(seq);
        let cand = table[h] as usize;
        table[h] = i as u32;
        if cand < i && i - cand <= 65535 && read32(src, cand) == seq {
            let (mut s, mut c) = (i, cand);
            while s > anchor && c > 0 && src[s - 1] == src[c - 1] {
                s -= 1;
                c -= 1;
            }
            let mut len = MIN_MATCH + (i - s);
            // Extend forward 8 bytes at a time.
            while s + len + 8 <= matchlimit {
                let a = u64::from_le_bytes(src[s + len..s + len + 8].try_into().ok()?);
                let b = u64::from_le_bytes(src[c + len..c + len + 8].try_into().ok()?);
                let x = a ^ b;
                if x != 0 {
                    len += (x.trailing_zeros() / 8) as usize;
                    break;
                }
                len += 8;
            }
            while s + len < matchlimit && src[s + len] == src[c + len] {
                len += 1;
            }
            if s + len > matchlimit {
                len = matchlimit - s;
            }
            out.sequence(&src[anchor..s], Some(((s - c) as u16, len)))?;
            i = s + len;
            anchor = i;
            if i >= 2 && i - 2 < mflimit {
                table[hash(read32(src, i - 2))] = (i - 2) as u32;
            }
        } else {
            i += 1 + ((i - anchor) >> 6);
        }
    }
    out.sequence(&src[anchor..], None)?;
    Some(out.pos)
}

/// Decompress a block produced by [`compress`] into exactly `out.len()` bytes.
pub fn decompress(src: &[u8], out: &mut [u8]) -> Result<(), ()> {
    match lz4_flex::block::decompress_into(src, out) {
        Ok(n) if n == out.len() => Ok(()),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(data: &[u8]) {
        let mut t = Box::new([0u32; HASH_ENTRIES]);
        let mut c = vec![0u8; data.len() + data.len() / 255 + 64];
        let n = compress(data, &mut c, &mut t).expect("fits in the bound");
        let mut d = vec![0u8; data.len()];
        decompress(&c[..n], &mut d).expect("valid block");
        assert_eq!(d, data);
        // Our blocks also decode with lz4_flex's allocating API (format check).
        assert_eq!(lz4_flex::block::decompress(&c[..n], data.len()).unwrap(), data);
    }

    #[test]
    fn roundtrips_typical_pages() {
        roundtrip(&[]);
        roundtrip(&[7; 5]);
        roundtrip(&[0; 4096]);
        let pat: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        roundtrip(&pat);
        let words: Vec<u8> = (0..4096u32).flat_map(|i| (i / 64).to_le_bytes()).collect();
        roundtrip(&words);
        let mut x = 0x1234_5678u64;
        let rnd: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        roundtrip(&rnd);
    }

    #[test]
    fn small_output_buffer_is_reported() {
        let mut t = Box::new([0u32; HASH_ENTRIES]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let rnd: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let mut c = vec![0u8; 4096];
        assert!(compress(&rnd, &mut c, &mut t).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn roundtrips_arbitrary(data in proptest::collection::vec(0u8..4, 0..9000)) {
            roundtrip(&data);
        }
        #[test]
        fn roundtrips_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            roundtrip(&data);
        }
    }
}
