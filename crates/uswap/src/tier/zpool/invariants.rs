//! The allocator's consistency check for tests ([`ZPool::check_invariants`]): free lists,
//! fullness groups, pins and counters agree with the zspages, and the pool's total size with
//! its allocations.
//!
//! Locking: takes each class mutex in turn, then the large-area mutex; never two at once.

use super::layout::{FULL, NO_OBJ, USED};
use super::ZPool;
use crate::sync::{lock, Ordering};

impl ZPool {
    /// Check the allocator's internal accounting; Err describes the first inconsistency.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut total = 0u64;
        for (c, m) in self.classes.iter().enumerate() {
            let cl = lock(m);
            let mut used = 0u64;
            for (id, zs) in cl.zspages.iter().enumerate() {
                let Some(zs) = zs else { continue };
                total += cl.zspage_bytes() as u64;
                let mut free = 0;
                let mut f = zs.free_head;
                while f != NO_OBJ {
                    if f >= cl.objs || free > cl.objs {
                        return Err(format!("class {c} zspage {id}: bad free list"));
                    }
                    free += 1;
                    f = (cl.read_hdr(zs, f) & 0xffff) as u16;
                }
                let marked = (0..cl.objs).filter(|&o| cl.read_hdr(zs, o) & USED != 0).count() as u16;
                if marked != zs.inuse || free + zs.inuse != cl.objs {
                    return Err(format!("class {c} zspage {id}: inuse {} marked {marked} free {free}", zs.inuse));
                }
                if zs.inuse == 0 {
                    return Err(format!("class {c} zspage {id}: empty zspage kept"));
                }
                if zs.pins != 0 {
                    return Err(format!("class {c} zspage {id}: {} pins left by loads", zs.pins));
                }
                if !zs.draining && zs.group != cl.group_of(zs.inuse) {
                    return Err(format!("class {c} zspage {id}: wrong fullness group"));
                }
                if zs.group != FULL
                    && !zs.draining
                    && cl.groups[usize::from(zs.group)].get(zs.pos as usize) != Some(&(id as u32))
                {
                    return Err(format!("class {c} zspage {id}: not in its group list"));
                }
                used += u64::from(zs.inuse);
            }
            if used != cl.used_objs {
                return Err(format!("class {c}: used {used} != counter {}", cl.used_objs));
            }
            let listed: usize = cl.groups.iter().map(|g| g.len()).sum();
            let partial = cl.zspages.iter().flatten().filter(|z| z.group != FULL && !z.draining).count();
            if listed != partial {
                return Err(format!("class {c}: {listed} listed, {partial} partial"));
            }
        }
        total += lock(&self.large).slots.iter().flatten().map(|l| l.alloc as u64).sum::<u64>();
        let counted = self.total.load(Ordering::Relaxed);
        if total != counted {
            return Err(format!("pool_total_size {counted} != sum of allocations {total}"));
        }
        Ok(())
    }
}
