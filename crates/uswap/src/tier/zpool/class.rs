//! One size class of the allocator (zsmalloc's `size_class`): its zspages, the objects carved
//! out of them with a free list threaded through their headers, the four fullness groups of
//! its partly used zspages (allocation takes from the fullest group), and the emptied zspages
//! it keeps for reuse within the pool's [`SpareBudget`].
//!
//! Locking: none taken here. A [`Class`] lives in the pool's mutex of that class
//! (`PoolClass`), and every method runs with it held; getting or giving back a zspage takes
//! the page heap's locks under it. The [`SpareBudget`] is an atomic shared by the classes and
//! the large area.

use super::layout::{class_size, pages_per_zspage, FULL, HDR, NO_OBJ, NR_GROUPS, USED, ZS_BITS};
use crate::page_heap::{self, PageVec};
use crate::swap_table::PAGE_SIZE;
use crate::sync::{AtomicU64, Ordering};
use std::ptr::NonNull;

/// A zspage: `pages` contiguous 4 KiB pages carved into objects of one class.
#[derive(Clone, Copy)]
pub(super) struct Zspage {
    pub(super) mem: NonNull<u8>,
    pub(super) inuse: u16,
    pub(super) free_head: u16,
    pub(super) group: u8,
    pub(super) pos: u32,
    pub(super) draining: bool,
    /// Loads decoding an object of this zspage in place (see [`ZPool::pin`](super::ZPool::pin)): compaction
    /// moves nothing out of it meanwhile.
    pub(super) pins: u16,
    /// An object of it was stored or loaded since the last [`ZPool::mark_idle`](super::ZPool::mark_idle): its objects
    /// are not idle (zram's per-slot idle flag, kept per zspage; see `recompress`).
    pub(super) touched: bool,
    /// A recompression pass went through it and no object was stored into it since: nothing
    /// in it is worth another try.
    pub(super) swept: bool,
}

pub(super) struct Class {
    pub(super) size: usize,
    pub(super) pages: usize,
    pub(super) objs: u16,
    pub(super) zspages: PageVec<Option<Zspage>>,
    pub(super) free_ids: PageVec<u32>,
    pub(super) groups: [PageVec<u32>; NR_GROUPS],
    pub(super) used_objs: u64,
    /// Up to [`SPARE_ZSPAGES`] emptied zspages kept for the next `new_zspage`, so a pool whose
    /// size hovers (the steady state of a pager under its limit) does not release and fault in
    /// memory on every swap-out/swap-in pair. Bounded pool-wide by [`SpareBudget`] and counted
    /// in the pool's memory use: it is resident.
    pub(super) spare: Vec<NonNull<u8>>,
}

/// Empty zspages a class keeps (see `Class::spare`).
pub(super) const SPARE_ZSPAGES: usize = 8;

/// Memory of emptied zspages and large objects kept for reuse (see `Class::spare`,
/// `LargeArea::spare`), at most [`SPARE_MAX_BYTES`] per pool.
#[derive(Default)]
pub(super) struct SpareBudget {
    pub(super) bytes: AtomicU64,
}

/// Bytes of spare memory a pool keeps resident at most.
pub(super) const SPARE_MAX_BYTES: u64 = 2 << 20;

impl SpareBudget {
    /// Reserve `n` bytes of the budget; false when it would exceed the maximum.
    pub(super) fn take(&self, n: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| (b + n <= SPARE_MAX_BYTES).then_some(b + n))
            .is_ok()
    }
    pub(super) fn give(&self, n: u64) {
        self.bytes.fetch_sub(n, Ordering::Relaxed);
    }
}

// SAFETY: a Class owns its zspages' memory exclusively; it is only touched under its mutex.
unsafe impl Send for Class {}

