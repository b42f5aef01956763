//! Where `uswap run` finds the LD_PRELOAD library: `USWAP_PRELOAD`, else the copy embedded in
//! release builds (see build.rs), else `libuswap_ffi.so` next to the binary (`deps/` in a cargo
//! target directory, `../lib/` when installed by a package).
//!
//! The embedded copy is written once to a cache file, `$XDG_RUNTIME_DIR/uswap/` (when that
//! directory can be used, [`crate::rundir::runtime_dir`]) or `/tmp/uswap-$UID/` (directory mode
//! 0711, owned by us, not a symlink: others may load the library by name, as a program that
//! drops privileges must, but not list or write), named by the content's hash, written to a
//! temporary name and renamed, so concurrent runs never see half a file. A file path (not a
//! memfd) because every program started below `uswap run` inherits LD_PRELOAD, including those
//! started after their parent closed all its file descriptors.
//!
//! A run that writes a new copy (the first of a new build) removes the copies other builds
//! left that nothing maps and nothing read for two days (`prune`).
//!
//! Locking: none (the rename is atomic; two runs writing the same content race harmlessly).

use std::path::{Path, PathBuf};

#[cfg(uswap_embed)]
static EMBEDDED: Option<&[u8]> = Some(include_bytes!(env!("USWAP_EMBED_PATH")));
#[cfg(not(uswap_embed))]
static EMBEDDED: Option<&[u8]> = None;
/// `fnv1a` of [`EMBEDDED`], computed by build.rs, so that `uswap run` does not hash the library at
/// every start.
#[cfg(uswap_embed)]
const EMBEDDED_HASH: Option<&str> = Some(env!("USWAP_EMBED_HASH"));
#[cfg(not(uswap_embed))]
const EMBEDDED_HASH: Option<&str> = None;

// `fn fnv1a(&[u8]) -> u64`, the hash that names the cache file by content (not a security
// boundary: the directory is ours); build.rs includes the same file to compute
// EMBEDDED_HASH, so the two cannot differ.
include!("fnv1a.rs");

/// The cache's directory (see [`crate::rundir::owned_dir`]: ours, closed to writing and listing
/// by others, open to traversal so that a program that drops privileges can load the library).
fn private_dir() -> Result<PathBuf, String> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let d = match crate::rundir::runtime_dir() {
        Some(r) => r.join("uswap"),
        None => std::env::temp_dir().join(format!("uswap-{uid}")),
    };
    crate::rundir::owned_dir(&d, uid)?;
    Ok(d)
}

/// Whether the file at `p` holds exactly `bytes` (read in chunks: the library is a few MiB,
/// and whatever this process touches before it starts the program shows in the program's
/// peak RSS, see [`shed_before_spawn`]).
fn same_content(p: &Path, bytes: &[u8]) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(p) else { return false };
    if f.metadata().map(|m| m.len()).ok() != Some(bytes.len() as u64) {
        return false;
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < bytes.len() {
        let n = match f.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n.min(bytes.len() - at),
        };
        if buf[..n] != bytes[at..at + n] {
            return false;
        }
        at += n;
    }
    true
}

