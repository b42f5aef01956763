//! The numbers every part of the pool works with: the size classes' geometry, the 8-byte
//! object header and the 41-bit handle.
//!
//! Size classes (zsmalloc, `mm/zsmalloc.c`): 255 classes, from 48 B to 3360 B spaced by 16 B
//! (compressed 4 KiB pages), then up to 7872 B spaced by 96 B (a raw page, and whole 64 KiB
//! folios that compress 8–19x, which would otherwise round up to 8 KiB in the large area);
//! each class carves objects out of "zspages" of 1..=8 contiguous 4 KiB pages (the count that
//! wastes the least; up to 64 for classes above a page), so objects straddle page boundaries.
//! Classes that pack identically (same pages and objects per zspage) are merged into the
//! largest of them, as zsmalloc does: an object costs the same there, and fewer classes in use
//! mean fewer partly used zspages.
//!
//! Object header: every object starts with 8 bytes (used bit, codec, order, length, owner
//! virtual slot) so compaction knows whom to report a move to; free objects thread a free list
//! through the same 8 bytes.
//!
//! Handles (41 bits): `class (8) | zspage index (21) | object index (12)`; class 255 is the
//! large area (the low 33 bits index it).
//!
//! Locking: none (constants and pure functions).

use crate::swap_table::{PAGE_SIZE, PAYLOAD_MAX};

pub(super) const HDR: usize = 8;
pub(super) const CLASS_MIN: usize = 48;
pub(super) const CLASS_STEP: usize = 16;
/// Classes spaced by `CLASS_STEP`: 48..=3360 B.
pub(super) const FINE_CLASSES: usize = 208;
pub(super) const FINE_MAX: usize = CLASS_MIN + CLASS_STEP * (FINE_CLASSES - 1);
/// Spacing of the classes above `FINE_MAX`.
pub(super) const COARSE_STEP: usize = 96;
/// Number of size classes (the class index 255 names the large-object area).
pub(crate) const NR_CLASSES: usize = 255;
pub(super) const LARGE_CLASS: u64 = 255;
/// Largest object in a size class (header included).
pub(crate) const CLASS_MAX: usize = FINE_MAX + COARSE_STEP * (NR_CLASSES - FINE_CLASSES);
pub(super) const MAX_CHAIN: usize = 8;
pub(super) const HUGE_CHAIN: usize = 64;
pub(super) const NR_GROUPS: usize = 4;
pub(super) const FULL: u8 = u8::MAX;
pub(super) const ZS_BITS: u32 = 21;
pub(super) const OBJ_BITS: u32 = 12;
pub(super) const NO_OBJ: u16 = u16::MAX;

// Object header (used): bit 63 used, 62..60 codec, 59..56 order, 55..43 length, 42..41 unit
// shift (units of 2^shift pages, with CODEC_PERPAGE), 40..0 owner. The codec values below
// carry the unit shift in their bits 4..3.
pub(super) const USED: u64 = 1 << 63;
pub(super) const CODEC_RAW: u64 = 0;
pub(super) const CODEC_LZ4: u64 = 1;
pub(super) const CODEC_ZSTD: u64 = 2;
/// The object is a table of unit lengths and then the units (of `1 << unit_shift` pages).
pub(super) const CODEC_PERPAGE: u64 = 4;

pub(super) fn make_hdr(codec: u64, order: u8, len: usize, owner: u64) -> u64 {
    USED | (codec & 7) << 60
        | ((codec >> 3) & 3) << 41
        | u64::from(order) << 56
        | ((len as u64) & 0x1fff) << 43
        | (owner & PAYLOAD_MAX)
}
pub(super) fn hdr_codec(h: u64) -> u64 {
    (h >> 60) & 7 | ((h >> 41) & 3) << 3
}
pub(super) fn hdr_order(h: u64) -> u8 {
    ((h >> 56) & 0xf) as u8
}
pub(super) fn hdr_len(h: u64) -> usize {
    ((h >> 43) & 0x1fff) as usize
}
pub(super) fn hdr_owner(h: u64) -> u64 {
    h & PAYLOAD_MAX
}

