//! The swap file's per-slot seal records in RAM: [`SlotRecords`].
//!
//! An encrypted page's record ([`META_BYTES`]: the nonce's counter and the tag) is needed to
//! open it. Kept on disk beside the data, every swap-in would be two reads at two offsets (the
//! data and its record) and every store under `O_DIRECT` a read-modify-write of the record's
//! block: a disk read is most of a swap-in's cost, so that doubles it. Kept here,
//! a swap-in is one read and a store one write, for 24 bytes of RAM per slot in use (0.6 % of
//! what the file holds; the kernel's own per-slot RAM for a swap file is 9-11 bytes).
//!
//! The array spans every slot of the file but lives in a fresh anonymous mapping: only the
//! pages holding records of slots ever written are committed, 4 KiB per 170 slots. It is
//! private memory, so a `fork` child inherits its parent's records as they were at the fork,
//! which is what it needs to read the clusters the two processes share (frozen where they lie:
//! neither writes a shared slot, so neither's record of it changes).
//!
//! Locking: none. A slot's record is written by the one store that allocated the slot, before
//! its handle is published, and read by loads of that handle, after it; the engine's table
//! orders the two. The words are relaxed atomics so that a load racing a buggy caller reads
//! stale bytes (which then fail authentication) rather than being undefined behaviour.

use super::crypt::META_BYTES;
use crate::page_heap::PageVec;
use std::sync::atomic::{AtomicU64, Ordering};

const WORDS: usize = META_BYTES / 8;
const _: () = assert!(META_BYTES.is_multiple_of(8));

/// One seal record per physical slot.
pub(crate) struct SlotRecords {
    words: PageVec<u64>,
}

impl SlotRecords {
    /// Room for the records of `nr_slots` slots (address space only until written).
    pub(crate) fn new(nr_slots: u64) -> Self {
        SlotRecords { words: PageVec::zeroed(nr_slots as usize * WORDS) }
    }

    fn word(&self, slot: u64, i: usize) -> &AtomicU64 {
        let w = &self.words.as_slice()[slot as usize * WORDS + i];
        // SAFETY: `w` is a valid, aligned u64 in our mapping, alive as long as `self`; every
        // access to the array goes through this atomic view (no `&mut` to it is ever made
        // after creation), so there is no mixed atomic and non-atomic access.
        unsafe { AtomicU64::from_ptr(std::ptr::from_ref(w).cast_mut()) }
    }

    /// Keep the records `recs` (`META_BYTES` each) of the slots from `slot` on.
    pub(crate) fn put(&self, slot: u64, recs: &[u8]) {
        for (k, rec) in recs.chunks_exact(META_BYTES).enumerate() {
            for (i, w) in rec.chunks_exact(8).enumerate() {
                let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                self.word(slot + k as u64, i).store(v, Ordering::Relaxed);
            }
        }
    }

    /// Copy the records of the slots from `slot` on into `out` (`META_BYTES` each).
    pub(crate) fn get(&self, slot: u64, out: &mut [u8]) {
        for (k, rec) in out.chunks_exact_mut(META_BYTES).enumerate() {
            for (i, w) in rec.chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&self.word(slot + k as u64, i).load(Ordering::Relaxed).to_le_bytes());
            }
        }
    }

    /// Slots the array has room for.
    #[cfg(test)]
    pub(crate) fn nr_slots(&self) -> u64 {
        (self.words.len() / WORDS) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_per_slot() {
        let r = SlotRecords::new(1024);
        assert_eq!(r.nr_slots(), 1024);
        let recs: Vec<u8> = (0..3 * META_BYTES).map(|i| i as u8 ^ 0x5a).collect();
        r.put(510, &recs);
        let mut out = vec![0u8; 3 * META_BYTES];
        r.get(510, &mut out);
        assert_eq!(out, recs);
        // A neighbour is untouched, a single record reads back alone.
        let mut one = [0xffu8; META_BYTES];
        r.get(509, &mut one);
        assert_eq!(one, [0u8; META_BYTES]);
        r.get(511, &mut one);
        assert_eq!(one[..], recs[META_BYTES..2 * META_BYTES]);
    }
}
