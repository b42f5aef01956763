//! What kind of executable a file is, from its ELF program headers: whether the dynamic loader
//! runs it (so the preload library is loaded at all), whether the Go toolchain built it
//! (the Go runtime gives memory back with system calls of its own, which the preload does not
//! see: [`GO_REFUSED`]), and whether a sanitizer instruments it (from its dynamic string table). Used by `uswap run` before it starts a program, by its watch over the
//! tree, and by the preload library at start-up.
//!
//! Locking: none (plain reads of one file).

use std::path::Path;

/// What kind of executable a file is.
#[derive(Debug, PartialEq, Eq)]
pub enum ExeKind {
    /// ELF with an interpreter (PT_INTERP).
    Dynamic,
    /// ELF without one: the LD_PRELOAD library would never be loaded.
    Static,
    /// ELF built by the Go toolchain (a `Go` build-id note), with an interpreter or without
    /// (what `go build` makes of a program that uses no cgo). The Go runtime gives memory back
    /// with `madvise` system calls of its own, which the preload does not see (see
    /// [`GO_REFUSED`]).
    Go,
    /// A dynamic ELF built with a sanitizer (AddressSanitizer, ThreadSanitizer,
    /// MemorySanitizer): its runtime must be the first library loaded (an LD_PRELOAD library
    /// before it makes it refuse to start) and maps terabytes of shadow memory of its own. The
    /// name is the sanitizer's.
    Sanitized(&'static str),
    /// A script (#!) or something the kernel will sort out.
    Other,
}

/// The sanitizers' start-up symbols, which an instrumented executable references (GCC, with
/// the runtime in a shared library) or defines and exports (Clang, with it linked in): found
/// in the dynamic string table either way.
const SANITIZERS: [(&[u8], &str); 4] = [
    (b"__asan_init", "AddressSanitizer"),
    (b"__tsan_init", "ThreadSanitizer"),
    (b"__msan_init", "MemorySanitizer"),
    (b"__hwasan_init", "HWAddressSanitizer"),
];

/// Why a Go program is not put under the pager (the refusal, and the reason of a Go process
/// found in the tree).
pub const GO_REFUSED: &str = "the Go runtime gives memory back with madvise(MADV_DONTNEED) system calls of \
     its own, which uswap does not see, so a page it had swapped out would come back with stale contents \
     (a Go heap under uswap failed the runtime's own check: \"found pointer to free object\")";

/// Classify an executable by its ELF program headers.
pub fn exe_kind(path: &Path) -> std::io::Result<ExeKind> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let mut h = [0u8; 64];
    let n = f.read(&mut h)?;
    if n < 64 || &h[..4] != b"\x7fELF" {
        return Ok(ExeKind::Other);
    }
    let le = h[5] == 1;
    let rd16 = |b: &[u8]| if le { u16::from_le_bytes([b[0], b[1]]) } else { u16::from_be_bytes([b[0], b[1]]) };
    let rd32 = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let rd64 = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        if le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    };
    let (phoff, phentsize, phnum) = match h[4] {
        2 => (rd64(&h[32..]), rd16(&h[54..]), rd16(&h[56..])),
        1 => (u64::from(rd32(&h[28..])), rd16(&h[42..]), rd16(&h[44..])),
        _ => return Ok(ExeKind::Other),
    };
    let mut ph = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    f.seek(SeekFrom::Start(phoff))?;
    f.read_exact(&mut ph)?;
    let entries = || ph.chunks_exact(usize::from(phentsize).max(if h[4] == 2 { 56 } else { 32 }));
    // PT_NOTE segments: (offset, size) at 8/32 in ELF64, 4/16 in ELF32.
    for e in entries().filter(|e| rd32(e) == PT_NOTE) {
        let (off, size) = if h[4] == 2 {
            (rd64(&e[8..]), rd64(&e[32..]))
        } else {
            (u64::from(rd32(&e[4..])), u64::from(rd32(&e[16..])))
        };
        if read_at(&mut f, off, size.min(64 << 10))?.is_some_and(|notes| has_go_note(&notes, rd32)) {
            return Ok(ExeKind::Go);
        }
    }
    if !entries().any(|e| rd32(e) == PT_INTERP) {
        return Ok(ExeKind::Static);
    }
    // The dynamic string table: DT_STRTAB (an address) and DT_STRSZ from PT_DYNAMIC, the
    // address turned into a file offset through the PT_LOAD segment that holds it (ELF64 only:
    // the sanitizers run on 64-bit targets).
    if h[4] == 2 {
        let seg = |e: &[u8]| (rd64(&e[8..]), rd64(&e[16..]), rd64(&e[32..]));
        let mut strtab = None;
        for e in entries().filter(|e| rd32(e) == PT_DYNAMIC) {
            let (off, _, size) = seg(e);
            let Some(dynamic) = read_at(&mut f, off, size.min(64 << 10))? else { continue };
            let tag = |t: u64| dynamic.chunks_exact(16).find(|d| rd64(d) == t).map(|d| rd64(&d[8..]));
            strtab = tag(DT_STRTAB).zip(tag(DT_STRSZ));
        }
        let at = strtab.and_then(|(addr, size)| {
            entries().filter(|e| rd32(e) == PT_LOAD).map(seg).find_map(|(off, vaddr, filesz)| {
                (addr >= vaddr && addr + size <= vaddr + filesz).then_some((off + (addr - vaddr), size))
            })
        });
        if let Some((off, size)) = at {
            if let Some(strings) = read_at(&mut f, off, size.min(16 << 20))? {
                for (sym, name) in SANITIZERS {
                    if strings.split(|&b| b == 0).any(|s| s == sym) {
                        return Ok(ExeKind::Sanitized(name));
                    }
                }
            }
        }
    }
    Ok(ExeKind::Dynamic)
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;

