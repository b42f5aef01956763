//! The allocator (the kernel's `cluster_alloc_swap_entry`): the shard's current cluster for
//! the order first, then the order's nonfull list, the free list, its fragment lists under the
//! fragment policy; order 0 then steals from any usable cluster and, last, waits for a locked
//! one. One locked cluster is scanned for a free aligned window, which is filled with the
//! caller's words.
//!
//! Locking: an allocation holds its shard lock throughout (lock order: shard -> cluster ->
//! list). Under it, it locks one cluster at a time: waiting for the lock only on the fast path
//! and in the last resort of order 0, with the list lock not held; otherwise a cluster is taken
//! off a list with a `try_lock` (`relocate.rs`). The list lock is taken inside, to move the
//! cluster. `init` runs under the shard and cluster locks and must not call back into the space.

use super::frag::{bucket_prior, bucket_range, Estimate, NR_BUCKETS};
use super::list::NIL;
use super::state::{l_frag, l_nonfull, set_bits, usable, window_free, ClusterFlag, ClusterState, L_FREE, N};
use super::stats::{ShardStats, Source};
use super::{FragPolicy, SwapSpace};
use crate::swap_table::{SwapEntry, Word, COUNT_MAX, MAX_ORDER, NR_ORDERS};
use crate::sync::{lock, thread_shard, Ordering};
use crate::SwapError;

/// "No next slot" in [`Shard::next`].
const INVALID: u64 = u64::MAX;

/// One allocator shard (the kernel's per-CPU `percpu_swap_cluster` plus counters).
pub(super) struct Shard {
    /// Next slot to try per order in the current cluster, or `INVALID`.
    pub(super) next: [u64; NR_ORDERS],
    pub(super) stats: ShardStats,
    /// Success estimates per order and frag bucket (`frag.rs`).
    pub(super) est: [[Estimate; NR_BUCKETS]; NR_ORDERS],
}

impl Shard {
    /// A shard with no current cluster and no counts.
    pub(super) fn new() -> Shard {
        Shard {
            next: [INVALID; NR_ORDERS],
            stats: ShardStats::default(),
            est: [[Estimate::default(); NR_BUCKETS]; NR_ORDERS],
        }
    }
}

impl SwapSpace {
    /// Allocate `2^order` naturally aligned free slots in one cluster and write `init(i)`
    /// (non-free, inline count below 15) into slot `i`, all under the cluster lock.
    ///
    /// Fails with `NoSpace { order }` when no such range is found (the caller splits). An
    /// order-0 allocation only fails when no slot is free: if every cluster with a free slot
    /// was locked when tried, it waits for one (it can still fail when the only free slots are
    /// in clusters other allocators hold isolated at that instant). With `discard` on,
    /// clusters waiting on the discard list are not free yet.
    pub fn alloc(&self, order: u8, init: &mut dyn FnMut(usize) -> Word) -> Result<SwapEntry, SwapError> {
        if order > MAX_ORDER {
            return Err(SwapError::NoSpace { order });
        }
        let mut shard = lock(&self.shards[thread_shard() % self.shards.len()]);
        let r = self.alloc_locked(&mut shard, order, init);
        match r {
            Ok(_) => shard.stats.alloc[order as usize] += 1,
            Err(SwapError::NoSpace { .. }) => shard.stats.fail[order as usize] += 1,
            Err(_) => {}
        }
        r
    }

