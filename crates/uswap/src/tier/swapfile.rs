//! The swap file's on-disk header and the checks that keep uswap off files and devices that
//! hold someone else's data, as `mkswap`/`swapon` do for kernel swap.
//!
//! Every swap file uswap writes starts with a [`Header`] of [`HEADER_BYTES`] (magic
//! `USWAPFIL`, format version, page size, data offset, a random UUID, creation time); page data
//! starts after it. Opening a `file:PATH` tier:
//! - PATH does not exist: it is created with mode 0600, given a header, and unlinked at once.
//! - PATH exists (regular file or block device) and starts with uswap's header: it is reused
//!   (its old contents were encrypted with a key that died with the process that wrote them).
//! - PATH exists without the header: refused, unless `force` (the tier option `force` or the
//!   CLI's `--force`), which writes a new header over it.
//! - PATH is in use: always refused, force or not. A block device is opened with `O_EXCL` (the
//!   kernel refuses while it is mounted, an active swap device, or claimed by md/dm/another
//!   exclusive opener), and is also looked up in `/proc/self/mountinfo` and `/proc/swaps`; a
//!   regular file is refused when it is an active kernel swap file, a mount point, the backing
//!   file of a loop device, or locked by another uswap process (each user takes an exclusive
//!   `flock` for as long as it has the file open).
//!
//! Locking: none in memory; the `flock` on an opened regular file is held by its open file
//! description until it is closed.

use crate::error::TierError;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Bytes before the first cluster: the header, padded to a page (O_DIRECT-aligned).
pub const HEADER_BYTES: u64 = 4096;
/// The first 8 bytes of every uswap swap file.
pub const MAGIC: [u8; 8] = *b"USWAPFIL";
/// Format version written by this build.
pub(crate) const VERSION: u32 = 1;

/// The header at offset 0 (little-endian fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// Format version.
    pub version: u32,
    /// Page size the file was written with.
    pub page_size: u32,
    /// Byte offset of the first cluster.
    pub data_offset: u64,
    /// Random (version 4) UUID naming this swap file.
    pub uuid: [u8; 16],
    /// Creation time, seconds since the epoch.
    pub created: u64,
}

impl Header {
    /// A new header with a random UUID.
    pub(crate) fn new() -> Result<Header, TierError> {
        let mut uuid = [0u8; 16];
        getrandom::fill(&mut uuid).map_err(|e| TierError::Io { errno: 0, op: "getrandom", msg: e.to_string() })?;
        uuid[6] = (uuid[6] & 0x0f) | 0x40;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Ok(Header { version: VERSION, page_size: crate::PAGE_SIZE as u32, data_offset: HEADER_BYTES, uuid, created })
    }

