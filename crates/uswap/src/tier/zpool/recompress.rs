//! Recompression of idle objects (zram's `recomp_algorithm` and `recompress type=idle`).
//!
//! Objects are stored fast with the pool's primary algorithm (lz4). A pass, run by the owner
//! of the pool when it chooses (explicitly, or from a background thread; never on the fault
//! path), re-encodes the objects that have been idle with the secondary algorithm of
//! [`PoolConfig::recompress`](super::PoolConfig::recompress) (zstd at a high level), and
//! keeps the new copy only if it lands in a smaller size class (or, for a large object, fewer
//! pages). The new copy is placed like a store, reported through the [`Relocate`] hook exactly
//! as compaction reports a move, and the old copy is freed once the owner took the new handle
//! (or the new copy is freed if it refused). The object header records the codec, so loads
//! need nothing new: a recompressed object is a zstd object, decoded with the thread's
//! preallocated zstd context (made on the thread's first load when the pool may hold zstd
//! objects, so the fault path never allocates for it).
//!
//! Idleness is tracked per zspage (and per large object), not per object: a store into a
//! zspage or a load from it marks it *touched*; [`ZPool::mark_idle`] clears every mark
//! (zram's `echo all > idle`). An idle pass takes only untouched zspages, so it never
//! recompresses an object loaded or stored since the mark, at the price of skipping idle
//! neighbours of a hot object. This costs no byte per object (the header has no spare bit)
//! and nothing on the fault path beyond a store to a field of the zspage the load already
//! pins. A zspage the pass went through is *swept* until something is stored into it, so
//! objects that did not shrink (random data) are not tried again and again (zram's
//! `incompressible` flag). Objects already in the secondary algorithm's codec are skipped.
//!
//! No page is ever lost: the pass copies an object's bytes out under its class lock and
//! works on the copy, so a concurrent free cannot pull memory from under it; the zspage it
//! works in is *draining* (out of the fullness lists, as a compaction source), so no store
//! reuses a slot of it and the zspage is not released even when emptied, until the pass
//! ends: the old handle cannot come to name another object before `relocate` decides (no
//! ABA). A held large object's index is likewise not reused. After a successful relocate the
//! old copy is freed once no load has it pinned. If the owner freed the object meanwhile,
//! relocate refuses and the new copy is freed. A load always reads either the old copy
//! (still intact) or the new one.
//!
//! Locking: a pass holds the pool's compaction mutex (`PoolCompact`, with `try_lock`:
//! compaction and recompression passes exclude each other, and a second pass returns at
//! once), then takes one class lock or the large-area lock at a time, briefly, to pick and
//! copy out an object, to place the new copy and to free the old; none is held across
//! decompression, compression or the relocate hook.

use super::class::Zspage;
use super::codec::{codec_of, with_scratch};
use super::config::Compressor;
use super::large::Large;
use super::layout::{
    class_size, handle, hdr_codec, hdr_len, hdr_order, hdr_owner, make_hdr, split, CLASS_MAX, CODEC_RAW, HDR,
    LARGE_CLASS, NR_CLASSES, OBJ_BITS, USED, ZS_BITS,
};
use super::ZPool;
use crate::backend::{Recompressed, Relocate};
use crate::swap_table::{SwapEntry, PAGE_SIZE};
use crate::sync::{lock, AtomicU64, Ordering};

/// While nonzero, every recompression pass of the process stops at its next object
/// ([`hold_off`]).
static HOLD_OFF: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Make the recompression passes of this process stop at their next object, and start no
/// more, until [`release_hold_off`]. A pager calls it before a `fork`, with the wait for its
/// recompression thread to leave its pass: a pass must not hold a pool lock or a zspage's
/// draining mark when the address space is copied (the child would keep them forever).
pub fn hold_off() {
    HOLD_OFF.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// End of [`hold_off`].
pub fn release_hold_off() {
    HOLD_OFF.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
}

fn held_off() -> bool {
    HOLD_OFF.load(std::sync::atomic::Ordering::SeqCst) > 0
}

/// Counters of recompression (see [`PoolStats`](super::PoolStats)).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) objects: AtomicU64,
    pub(super) pages: AtomicU64,
    pub(super) kept: AtomicU64,
    pub(super) saved_bytes: AtomicU64,
    pub(super) cpu_ns: AtomicU64,
}

/// Buffers of a pass (a background pass may allocate).
#[derive(Default)]
struct Work {
    /// The old object's payload, copied out.
    src: Vec<u8>,
    /// Its decoded folio.
    plain: Vec<u8>,
}

/// What became of one object.
enum Outcome {
    /// Moved: the new handle and the old slot's and new slot's sizes.
    Moved { new: u64, old_bytes: u64, new_bytes: u64 },
    /// Left as it was.
    Kept,
    /// Not tried (undecodable: counted in `decompress_fail`; left for loads to report).
    Skipped,
}

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is always available
    // on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

