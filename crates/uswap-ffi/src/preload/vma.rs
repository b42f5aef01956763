//! The address-space allocator of the managed heap: page-granular ranges of one big pager region,
//! first fit with coalescing. dlmalloc's segments and the program's anonymous `mmap`s are carved
//! from it; freed ranges are discarded (their swap entries released, pages dropped) before they
//! return to the free list, so a range handed out is always zero-fill.
//!
//! Locking: none of its own; every call is made with [`crate::BIG`] held.

use std::collections::BTreeMap;

/// Free ranges of `[base, base + len)`.
pub struct Vma {
    free: BTreeMap<usize, usize>,
    /// Bytes handed out.
    pub used: usize,
}

impl Vma {
    /// All of `[base, base + len)` free.
    pub fn new(base: usize, len: usize) -> Vma {
        let mut free = BTreeMap::new();
        free.insert(base, len);
        Vma { free, used: 0 }
    }

    /// Take `len` bytes (a multiple of 4096) aligned to `align` (a power of two).
    pub fn alloc(&mut self, len: usize, align: usize) -> Option<usize> {
        let (s, l, a) = self.free.iter().find_map(|(&s, &l)| {
            let a = s.checked_add(align - 1)? & !(align - 1);
            (a.checked_add(len)? <= s + l).then_some((s, l, a))
        })?;
        self.free.remove(&s);
        if a > s {
            self.free.insert(s, a - s);
        }
        if a + len < s + l {
            self.free.insert(a + len, s + l - (a + len));
        }
        self.used += len;
        Some(a)
    }

    /// Take exactly `[start, start + len)` if it is free (growing a mapping in place).
    pub fn take(&mut self, start: usize, len: usize) -> bool {
        let Some((&s, &l)) = self.free.range(..=start).next_back() else { return false };
        if start + len > s + l {
            return false;
        }
        self.free.remove(&s);
        if start > s {
            self.free.insert(s, start - s);
        }
        if start + len < s + l {
            self.free.insert(start + len, s + l - (start + len));
        }
        self.used += len;
        true
    }

    /// Return `[start, start + len)`.
    pub fn free(&mut self, start: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.used -= len;
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            debug_assert!(ps + pl <= s, "double free of {s:#x}");
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
    }

    /// Number of free ranges (fragmentation, for statistics).
    pub fn free_ranges(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesce() {
        let mut v = Vma::new(1 << 20, 1 << 20);
        let a = v.alloc(8192, 4096).unwrap();
        let b = v.alloc(4096, 65536).unwrap();
        assert_eq!(a, 1 << 20);
        assert_eq!(b % 65536, 0);
        assert!(b >= a + 8192);
        let c = v.alloc(4096, 4096).unwrap();
        assert_eq!(c, a + 8192, "first fit reuses the hole before b");
        v.free(a, 8192);
        v.free(c, 4096);
        v.free(b, 4096);
        assert_eq!(v.used, 0);
        assert_eq!(v.free_ranges(), 1);
        assert!(v.alloc(1 << 20, 4096).is_some());
        assert!(v.alloc(4096, 4096).is_none());
    }

    #[test]
    fn take_in_place() {
        let mut v = Vma::new(0x10000, 0x10000);
        let a = v.alloc(0x1000, 0x1000).unwrap();
        assert!(v.take(a + 0x1000, 0x2000));
        assert!(!v.take(a + 0x2000, 0x1000));
        v.free(a, 0x3000);
        assert_eq!(v.free_ranges(), 1);
    }
}