    /// The header as the first [`HEADER_BYTES`] of the file.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_BYTES as usize];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.data_offset.to_le_bytes());
        b[24..40].copy_from_slice(&self.uuid);
        b[40..48].copy_from_slice(&self.created.to_le_bytes());
        b
    }

    /// `None` when `b` does not start with the magic (not a uswap file); an error when it does
    /// but this build cannot use it.
    pub(crate) fn decode(b: &[u8]) -> Option<Result<Header, String>> {
        if b.len() < 48 || b[..8] != MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[24..40]);
        let h =
            Header { version: u32_at(8), page_size: u32_at(12), data_offset: u64_at(16), uuid, created: u64_at(40) };
        Some(if h.version != VERSION {
            Err(format!("uswap swap file format version {} (this uswap reads version {VERSION})", h.version))
        } else if h.page_size as usize != crate::PAGE_SIZE || h.data_offset != HEADER_BYTES {
            Err(format!("uswap swap file with page size {} and data offset {}", h.page_size, h.data_offset))
        } else {
            Ok(h)
        })
    }

    /// The UUID in its usual text form.
    #[cfg(test)]
    pub(crate) fn uuid_string(&self) -> String {
        let u = &self.uuid;
        let hex = |r: std::ops::Range<usize>| u[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
        format!("{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
    }
}

/// Write a new header at offset 0 (through an aligned buffer, so O_DIRECT files work).
pub(crate) fn write_header(f: &File) -> Result<Header, TierError> {
    let h = Header::new()?;
    let mut buf = super::io_engine::IoBuf::new(HEADER_BYTES as usize);
    buf.as_mut_slice()[..HEADER_BYTES as usize].copy_from_slice(&h.encode());
    f.write_all_at(&buf.as_slice()[..HEADER_BYTES as usize], 0)
        .map_err(|e| TierError::io("write swap file header", &e))?;
    Ok(h)
}

/// Read the header of an existing file: `Ok(None)` when it has none (or is shorter than one).
pub(crate) fn read_header(f: &File) -> Result<Option<Result<Header, String>>, TierError> {
    let mut buf = super::io_engine::IoBuf::new(HEADER_BYTES as usize);
    let b = &mut buf.as_mut_slice()[..HEADER_BYTES as usize];
    let mut got = 0;
    while got < b.len() {
        match f.read_at(&mut b[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(TierError::io("read swap file header", &e)),
        }
    }
    Ok(if got < 48 { None } else { Header::decode(&b[..got]) })
}

/// Undo the octal escapes (`\040` for a space) of /proc/mounts, /proc/swaps and mountinfo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One mount of `/proc/self/mountinfo`: device number, mount point, source.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    /// `major:minor` of the mounted file system.
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub point: PathBuf,
    /// The mount source (a device path for block file systems).
    pub source: String,
}

/// Parse `/proc/self/mountinfo` text.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let (maj, min) = f.get(2)?.split_once(':')?;
            let sep = f.iter().position(|x| *x == "-")?;
            Some(Mount {
                dev: (maj.parse().ok()?, min.parse().ok()?),
                point: PathBuf::from(unescape(f.get(4)?)),
                source: unescape(f.get(sep + 2)?),
            })
        })
        .collect()
}

/// The file names of `/proc/swaps` text (header line skipped).
pub(crate) fn parse_swaps(text: &str) -> Vec<PathBuf> {
    text.lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(|n| PathBuf::from(unescape(n))).collect()
}

fn same_file(a: &std::fs::Metadata, p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|b| {
        if a.file_type().is_file() {
            a.dev() == b.dev() && a.ino() == b.ino()
        } else {
            b.rdev() != 0 && a.rdev() == b.rdev()
        }
    })
}

/// Why `path` (open as `f`, with metadata `md`) is in use by someone else, if it is.
/// `mountinfo` and `swaps` are the texts of `/proc/self/mountinfo` and `/proc/swaps`.
pub(crate) fn in_use_reason(path: &Path, md: &std::fs::Metadata, mountinfo: &str, swaps: &str) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if md.file_type().is_block_device() {
        let (maj, min) = (libc::major(md.rdev()), libc::minor(md.rdev()));
        for m in parse_mountinfo(mountinfo) {
            if m.dev == (maj, min) || (m.source.starts_with('/') && same_file(md, Path::new(&m.source))) {
                return Some(format!("it is mounted on {}", m.point.display()));
            }
        }
    } else {
        for m in parse_mountinfo(mountinfo) {
            if m.point == canon {
                return Some("it is a mount point".into());
            }
        }
        // A loop device's backing file.
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            for e in rd.flatten() {
                let bf = e.path().join("loop/backing_file");
                if let Ok(s) = std::fs::read_to_string(&bf) {
                    if Path::new(s.trim_end()) == canon {
                        return Some(format!("it backs the loop device /dev/{}", e.file_name().to_string_lossy()));
                    }
                }
            }
        }
    }
    for s in parse_swaps(swaps) {
        if s == canon || same_file(md, &s) {
            return Some("it is an active kernel swap area (see /proc/swaps)".into());
        }
    }
    None
}

/// Refuse a file or device that is in use: checks [`in_use_reason`] against this system's
/// mount table and swap list, and for a regular file takes an exclusive `flock` (held while
/// `f` is open) so two uswap processes never share one swap file.
pub(crate) fn claim(path: &Path, f: &File) -> Result<(), TierError> {
    let md = f.metadata().map_err(|e| TierError::io("stat swap file", &e))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    if let Some(why) = in_use_reason(path, &md, &mountinfo, &swaps) {
        return Err(TierError::Io {
            errno: 0,
            op: "open swap file",
            msg: format!("'{}' is in use: {why}; uswap never uses it, even with force", path.display()),
        });
    }
    if md.file_type().is_file() {
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(TierError::Io {
                errno: 0,
                op: "open swap file",
                msg: format!(
                    "'{}' is in use by another uswap process (it holds a lock on it: {e}); give each process its own \
                     swap file, or a directory",
                    path.display()
                ),
            });
        }
    }
    Ok(())
}

