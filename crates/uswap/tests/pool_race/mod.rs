//! The engine's protocol in miniature, for tests that race a pool's movers (compaction,
//! recompression) with stores, loads and frees: each owner thread keeps its entries in one
//! table whose mutex stands for the cluster lock; a load marks its entry busy (the swap cache's
//! CACHED word) so a relocate of it is refused and the old handle stays valid; a free happens
//! under the table lock, as the engine frees under the cluster lock. Every load and, at the
//! end, every entry is checked byte for byte.

use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uswap::backend::Backend;
use uswap::tier::zpool::ZPool;
use uswap::SwapEntry;

/// A stored object as its owner sees it: its handle, whether a load holds it, and what the
/// test needs to rebuild its bytes.
pub struct Owned<M> {
    pub handle: u64,
    pub busy: bool,
    pub meta: M,
}

/// The owners' entries by entry number.
pub type Table<M> = Arc<Mutex<HashMap<u64, Owned<M>>>>;

/// A new, empty table.
pub fn table<M>() -> Table<M> {
    Arc::new(Mutex::new(HashMap::new()))
}

/// The relocate hook of a mover: moves the entry only if no load holds it and its handle is
/// still `old`.
pub fn relocate<M>(table: &Table<M>, owner: SwapEntry, old: u64, new: u64) -> bool {
    let mut t = table.lock().unwrap();
    match t.get_mut(&owner.0) {
        Some(e) if !e.busy && e.handle == old => {
            e.handle = new;
            true
        }
        _ => false,
    }
}

/// Run `owner(t)` for `t` in `0..threads`, each in its own thread, and wait for all of them.
pub fn race<M, Make, Expect>(
    pool: &ZPool,
    table: &Table<M>,
    threads: u64,
    owner: impl Fn(u64) -> Owner<Make, Expect> + Sync,
) where
    M: Copy + Send,
    Make: Fn(&mut rand::rngs::SmallRng) -> (Vec<u8>, M),
    Expect: Fn(&M) -> Vec<u8>,
{
    std::thread::scope(|s| {
        for t in 0..threads {
            let owner = &owner;
            s.spawn(move || owner(t).run(pool, table));
        }
    });
}

/// What an owner thread does: `steps` random steps seeded by `thread`; a step is, `stores` times
/// in `of`, a store of what `make` builds, else (once in `of`) a load of one of its entries
/// checked against `expect`, else a free.
pub struct Owner<Make, Expect> {
    pub thread: u64,
    pub steps: usize,
    pub stores: u32,
    pub of: u32,
    pub make: Make,
    pub expect: Expect,
}

impl<M, Make, Expect> Owner<Make, Expect>
where
    M: Copy,
    Make: Fn(&mut rand::rngs::SmallRng) -> (Vec<u8>, M),
    Expect: Fn(&M) -> Vec<u8>,
{
    /// Run the steps against `pool`, keeping `table` current.
    pub fn run(&self, pool: &ZPool, table: &Table<M>) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(self.thread);
        let mut mine: Vec<u64> = Vec::new();
        let mut next = self.thread << 32;
        for _ in 0..self.steps {
            let step = rng.random_range(0..self.of);
            if step < self.stores {
                let (data, meta) = (self.make)(&mut rng);
                // Stored before the table has the entry, like swap-out.
                let st = pool.store(&data, SwapEntry(next)).unwrap();
                table.lock().unwrap().insert(next, Owned { handle: st.handle, busy: false, meta });
                mine.push(next);
                next += 1;
            } else if mine.is_empty() {
                continue;
            } else if step == self.stores {
                let owner = mine[rng.random_range(0..mine.len())];
                let (h, meta) = {
                    let mut t = table.lock().unwrap();
                    let e = t.get_mut(&owner).unwrap();
                    e.busy = true;
                    (e.handle, e.meta)
                };
                let want = (self.expect)(&meta);
                let mut out = vec![0u8; want.len()];
                pool.load(h, &mut out).unwrap();
                assert!(out == want, "owner {owner}");
                table.lock().unwrap().get_mut(&owner).unwrap().busy = false;
            } else {
                let owner = mine.swap_remove(rng.random_range(0..mine.len()));
                let mut t = table.lock().unwrap();
                let e = t.remove(&owner).unwrap();
                assert!(pool.free(e.handle) > 0);
            }
        }
    }

    /// After the race: the pool's invariants, its page count (`pages` per entry) and every
    /// entry's bytes.
    pub fn check_all(&self, pool: &ZPool, table: &Table<M>, pages: impl Fn(&M) -> u64) {
        let t = table.lock().unwrap();
        pool.check_invariants().unwrap();
        assert_eq!(pool.usage().stored_pages, t.values().map(|e| pages(&e.meta)).sum::<u64>());
        for e in t.values() {
            let want = (self.expect)(&e.meta);
            let mut out = vec![0u8; want.len()];
            pool.load(e.handle, &mut out).unwrap();
            assert!(out == want);
        }
    }
}
