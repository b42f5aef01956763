//! Slots: up to 64 numbered things (buffers of a pool) handed out and given back by CAS on one
//! bit mask, with no lock and no allocation, so a signal handler may take one. The pools of
//! the fault path ([`crate::bufs::BufPool`]) and of reclaim ([`crate::reclaim::BatchPool`])
//! are a mapping cut into equal pieces plus a `Slots` saying which pieces are free; each
//! decides what to do when none is (wait, or give up).
//!
//! Locking: none. A set bit is a free slot; [`Slots::try_take`] clears one by CAS (`Acquire`:
//! the taker sees what the last holder wrote), [`Slots::put`] sets it again (`Release`). A
//! slot is its taker's alone from the CAS that cleared its bit to the `put` that sets it; the
//! loom model `tests/loom_claim.rs` checks that no slot is ever handed to two takers and all
//! come back.

use crate::sync::{AtomicU64, Ordering};

/// A set of `n` slots (at most 64), all free at first.
pub struct Slots {
    /// Bit i set: slot i is free.
    free: AtomicU64,
    /// Every slot's bit.
    all: u64,
}

impl Slots {
    /// `n` free slots (1 to 64).
    pub fn new(n: usize) -> Slots {
        assert!((1..=64).contains(&n), "{n} slots");
        let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        Slots { free: AtomicU64::new(all), all }
    }

    /// Take a free slot (the lowest), or `None` if every slot is taken.
    #[inline]
    pub fn try_take(&self) -> Option<usize> {
        let mut f = self.free.load(Ordering::Acquire);
        while f != 0 {
            let i = f.trailing_zeros() as usize;
            match self.free.compare_exchange_weak(f, f & !(1 << i), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(i),
                Err(now) => f = now,
            }
        }
        None
    }

    /// Give slot `i` back (it must have been taken, by this caller).
    #[inline]
    pub fn put(&self, i: usize) {
        let before = self.free.fetch_or(1 << i, Ordering::Release);
        debug_assert!(before & (1 << i) == 0, "slot {i} given back twice");
    }

    /// Slots free now.
    #[cfg(any(test, loom))]
    pub fn free_count(&self) -> usize {
        self.free.load(Ordering::Acquire).count_ones() as usize
    }

    /// Every slot free again (a fork child: the threads that held slots do not exist there).
    pub fn reset(&self) {
        self.free.store(self.all, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_once_and_come_back() {
        let s = Slots::new(3);
        let got: Vec<usize> = std::iter::from_fn(|| s.try_take()).collect();
        assert_eq!(got, [0, 1, 2]);
        assert_eq!(s.free_count(), 0);
        s.put(1);
        assert_eq!(s.try_take(), Some(1));
        s.reset();
        assert_eq!(s.free_count(), 3);
        assert_eq!(Slots::new(64).free_count(), 64);
    }
}