/// The message for an existing file without uswap's header.
pub(crate) fn not_ours(path: &Path, what: &str) -> TierError {
    TierError::Io {
        errno: 0,
        op: "open swap file",
        msg: format!(
            "'{}' is an existing {what} without a uswap swap header, so it may hold data that swapping would \
             overwrite; uswap refuses it. Give a directory (uswap then uses an unlinked temporary file in it), a path \
             that does not exist (uswap creates the file and removes its name at once), or add `force` \
             (`file:{}:force`, or `--force`) to overwrite it",
            path.display(),
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header::new().unwrap();
        let b = h.encode();
        assert_eq!(b.len(), HEADER_BYTES as usize);
        assert_eq!(&b[..8], b"USWAPFIL");
        assert_eq!(Header::decode(&b), Some(Ok(h.clone())));
        let s = h.uuid_string();
        assert_eq!(s.len(), 36);
        assert_eq!(s.as_bytes()[14], b'4', "version 4 UUID: {s}");
        assert_ne!(Header::new().unwrap().uuid, h.uuid);
        let mut bad = b.clone();
        bad[8] = 9;
        assert!(Header::decode(&bad).unwrap().unwrap_err().contains("version 9"));
        assert_eq!(Header::decode(&[0u8; 4096]), None);
        assert_eq!(Header::decode(b"USWAP"), None);
    }

    #[test]
    fn parses_proc_files() {
        let mi = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                  30 22 0:40 / /mnt/my\\040disk rw - btrfs /dev/sdb2 rw\n\
                  31 22 0:41 / /run rw - tmpfs tmpfs rw\n";
        let m = parse_mountinfo(mi);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], Mount { dev: (8, 1), point: "/".into(), source: "/dev/sda1".into() });
        assert_eq!(m[1].point, PathBuf::from("/mnt/my disk"));
        assert_eq!(m[1].source, "/dev/sdb2");
        let sw = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                  /dev/zram0                              partition\t8388604\t\t0\t\t100\n\
                  /var/swap\\040file                       file\t\t1048572\t\t0\t\t-2\n";
        assert_eq!(parse_swaps(sw), vec![PathBuf::from("/dev/zram0"), PathBuf::from("/var/swap file")]);
    }

    #[test]
    fn in_use_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("swap");
        std::fs::write(&p, b"x").unwrap();
        let md = std::fs::metadata(&p).unwrap();
        let c = p.canonicalize().unwrap();
        assert_eq!(in_use_reason(&p, &md, "", "Filename Type\n"), None);
        let swaps = format!("Filename Type\n{} file 100 0 -2\n", c.display());
        assert!(in_use_reason(&p, &md, "", &swaps).unwrap().contains("active kernel swap"));
        let mi = format!("40 22 0:50 / {} rw - ext4 /dev/sdc rw\n", c.display());
        assert!(in_use_reason(&p, &md, &mi, "").unwrap().contains("mount point"));
        // Two claims on one file: the second is refused while the first is open.
        let a = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        claim(&p, &a).unwrap();
        let b = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let e = claim(&p, &b).unwrap_err().to_string();
        assert!(e.contains("another uswap process"), "{e}");
        drop(a);
        claim(&p, &b).unwrap();
    }

    #[test]
    fn a_mounted_block_device_is_in_use() {
        // The root file system's device, when /proc/self/mountinfo names a /dev node for it.
        let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let Some(m) = parse_mountinfo(&mi).into_iter().find(|m| {
            m.source.starts_with("/dev/")
                && std::fs::metadata(&m.source).is_ok_and(|md| {
                    use std::os::unix::fs::FileTypeExt;
                    md.file_type().is_block_device()
                })
        }) else {
            eprintln!("no mounted block device visible: skipped");
            return;
        };
        let md = std::fs::metadata(&m.source).unwrap();
        let why = in_use_reason(Path::new(&m.source), &md, &mi, "").unwrap();
        assert!(why.contains("mounted on"), "{why}");
    }
}
