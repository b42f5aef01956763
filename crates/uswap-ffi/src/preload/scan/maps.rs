//! Reading `/proc/self/maps` and judging its lines: which mapping is adoptable and why the
//! others are not (not private writable, executable, a file or special mapping, the pager's
//! own, a thread stack, a loaded object's `.bss`, too small), which are the dynamic loader's
//! data at start, and the recording of this library's own image as the pager's own.
//!
//! The stack rule is a heuristic: a thread stack is anonymous memory with a small `PROT_NONE`
//! guard right below it, and a stack mapped with no guard below it is adopted like a heap (a
//! JVM maps its Java thread stacks read-write and makes their guard zones later, so a pass in
//! between adopts them). The preload runs its pager in thread fault mode, where a fault on an
//! adopted stack is served like any other (a SIGBUS-mode handler would run on the stack that
//! faulted, so that mode could not adopt stacks).
//!
//! Locking: none of its own; the maps are read through `uswap::procfs::private` (its helper's
//! lock while that thread runs), and the pager's own-memory records are asked through
//! `uswap_pager::own`. It holds no state.

use std::sync::atomic::AtomicU64;

/// One line of `/proc/self/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// First byte.
    pub start: usize,
    /// End (exclusive).
    pub end: usize,
    /// `rwxp` / `rw-s` ...
    pub perms: [u8; 4],
    /// Inode (0 for anonymous memory).
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`), empty for anonymous memory.
    pub path: String,
}

/// Parse `/proc/self/maps` text.
pub fn parse_maps(text: &str) -> Vec<Map> {
    let mut v = Vec::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        let p = perms.as_bytes();
        if p.len() < 4 {
            continue;
        }
        let path = it.collect::<Vec<_>>().join(" ");
        v.push(Map { start, end, perms: [p[0], p[1], p[2], p[3]], inode: inode.parse().unwrap_or(0), path });
    }
    v
}

/// Why a mapping is not adopted (None = adopt it).
pub fn skip_reason(maps: &[Map], i: usize, min_len: usize) -> Option<&'static str> {
    let m = &maps[i];
    // A large PROT_NONE reservation (a glibc thread arena's unused part, a runtime's heap
    // reserve) is adopted as it is: the registration survives the `mprotect` that commits it,
    // so its pages are managed from their first touch. Small ones are guard pages.
    let reserve = &m.perms == b"---p" && m.inode == 0 && m.path.is_empty() && m.end - m.start >= 1 << 20;
    if reserve {
        return if own_whole(m) { Some("pager's own") } else { None };
    }
    if m.perms[0] != b'r' || m.perms[1] != b'w' || m.perms[3] != b'p' {
        return Some("not private writable");
    }
    if m.perms[2] == b'x' {
        return Some("executable");
    }
    if m.inode != 0 || (!m.path.is_empty() && m.path != "[heap]") {
        return Some("file or special");
    }
    if own_whole(m) {
        return Some("pager's own");
    }
    if m.path == "[heap]" {
        return None;
    }
    if let Some(prev) = i.checked_sub(1).map(|j| &maps[j]) {
        if prev.end == m.start {
            // A private file mapping's neighbour: an object's bss. (A shared mapping, such as
            // the engine's `/dev/zero` pages shared with fork children, is no object's.)
            if prev.inode != 0 && prev.perms[3] == b'p' {
                return Some("bss of a loaded object");
            }
            if &prev.perms[..3] == b"---" && prev.path.is_empty() && prev.end - prev.start <= 1 << 20 {
                return Some("thread stack");
            }
        }
    }
    if m.end - m.start < min_len {
        return Some("small");
    }
    None
}

/// No part of `m` can be adopted: all of it is the pager's own, or a pager thread's stack is in
/// it. (A mapping only partly the pager's is a merge; `pass::adopt_mapping` takes the rest.)
fn own_whole(m: &Map) -> bool {
    uswap_pager::own::is_own(m.start, m.end) && uswap_pager::own::gaps(m.start, m.end).is_empty()
}

/// The current `/proc/self/maps`, parsed (empty if unreadable).
pub(super) fn read_maps() -> Vec<Map> {
    uswap::procfs::private(|| std::fs::read_to_string("/proc/self/maps")).map(|s| parse_maps(&s)).unwrap_or_default()
}

/// Is `[a, a + len)` inside one anonymous private writable mapping?
pub fn is_anon_private_range(a: usize, len: usize) -> bool {
    crate::reentry::internal(|| {
        let maps = read_maps();
        maps.iter()
            .enumerate()
            .any(|(i, m)| m.start <= a && a + len <= m.end && skip_reason(&maps, i, 0).is_none_or(|r| r == "small"))
    })
}

/// Record this library's own image and the anonymous memory right after it (its `.bss`, where
/// the pager's registry lives) as the pager's own.
pub fn record_own_image() {
    let mut info: libc::Dl_info = unsafe_zeroed();
    // Any static of this library names its image; this one is zero-initialised, in its `.bss`.
    let anchor: *const AtomicU64 = &super::resident::FILE_AT_START;
    // SAFETY: dladdr with the address of one of our statics and a writable Dl_info.
    if unsafe { libc::dladdr(anchor.cast(), &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated path that lives as long as the object.
    let me = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let me = std::fs::canonicalize(&me).map(|p| p.to_string_lossy().into_owned()).unwrap_or(me);
    let maps = read_maps();
    for (i, m) in maps.iter().enumerate() {
        if m.path == me {
            uswap_pager::own::add(m.start, m.end - m.start);
            if let Some(n) = maps.get(i + 1) {
                if n.start == m.end && n.inode == 0 && n.path.is_empty() {
                    uswap_pager::own::add(n.start, n.end - n.start);
                }
            }
        }
    }
}

fn unsafe_zeroed() -> libc::Dl_info {
    // SAFETY: Dl_info is plain pointers, for which all-zero (null) is valid.
    unsafe { std::mem::zeroed() }
}

/// Anonymous mappings present at start and smaller than this are the dynamic loader's.
const LOADER_MAX: usize = 1 << 20;

/// Is mapping `m`, seen by the pass at start-up, the dynamic loader's data?
///
/// ld.so allocates with its own minimal `malloc` (small anonymous mappings) before any library
/// code runs: the link maps, the TLS slot-info list, the main thread's static TLS and its DTV.
/// The loader reads them on paths where no pager thread can serve a fault: a lazily bound
/// call's `_dl_fixup`, and `pthread_create` on a cached stack (`_dl_allocate_tls_init`), both
/// taken by a fork child while it starts its own pager thread (a fork child that found the
/// slot-info list swapped out there would hang). So they are recorded as the pager's own at
/// start: never adopted, always resident, counted in `loader_bytes`. The brk heap is the
/// program's (`[heap]`), and anything larger than [`LOADER_MAX`] is the program's too.
pub(super) fn is_loader_data(m: &Map) -> bool {
    m.path.is_empty() && m.perms[..2] == *b"rw" && m.end - m.start < LOADER_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    // Addresses above the 47-bit user address space, so that no mapping of this test process
    // (a thread stack another test recorded as the pager's own) can overlap them.
    const SAMPLE: &str = "\
fd0c00000000-fd0c00001000 r--p 00000000 fe:00 1234 /usr/bin/prog
fd0c00001000-fd0c00002000 rw-p 00001000 fe:00 1234 /usr/bin/prog
fd0c00002000-fd0c00003000 rw-p 00000000 00:00 0
fd0c01000000-fd0c02000000 rw-p 00000000 00:00 0 [heap]
fe0000000000-fe0000001000 ---p 00000000 00:00 0
fe0000001000-fe0000801000 rw-p 00000000 00:00 0
fe0001000000-fe0005000000 rw-p 00000000 00:00 0
fe0005000000-fe0009000000 ---p 00000000 00:00 0
fe0009000000-fe0009002000 rw-p 00000000 00:00 0
fe000a000000-fe000a100000 rw-s 00000000 00:05 99 /dev/zero (deleted)
fffc00000000-fffc00021000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn picks_heaps_and_arenas_not_stacks_bss_or_shared() {
        let maps = parse_maps(SAMPLE);
        assert_eq!(maps.len(), 11);
        let r: Vec<_> = (0..maps.len()).map(|i| skip_reason(&maps, i, 16 << 10)).collect();
        assert_eq!(r[0], Some("not private writable"));
        assert_eq!(r[1], Some("file or special"));
        assert_eq!(r[2], Some("bss of a loaded object"));
        assert_eq!(r[3], None, "[heap]");
        assert_eq!(r[5], Some("thread stack"));
        assert_eq!(r[6], None, "an arena's heap");
        assert_eq!(r[7], None, "a large reservation");
        assert_eq!(r[4], Some("not private writable"), "a guard page");
        assert_eq!(r[8], Some("small"));
        assert_eq!(r[9], Some("not private writable"));
        assert_eq!(r[10], Some("file or special"));
    }
}