impl ZPool {
    /// Mark every stored object idle (zram's `echo all > idle`): the next
    /// [`ZPool::recompress`] with `idle_only` takes what was neither stored nor loaded since.
    pub(crate) fn mark_idle(&self) {
        for m in self.classes.iter() {
            let mut cl = lock(m);
            for zs in cl.zspages.as_mut_slice().iter_mut().flatten() {
                zs.touched = false;
            }
        }
        let mut la = lock(&self.large);
        for l in la.slots.as_mut_slice().iter_mut().flatten() {
            l.touched = false;
        }
    }

    /// One recompression pass (see the module doc): every object idle since the last
    /// [`ZPool::mark_idle`] (or every object, `idle_only` false) not yet in the secondary
    /// codec is re-encoded with [`PoolConfig::recompress`](super::PoolConfig::recompress) and
    /// moved if that takes a smaller slot, each move reported through `relocate`. Returns at
    /// once, doing nothing, when no secondary algorithm is configured or a compaction or
    /// recompression pass is running.
    pub(crate) fn recompress(&self, idle_only: bool, relocate: Relocate<'_>) -> Recompressed {
        let mut done = Recompressed::default();
        let Some(comp) = self.cfg.recompress else { return done };
        if held_off() {
            return done;
        }
        let Some(_g) = self.compacting.try_lock() else { return done };
        let t0 = thread_cpu_ns();
        let mut w = Work::default();
        for c in 0..NR_CLASSES {
            if usize::from(self.merge[c]) == c {
                self.recompress_class(c, comp, idle_only, &mut w, relocate, &mut done);
            }
        }
        self.recompress_large(comp, idle_only, &mut w, relocate, &mut done);
        done.cpu_ns = thread_cpu_ns().saturating_sub(t0);
        self.recomp.cpu_ns.fetch_add(done.cpu_ns, Ordering::Relaxed);
        done
    }

    fn recompress_class(
        &self,
        c: usize,
        comp: Compressor,
        idle_only: bool,
        w: &mut Work,
        relocate: Relocate<'_>,
        done: &mut Recompressed,
    ) {
        let eligible = |z: &Zspage| !(z.draining || z.swept || (idle_only && z.touched));
        let ids: Vec<u32> = {
            let cl = lock(&self.classes[c]);
            cl.zspages
                .iter()
                .enumerate()
                .filter(|(_, z)| z.as_ref().is_some_and(eligible))
                .map(|(id, _)| id as u32)
                .collect()
        };
        let target = codec_of(comp);
        for id in ids {
            if held_off() {
                return;
            }
            let objs = {
                let mut cl = lock(&self.classes[c]);
                if !cl.zspages[id as usize].as_ref().is_some_and(eligible) {
                    continue;
                }
                cl.group_remove(id);
                cl.zspages[id as usize].as_mut().expect("zspage").draining = true;
                cl.objs
            };
            let mut whole = true;
            for obj in 0..objs {
                let old = handle(c, id, obj);
                let (hdr, old_bytes) = {
                    let cl = lock(&self.classes[c]);
                    // Draining: the zspage stays until `undrain` below.
                    let zs = cl.zspages[id as usize].as_ref().expect("draining zspage");
                    if (idle_only && zs.touched) || held_off() {
                        // Loaded since the pass began (or a fork is coming): leave the rest
                        // of it for a later pass.
                        whole = false;
                        break;
                    }
                    let Some(hdr) = cl.used_hdr(id, obj) else { continue };
                    let len = hdr_len(hdr);
                    if hdr_codec(hdr) & 3 == target || HDR + len > cl.size {
                        continue;
                    }
                    w.src.resize(len, 0);
                    // SAFETY: the object's payload, `len` bytes after its header inside its slot
                    // (checked above); we hold the class lock, so nothing writes it meanwhile.
                    unsafe { std::ptr::copy_nonoverlapping(cl.obj_ptr(zs, obj).add(HDR), w.src.as_mut_ptr(), len) };
                    (hdr, cl.size as u64)
                };
                let out = self.recompress_one(old, hdr, old_bytes, comp, w);
                self.settle(out, old, hdr, relocate, done);
            }
            let mut cl = lock(&self.classes[c]);
            if let Some(zs) = cl.zspages[id as usize].as_mut() {
                zs.swept = whole;
            }
            if cl.undrain(id) {
                self.total.fetch_sub(cl.zspage_bytes() as u64, Ordering::Relaxed);
            }
        }
    }