/// Write `bytes` to `dir/libuswap_ffi-HASH.so` unless it is already there with this content.
/// `known` is the bytes' `fnv1a` in hex if the caller has it (build.rs computed the embedded
/// copy's); else it is computed here.
pub fn cached(dir: &Path, bytes: &[u8], known: Option<&str>) -> Result<PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = known.map_or_else(|| format!("{:016x}", fnv1a(bytes)), str::to_owned);
    let p = dir.join(format!("libuswap_ffi-{name}.so"));
    if same_content(&p, bytes) {
        // Readable by all (a copy an older uswap wrote 0500 is opened up; see `private_dir`).
        let _ = std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o555));
        return Ok(p);
    }
    let tmp = dir.join(format!(".libuswap_ffi-{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o555)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &p).map_err(|e| format!("{}: {e}", p.display()))?;
    prune(dir, &p, PRUNE_UNREAD);
    Ok(p)
}

/// How long a copy of another build must have gone unread before [`prune`] removes it.
const PRUNE_UNREAD: std::time::Duration = std::time::Duration::from_secs(2 * 24 * 3600);

/// Remove the copies other builds of uswap left in the cache directory `dir` (every build
/// writes its own, and none removed them: 31 MB each before they lost their debug
/// information, in a directory that is often a tmpfs), except `keep`. A copy goes only if no
/// process this user can see maps it and it has not been read for `unread` (its access time,
/// which a load or a start of its build's `uswap run` refreshes at least daily under
/// `relatime`), so a tree of an older uswap still running keeps its copy. Called when a run
/// writes a new copy (the first run of a new build), not at every run: it reads the maps of
/// every process. Best effort; returns the copies removed.
fn prune(dir: &Path, keep: &Path, unread: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let now = std::time::SystemTime::now();
    let stale: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.as_path() != keep
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libuswap_ffi-") && n.ends_with(".so"))
                && std::fs::metadata(p)
                    .and_then(|m| m.accessed())
                    .is_ok_and(|a| now.duration_since(a).is_ok_and(|d| d >= unread))
        })
        .collect();
    if stale.is_empty() {
        return 0;
    }
    // A mapping is listed under the file's resolved path (the directory may lie below a
    // symbolic link); a path that cannot be resolved counts as in use.
    let names: Vec<Option<String>> = stale
        .iter()
        .map(|p| std::fs::canonicalize(p).ok().and_then(|c| c.into_os_string().into_string().ok()))
        .collect();
    let mut in_use: Vec<bool> = names.iter().map(Option::is_none).collect();
    for pid in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if pid.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_none() {
            continue;
        }
        let Ok(maps) = std::fs::read_to_string(pid.path().join("maps")) else { continue };
        for (used, name) in in_use.iter_mut().zip(&names) {
            *used |= name.as_deref().is_some_and(|n| maps.contains(n));
        }
    }
    stale.iter().zip(in_use).filter(|&(p, used)| !used && std::fs::remove_file(p).is_ok()).count()
}