    fn alloc_locked(
        &self,
        sh: &mut Shard,
        order: u8,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<SwapEntry, SwapError> {
        let o = order as usize;
        // Fast path: the shard's current cluster for this order (`swap_alloc_fast`).
        let next = sh.next[o];
        if next != INVALID {
            let ci = (next / N as u64) as usize;
            let mut st = self.cluster(ci).state.lock();
            if usable(&st, order) {
                let start = if st.count == 0 { 0 } else { (next % N as u64) as usize };
                if let Some(e) = self.scan(ci, &mut st, start, order, sh, init)? {
                    sh.stats.src[Source::Fast as usize][o] += 1;
                    return Ok(e);
                }
            } else {
                sh.next[o] = INVALID;
            }
        }
        // Slow path (`cluster_alloc_swap_entry`).
        if self.cfg.discard {
            if let Some(e) = self.alloc_from(L_FREE, order, sh, init)? {
                sh.stats.src[Source::Free as usize][o] += 1;
                return Ok(e);
            }
        }
        if order < MAX_ORDER {
            while let Some((ci, mut st)) = self.isolate_lock(l_nonfull(order)) {
                if let Some(e) = self.scan(ci, &mut st, 0, order, sh, init)? {
                    sh.stats.src[Source::Nonfull as usize][o] += 1;
                    return Ok(e);
                }
            }
        }
        if !self.cfg.discard {
            if let Some(e) = self.alloc_from(L_FREE, order, sh, init)? {
                sh.stats.src[Source::Free as usize][o] += 1;
                return Ok(e);
            }
        }
        if order < MAX_ORDER {
            if let Some(e) = self.alloc_frag(order, sh, init)? {
                sh.stats.src[Source::Frag as usize][o] += 1;
                return Ok(e);
            }
        }
        if order == 0 {
            // Order 0 steals from any usable cluster: for each order, its frag lists, then its
            // nonfull list. Any cluster on these lists has a free slot. Buckets are taken
            // fullest first, leaving the freest clusters to the orders they serve.
            let nb = self.nr_buckets() as u8;
            let steal_lists = || {
                (0..NR_ORDERS as u8)
                    .flat_map(move |o| (0..nb).rev().map(move |b| l_frag(o, b)).chain((o > 0).then(|| l_nonfull(o))))
            };
            while let Some((ci, mut st)) = self.isolate_lock_in(steal_lists()) {
                if let Some(e) = self.scan(ci, &mut st, 0, 0, sh, init)? {
                    sh.stats.src[Source::Steal as usize][0] += 1;
                    return Ok(e);
                }
            }
            // Every cluster with a free slot was locked by someone else when we tried it: wait
            // for one (blocking, outside the list lock) rather than fail.
            if let Some(e) = self.alloc_order0_wait(sh, init)? {
                sh.stats.src[Source::Steal as usize][0] += 1;
                return Ok(e);
            }
        }
        Err(SwapError::NoSpace { order })
    }

    /// Last resort of order 0: pick a cluster with a free slot from the lists, drop the list
    /// lock, wait for its lock (lock order cluster -> list), and use it if it is still on an
    /// allocatable list. A few rounds, since the pick may be stale by the time we hold it.
    fn alloc_order0_wait(
        &self,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        for _ in 0..8 {
            let cand = {
                let mut l = lock(&self.lists);
                // The free list holds no never-used cluster: make the next one ready there
                // (the one `isolate_lock_in` would have taken, if another process's hold
                // turned it away, is on the foreign list now).
                if l.first(L_FREE) == NIL {
                    self.ready_next_fresh(&mut l);
                }
                let mut ids = std::iter::once(L_FREE)
                    .chain((0..NR_ORDERS as u8).map(l_nonfull))
                    .chain((0..NR_ORDERS as u8).flat_map(|o| (0..NR_BUCKETS as u8).map(move |b| l_frag(o, b))));
                ids.find_map(|id| {
                    let c = l.first(id);
                    (c != NIL).then_some(c as usize)
                })
            };
            let Some(ci) = cand else {
                return Ok(None);
            };
            let mut st = self.cluster(ci).state.lock();
            if st.flag == ClusterFlag::None || st.flag > ClusterFlag::Frag || st.count as usize >= N {
                continue;
            }
            lock(&self.lists).remove(ci as u32);
            st.flag = ClusterFlag::None;
            if let Some(e) = self.scan(ci, &mut st, 0, 0, sh, init)? {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// One cluster from `list`, scanned from its start. A free cluster another process
    /// claimed first (a space shared since a `fork`, where every relative's free list starts
    /// with the same clusters) goes to the `foreign` list and the next one is tried, so a
    /// sibling's claim never makes an allocation fail while a free cluster is left.
    fn alloc_from(
        &self,
        list: u16,
        order: u8,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        while let Some((ci, mut st)) = self.isolate_lock(list) {
            let claimed_elsewhere = st.count == 0 && self.holds.is_some();
            match self.scan(ci, &mut st, 0, order, sh, init)? {
                None if claimed_elsewhere && st.flag == ClusterFlag::Foreign => continue,
                r => return Ok(r),
            }
        }
        Ok(None)
    }

    /// The fragment step under the configured policy.
    fn alloc_frag(
        &self,
        order: u8,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        let o = order as usize;
        match self.cfg.frag_policy {
            FragPolicy::ScanOne => {
                let Some((ci, mut st)) = self.isolate_lock(l_frag(order, 0)) else {
                    return Ok(None);
                };
                sh.stats.frag_scans[o] += 1;
                sh.stats.bucket_scans[o][0] += 1;
                let r = self.scan(ci, &mut st, 0, order, sh, init)?;
                if r.is_some() {
                    sh.stats.bucket_hits[o][0] += 1;
                }
                Ok(r)
            }
            FragPolicy::Buckets => {
                let lens: [usize; NR_BUCKETS] = {
                    let l = lock(&self.lists);
                    std::array::from_fn(|b| l.len(l_frag(order, b as u8)))
                };
                for b in 0..NR_BUCKETS as u8 {
                    let list = l_frag(order, b);
                    let len = lens[b as usize];
                    if len == 0 {
                        continue;
                    }
                    // A bucket whose clusters cannot have 2^order free slots is never tried.
                    if N - (bucket_range(b).0 as usize) < 1 << order {
                        continue;
                    }
                    let budget = sh.est[o][b as usize].budget(bucket_prior(order, b));
                    for _ in 0..(budget as usize).min(len) {
                        let Some((ci, mut st)) = self.isolate_lock(list) else {
                            break;
                        };
                        sh.stats.frag_scans[o] += 1;
                        sh.stats.bucket_scans[o][b as usize] += 1;
                        let r = self.scan(ci, &mut st, 0, order, sh, init)?;
                        sh.est[o][b as usize].record(r.is_some());
                        if r.is_some() {
                            sh.stats.bucket_hits[o][b as usize] += 1;
                            return Ok(r);
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    /// `alloc_swap_scan_cluster`: with cluster `ci` locked, find the first free aligned
    /// window of `2^order` slots at or after `start`, fill it, update the shard's next offset
    /// and relocate the cluster. `Err` only for a bad `init` word (nothing allocated).
    fn scan(
        &self,
        ci: usize,
        st: &mut ClusterState,
        start: usize,
        order: u8,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        if st.count == 0 && !self.claim(ci, st) {
            sh.next[order as usize] = INVALID;
            return Ok(None);
        }
        let n = 1usize << order;
        let mut off = start.next_multiple_of(n);
        let mut found = None;
        if st.count as usize + n <= N {
            while off + n <= N {
                if window_free(&st.used, off, n) {
                    found = Some(off);
                    break;
                }
                off += n;
            }
        }
        let res = match found {
            None => {
                sh.next[order as usize] = INVALID;
                Ok(None)
            }
            Some(off) => {
                let first = SwapEntry((ci * N + off) as u64);
                match self.fill(ci, st, off, order, init) {
                    Ok(()) => {
                        let nx = off + n;
                        sh.next[order as usize] =
                            if nx < N && (st.count as usize) < N { (ci * N + nx) as u64 } else { INVALID };
                        Ok(Some(first))
                    }
                    Err(()) => Err(SwapError::BadFolio { entry: first.0, order }),
                }
            }
        };
        self.relocate_after_alloc(ci, st);
        res
    }

    /// Write the window's words (`__swap_cluster_alloc_entries`); on a bad word, undo.
    fn fill(
        &self,
        ci: usize,
        st: &mut ClusterState,
        off: usize,
        order: u8,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<(), ()> {
        let n = 1usize << order;
        let t = self.ensure_table(ci);
        for i in 0..n {
            let w = init(i);
            if w.is_free() || w.count() == COUNT_MAX {
                for j in 0..i {
                    t.words[off + j].store(0, Ordering::Release);
                }
                if st.count == 0 {
                    self.retire_table(ci);
                }
                return Err(());
            }
            t.words[off + i].store(w.0, Ordering::Release);
        }
        if st.count == 0 {
            st.order = order;
        }
        set_bits(&mut st.used, off, n, true);
        st.count += n as u16;
        self.used_slots.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}