/// `len` bytes of `f` at `off`, or `None` if the file is shorter (a truncated segment).
fn read_at(f: &mut std::fs::File, off: u64, len: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut buf = vec![0u8; len as usize];
    f.seek(SeekFrom::Start(off))?;
    Ok(f.read_exact(&mut buf).is_ok().then_some(buf))
}
/// The Go linker's build-id note (`.note.go.buildid`, kept by `-ldflags=-s`): owner "Go", type 4.
const NT_GO_BUILDID: u32 = 4;

/// Whether a PT_NOTE segment's notes (namesz, descsz, type, name and desc each padded to 4
/// bytes) hold the Go build id.
fn has_go_note(mut notes: &[u8], rd32: impl Fn(&[u8]) -> u32) -> bool {
    let pad = |n: u32| (n as usize).div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (namesz, descsz, ty) = (rd32(notes), rd32(&notes[4..]), rd32(&notes[8..]));
        let name_end = 12 + pad(namesz);
        if notes.len() < name_end {
            return false;
        }
        // The Go linker writes the name as "Go\0\0" (namesz 4); "Go\0" (3) is the same owner.
        if ty == NT_GO_BUILDID && (namesz == 3 || namesz == 4) && &notes[12..15] == b"Go\0" {
            return true;
        }
        let next = name_end.saturating_add(pad(descsz));
        if next > notes.len() {
            return false;
        }
        notes = &notes[next..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 file: the header, program headers `(type, offset, size)`, then `tail`.
    fn elf(phdrs: &[(u32, u64, u64)], tail: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for &(ty, off, size) in phdrs {
            let mut e = [0u8; 56];
            e[..4].copy_from_slice(&ty.to_le_bytes());
            e[8..16].copy_from_slice(&off.to_le_bytes());
            // p_vaddr = p_offset: addresses in the file are their offsets.
            e[16..24].copy_from_slice(&off.to_le_bytes());
            e[32..40].copy_from_slice(&size.to_le_bytes());
            h.extend_from_slice(&e);
        }
        h.extend_from_slice(tail);
        h
    }

    /// ELF notes `(name with its NULs, type, desc)`, each part padded to 4 bytes.
    fn notes(list: &[(&[u8], u32, &[u8])]) -> Vec<u8> {
        let mut n = Vec::new();
        for (name, ty, desc) in list {
            n.extend_from_slice(&(name.len() as u32).to_le_bytes());
            n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            n.extend_from_slice(&ty.to_le_bytes());
            n.extend_from_slice(name);
            n.resize(n.len().div_ceil(4) * 4, 0);
            n.extend_from_slice(desc);
            n.resize(n.len().div_ceil(4) * 4, 0);
        }
        n
    }

    #[test]
    fn classifies_executables() {
        assert_eq!(exe_kind(Path::new("/bin/sh")).unwrap(), ExeKind::Dynamic);
        let d = std::env::temp_dir().join(format!("uswap-exe-kind-{}", std::process::id()));
        let kind = |bytes: &[u8]| {
            std::fs::write(&d, bytes).unwrap();
            exe_kind(&d).unwrap()
        };
        assert_eq!(kind(b"#!/bin/sh\necho hi\n"), ExeKind::Other);
        assert_eq!(kind(&elf(&[(1, 0, 0)], &[])), ExeKind::Static, "PT_LOAD only");
        assert_eq!(kind(&elf(&[(1, 0, 0), (3, 0, 0)], &[])), ExeKind::Dynamic, "with PT_INTERP");
        // The Go linker's build id: owner "Go\0\0", type 4 (after a GNU build id), in a
        // PT_NOTE segment; with or without PT_INTERP (a cgo build has one).
        let go = notes(&[(b"GNU\0", 3, &[7; 20]), (b"Go\0\0", 4, b"abc/def")]);
        let at = 64 + 2 * 56;
        assert_eq!(kind(&elf(&[(1, 0, 0), (4, at, go.len() as u64)], &go)), ExeKind::Go);
        assert_eq!(kind(&elf(&[(3, 0, 0), (4, at, go.len() as u64)], &go)), ExeKind::Go);
        // Not Go: another type for "Go", or the segment cut before the name.
        let other = notes(&[(b"Go\0\0", 1, b"abc/def")]);
        assert_eq!(kind(&elf(&[(3, 0, 0), (4, at, other.len() as u64)], &other)), ExeKind::Dynamic);
        assert_eq!(kind(&elf(&[(1, 0, 0), (4, at, go.len() as u64 - 16)], &go[..go.len() - 16])), ExeKind::Static);
        // A sanitizer's start-up symbol in the dynamic string table (DT_STRTAB, DT_STRSZ in
        // PT_DYNAMIC; the table inside the PT_LOAD segment that maps the whole file).
        let sanitized = |strings: &[u8]| {
            let at = 64 + 3 * 56;
            let mut tail = Vec::new();
            for (tag, val) in [(5u64, at + 48), (10, strings.len() as u64), (0, 0)] {
                tail.extend_from_slice(&tag.to_le_bytes());
                tail.extend_from_slice(&val.to_le_bytes());
            }
            tail.extend_from_slice(strings);
            let len = at + tail.len() as u64;
            kind(&elf(&[(1, 0, len), (3, 0, 0), (2, at, 48)], &tail))
        };
        assert_eq!(sanitized(b"\0libc.so.6\0__asan_init\0malloc\0"), ExeKind::Sanitized("AddressSanitizer"));
        assert_eq!(sanitized(b"\0__tsan_init\0"), ExeKind::Sanitized("ThreadSanitizer"));
        assert_eq!(sanitized(b"\0libc.so.6\0__asan_init_v8\0"), ExeKind::Dynamic, "a longer name is another symbol");
        std::fs::remove_file(&d).unwrap();
    }
}
