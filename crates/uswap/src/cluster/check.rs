//! The space's invariants checked against its state, for tests and debugging: each cluster's
//! count, bitmap, table, extend table, flag and list agree, and the space's totals add up.
//!
//! Locking: takes each cluster's lock in turn and the list lock under it (cluster -> list);
//! meaningful only while no other thread uses the space.

use super::frag::bucket_of;
use super::state::{
    bit, l_frag, l_nonfull, ClusterFlag, L_DISCARD, L_FOREIGN, L_FREE, L_FULL, L_SHARED, N, T_DISCARDING,
};
use super::{FragPolicy, SwapSpace};
use crate::swap_table::{Word, COUNT_MAX};
use crate::sync::{lock, Ordering};

impl SwapSpace {
    /// Check every invariant of the space against its state; for tests and debugging. Call
    /// only while no other thread uses the space. Returns a description of the first
    /// violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut used_total = 0usize;
        let mut tables = 0usize;
        let mut extends = 0usize;
        for (ci, c) in self.clusters.iter().enumerate() {
            let st = c.state.lock();
            let l = lock(&self.lists);
            let on = l.on(ci as u32);
            drop(l);
            let count = st.count as usize;
            used_total += count;
            let pop: u32 = st.used.iter().map(|w| w.count_ones()).sum();
            if pop as usize != count {
                return Err(format!("cluster {ci}: count {count} but bitmap has {pop}"));
            }
            let p = c.table.load(Ordering::Acquire);
            if (count > 0) == p.is_null() {
                return Err(format!("cluster {ci}: count {count} but table present = {}", !p.is_null()));
            }
            if !p.is_null() {
                tables += 1;
                // SAFETY: we hold the cluster lock, so the table cannot be retired meanwhile.
                let t = unsafe { &*p };
                let mut sat = 0;
                for off in 0..N {
                    let w = Word(t.words[off].load(Ordering::Relaxed));
                    if w.is_free() == bit(&st.used, off) {
                        return Err(format!("cluster {ci} slot {off}: word {w:?} but used bit {}", bit(&st.used, off)));
                    }
                    if w.count() == COUNT_MAX {
                        sat += 1;
                        match &st.extend {
                            Some(x) if x[off] >= u32::from(COUNT_MAX) => {}
                            _ => return Err(format!("cluster {ci} slot {off}: saturated without extend count")),
                        }
                    } else if let Some(x) = &st.extend {
                        if x[off] != 0 {
                            return Err(format!("cluster {ci} slot {off}: stale extend count {}", x[off]));
                        }
                    }
                }
                if sat != st.extend_used {
                    return Err(format!("cluster {ci}: extend_used {} but {sat} saturated", st.extend_used));
                }
            }
            if st.extend.is_some() {
                extends += 1;
            }
            if st.extend.is_some() != (st.extend_used > 0) {
                return Err(format!(
                    "cluster {ci}: extend table {} with {} users",
                    st.extend.is_some(),
                    st.extend_used
                ));
            }
            let want: Option<u16> = match st.flag {
                ClusterFlag::None => return Err(format!("cluster {ci}: isolated (NONE) at rest")),
                ClusterFlag::Free if count == 0 && st.order == 0 => Some(L_FREE),
                ClusterFlag::Discard if count == 0 => {
                    if on == T_DISCARDING {
                        None
                    } else {
                        Some(L_DISCARD)
                    }
                }
                ClusterFlag::Nonfull if count > 0 && count < N => Some(l_nonfull(st.order)),
                ClusterFlag::Frag if count > 0 && count < N => {
                    let b = if self.cfg.frag_policy == FragPolicy::Buckets { bucket_of(st.count) } else { 0 };
                    if st.bucket != b {
                        return Err(format!("cluster {ci}: bucket {} but count {count} wants {b}", st.bucket));
                    }
                    Some(l_frag(st.order, b))
                }
                ClusterFlag::Full if count == N => Some(L_FULL),
                ClusterFlag::Shared if count > 0 => Some(L_SHARED),
                ClusterFlag::Foreign if count == 0 && st.order == 0 => Some(L_FOREIGN),
                f => return Err(format!("cluster {ci}: flag {f:?} with count {count} order {}", st.order)),
            };
            if let Some(want) = want {
                if on != want {
                    return Err(format!("cluster {ci}: flag {:?} (list {want}) but on list {on}", st.flag));
                }
            }
        }
        lock(&self.lists).check()?;
        if used_total != self.used_slots() {
            return Err(format!("used_slots {} but clusters hold {used_total}", self.used_slots()));
        }
        if tables != self.live_tables() || extends != self.live_extend_tables() {
            return Err(format!(
                "counted {tables} tables / {extends} extend tables, accounting says {} / {}",
                self.live_tables(),
                self.live_extend_tables()
            ));
        }
        Ok(())
    }
}