impl Class {
    pub(super) fn new(c: usize) -> Self {
        let size = class_size(c);
        let pages = pages_per_zspage(size);
        Class {
            size,
            pages,
            objs: (pages * PAGE_SIZE / size) as u16,
            zspages: PageVec::new(),
            free_ids: PageVec::new(),
            groups: Default::default(),
            used_objs: 0,
            spare: Vec::with_capacity(SPARE_ZSPAGES),
        }
    }
    pub(super) fn zspage_bytes(&self) -> usize {
        self.pages * PAGE_SIZE
    }
    pub(super) fn group_of(&self, inuse: u16) -> u8 {
        if inuse >= self.objs {
            FULL
        } else {
            ((usize::from(inuse) * NR_GROUPS) / usize::from(self.objs)) as u8
        }
    }
    pub(super) fn obj_ptr(&self, zs: &Zspage, obj: u16) -> *mut u8 {
        // SAFETY: obj < objs, so obj*size + size <= pages*PAGE_SIZE: inside the allocation.
        unsafe { zs.mem.as_ptr().add(usize::from(obj) * self.size) }
    }
    pub(super) fn read_hdr(&self, zs: &Zspage, obj: u16) -> u64 {
        let mut b = [0u8; HDR];
        // SAFETY: the object (>= 48 bytes) is inside the zspage; the bytes were initialised
        // (zeroed allocation, then written).
        unsafe { std::ptr::copy_nonoverlapping(self.obj_ptr(zs, obj), b.as_mut_ptr(), HDR) };
        u64::from_le_bytes(b)
    }
    pub(super) fn write_hdr(&self, zs: &Zspage, obj: u16, h: u64) {
        // SAFETY: as in read_hdr; we hold the class lock (exclusive access to zspage memory).
        unsafe { std::ptr::copy_nonoverlapping(h.to_le_bytes().as_ptr(), self.obj_ptr(zs, obj), HDR) };
    }
    pub(super) fn group_remove(&mut self, id: u32) {
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        let (g, pos) = (zs.group, zs.pos as usize);
        if g == FULL || zs.draining {
            return;
        }
        let v = &mut self.groups[usize::from(g)];
        v.swap_remove(pos);
        if let Some(&moved) = v.get(pos) {
            self.zspages[moved as usize].as_mut().expect("zspage").pos = pos as u32;
        }
    }
    pub(super) fn group_insert(&mut self, id: u32) {
        let objs = self.objs;
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        if zs.draining {
            return;
        }
        let g = if zs.inuse >= objs { FULL } else { ((usize::from(zs.inuse) * NR_GROUPS) / usize::from(objs)) as u8 };
        let pos = if g == FULL {
            0
        } else {
            let v = &mut self.groups[usize::from(g)];
            v.push(id);
            v.len() - 1
        };
        let zs = self.zspages[id as usize].as_mut().expect("zspage");
        zs.group = g;
        zs.pos = pos as u32;
    }
    /// Allocate an object slot in an existing partial zspage (fullest group first).
    pub(super) fn alloc_existing(&mut self) -> Option<(u32, u16)> {
        let id = (0..NR_GROUPS).rev().find_map(|g| self.groups[g].last().copied())?;
        Some((id, self.take_slot(id)))
    }
    pub(super) fn take_slot(&mut self, id: u32) -> u16 {
        self.group_remove(id);
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        let obj = zs.free_head;
        debug_assert_ne!(obj, NO_OBJ);
        let next = (self.read_hdr(zs, obj) & 0xffff) as u16;
        let zs = self.zspages[id as usize].as_mut().expect("zspage");
        zs.free_head = next;
        zs.inuse += 1;
        self.used_objs += 1;
        self.group_insert(id);
        obj
    }
    /// Create a zspage; returns its id, or None if the id space or memory is exhausted.
    pub(super) fn new_zspage(&mut self, spare: &SpareBudget) -> Option<u32> {
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None if self.zspages.len() < (1 << ZS_BITS) => {
                self.zspages.push(None);
                (self.zspages.len() - 1) as u32
            }
            None => return None,
        };
        let mem = match self.spare.pop() {
            Some(m) => {
                spare.give(self.zspage_bytes() as u64);
                m
            }
            None => match page_heap::heap().alloc(self.zspage_bytes()) {
                Some(m) => m,
                None => {
                    self.free_ids.push(id);
                    return None;
                }
            },
        };
        let zs = Zspage {
            mem,
            inuse: 0,
            free_head: 0,
            group: 0,
            pos: 0,
            draining: false,
            pins: 0,
            touched: false,
            swept: false,
        };
        // Thread the free list: object i -> i+1, last -> NO_OBJ.
        for i in 0..self.objs {
            let next = if i + 1 == self.objs { NO_OBJ } else { i + 1 };
            self.write_hdr(&zs, i, u64::from(next));
        }
        self.zspages[id as usize] = Some(zs);
        self.group_insert(id);
        Some(id)
    }
    /// Validate a handle's zspage/object and return its header if it is in use.
    pub(super) fn used_hdr(&self, zs_id: u32, obj: u16) -> Option<u64> {
        let zs = self.zspages.get(zs_id as usize)?.as_ref()?;
        if obj >= self.objs {
            return None;
        }
        let h = self.read_hdr(zs, obj);
        (h & USED != 0).then_some(h)
    }
    /// Free an object; returns true if its zspage was released (bytes = zspage_bytes).
    /// An emptied zspage is kept for reuse when `spare` has room, else released. A draining
    /// zspage is never released here, even empty: its id and slots stay reserved until the
    /// pass that drains it calls [`Class::undrain`], so a handle that pass still holds cannot
    /// come to name a new object (no ABA through a reused zspage id or slot).
    pub(super) fn free_obj(&mut self, id: u32, obj: u16, spare: Option<&SpareBudget>) -> bool {
        self.group_remove(id);
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        self.write_hdr(zs, obj, u64::from(zs.free_head));
        let zs = self.zspages[id as usize].as_mut().expect("zspage");
        zs.free_head = obj;
        zs.inuse -= 1;
        self.used_objs -= 1;
        if zs.inuse == 0 && !zs.draining {
            self.release(id, spare);
            return true;
        }
        self.group_insert(id);
        false
    }
    /// End of a pass over a draining zspage: back into its fullness group, or released if it
    /// was emptied meanwhile (returns true then; bytes = zspage_bytes). No-op if not draining.
    pub(super) fn undrain(&mut self, id: u32) -> bool {
        let Some(zs) = self.zspages.get_mut(id as usize).and_then(|z| z.as_mut()).filter(|z| z.draining) else {
            return false;
        };
        zs.draining = false;
        if zs.inuse == 0 {
            self.release(id, None);
            return true;
        }
        self.group_insert(id);
        false
    }
    /// Release the empty zspage `id` (out of every group list already).
    pub(super) fn release(&mut self, id: u32, spare: Option<&SpareBudget>) {
        let zs = self.zspages[id as usize].take().expect("zspage");
        if self.spare.len() < SPARE_ZSPAGES && spare.is_some_and(|b| b.take(self.zspage_bytes() as u64)) {
            self.spare.push(zs.mem);
        } else {
            // SAFETY: allocated in new_zspage with this size; no handle names it now.
            unsafe { page_heap::heap().free(zs.mem, self.zspage_bytes()) };
        }
        self.free_ids.push(id);
    }
}

impl Drop for Class {
    fn drop(&mut self) {
        let bytes = self.zspage_bytes();
        for m in self.spare.drain(..) {
            // SAFETY: allocated in new_zspage with this size, freed exactly once here.
            unsafe { page_heap::heap().free(m, bytes) };
        }
        for zs in self.zspages.iter().flatten() {
            // SAFETY: allocated in new_zspage with this size, freed exactly once here.
            unsafe { page_heap::heap().free(zs.mem, bytes) };
        }
    }
}
