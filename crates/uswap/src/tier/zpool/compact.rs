//! Compaction of a size class (zsmalloc's `zs_compact`): the sparsest partly used zspages are
//! drained into the free slots of the others, every move reported through the
//! [`Relocate`](crate::backend::Relocate) hook, and the emptied zspages given back to the page
//! heap (not kept as spare: compaction is there to give memory back).
//!
//! A zspage being drained is out of the fullness groups and marked draining, so no store
//! reuses its slots and it is not released before the pass ends (no ABA through its handles);
//! a zspage a load has pinned is left alone, and an old object is freed only once no load has
//! its zspage pinned.
//!
//! Locking: a pass runs under the pool's compaction mutex (`PoolCompact`, taken with
//! `try_lock` by [`Backend::compact`](crate::backend::Backend::compact)); it takes the class
//! mutex briefly to choose sources, to copy one object and to free one, never across the
//! relocate hook.

use super::layout::{handle, hdr_owner, split, USED};
use super::ZPool;
use crate::swap_table::SwapEntry;
use crate::sync::{lock, Ordering};

impl ZPool {
    /// One compaction pass over class `c`; returns (objects moved).
    pub(super) fn compact_class(&self, c: usize, relocate: &mut dyn FnMut(SwapEntry, u64, u64) -> bool) -> u64 {
        // Pick sources: the sparsest partial zspages whose objects fit in the free slots of
        // the others.
        let sources: Vec<u32> = {
            let mut cl = lock(&self.classes[c]);
            let mut partial: Vec<(u16, u32)> = cl
                .groups
                .iter()
                .flatten()
                .map(|&id| cl.zspages[id as usize].as_ref().map(|z| (z.inuse, z.pins, id)).expect("zspage"))
                .filter(|&(_, pins, _)| pins == 0)
                .map(|(inuse, _, id)| (inuse, id))
                .collect();
            if partial.len() < 2 {
                return 0;
            }
            partial.sort_unstable();
            let objs = cl.objs;
            let mut free_dst: u64 = partial.iter().map(|&(u, _)| u64::from(objs - u)).sum();
            let mut srcs = Vec::new();
            for &(inuse, id) in &partial {
                // Moving this zspage's objects removes its own free slots from the destinations.
                let own_free = u64::from(objs - inuse);
                if u64::from(inuse) > free_dst.saturating_sub(own_free) {
                    break;
                }
                free_dst -= own_free + u64::from(inuse);
                srcs.push(id);
            }
            for &id in &srcs {
                cl.group_remove(id);
                cl.zspages[id as usize].as_mut().expect("zspage").draining = true;
            }
            srcs
        };
        let mut moved = 0;
        for src in sources {
            let mut next = 0u16;
            loop {
                // Copy one object to a destination under the lock.
                let (old, new, owner) = {
                    let mut cl = lock(&self.classes[c]);
                    // A load pinned the zspage since: leave the rest of it alone.
                    let Some(zs) = cl.zspages[src as usize].as_ref().filter(|z| z.draining && z.pins == 0) else {
                        break;
                    };
                    let Some(obj) = (next..cl.objs).find(|&o| cl.read_hdr(zs, o) & USED != 0) else { break };
                    next = obj + 1;
                    let Some((dst, dobj)) = cl.alloc_existing() else { break };
                    // The moved object may be one a recompression pass has not tried yet.
                    cl.zspages[dst as usize].as_mut().expect("zspage").swept = false;
                    let size = cl.size;
                    let sp = cl.obj_ptr(cl.zspages[src as usize].as_ref().expect("zspage"), obj);
                    let dp = cl.obj_ptr(cl.zspages[dst as usize].as_ref().expect("zspage"), dobj);
                    // SAFETY: two distinct object slots of `size` bytes in live zspages of this
                    // class; we hold the class lock.
                    unsafe { std::ptr::copy_nonoverlapping(sp, dp, size) };
                    let hdr = cl.read_hdr(cl.zspages[src as usize].as_ref().expect("zspage"), obj);
                    (handle(c, src, obj), handle(c, dst, dobj), hdr_owner(hdr))
                };
                let ok = relocate(SwapEntry(owner), old, new);
                let mut cl = lock(&self.classes[c]);
                // A load may have pinned the old object's zspage (with the old handle) before
                // the relocation: let it finish before the old object is freed.
                while ok && cl.zspages[src as usize].as_ref().is_some_and(|z| z.pins > 0) {
                    drop(cl);
                    std::thread::yield_now();
                    cl = lock(&self.classes[c]);
                }
                let (id, o) = if ok { (src, split(old).2) } else { (split(new).1, split(new).2) };
                // The old object may have been freed by the engine meanwhile (then relocate
                // failed and we free the new copy, which is still ours).
                // Compaction is there to give memory back: emptied zspages are not kept.
                if cl.used_hdr(id, o).is_some() && cl.free_obj(id, o, None) {
                    let zb = cl.zspage_bytes() as u64;
                    self.total.fetch_sub(zb, Ordering::Relaxed);
                    self.compacted_bytes.fetch_add(zb, Ordering::Relaxed);
                }
                if ok {
                    moved += 1;
                }
            }
            let mut cl = lock(&self.classes[c]);
            if cl.undrain(src) {
                let zb = cl.zspage_bytes() as u64;
                self.total.fetch_sub(zb, Ordering::Relaxed);
                self.compacted_bytes.fetch_add(zb, Ordering::Relaxed);
            }
        }
        moved
    }
}