/// Make this process small before it starts a program: Linux gives a child the peak RSS of the
/// process it was forked or spawned from (`exec` records the old address space's high-water
/// mark in the child's `ru_maxrss`), so the embedded library that [`locate`] read (a few
/// MiB) would show as the program's peak. Drops those pages (a private read-only file mapping:
/// they come back from the binary if read again) and resets this process's high-water mark to
/// its current RSS (`/proc/self/clear_refs`, value 5). Best effort: failures only leave the
/// figure higher.
pub fn shed_before_spawn() {
    if let Some(b) = EMBEDDED {
        let start = (b.as_ptr() as usize).div_ceil(4096) * 4096;
        let end = (b.as_ptr() as usize + b.len()) / 4096 * 4096;
        if end > start {
            // SAFETY: [start, end) lies inside the embedded bytes, a read-only file-backed
            // mapping of our binary that nothing writes: MADV_DONTNEED only drops its pages,
            // which later reads fault back in from the file unchanged.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The library to preload, or a message naming every way to provide one.
pub(crate) fn locate() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(uswap_pager::launch::PRELOAD.os_name()) {
        return named(Path::new(&p));
    }
    let mut why = String::new();
    if let Some(b) = EMBEDDED {
        match private_dir().and_then(|d| cached(&d, b, EMBEDDED_HASH)) {
            Ok(p) => return Ok(p),
            Err(e) => why = format!(" (the built-in copy could not be written: {e})"),
        }
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the uswap binary: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for c in [dir.join("libuswap_ffi.so"), dir.join("deps/libuswap_ffi.so"), dir.join("../lib/libuswap_ffi.so")] {
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(format!(
        "cannot find libuswap_ffi.so next to {}{why}: build uswap with `cargo build --release -p uswap-cli` (which \
         embeds it) or `cargo install --path crates/uswap-cli`, or set {} to the library's path",
        exe.display(),
        uswap_pager::launch::PRELOAD.name()
    ))
}

/// The library `USWAP_PRELOAD` names, checked: the dynamic loader skips a preload it cannot
/// open with only a line on stderr, and the program would run with no pager and no limit.
/// Made absolute, since a relative `LD_PRELOAD` is looked up from each process's own working
/// directory.
fn named(p: &Path) -> Result<PathBuf, String> {
    use std::io::Read;
    let var = uswap_pager::launch::PRELOAD.name();
    let bad = |why: &str| Err(format!("{var}={}: {why}; unset it to use the built-in library", p.display()));
    if p.as_os_str().is_empty() {
        return bad("empty");
    }
    let abs = match std::fs::canonicalize(p) {
        Ok(a) => a,
        Err(e) => return bad(&e.to_string()),
    };
    let mut magic = [0u8; 18];
    let read = std::fs::File::open(&abs).and_then(|mut f| f.read_exact(&mut magic));
    match read {
        Err(e) if std::fs::metadata(&abs).is_ok_and(|m| !m.is_file()) => bad(&format!("not a regular file ({e})")),
        Err(e) => bad(&e.to_string()),
        // ELF magic, and e_type (little-endian) ET_DYN: a shared object.
        Ok(()) if magic[..4] == *b"\x7fELF" && magic[16] == 3 && magic[17] == 0 => Ok(abs),
        Ok(()) => bad("not an ELF shared library"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_other_builds_go_once_unread_and_unmapped() {
        use std::fs::{File, FileTimes};
        let t = tempfile::tempdir().unwrap();
        // The directory is reached through a symbolic link: /proc/PID/maps names the real path.
        std::fs::create_dir(t.path().join("real")).unwrap();
        std::os::unix::fs::symlink(t.path().join("real"), t.path().join("link")).unwrap();
        let d = t.path().join("link");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 24 * 3600);
        let make = |name: &str, aged: bool| {
            let p = d.join(name);
            std::fs::write(&p, vec![7u8; 8192]).unwrap();
            if aged {
                File::options().write(true).open(&p).unwrap().set_times(FileTimes::new().set_accessed(old)).unwrap();
            }
            p
        };
        let keep = make("libuswap_ffi-0000.so", true);
        let stale = make("libuswap_ffi-aaaa.so", true);
        let recent = make("libuswap_ffi-bbbb.so", false);
        let in_use = make("libuswap_ffi-cccc.so", true);
        let other = make("notes.txt", true);
        let f = File::options().read(true).write(true).open(&in_use).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a private read-only mapping of a file this test owns, unmapped below.
        let m = unsafe { libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_PRIVATE, f.as_raw_fd(), 0) };
        assert_ne!(m, libc::MAP_FAILED);
        // Mapping it was a read (the kernel's `file_accessed`): make it look unread again, so
        // only the mapping keeps it.
        f.set_times(FileTimes::new().set_accessed(old)).unwrap();
        assert_eq!(prune(&d, &keep, PRUNE_UNREAD), 1);
        assert!(!stale.exists(), "unread for three days and mapped by no one");
        for p in [&keep, &recent, &in_use, &other] {
            assert!(p.exists(), "{} must stay", p.display());
        }
        // SAFETY: the mapping made above, not used after this.
        unsafe { libc::munmap(m, 8192) };
        assert_eq!(prune(&d, &keep, PRUNE_UNREAD), 1, "unmapped now");
        assert!(!in_use.exists() && recent.exists() && keep.exists());
    }

    #[test]
    fn a_preload_named_by_the_environment_must_be_a_shared_library() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope.so");
        let e = named(&missing).unwrap_err();
        assert!(e.contains("USWAP_PRELOAD=") && e.contains("No such file"), "{e}");
        let e = named(d.path()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let text = d.path().join("text.so");
        std::fs::write(&text, b"not a library at all, just text").unwrap();
        assert!(named(&text).unwrap_err().contains("not an ELF shared library"));
        assert!(named(Path::new("")).unwrap_err().contains("empty"));
        // A real shared library of this system passes, and comes back absolute.
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("no libc.so.6 in the usual places");
        let ok = named(Path::new(libc)).unwrap();
        assert!(ok.is_absolute());
        let up = std::env::current_dir().unwrap().components().count() - 1;
        let rel = PathBuf::from("../".repeat(up)).join(&libc[1..]);
        assert!(rel.is_relative());
        assert_eq!(named(&rel).unwrap(), ok, "a relative path is made absolute");
    }

    #[test]
    fn the_cache_is_written_once_and_readable_by_all() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let a = cached(d.path(), b"lib one", None).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"lib one");
        assert_eq!(std::fs::metadata(&a).unwrap().permissions().mode() & 0o777, 0o555);
        assert_eq!(cached(d.path(), b"lib one", None).unwrap(), a);
        let known = format!("{:016x}", fnv1a(b"lib one"));
        assert_eq!(cached(d.path(), b"lib one", Some(&known)).unwrap(), a, "the same name from a known hash");
        let b = cached(d.path(), b"lib two", None).unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2, "no temporary file left");
    }
}
