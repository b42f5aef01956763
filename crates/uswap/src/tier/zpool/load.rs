//! Reading objects where they lie: a class object is pinned (a count on its zspage, zsmalloc's
//! `zs_obj_read_begin`) and decoded in place, without a copy; a large object is decoded as it
//! lies (large objects never move); of a folio's object, only the units the part read touches
//! are decoded.
//!
//! Locking: the class mutex or the large-area mutex is held only to check the handle and to
//! take or drop the pin, never while decoding.

use super::codec::{decode_pages, decompress_unit, lz4_decompress_prefix};
use super::layout::{hdr_codec, hdr_len, split, CODEC_LZ4, CODEC_PERPAGE, HDR, LARGE_CLASS, OBJ_BITS, USED, ZS_BITS};
use super::ZPool;
use crate::error::TierError;
use crate::swap_table::PAGE_SIZE;
use crate::sync::{lock, Ordering};

pub(super) fn corrupt(handle: u64) -> TierError {
    TierError::Corrupt { tier: "zpool".into(), handle }
}

impl ZPool {
    /// A large object where it lies: (header, payload pointer, payload length). Read without
    /// copying and without a pin: large objects never move (compaction is per size class), and
    /// the caller's handle keeps the object from being freed while it is loaded. No scratch
    /// memory is needed, so a thread's first load of a large object allocates nothing.
    pub(super) fn large_in_place(&self, h: u64) -> Result<(u64, *const u8, usize), TierError> {
        let mut la = lock(&self.large);
        let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
        let l = la.slots.get_mut(idx).and_then(|x| x.as_mut()).ok_or(TierError::BadHandle(h))?;
        l.touched = true;
        let hdr = (l.hdr & !(0x1fff << 43)) | USED;
        // SAFETY: `l.mem` holds the header and `l.len` payload bytes (written in place()).
        Ok((hdr, unsafe { l.mem.as_ptr().add(HDR) }, l.len))
    }

    /// For a class object: check it, pin its zspage and return (header, payload pointer,
    /// payload length); `None` for a large object (see [`ZPool::large_in_place`]). Every `Some` must be
    /// followed by [`ZPool::unpin`]. This is zsmalloc's `zs_obj_read_begin`: the object is read
    /// in place instead of copied out under the class lock.
    pub(super) fn pin(&self, h: u64) -> Result<Option<(u64, *const u8, usize)>, TierError> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            return Ok(None);
        }
        let mut cl = lock(&self.classes[c]);
        let hdr = cl.used_hdr(zs_id, obj).ok_or(TierError::BadHandle(h))?;
        let len = hdr_len(hdr);
        if HDR + len > cl.size {
            return Err(corrupt(h));
        }
        let zs = cl.zspages[zs_id as usize].as_mut().expect("zspage");
        zs.pins += 1;
        zs.touched = true;
        let zs = cl.zspages[zs_id as usize].as_ref().expect("zspage");
        // SAFETY: the object lies inside its zspage; its payload follows the header.
        let p = unsafe { cl.obj_ptr(zs, obj).add(HDR) };
        Ok(Some((hdr, p, len)))
    }

    /// End of [`ZPool::pin`].
    pub(super) fn unpin(&self, h: u64) {
        let (c, zs_id, _) = split(h);
        let mut cl = lock(&self.classes[c]);
        if let Some(zs) = cl.zspages.get_mut(zs_id as usize).and_then(|z| z.as_mut()) {
            zs.pins = zs.pins.saturating_sub(1);
        }
    }

    /// Decode bytes `part` of the object `h` (header `hdr`, payload `src`) into the same place
    /// of `out` (the whole folio's buffer: an LZ4 unit decodes the prefix up to the part's end).
    pub(super) fn decode_part(
        &self,
        h: u64,
        hdr: u64,
        src: &[u8],
        zd: &mut Option<zstd::bulk::Decompressor<'static>>,
        out: &mut [u8],
        part: std::ops::Range<usize>,
    ) -> Result<(), TierError> {
        let codec = hdr_codec(hdr);
        let (at, need) = (part.start, part.end);
        let ok = if codec & CODEC_PERPAGE != 0 {
            if at.is_multiple_of(PAGE_SIZE) && need.is_multiple_of(PAGE_SIZE) {
                // Units of pages: decode just the units of the part.
                decode_pages(zd, codec, src, out, at / PAGE_SIZE, (need - at) / PAGE_SIZE)
            } else {
                decode_pages(zd, codec, src, out, 0, out.len() / PAGE_SIZE)
            }
        } else if codec & 3 == CODEC_LZ4 && need < out.len() {
            // One LZ4 unit: liblz4 stops once `need` bytes are out (the prefix is exact: a
            // corrupt block fails here as it would in a full decode of that prefix).
            lz4_decompress_prefix(src, out, need)
        } else {
            decompress_unit(zd, codec, src, out)
        };
        if ok {
            Ok(())
        } else {
            self.decompress_fail.fetch_add(1, Ordering::Relaxed);
            Err(corrupt(h))
        }
    }
}