pub(super) fn class_size(c: usize) -> usize {
    if c < FINE_CLASSES {
        CLASS_MIN + CLASS_STEP * c
    } else {
        FINE_MAX + COARSE_STEP * (c + 1 - FINE_CLASSES)
    }
}
pub(super) fn class_of(size: usize) -> usize {
    if size <= FINE_MAX {
        size.saturating_sub(CLASS_MIN).div_ceil(CLASS_STEP)
    } else {
        FINE_CLASSES - 1 + (size - FINE_MAX).div_ceil(COARSE_STEP)
    }
}
/// Pages per zspage for a class: the chain length with the least waste (ties: shortest).
/// Classes above a page (raw pages, whose header makes them a little larger, and whole large
/// folios) may chain up to `HUGE_CHAIN` pages, so a raw page costs ~1.6% more than 4 KiB
/// instead of ~7%.
pub(super) fn pages_per_zspage(size: usize) -> usize {
    let max = if size > PAGE_SIZE { HUGE_CHAIN } else { MAX_CHAIN };
    let mut best = (1, usize::MAX);
    for k in 1..=max {
        let waste = (k * PAGE_SIZE) % size;
        // Compare waste fractions: waste/k*PAGE.
        if waste * best.0 < best.1.saturating_mul(k) || best.1 == usize::MAX {
            best = (k, waste);
        }
    }
    best.0
}

// Every class object's length fits the header's 13-bit length field.
const _: () = assert!(CLASS_MAX - HDR <= 0x1fff);

// Every handle, the large area's included, fits the table word's payload.
const _: () = assert!((LARGE_CLASS + 1) << (ZS_BITS + OBJ_BITS) <= PAYLOAD_MAX + 1);

pub(super) fn handle(class: usize, zs: u32, obj: u16) -> u64 {
    (class as u64) << (ZS_BITS + OBJ_BITS) | u64::from(zs) << OBJ_BITS | u64::from(obj)
}
pub(super) fn split(h: u64) -> (usize, u32, u16) {
    (
        (h >> (ZS_BITS + OBJ_BITS)) as usize,
        ((h >> OBJ_BITS) & ((1 << ZS_BITS) - 1)) as u32,
        (h & ((1 << OBJ_BITS) - 1)) as u16,
    )
}

/// `ZPool::merge`: each class maps to the largest class of its run of classes with the same
/// pages per zspage and objects per zspage.
pub(super) fn merged_classes() -> [u8; NR_CLASSES] {
    let geometry = |c: usize| {
        let (size, pages) = (class_size(c), pages_per_zspage(class_size(c)));
        (pages, pages * PAGE_SIZE / size)
    };
    let mut m = [0u8; NR_CLASSES];
    for c in (0..NR_CLASSES).rev() {
        m[c] = if c + 1 < NR_CLASSES && geometry(c) == geometry(c + 1) { m[c + 1] } else { c as u8 };
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_geometry() {
        assert_eq!(class_size(NR_CLASSES - 1), CLASS_MAX);
        assert_eq!(CLASS_MAX, 7872);
        // A raw page (header included) wastes under 1% of its class.
        assert!(class_size(class_of(PAGE_SIZE + HDR)) - (PAGE_SIZE + HDR) <= 32);
        for size in 1..=CLASS_MAX {
            let c = class_of(size);
            assert!(class_size(c) >= size && (c == 0 || class_size(c - 1) < size), "size {size}");
        }
        for c in 0..NR_CLASSES {
            let s = class_size(c);
            let k = pages_per_zspage(s);
            let objs = k * PAGE_SIZE / s;
            assert!((1..1 << OBJ_BITS).contains(&objs));
            // Never worse than a single page per object would be (zram's "huge" case).
            assert!((objs * s) as f64 / (k * PAGE_SIZE) as f64 >= 0.5, "class {c}");
        }
        assert_eq!(pages_per_zspage(48), 3);
        let h = handle(254, (1 << ZS_BITS) - 1, (1 << OBJ_BITS) - 1);
        assert!(h <= PAYLOAD_MAX);
        assert_eq!(split(h), (254, (1 << ZS_BITS) - 1, (1 << OBJ_BITS) - 1));
    }
}
