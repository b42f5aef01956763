//! Compression and decompression: the per-thread scratch (output buffer, the LZ4 hash table
//! of [`crate::tier::lz4`], zstd contexts, all reused so that a page allocates nothing in
//! steady state), the encoding of a folio into one unit or into units of `2^shift` pages
//! behind a table of their lengths ([`FolioMode`](super::FolioMode)), and the decoders (liblz4's safe decoder,
//! which can stop after a prefix, and zstd).
//!
//! Locking: none. Everything here works on the calling thread's scratch and on bytes the
//! caller holds; the pool calls it with no pool lock held.

use super::config::Compressor;
use super::layout::{CODEC_LZ4, CODEC_PERPAGE, CODEC_RAW, CODEC_ZSTD, HDR};
use super::ZPool;
use crate::swap_table::PAGE_SIZE;
use crate::tier::lz4::{self, Lz4Table};
use std::cell::RefCell;

/// Per-thread scratch: compression output and reused zstd contexts.
pub(super) struct Scratch {
    pub(super) buf: Vec<u8>,
    pub(super) zc: Option<(i32, zstd::bulk::Compressor<'static>)>,
    pub(super) zd: Option<zstd::bulk::Decompressor<'static>>,
    pub(super) lz4: Option<Lz4Table>,
}

impl Scratch {
    /// Reserve (once per thread, without touching it) room for compressing the largest folio
    /// the engine stores, in any folio mode and with either codec: its growth later, when the
    /// thread first stores a larger folio than before, would be an allocation on the fault
    /// path (SIGBUS-mode direct reclaim), which the contract allows only on a thread's first
    /// fault (`docs/design.md`, "Deadlock freedom", 3). Capacity only: the pages are touched
    /// when a folio that large is compressed.
    pub(super) fn reserve_for_largest_folio(&mut self) {
        if self.buf.capacity() == 0 {
            let pages = 1usize << crate::swap_table::MAX_ORDER;
            let per_page = bound(Compressor::Lz4, PAGE_SIZE).max(bound(Compressor::Zstd { level: 1 }, PAGE_SIZE));
            self.buf.reserve_exact(HDR + 2 * pages + pages * per_page);
        }
    }
}

thread_local! {
    pub(super) static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch { buf: Vec::new(), zc: None, zd: None, lz4: None }) };
}

/// Run `f` with this thread's scratch state; with a fresh one when the thread's own cannot be
/// had: during the thread's exit, after its thread-locals were destroyed (a fault served in
/// the exiting thread, SIGBUS mode, while glibc frees its last blocks), or while it is
/// borrowed. The fresh state allocates, which only those cases pay.
pub(super) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut f = Some(f);
    let own = SCRATCH.try_with(|s| match (s.try_borrow_mut(), f.take()) {
        (Ok(mut s), Some(g)) => Ok(g(&mut s)),
        (_, g) => Err(g),
    });
    let g = match own {
        Ok(Ok(r)) => return r,
        Ok(Err(g)) => g,
        Err(_) => f.take(),
    };
    let mut fresh = Scratch { buf: Vec::new(), zc: None, zd: None, lz4: None };
    match g {
        Some(g) => g(&mut fresh),
        None => unreachable!("the closure runs once: it was not run when no state was had"),
    }
}

/// Make this thread's decoding state now (the zstd decompression context a pool that may
/// hold zstd objects uses): a thread that serves faults calls it when it starts, so its first
/// swap-in of a zstd object does not allocate on the fault path.
pub fn prepare_thread() {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        // The context allocates its workspace on its first frame: decode one now.
        let page = [7u8; 4096];
        if let (Some(zd), Ok(frame)) = (zstd_ctx(&mut s.zd), zstd::bulk::compress(&page, 3)) {
            let mut out = [0u8; 4096];
            let _ = zd.decompress_to_buffer(&frame, &mut out);
        }
    });
}

