//! Placing and freeing objects: a compressed copy goes into an object of its (merged) size
//! class, in a partly used zspage or a new one, or into the large area; a freed object's
//! memory goes back to its class or to the area, kept as spare within the budget or given back
//! to the page heap; and the lookups by handle (owner, address range).
//!
//! Locking: each function takes one class mutex or the large-area mutex at a time, briefly
//! (never two, never across compression or a callback; the page heap's locks may be taken
//! under it); `pool_total_size` is an atomic updated once the lock is dropped.

use super::codec::Scratch;
use super::large::{Large, SPARE_LARGE};
use super::layout::{handle, hdr_owner, split, CLASS_MAX, HDR, LARGE_CLASS, OBJ_BITS, ZS_BITS};
use super::ZPool;
use crate::backend::Stored;
use crate::error::TierError;
use crate::page_heap;
use crate::swap_table::{SwapEntry, PAGE_SIZE};
use crate::sync::{lock, Ordering};

impl ZPool {
    /// Place `s.buf[..HDR+len]` (header filled in here) into a class or the large area. A
    /// `fresh` object (a store, not a recompressed copy) marks its zspage touched and unswept.
    pub(super) fn place(&self, s: &mut Scratch, hdr: u64, len: usize, fresh: bool) -> Result<Stored, TierError> {
        let size = HDR + len;
        s.buf[..HDR].copy_from_slice(&hdr.to_le_bytes());
        if size <= CLASS_MAX {
            let c = self.class_for(size);
            let mut cl = lock(&self.classes[c]);
            let (id, obj, grown) = match cl.alloc_existing() {
                Some((id, obj)) => (id, obj, 0),
                None => {
                    let zb = cl.zspage_bytes() as u64;
                    if self.would_overflow(zb) {
                        return Err(TierError::Reject);
                    }
                    let id = cl.new_zspage(&self.spare).ok_or(TierError::Reject)?;
                    (id, cl.take_slot(id), zb)
                }
            };
            if fresh {
                let zs = cl.zspages[id as usize].as_mut().expect("zspage");
                zs.touched = true;
                zs.swept = false;
            }
            let zs = cl.zspages[id as usize].as_ref().expect("zspage");
            // SAFETY: the object slot is `cl.size >= size` bytes inside the zspage, we hold the
            // class lock, and s.buf holds at least `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(s.buf.as_ptr(), cl.obj_ptr(zs, obj), size) };
            let bytes = cl.size as u64;
            drop(cl);
            self.total.fetch_add(grown, Ordering::Relaxed);
            return Ok(Stored { handle: handle(c, id, obj), bytes });
        }
        let alloc = size.next_multiple_of(PAGE_SIZE);
        if self.would_overflow(alloc as u64) {
            return Err(TierError::Reject);
        }
        // Reuse the smallest spare allocation that fits and wastes at most a quarter.
        let reuse = {
            let mut la = lock(&self.large);
            let best = (0..la.spare.len())
                .filter(|&i| la.spare[i].1 >= alloc && la.spare[i].1 <= alloc + alloc / 4)
                .min_by_key(|&i| la.spare[i].1);
            best.map(|i| la.spare.swap_remove(i))
        };
        let (mem, alloc) = match reuse {
            Some((m, a)) => {
                self.spare.give(a as u64);
                (m, a)
            }
            None => (page_heap::heap().alloc(alloc).ok_or(TierError::Reject)?, alloc),
        };
        // SAFETY: `mem` has `alloc >= size` bytes, s.buf has `size` bytes, they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(s.buf.as_ptr(), mem.as_ptr(), size) };
        let mut la = lock(&self.large);
        let idx = match la.free.pop() {
            Some(i) => i,
            None => {
                la.slots.push(None);
                (la.slots.len() - 1) as u32
            }
        };
        la.slots[idx as usize] = Some(Large { mem, alloc, len, hdr, touched: fresh, swept: false, held: false });
        drop(la);
        self.total.fetch_add(alloc as u64, Ordering::Relaxed);
        Ok(Stored { handle: LARGE_CLASS << (ZS_BITS + OBJ_BITS) | u64::from(idx), bytes: alloc as u64 })
    }