    fn recompress_large(
        &self,
        comp: Compressor,
        idle_only: bool,
        w: &mut Work,
        relocate: Relocate<'_>,
        done: &mut Recompressed,
    ) {
        let target = codec_of(comp);
        let eligible = |l: &Large| !(l.held || l.swept || (idle_only && l.touched) || hdr_codec(l.hdr) & 3 == target);
        let idxs: Vec<usize> = {
            let la = lock(&self.large);
            la.slots.iter().enumerate().filter(|(_, l)| l.as_ref().is_some_and(eligible)).map(|(i, _)| i).collect()
        };
        for idx in idxs {
            if held_off() {
                return;
            }
            let old = LARGE_CLASS << (ZS_BITS + OBJ_BITS) | idx as u64;
            let (hdr, old_bytes) = {
                let mut la = lock(&self.large);
                let Some(l) = la.slots[idx].as_mut().filter(|l| eligible(l)) else { continue };
                l.held = true;
                let (hdr, len, alloc, mem) = ((l.hdr & !(0x1fff << 43)) | USED, l.len, l.alloc, l.mem);
                w.src.resize(len, 0);
                // SAFETY: `mem` holds the header and `len` payload bytes (written in place());
                // we hold the area's lock, so it is neither freed nor written meanwhile.
                unsafe { std::ptr::copy_nonoverlapping(mem.as_ptr().add(HDR), w.src.as_mut_ptr(), len) };
                (hdr, alloc as u64)
            };
            let out = self.recompress_one(old, hdr, old_bytes, comp, w);
            self.settle(out, old, hdr, relocate, done);
            let mut la = lock(&self.large);
            match la.slots[idx].as_mut() {
                Some(l) => {
                    l.held = false;
                    l.swept = true;
                }
                // Freed while held (by the owner, or by us once moved): the index is free now.
                None => la.free.push(idx as u32),
            }
        }
    }

    /// Decode the copied-out payload `w.src` of object `old` (header `hdr`, taking
    /// `old_bytes` of pool memory), re-encode it with `comp`, and place the result if it takes
    /// less memory.
    fn recompress_one(&self, old: u64, hdr: u64, old_bytes: u64, comp: Compressor, w: &mut Work) -> Outcome {
        let n = PAGE_SIZE << hdr_order(hdr);
        w.plain.resize(n, 0);
        with_scratch(|s| {
            if self.decode_part(old, hdr, &w.src, &mut s.zd, &mut w.plain, 0..n).is_err() {
                return Outcome::Skipped;
            }
            let Some((codec, len)) = self.compress_with(s, &w.plain, comp, 100) else { return Outcome::Kept };
            let size = HDR + len;
            let new_bytes = if size <= CLASS_MAX {
                class_size(self.class_for(size)) as u64
            } else {
                size.next_multiple_of(PAGE_SIZE) as u64
            };
            if new_bytes >= old_bytes {
                return Outcome::Kept;
            }
            match self.place(s, make_hdr(codec, hdr_order(hdr), len, hdr_owner(hdr)), len, false) {
                Ok(st) => Outcome::Moved { new: st.handle, old_bytes, new_bytes: st.bytes },
                Err(_) => Outcome::Kept,
            }
        })
    }

    /// Report a move to the owner and free whichever copy lost (no lock held).
    fn settle(&self, out: Outcome, old: u64, hdr: u64, relocate: Relocate<'_>, done: &mut Recompressed) {
        let Outcome::Moved { new, old_bytes, new_bytes } = out else {
            if matches!(out, Outcome::Kept) {
                done.kept += 1;
                self.recomp.kept.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        if !relocate(SwapEntry(hdr_owner(hdr)), old, new) {
            // Freed or being loaded meanwhile: the old copy stays (or is gone), ours goes.
            self.free_object(new, false);
            done.kept += 1;
            self.recomp.kept.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (c, zs_id, obj) = split(old);
        if c as u64 == LARGE_CLASS {
            self.free_object(old, false);
        } else {
            // A load may have pinned the old object (with the old handle) before the
            // relocation: let it finish before the old copy is freed.
            let mut cl = lock(&self.classes[c]);
            while cl.zspages[zs_id as usize].as_ref().is_some_and(|z| z.pins > 0) {
                drop(cl);
                std::thread::yield_now();
                cl = lock(&self.classes[c]);
            }
            // The zspage is draining: it is not released here (see `undrain`).
            if cl.used_hdr(zs_id, obj).is_some() {
                cl.free_obj(zs_id, obj, None);
            }
        }
        let pages = 1u64 << hdr_order(hdr);
        if hdr_codec(hdr) == CODEC_RAW {
            self.incompressible.fetch_sub(pages, Ordering::Relaxed);
        }
        let saved = old_bytes - new_bytes;
        done.objects += 1;
        done.pages += pages;
        done.saved_bytes += saved;
        self.recomp.objects.fetch_add(1, Ordering::Relaxed);
        self.recomp.pages.fetch_add(pages, Ordering::Relaxed);
        self.recomp.saved_bytes.fetch_add(saved, Ordering::Relaxed);
    }
}