/// Compress `src` into `dst` (sized by the caller) with `codec`; None if it did not fit.
pub(super) fn compress_unit(s: &mut Scratch, comp: Compressor, src: &[u8], dst: &mut [u8]) -> Option<usize> {
    match comp {
        Compressor::Lz4 => s.lz4.get_or_insert_with(Lz4Table::default).compress(src, dst),
        Compressor::Zstd { level } => {
            if s.zc.as_ref().is_none_or(|(l, _)| *l != level) {
                s.zc = Some((level, zstd::bulk::Compressor::new(level).ok()?));
            }
            s.zc.as_mut()?.1.compress_to_buffer(src, dst).ok()
        }
    }
}

/// Decode (at least) pages `first..first + n` of an object of units (`src`: a table of 2-byte
/// unit sizes, then the units of `2^shift` pages each, the shift in `codec`; a unit as long as
/// its data is stored raw) into the same place of `out`: every unit those pages touch, the
/// last one (LZ4) only up to page `first + n` (the rest of `out` is left as it was).
/// Decoding through the last unit also checks that the units end where `src` ends.
pub(super) fn decode_pages(
    zd: &mut Option<zstd::bulk::Decompressor<'static>>,
    codec: u64,
    src: &[u8],
    out: &mut [u8],
    first: usize,
    n: usize,
) -> bool {
    let pages = out.len() / PAGE_SIZE;
    let upages = 1usize << ((codec >> 3) & 3);
    let ulen = upages * PAGE_SIZE;
    let units = pages / upages;
    let table = units * 2;
    if units == 0 || src.len() < table || n == 0 || first + n > pages {
        return false;
    }
    let size = |i: usize| usize::from(u16::from_le_bytes([src[2 * i], src[2 * i + 1]]));
    let (u0, u1) = (first / upages, (first + n - 1) / upages + 1);
    let mut at = table + (0..u0).map(size).sum::<usize>();
    for u in u0..u1 {
        let len = size(u);
        if at + len > src.len() {
            return false;
        }
        let c = if len == ulen { CODEC_RAW } else { codec & 3 };
        let (unit, dst) = (&src[at..at + len], &mut out[u * ulen..(u + 1) * ulen]);
        // The last unit only up to the part's end: a random 4 KiB read from a 16 KiB unit
        // decodes 2.5 pages on average instead of 4 (LZ4 can stop, not start, mid-block).
        let tail = (first + n) * PAGE_SIZE - u * ulen;
        let ok = if u + 1 == u1 && c == CODEC_LZ4 && tail < ulen {
            lz4_decompress_prefix(unit, dst, tail)
        } else {
            decompress_unit(zd, c, unit, dst)
        };
        if !ok {
            return false;
        }
        at += len;
    }
    u1 < units || at == src.len()
}

/// This thread's zstd decompression context, made on first use (it allocates).
pub(super) fn zstd_ctx<'a>(
    zd: &'a mut Option<zstd::bulk::Decompressor<'static>>,
) -> Option<&'a mut zstd::bulk::Decompressor<'static>> {
    if zd.is_none() {
        *zd = zstd::bulk::Decompressor::new().ok();
    }
    zd.as_mut()
}

pub(super) fn decompress_unit(
    zd: &mut Option<zstd::bulk::Decompressor<'static>>,
    codec: u64,
    src: &[u8],
    out: &mut [u8],
) -> bool {
    match codec & 3 {
        CODEC_RAW => {
            if src.len() != out.len() {
                return false;
            }
            out.copy_from_slice(src);
            true
        }
        CODEC_LZ4 => lz4::decompress_exact(src, out),
        CODEC_ZSTD => zstd_ctx(zd).is_some_and(|d| d.decompress_to_buffer(src, out).is_ok_and(|n| n == out.len())),
        _ => false,
    }
}