    /// Free the object `h`'s memory (`pool_total_size` follows; the page counters are the
    /// caller's): returns its header and the bytes it took, None for a bad handle. `keep`:
    /// emptied memory may be kept as spare (a free by the engine; passes give it back).
    pub(super) fn free_object(&self, h: u64, keep: bool) -> Option<(u64, u64)> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
            let mut la = lock(&self.large);
            let l = la.slots.get_mut(idx).and_then(Option::take)?;
            if !l.held {
                la.free.push(idx as u32);
            }
            let kept = keep && la.spare.len() < SPARE_LARGE && self.spare.take(l.alloc as u64);
            if kept {
                la.spare.push((l.mem, l.alloc));
            }
            drop(la);
            self.total.fetch_sub(l.alloc as u64, Ordering::Relaxed);
            if !kept {
                // SAFETY: allocated in place() with this size; removed from the area above.
                unsafe { page_heap::heap().free(l.mem, l.alloc) };
            }
            return Some((l.hdr, l.alloc as u64));
        }
        let mut cl = lock(self.classes.get(c)?);
        let hdr = cl.used_hdr(zs_id, obj)?;
        let released = cl.free_obj(zs_id, obj, keep.then_some(&self.spare));
        let (size, zb) = (cl.size as u64, cl.zspage_bytes() as u64);
        drop(cl);
        if released {
            self.total.fetch_sub(zb, Ordering::Relaxed);
        }
        Some((hdr, size))
    }

    /// Count `pages` freed; when the pool holds nothing more, give its spare memory back too
    /// (an empty pool holds no memory).
    pub(super) fn note_freed(&self, pages: u64) {
        if self.stored_pages.fetch_sub(pages, Ordering::Relaxed) == pages {
            self.release_spares();
        }
    }

    pub(super) fn release_spares(&self) {
        for m in self.classes.iter() {
            let mut cl = lock(m);
            let bytes = cl.zspage_bytes();
            while let Some(z) = cl.spare.pop() {
                self.spare.give(bytes as u64);
                // SAFETY: a spare zspage of this class, allocated with this size; no handle names it.
                unsafe { page_heap::heap().free(z, bytes) };
            }
        }
        let mut la = lock(&self.large);
        while let Some((m, a)) = la.spare.pop() {
            self.spare.give(a as u64);
            // SAFETY: a spare large allocation of this size; no handle names it.
            unsafe { page_heap::heap().free(m, a) };
        }
    }

    /// The owner (virtual slot) recorded in the object's header.
    pub fn owner_of(&self, h: u64) -> Result<SwapEntry, TierError> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            let la = lock(&self.large);
            let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
            return la
                .slots
                .get(idx)
                .and_then(|x| x.as_ref())
                .map(|l| SwapEntry(hdr_owner(l.hdr)))
                .ok_or(TierError::BadHandle(h));
        }
        let cl = lock(&self.classes[c]);
        cl.used_hdr(zs_id, obj).map(|hd| SwapEntry(hdr_owner(hd))).ok_or(TierError::BadHandle(h))
    }

    /// Address range (start, length of the class slot) of an object, for overlap checks in
    /// tests. None for a bad handle.
    #[doc(hidden)]
    pub fn object_span(&self, h: u64) -> Option<(usize, usize)> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            let la = lock(&self.large);
            let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
            return la.slots.get(idx)?.as_ref().map(|l| (l.mem.as_ptr() as usize, l.alloc));
        }
        let cl = lock(&self.classes[c]);
        cl.used_hdr(zs_id, obj)?;
        let zs = cl.zspages[zs_id as usize].as_ref()?;
        Some((cl.obj_ptr(zs, obj) as usize, cl.size))
    }
}
