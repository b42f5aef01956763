//! Helpers shared by the engine tests: a memory backend of any [`TierKind`] with a page limit,
//! fault injection and a compaction that moves every object (to exercise the relocate hook).
#![allow(
    dead_code,
    reason = "each test crate uses its own subset of these helpers; #[expect] would be unfulfilled in the crate that uses them all"
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;
use uswap::backend::{Backend, Relocate, Stored, TierKind, Usage};
use uswap::{SwapEntry, TierError, PAGE_SIZE};

/// A test backend.
pub struct TestBackend {
    name: String,
    kind: TierKind,
    limit_pages: u64,
    inner: Mutex<Inner>,
    /// Fail every store with an I/O error (of errno `fail_errno`, 0 for none).
    pub fail_store: AtomicBool,
    /// The errno of an injected store failure.
    pub fail_errno: AtomicI32,
    /// Fail every load with a corruption error.
    pub fail_load: AtomicBool,
    /// Loads done.
    pub loads: AtomicU64,
}

#[derive(Default)]
struct Inner {
    next: u64,
    map: HashMap<u64, (Vec<u8>, SwapEntry)>,
    pages: u64,
}

impl TestBackend {
    pub fn new(name: &str, kind: TierKind, limit_pages: u64) -> Self {
        TestBackend {
            name: name.into(),
            kind,
            limit_pages,
            inner: Mutex::new(Inner { next: 1, ..Default::default() }),
            fail_store: AtomicBool::new(false),
            fail_errno: AtomicI32::new(0),
            fail_load: AtomicBool::new(false),
            loads: AtomicU64::new(0),
        }
    }
    /// Objects stored.
    pub fn objects(&self) -> usize {
        self.inner.lock().unwrap().map.len()
    }
}

impl Backend for TestBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        self.kind
    }
    fn store(&self, data: &[u8], owner: SwapEntry) -> Result<Stored, TierError> {
        if self.fail_store.load(Ordering::SeqCst) {
            return Err(TierError::Io {
                errno: self.fail_errno.load(Ordering::SeqCst),
                op: "store",
                msg: "injected".into(),
            });
        }
        let pages = (data.len() / PAGE_SIZE) as u64;
        let mut g = self.inner.lock().unwrap();
        if self.limit_pages != 0 && g.pages + pages > self.limit_pages {
            return Err(TierError::Reject);
        }
        let h = g.next;
        g.next += 1;
        g.map.insert(h, (data.to_vec(), owner));
        g.pages += pages;
        Ok(Stored { handle: h, bytes: data.len() as u64 })
    }
    fn load(&self, handle: u64, out: &mut [u8]) -> Result<(), TierError> {
        self.loads.fetch_add(1, Ordering::Relaxed);
        if self.fail_load.load(Ordering::SeqCst) {
            return Err(TierError::Corrupt { tier: self.name.clone(), handle });
        }
        let g = self.inner.lock().unwrap();
        let (d, _) = g.map.get(&handle).ok_or(TierError::BadHandle(handle))?;
        if d.len() != out.len() {
            return Err(TierError::BadHandle(handle));
        }
        out.copy_from_slice(d);
        Ok(())
    }
    fn free(&self, handle: u64) -> u64 {
        let mut g = self.inner.lock().unwrap();
        match g.map.remove(&handle) {
            Some((d, _)) => {
                g.pages -= (d.len() / PAGE_SIZE) as u64;
                d.len() as u64
            }
            None => panic!("{}: free of unknown handle {handle}", self.name),
        }
    }
    fn usage(&self) -> Usage {
        let g = self.inner.lock().unwrap();
        Usage {
            stored_pages: g.pages,
            used_bytes: g.pages * PAGE_SIZE as u64,
            limit_bytes: self.limit_pages * PAGE_SIZE as u64,
            ..Usage::default()
        }
    }
    fn compact(&self, relocate: Relocate<'_>) -> u64 {
        // Move every object to a fresh handle. The relocate callback is called with no
        // internal lock held (lock order: cluster lock -> backend lock).
        let objs: Vec<(u64, SwapEntry)> = {
            let g = self.inner.lock().unwrap();
            g.map.iter().map(|(h, (_, o))| (*h, *o)).collect()
        };
        let mut moved = 0;
        for (old, owner) in objs {
            let new = {
                let mut g = self.inner.lock().unwrap();
                let Some((d, o)) = g.map.get(&old).cloned() else { continue };
                let h = g.next;
                g.next += 1;
                g.pages += (d.len() / PAGE_SIZE) as u64;
                g.map.insert(h, (d, o));
                h
            };
            let took = relocate(owner, old, new);
            let mut g = self.inner.lock().unwrap();
            let victim = if took { old } else { new };
            if let Some((d, _)) = g.map.remove(&victim) {
                g.pages -= (d.len() / PAGE_SIZE) as u64;
            }
            if took {
                moved += 1;
            }
        }
        moved
    }
}

/// Deterministic page data for an object: `seed` 0 is all zero.
pub fn make_data(order: u8, seed: u64) -> Vec<u8> {
    let len = PAGE_SIZE << order;
    if seed == 0 {
        return vec![0; len];
    }
    let mut v = vec![0u8; len];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    if seed % 5 == 1 {
        // Mostly zero with one set byte at the end: defeats a zero check that stops early.
        v[len - 1] = (seed as u8) | 1;
        return v;
    }
    for c in v.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    v
}