extern "C" {
    fn LZ4_decompress_safe_partial(
        src: *const std::ffi::c_char,
        dst: *mut std::ffi::c_char,
        src_size: std::ffi::c_int,
        target_output_size: std::ffi::c_int,
        dst_capacity: std::ffi::c_int,
    ) -> std::ffi::c_int;
}

/// Decode the first `need` bytes (at least) of one LZ4 block into `out`.
pub(super) fn lz4_decompress_prefix(src: &[u8], out: &mut [u8], need: usize) -> bool {
    let (Ok(n), Ok(cap), Ok(want)) =
        (std::ffi::c_int::try_from(src.len()), std::ffi::c_int::try_from(out.len()), std::ffi::c_int::try_from(need))
    else {
        return false;
    };
    // SAFETY: `src` is readable for `n` bytes and `out` writable for `cap` bytes; liblz4's
    // safe partial decoder never reads or writes outside them and returns < 0 on bad input.
    let r = unsafe { LZ4_decompress_safe_partial(src.as_ptr().cast(), out.as_mut_ptr().cast(), n, want, cap) };
    r >= want
}

pub(super) fn codec_of(comp: Compressor) -> u64 {
    match comp {
        Compressor::Lz4 => CODEC_LZ4,
        Compressor::Zstd { .. } => CODEC_ZSTD,
    }
}

pub(super) fn bound(comp: Compressor, n: usize) -> usize {
    match comp {
        Compressor::Lz4 => lz4::max_compressed_size(n),
        Compressor::Zstd { .. } => zstd::zstd_safe::compress_bound(n),
    }
}

impl ZPool {
    /// Compress `data` into `s.buf[HDR..]`; returns (codec, payload length) or None if it is
    /// above the threshold (the caller then stores raw or rejects).
    pub(super) fn compress(&self, s: &mut Scratch, data: &[u8]) -> Option<(u64, usize)> {
        self.compress_with(s, data, self.cfg.compressor, self.cfg.threshold_percent)
    }

    /// [`ZPool::compress`] with algorithm `comp` and threshold `threshold_percent`.
    pub(super) fn compress_with(
        &self,
        s: &mut Scratch,
        data: &[u8],
        comp: Compressor,
        threshold_percent: u8,
    ) -> Option<(u64, usize)> {
        s.reserve_for_largest_folio();
        let base = codec_of(comp);
        let limit = data.len() / 100 * usize::from(threshold_percent.min(100));
        let pages = data.len() / PAGE_SIZE;
        let shift = self.cfg.folio_mode.unit_shift().filter(|&sh| pages > 1 << sh);
        let Some(shift) = shift else {
            let need = HDR + bound(comp, data.len());
            if s.buf.len() < need {
                s.buf.resize(need, 0);
            }
            let mut buf = std::mem::take(&mut s.buf);
            let r = compress_unit(s, comp, data, &mut buf[HDR..]);
            s.buf = buf;
            return r.filter(|&n| n <= limit).map(|n| (base, n));
        };
        // Units of 2^shift pages: a table of u16 lengths (the unit's size = stored raw), then
        // the units.
        let ulen = PAGE_SIZE << shift;
        let units = data.len() / ulen;
        let table = units * 2;
        let need = HDR + table + units * bound(comp, ulen);
        if s.buf.len() < need {
            s.buf.resize(need, 0);
        }
        let mut buf = std::mem::take(&mut s.buf);
        let mut at = HDR + table;
        for (i, unit) in data.chunks_exact(ulen).enumerate() {
            let n = match compress_unit(s, comp, unit, &mut buf[at..]) {
                Some(n) if n < ulen => n,
                _ => {
                    buf[at..at + ulen].copy_from_slice(unit);
                    ulen
                }
            };
            buf[HDR + 2 * i..HDR + 2 * i + 2].copy_from_slice(&(n as u16).to_le_bytes());
            at += n;
        }
        s.buf = buf;
        let n = at - HDR;
        (n <= limit).then_some((base | CODEC_PERPAGE | shift << 3, n))
    }
}
