//! The run directory and the tree directories in it, as `uswap run` makes them and every reader
//! finds them: where they lie ([`runtime_dir`], [`run_dir`], [`run_dirs`]), who may use them
//! ([`owned_dir`]), the names of the files a tree directory holds besides the processes'
//! statistics ([`BUDGET_FILE`]), and how a file there is replaced whole ([`write_atomic`]).
//! (The layout as a whole is described in `crate::live`.)
//!
//! Locking: none. Writers write a temporary file and rename it, so readers see whole files.

use std::path::{Path, PathBuf};

/// The tree's shared budget file in its tree directory (`uswap_pager::tree`), mapped by every
/// process of the tree.
pub(crate) const BUDGET_FILE: &str = "budget";

/// The user's runtime directory, `$XDG_RUNTIME_DIR`, when it can be used: an absolute path to
/// an existing directory of this user that nobody else may write and that this process may
/// write into. Otherwise (unset; a directory that does not exist, as after `su`, in cron or
/// over ssh; another user's; read-only) None, and the per-user directory is used instead,
/// without a word.
pub(crate) fn runtime_dir() -> Option<PathBuf> {
    usable_runtime_dir(std::env::var_os("XDG_RUNTIME_DIR"), uid())
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// [`runtime_dir`] for the value `var` of `XDG_RUNTIME_DIR` and user `uid`.
fn usable_runtime_dir(var: Option<std::ffi::OsString>, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let d = PathBuf::from(var.filter(|d| !d.is_empty())?);
    let m = std::fs::metadata(&d).ok()?;
    let c = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: access(2) of a NUL-terminated path.
    let writable = unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0;
    (d.is_absolute() && m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0 && writable).then_some(d)
}

/// The per-user run directory used without a usable [`runtime_dir`]: `/dev/shm/uswap-<uid>`
/// where `/dev/shm` is a tmpfs, else `/tmp/uswap-<uid>`.
fn per_user_dir(uid: u32) -> PathBuf {
    if is_tmpfs(Path::new("/dev/shm")) {
        PathBuf::from(format!("/dev/shm/uswap-{uid}"))
    } else {
        PathBuf::from(format!("/tmp/uswap-{uid}"))
    }
}

/// The directory holding one tree directory per running `uswap run` (and the cached preload
/// library, `crate::preload`), created if missing: `<runtime dir>/uswap`, else the per-user
/// directory. An error says why it cannot be used (then the run keeps its statistics in a
/// private temporary directory, and `uswap status` cannot see it).
pub fn run_dir() -> Result<PathBuf, String> {
    let uid = uid();
    let dir = runtime_dir().map_or_else(|| per_user_dir(uid), |d| d.join("uswap"));
    owned_dir(&dir, uid)?;
    Ok(dir)
}

/// Every run directory where this user's runs may be, whatever the environment they started
/// in: `<runtime dir>/uswap`, `/run/user/<uid>/uswap` (the runtime directory systemd-logind
/// makes for the user, also when this environment has no `XDG_RUNTIME_DIR`) and the per-user directory;
/// those that exist as directories of the user that nobody else may write, each once.
pub(crate) fn run_dirs() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = uid();
    let candidates = [
        runtime_dir().map(|d| d.join("uswap")),
        Some(PathBuf::from(format!("/run/user/{uid}/uswap"))),
        Some(per_user_dir(uid)),
    ];
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = Vec::new();
    for d in candidates.into_iter().flatten() {
        let ours = std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0);
        let Ok(real) = std::fs::canonicalize(&d) else { continue };
        if ours && !seen.contains(&real) {
            seen.push(real);
            out.push(d);
        }
    }
    out
}

/// Whether `dir` is a directory on a tmpfs (memory, not a disk).
fn is_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs of a NUL-terminated path into a zeroed struct of the right type.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::statfs(c.as_ptr(), &mut st) }) == 0 && st.f_type as i64 == TMPFS_MAGIC && dir.is_dir()
}

/// Make `dir` (mode 0711) unless it exists, and check that it is a real directory of `uid` that
/// nobody else may write or list. Others may *traverse* it: a program that drops privileges
/// under `uswap run` (`runuser`, `gosu`, a server's own `setuid`) must still be able to load
/// the cached library by its name (with 0700 its loader printed "cannot be preloaded" and it
/// ran without the pager). A 0700 directory of an older uswap is opened up to 0711.
pub(crate) fn owned_dir(dir: &std::path::Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o711).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mode = m.permissions().mode() & 0o7777;
    if !m.is_dir() || m.uid() != uid || mode & 0o066 != 0 {
        return Err(format!(
            "{} is not a directory of user {uid} that nobody else may write or list (mode {mode:o}, owner {})",
            dir.display(),
            m.uid()
        ));
    }
    if mode & 0o011 != 0o011 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011));
    }
    Ok(())
}

/// Write `bytes` to `path` through a temporary name in the same directory and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> bool {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run directory is made 0711 (others may traverse it to load the cached library, not
    /// list or write it), an older 0700 one is opened to 0711, and one others may list or
    /// write is refused.
    #[test]
    fn the_run_directory_is_traversable_and_nothing_more() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let mode = |d: &std::path::Path| std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
        let d = base.path().join("new");
        owned_dir(&d, uid).unwrap();
        assert_eq!(mode(&d), 0o711);
        let old = base.path().join("old");
        std::fs::create_dir(&old).unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o700)).unwrap();
        owned_dir(&old, uid).unwrap();
        assert_eq!(mode(&old), 0o711, "a 0700 directory is opened to traversal");
        for bad in [0o755, 0o733, 0o777] {
            std::fs::set_permissions(&old, std::fs::Permissions::from_mode(bad)).unwrap();
            let e = owned_dir(&old, uid).expect_err("a directory others may list or write is refused");
            assert!(e.contains("nobody else may write or list"), "{e}");
        }
        assert!(owned_dir(&d, uid + 1).is_err(), "another user's directory is refused");
    }

    /// `XDG_RUNTIME_DIR` is used only when it names an existing directory of this user, by an
    /// absolute path, that nobody else may write: else the per-user directory is.
    #[test]
    fn an_unusable_runtime_directory_is_passed_over() {
        use std::os::unix::fs::PermissionsExt;
        let me = uid();
        let d = tempfile::tempdir().unwrap();
        let var = |p: &Path| Some(p.as_os_str().to_os_string());
        assert_eq!(usable_runtime_dir(var(d.path()), me), Some(d.path().to_path_buf()));
        for missing in [None, Some("".into()), Some("/nonexistent".into()), Some(".".into())] {
            assert_eq!(usable_runtime_dir(missing.clone(), me), None, "{missing:?}");
        }
        assert_eq!(usable_runtime_dir(var(d.path()), me + 1), None, "another user's directory");
        let file = d.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(usable_runtime_dir(var(&file), me), None, "not a directory");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(usable_runtime_dir(var(d.path()), me), None, "others may write it");
    }
}
