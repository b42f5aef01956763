//! The swap file tier: [`FileTier`], a [`Backend`] of kind [`TierKind::File`] over a file or
//! block device. By default an unlinked temporary file (mode 0600, `O_TMPFILE`) in a
//! configurable directory, so nothing is left behind when the process ends. An existing file
//! or device is used only if it carries uswap's header or `force` is set, and never while it
//! is in use (`swapfile` has the rules).
//!
//! Physical slots are managed by the cluster allocator ([`SwapSpace`]): a stored folio of
//! 2^order pages takes 2^order naturally aligned slots of one cluster, each holding the
//! reverse-map word `Word::rmap(group, owner virtual slot)`, and is written as one contiguous
//! I/O. The handle is `slot << 4 | order`.
//!
//! On-disk layout: a 4 KiB header (`swapfile::Header`: magic, version, page size, UUID),
//! then the page data, 2 MiB per 512-slot cluster. Every page is encrypted and authenticated
//! with a per-process key, with the slot number and the owning virtual slot as associated data
//! (`crypt`); a page that fails authentication is reported as
//! [`TierError::Corrupt`] and never returned. Each page's seal record (nonce counter and tag)
//! stays in RAM (`SlotRecords`), so a swap-in is one read and a store one write.
//!
//! Page cache: what the file holds must not sit in RAM the limit does not see. By default I/O
//! is buffered and `DropBehind` keeps the file's page cache to a small window (a store costs
//! a copy into the page cache and the write-back runs behind it: faster than waiting for the
//! device). With `direct=on` the file is opened `O_DIRECT` and takes no page cache at all;
//! where the file system refuses that (`open` fails with `EINVAL`), buffered I/O with drop-behind again.
//!
//! Error handling: a failed store frees the slots it allocated and returns the error, so the
//! caller's copy stays the only copy (the engine keeps the old location until a store
//! succeeded). A failed load changes nothing.
//!
//! Locking: the allocator's cluster locks (only for allocating and freeing slots, never across
//! I/O), a per-shard mutex around a small stack of reusable I/O buffers, the drop-behind ring's
//! mutex (buffered I/O only, never across a system call), and whatever the I/O engine takes. Encryption and I/O run with no tier lock held. With `discard` on, clusters
//! that become empty have their blocks released (`FALLOC_FL_PUNCH_HOLE`) before reuse.

use super::crypt::{PageCipher, META_BYTES};
use super::drop_behind::DropBehind;
use super::holds::FileHolds;
use super::io_engine::{IoBuf, IoEngine, IoOp, PsyncEngine, UringEngine};
use super::records::SlotRecords;
use super::swapfile::{self, HEADER_BYTES};
use crate::backend::{Backend, LoadReq, ShareStep, Stored, TierKind, Usage};
use crate::cluster::{SpaceConfig, SwapSpace};
use crate::error::TierError;
use crate::swap_table::{Kind, SwapEntry, Word, MAX_ORDER, PAGE_SIZE, PAYLOAD_MAX, SLOTS_PER_CLUSTER};
use crate::sync::{lock, thread_shard, AtomicU64, LockClass, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// Bytes of page data per cluster.
const DATA_BYTES: u64 = (SLOTS_PER_CLUSTER * PAGE_SIZE) as u64;
/// Bytes of one cluster on disk.
pub const CLUSTER_STRIDE: u64 = DATA_BYTES;
const NR_BUF_SHARDS: usize = 16;
const ORDER_BITS: u32 = 4;

/// Which I/O engine to use.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum EngineKind {
    /// `pread`/`pwrite`.
    Psync,
    /// io_uring (falls back to nothing: creation fails if io_uring is unavailable).
    Uring,
}

/// Where the swap data lives.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FileTarget {
    /// An unlinked temporary file in this directory.
    TempIn(PathBuf),
    /// This file or block device: a missing regular file is created (mode 0600, with a
    /// header) and unlinked at once, so it lives as long as the tier; an existing one needs
    /// uswap's header or `force`, and is refused while in use.
    Path(PathBuf),
}

/// Configuration of a file tier.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FileConfig {
    /// Where.
    pub target: FileTarget,
    /// Capacity in bytes of page data (rounded down to whole 2 MiB clusters; 0 = the size of
    /// the block device or file).
    pub size_bytes: u64,
    /// I/O engine.
    pub engine: EngineKind,
    /// Encrypt and authenticate every page (on by default; off only for benchmarks).
    pub encrypt: bool,
    /// Punch holes for emptied clusters.
    pub discard: bool,
    /// Bypass the page cache (`O_DIRECT`). Where the file system refuses it, the tier falls
    /// back to buffered I/O with drop-behind ([`FileTier::direct`] says which); off (the
    /// default): buffered with drop-behind.
    pub direct: bool,
    /// Use an existing file or device even without uswap's header (overwriting its data).
    pub force: bool,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            target: FileTarget::TempIn(std::env::temp_dir()),
            size_bytes: 8 << 30,
            engine: EngineKind::Psync,
            encrypt: true,
            discard: false,
            direct: false,
            force: false,
        }
    }
}

/// The swap file tier.
pub struct FileTier {
    name: String,
    space: SwapSpace,
    io: Arc<dyn IoEngine>,
    /// Encryption: the key and the slots' seal records.
    seal: Option<(PageCipher, SlotRecords)>,
    bufs: Box<[CachePadded<Mutex<Vec<IoBuf>>>]>,
    stored_pages: AtomicU64,
    discard: bool,
    /// Buffered I/O (the file is not `O_DIRECT`): what keeps its page cache small.
    drop_behind: Option<DropBehind>,
    /// This process's holds on the clusters (the file is shared with `fork` children).
    holds: Arc<FileHolds>,
    _file: Arc<File>,
}

fn handle_of(slot: u64, order: u8) -> u64 {
    slot << ORDER_BITS | u64::from(order)
}
fn split(h: u64) -> (u64, u8) {
    (h >> ORDER_BITS, (h & ((1 << ORDER_BITS) - 1)) as u8)
}
/// Byte offset of cluster `ci` (after the header).
fn cluster_off(ci: u64) -> u64 {
    HEADER_BYTES + ci * CLUSTER_STRIDE
}
fn data_off(slot: u64) -> u64 {
    cluster_off(slot / SLOTS_PER_CLUSTER as u64) + (slot % SLOTS_PER_CLUSTER as u64) * PAGE_SIZE as u64
}
fn io_err(op: &'static str, e: std::io::Error) -> TierError {
    TierError::io(op, &e)
}

/// Open the file a configuration names, checked and with uswap's header written or verified
/// (`swapfile` has the rules; `force` overwrites a file or device without the header); returns
/// it with its size in bytes (0 for a new file). `direct` asks for `O_DIRECT`; a file system
/// that refuses it (`EINVAL`) gets the file opened buffered instead (its flags say which).
pub fn open_target(target: &FileTarget, direct: bool, force: bool) -> Result<(File, u64), TierError> {
    if direct {
        match open_flags(target, libc::O_DIRECT, force) {
            Ok(r) => return Ok(r),
            Err(OpenErr::Tier(e)) => return Err(e),
            Err(OpenErr::DirectRefused) => {}
        }
    }
    open_flags(target, 0, force).map_err(|e| match e {
        OpenErr::Tier(e) => e,
        OpenErr::DirectRefused => unreachable!("only an O_DIRECT open is refused for O_DIRECT"),
    })
}

/// Why [`open_flags`] failed.
enum OpenErr {
    /// The file system refused `O_DIRECT` (`EINVAL` from `open`).
    DirectRefused,
    Tier(TierError),
}

impl From<TierError> for OpenErr {
    fn from(e: TierError) -> Self {
        OpenErr::Tier(e)
    }
}

/// [`open_target`] with these extra open flags (`O_DIRECT` or none): the file and its size.
fn open_flags(target: &FileTarget, dflag: i32, force: bool) -> Result<(File, u64), OpenErr> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let refused = |e: &std::io::Error| dflag != 0 && e.raw_os_error() == Some(libc::EINVAL);
    match target {
        FileTarget::TempIn(dir) if dflag != 0 => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_TMPFILE | dflag)
                .mode(0o600)
                .open(dir)
                .map_err(|e| {
                    if refused(&e) {
                        OpenErr::DirectRefused
                    } else {
                        io_err("create temporary swap file (O_TMPFILE|O_DIRECT)", e).into()
                    }
                })?;
            swapfile::write_header(&f)?;
            Ok((f, 0))
        }
        FileTarget::TempIn(dir) => {
            // O_TMPFILE where the file system has it (tempfile then uses mode 0666 & umask:
            // made private before anything is written).
            let f = tempfile::tempfile_in(dir).map_err(|e| io_err("create temporary swap file", e))?;
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err("chmod temporary swap file", e))?;
            swapfile::write_header(&f)?;
            Ok((f, 0))
        }
        FileTarget::Path(p) => {
            let md = std::fs::metadata(p).ok();
            let is_blk = md.as_ref().is_some_and(|m| m.file_type().is_block_device());
            if md.as_ref().is_some_and(|m| !m.file_type().is_file() && !is_blk) {
                return Err(TierError::Io {
                    errno: 0,
                    op: "open swap file",
                    msg: format!("'{}' is neither a regular file nor a block device", p.display()),
                }
                .into());
            }
            // O_EXCL on a block device is the kernel's exclusive claim: EBUSY while it is
            // mounted, an active swap area, or held by md/dm or another exclusive opener; held
            // for as long as we keep it open.
            let excl = if is_blk { libc::O_EXCL } else { 0 };
            let open = |create_new: bool| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(create_new)
                    .custom_flags(dflag | excl)
                    .mode(0o600)
                    .open(p)
            };
            let mut f = match open(md.is_none()) {
                Ok(f) if md.is_none() => {
                    // Created here: its data is encrypted with a key that dies with this
                    // process, so unlink it now; nothing is left behind, even after a crash.
                    std::fs::remove_file(p).map_err(|e| io_err("unlink new swap file", e))?;
                    swapfile::write_header(&f)?;
                    return Ok((f, 0));
                }
                Ok(f) => f,
                Err(e) if refused(&e) => {
                    // O_CREAT made the file before O_DIRECT was refused: do not leave it.
                    if md.is_none() {
                        let _ = std::fs::remove_file(p);
                    }
                    return Err(OpenErr::DirectRefused);
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(TierError::Io {
                        errno: 0,
                        op: "open swap device",
                        msg: format!(
                            "'{}' is in use (mounted, an active swap area, or held by another program); uswap \
                             never uses it, even with force",
                            p.display()
                        ),
                    }
                    .into())
                }
                Err(e) => {
                    return Err(io_err(if md.is_none() { "create swap file" } else { "open swap file" }, e).into())
                }
            };
            swapfile::claim(p, &f)?;
            let what = if is_blk { "block device" } else { "file" };
            match swapfile::read_header(&f)? {
                Some(Ok(_)) => {}
                Some(Err(why)) if !force => {
                    return Err(TierError::Io {
                        errno: 0,
                        op: "open swap file",
                        msg: format!("'{}' is a {why}; add `force` to overwrite it", p.display()),
                    }
                    .into())
                }
                None if !force => return Err(swapfile::not_ours(p, what).into()),
                _ => {
                    swapfile::write_header(&f)?;
                }
            }
            let size = if is_blk {
                f.seek(SeekFrom::End(0)).map_err(|e| io_err("size of block device", e))?
            } else {
                f.metadata().map_err(|e| io_err("stat swap file", e))?.len()
            };
            Ok((f, size))
        }
    }
}

impl FileTier {
    /// Open the tier a configuration describes.
    pub fn open(cfg: &FileConfig) -> Result<Self, TierError> {
        let (file, existing) = open_target(&cfg.target, cfg.direct, cfg.force)?;
        let (want, nr_clusters) = if cfg.size_bytes == 0 {
            let w = existing.saturating_sub(HEADER_BYTES);
            (w, w / CLUSTER_STRIDE)
        } else {
            (cfg.size_bytes, cfg.size_bytes / DATA_BYTES)
        };
        if nr_clusters == 0 {
            return Err(TierError::Io {
                errno: 0,
                op: "open swap file",
                msg: format!("capacity {want} bytes is below one 2 MiB cluster"),
            });
        }
        let file = Arc::new(file);
        let is_blk =
            file.metadata().map(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type())).unwrap_or(false);
        if is_blk {
            if cluster_off(nr_clusters) > existing {
                return Err(TierError::Io {
                    errno: 0,
                    op: "open swap device",
                    msg: format!("device of {existing} bytes cannot hold {nr_clusters} clusters"),
                });
            }
        } else if existing < cluster_off(nr_clusters) {
            // Sparse: no blocks are allocated until written.
            file.set_len(cluster_off(nr_clusters)).map_err(|e| io_err("size swap file", e))?;
        }
        let io: Arc<dyn IoEngine> = match cfg.engine {
            EngineKind::Psync => Arc::new(PsyncEngine::new(file.clone())),
            EngineKind::Uring => Arc::new(UringEngine::new(file.clone(), 4, 64)?),
        };
        let name = match &cfg.target {
            FileTarget::TempIn(d) => format!("file:{}", d.display()),
            FileTarget::Path(p) => format!("file:{}", p.display()),
        };
        Self::with_engine(&name, file, nr_clusters * SLOTS_PER_CLUSTER as u64, io, cfg.encrypt, cfg.discard)
    }

    /// A tier over `file` with `nr_slots` slots and an explicit engine (tests inject faults
    /// this way). A file open `O_DIRECT` is read and written so; any other gets drop-behind.
    pub fn with_engine(
        name: &str,
        file: Arc<File>,
        nr_slots: u64,
        io: Arc<dyn IoEngine>,
        encrypt: bool,
        discard: bool,
    ) -> Result<Self, TierError> {
        if nr_slots == 0 || nr_slots > PAYLOAD_MAX >> ORDER_BITS {
            return Err(TierError::Io {
                errno: 0,
                op: "open swap file",
                msg: format!("{nr_slots} slots is out of range"),
            });
        }
        let mut space = SwapSpace::new(SpaceConfig { nr_slots, discard, ..SpaceConfig::default() })
            .map_err(|e| TierError::Io { errno: 0, op: "swap space", msg: e.to_string() })?;
        let holds = Arc::new(FileHolds::new(space.nr_clusters(), &file)?);
        space.set_holds(holds.clone());
        let seal = if encrypt { Some((PageCipher::new_random()?, SlotRecords::new(nr_slots))) } else { None };
        // SAFETY: fcntl(F_GETFL) on a valid open fd.
        let direct =
            unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&*file), libc::F_GETFL) } & libc::O_DIRECT != 0;
        Ok(FileTier {
            name: name.to_string(),
            space,
            io,
            seal,
            bufs: (0..NR_BUF_SHARDS)
                .map(|_| CachePadded::new(Mutex::new(LockClass::FileBufs, Vec::with_capacity(4))))
                .collect(),
            stored_pages: AtomicU64::new(0),
            discard,
            drop_behind: (!direct).then(|| DropBehind::new(file.clone())),
            holds,
            _file: file,
        })
    }

    /// The physical swap space (its RMAP words name each slot's owner).
    pub fn space(&self) -> &SwapSpace {
        &self.space
    }

    /// This process's holds on the clusters of the file.
    pub fn holds(&self) -> &FileHolds {
        &self.holds
    }

    /// The I/O engine's name.
    pub fn engine_name(&self) -> &'static str {
        self.io.name()
    }

    /// Whether the file is read and written `O_DIRECT` (else buffered, with drop-behind).
    pub fn direct(&self) -> bool {
        self.drop_behind.is_none()
    }

    /// Whether pages are encrypted.
    pub fn encrypted(&self) -> bool {
        self.seal.is_some()
    }

    /// The virtual slot owning the data under `handle` (from the reverse map).
    pub fn owner_of(&self, handle: u64) -> Result<SwapEntry, TierError> {
        let (slot, _) = split(handle);
        let w = self.space.load(SwapEntry(slot)).map_err(|_| TierError::BadHandle(handle))?;
        if w.kind() != Kind::Rmap {
            return Err(TierError::BadHandle(handle));
        }
        Ok(SwapEntry(w.payload()))
    }

    /// Flush written data to the device and drop it from the page cache (benchmarks: the next
    /// reads come from the device).
    pub fn sync_and_drop_cache(&self) -> Result<(), TierError> {
        use std::os::fd::AsRawFd;
        self._file.sync_data().map_err(|e| io_err("fdatasync", e))?;
        // SAFETY: posix_fadvise on a valid open fd with integer arguments.
        let r = unsafe { libc::posix_fadvise(self._file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(io_err("posix_fadvise", std::io::Error::from_raw_os_error(r)));
        }
        Ok(())
    }

    /// Byte offset of a slot's data in the file (for tests that corrupt the file directly).
    #[doc(hidden)]
    pub fn data_offset(handle: u64) -> u64 {
        data_off(split(handle).0)
    }

    fn get_buf(&self, need: usize) -> IoBuf {
        let shard = thread_shard() % NR_BUF_SHARDS;
        let mut b = lock(&self.bufs[shard]).pop().unwrap_or_else(|| IoBuf::new(need));
        b.reserve(need);
        b
    }
    fn put_buf(&self, b: Option<IoBuf>) {
        if let Some(b) = b {
            let shard = thread_shard() % NR_BUF_SHARDS;
            let mut v = lock(&self.bufs[shard]);
            if v.len() < 4 {
                v.push(b);
            }
        }
    }

    /// Load pages `[first, first + k)` of the folio under `handle` into the same pages of
    /// `out` (as long as the whole folio): check the handle against the reverse map (which
    /// names the owner bound into each page's authentication, and says the handle is live),
    /// read those pages in one I/O, open each, and copy them out only if every one
    /// authenticated.
    fn load_pages(&self, handle: u64, out: &mut [u8], first: usize, k: usize) -> Result<(), TierError> {
        let (slot, n, owner) = self.live_folio(handle, out.len())?;
        if first + k > n {
            return Err(TierError::BadHandle(handle));
        }
        let s0 = slot + first as u64;
        let len = k * PAGE_SIZE;
        let buf = self.get_buf(len);
        let (b, r) = self.io.submit(buf, &[IoOp::read(data_off(s0), 0, len)]);
        let mut buf = match (b, r) {
            (b, Err(e)) => {
                self.put_buf(b);
                return Err(e);
            }
            (Some(b), Ok(())) => b,
            (None, Ok(())) => return Err(TierError::Io { errno: 0, op: "read", msg: "I/O buffer lost".into() }),
        };
        self.read_done(len);
        let ok = self.open_pages(s0, owner + first as u64, &mut buf.as_mut_slice()[..len]);
        if ok {
            out[first * PAGE_SIZE..first * PAGE_SIZE + len].copy_from_slice(&buf.as_slice()[..len]);
        }
        self.put_buf(Some(buf));
        if ok {
            Ok(())
        } else {
            Err(TierError::Corrupt { tier: self.name.clone(), handle })
        }
    }

    /// Buffered I/O: a read of `len` bytes is done and copied out.
    fn read_done(&self, len: usize) {
        if let Some(d) = &self.drop_behind {
            d.read(len as u64);
        }
    }

    /// Check `handle` against the reverse map (every slot of the folio names the next page of
    /// one owner, so the handle is live) and `out_len` against its size. Returns its first
    /// slot, its pages and the owner (bound into each page's authentication).
    fn live_folio(&self, handle: u64, out_len: usize) -> Result<(u64, usize, u64), TierError> {
        let (slot, order) = split(handle);
        let n = 1usize << order.min(MAX_ORDER);
        if order > MAX_ORDER || out_len != PAGE_SIZE << order || !slot.is_multiple_of(n as u64) {
            return Err(TierError::BadHandle(handle));
        }
        let owner = self.owner_of(handle)?.0;
        for i in 1..n as u64 {
            let w = self.space.load(SwapEntry(slot + i)).map_err(|_| TierError::BadHandle(handle))?;
            if w.kind() != Kind::Rmap || w.payload() != owner + i {
                return Err(TierError::BadHandle(handle));
            }
        }
        Ok((slot, n, owner))
    }

    /// Authenticate and decrypt in place the pages read from the slots from `slot` (owned by
    /// `owner` on) with their records: true if every one opened (at once without encryption).
    fn open_pages(&self, slot: u64, owner: u64, pages: &mut [u8]) -> bool {
        let Some((c, recs)) = &self.seal else { return true };
        pages.chunks_exact_mut(PAGE_SIZE).enumerate().all(|(i, p)| {
            let mut m = [0u8; META_BYTES];
            recs.get(slot + i as u64, &mut m);
            c.open(slot + i as u64, owner + i as u64, p, &m)
        })
    }

    fn release_slots(&self, slot: u64, n: usize) {
        if let Ok(mut g) = self.space.lock_cluster(SwapEntry(slot)) {
            let off = SwapEntry(slot).offset();
            let _ = g.free_range(off, n);
        }
        if self.discard {
            let io = &self.io;
            self.space.process_discards(&mut |ci| {
                let _ = io.punch_hole(cluster_off(ci as u64), CLUSTER_STRIDE);
            });
        }
    }
}

/// Most runs of adjacent slots one [`Backend::load_many`] submits at once (a fault's
/// readahead window); a larger batch (the drain) reads run by run.
const RUNS_AT_ONCE: usize = 16;

/// A run of adjacent slots in one cluster: requests `order[at..end]`, slots `[first, first +
/// slots)`.
#[derive(Copy, Clone, Default)]
struct Run {
    at: usize,
    end: usize,
    first: u64,
    slots: usize,
}

impl FileTier {
    /// [`Backend::load_many`] of `runs` (requests `order[run.at..run.end]` each, in slot
    /// order) with one submission: the runs are read into one buffer from the pool (in flight
    /// together with io_uring), then each object is checked against the reverse map and
    /// decrypted into its `out`; a failure (I/O, bad handle, authentication) is reported per
    /// request.
    fn load_runs(&self, runs: &[Run], order: &[usize], reqs: &mut [LoadReq<'_>]) {
        let mut ops = [IoOp::read(0, 0, 0); RUNS_AT_ONCE];
        let mut len = 0;
        for (op, run) in ops.iter_mut().zip(runs) {
            *op = IoOp::read(data_off(run.first), len, run.slots * PAGE_SIZE);
            len += run.slots * PAGE_SIZE;
        }
        let buf = self.get_buf(len);
        let (b, r) = self.io.submit(buf, &ops[..runs.len()]);
        let buf = match (b, r) {
            (Some(b), Ok(())) => b,
            (b, r) => {
                self.put_buf(b);
                let e = r.err().unwrap_or(TierError::Io { errno: 0, op: "read", msg: "I/O buffer lost".into() });
                for &k in runs.iter().flat_map(|run| &order[run.at..run.end]) {
                    reqs[k].result = Err(e.clone());
                }
                return;
            }
        };
        let mut base = 0;
        for run in runs {
            self.read_done(run.slots * PAGE_SIZE);
            let data = &buf.as_slice()[base..base + run.slots * PAGE_SIZE];
            base += run.slots * PAGE_SIZE;
            for &k in &order[run.at..run.end] {
                let r = &mut reqs[k];
                r.result = (|| {
                    let (slot, np, owner) = self.live_folio(r.handle, r.out.len())?;
                    let at = (slot - run.first) as usize;
                    r.out.copy_from_slice(&data[at * PAGE_SIZE..(at + np) * PAGE_SIZE]);
                    if !self.open_pages(slot, owner, r.out) {
                        return Err(TierError::Corrupt { tier: self.name.clone(), handle: r.handle });
                    }
                    Ok(())
                })();
            }
        }
        self.put_buf(Some(buf));
    }
}

fn folio_order(len: usize) -> Option<u8> {
    let pages = len / PAGE_SIZE;
    (len.is_multiple_of(PAGE_SIZE) && pages.is_power_of_two() && pages <= 1 << MAX_ORDER)
        .then(|| pages.trailing_zeros() as u8)
}

impl Backend for FileTier {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        TierKind::File
    }

    fn store(&self, data: &[u8], owner: SwapEntry) -> Result<Stored, TierError> {
        let order = folio_order(data.len()).ok_or_else(|| TierError::Io {
            errno: 0,
            op: "file store",
            msg: format!("{} bytes is not a folio", data.len()),
        })?;
        let n = 1usize << order;
        if owner.0 + n as u64 > PAYLOAD_MAX + 1 {
            return Err(TierError::Io {
                errno: 0,
                op: "file store",
                msg: format!("owner {:#x} does not fit a word", owner.0),
            });
        }
        // The physical slots: no space left means "try the next tier".
        let slot =
            self.space.alloc(order, &mut |i| Word::rmap(0, owner.0 + i as u64)).map_err(|_| TierError::Reject)?.0;
        let len = data.len();
        let mut buf = self.get_buf(len);
        let page_bytes = &mut buf.as_mut_slice()[..len];
        page_bytes.copy_from_slice(data);
        // The records go to RAM before the write: the slots are ours alone until the handle
        // is returned, and a failed write frees them (their records are then never read).
        let sealed = match &self.seal {
            Some((c, recs)) => page_bytes.chunks_exact_mut(PAGE_SIZE).enumerate().try_for_each(|(i, p)| {
                let mut m = [0u8; META_BYTES];
                c.seal(slot + i as u64, owner.0 + i as u64, p, &mut m)?;
                recs.put(slot + i as u64, &m);
                Ok(())
            }),
            None => Ok(()),
        };
        let res = sealed.and_then(|()| {
            let (b, r) = self.io.submit(buf, &[IoOp::write(data_off(slot), 0, len)]);
            self.put_buf(b);
            r
        });
        if res.is_ok() {
            if let Some(d) = &self.drop_behind {
                d.written(data_off(slot), len as u64);
            }
        }
        if let Err(e) = res {
            self.release_slots(slot, n);
            return Err(e);
        }
        self.stored_pages.fetch_add(n as u64, Ordering::Relaxed);
        Ok(Stored { handle: handle_of(slot, order), bytes: len as u64 })
    }

    fn load(&self, handle: u64, out: &mut [u8]) -> Result<(), TierError> {
        let pages = out.len() / PAGE_SIZE;
        self.load_pages(handle, out, 0, pages)
    }

    /// Reads and opens only the pages covering `[at, at + len)`: a 4 KiB swap-in of a large
    /// folio costs one page of I/O and one page of decryption, not the folio's.
    fn load_part(&self, handle: u64, out: &mut [u8], at: usize, len: usize) -> Result<(), TierError> {
        let first = at / PAGE_SIZE;
        let end = (at + len).div_ceil(PAGE_SIZE);
        if len == 0 || end > out.len() / PAGE_SIZE {
            return Err(TierError::BadHandle(handle));
        }
        self.load_pages(handle, out, first, end - first)
    }

    fn load_many(&self, reqs: &mut [LoadReq<'_>]) {
        // In slot order; a small batch (a fault's readahead window) allocates nothing.
        let mut small = [0usize; RUNS_AT_ONCE];
        let mut big = Vec::new();
        let at_once = reqs.len() <= RUNS_AT_ONCE;
        let order: &mut [usize] = if at_once {
            &mut small[..reqs.len()]
        } else {
            big.resize(reqs.len(), 0);
            &mut big
        };
        for (i, o) in order.iter_mut().enumerate() {
            *o = i;
        }
        order.sort_unstable_by_key(|&i| split(reqs[i].handle).0);
        let overlap = self.io.overlaps_reads();
        let mut runs = [Run::default(); RUNS_AT_ONCE];
        let mut nruns = 0;
        let mut i = 0;
        while i < order.len() {
            // A run: requests whose slots follow each other inside one cluster, read with one
            // data read.
            let first = split(reqs[order[i]].handle).0;
            let cluster = first / SLOTS_PER_CLUSTER as u64;
            let mut next = first;
            let mut j = i;
            while j < order.len() {
                let r = &reqs[order[j]];
                let (slot, o) = split(r.handle);
                if slot != next || slot / SLOTS_PER_CLUSTER as u64 != cluster || o > MAX_ORDER {
                    break;
                }
                next = slot + (1u64 << o);
                j += 1;
            }
            if j == i {
                // A bad handle or an overlap: the single path reports it.
                let r = &mut reqs[order[i]];
                r.result = self.load(r.handle, r.out);
                i += 1;
                continue;
            }
            let run = Run { at: i, end: j, first, slots: (next - first) as usize };
            if !overlap && order[i..j].iter().all(|&k| reqs[k].optional) {
                // A read of its own, after the others: not worth its wait.
                for &k in &order[i..j] {
                    reqs[k].result = Err(TierError::Reject);
                }
            } else if at_once {
                runs[nruns] = run;
                nruns += 1;
            } else {
                self.load_runs(&[run], order, reqs);
            }
            i = j;
        }
        if nruns > 0 {
            self.load_runs(&runs[..nruns], order, reqs);
        }
    }

    fn free(&self, handle: u64) -> u64 {
        let (slot, order) = split(handle);
        if order > MAX_ORDER {
            return 0;
        }
        let n = 1usize << order;
        let Ok(mut g) = self.space.lock_cluster(SwapEntry(slot)) else { return 0 };
        let off = SwapEntry(slot).offset();
        if !off.is_multiple_of(n) || off + n > SLOTS_PER_CLUSTER || (0..n).any(|i| g.word(off + i).kind() != Kind::Rmap)
        {
            return 0;
        }
        if g.free_range(off, n).is_err() {
            return 0;
        }
        drop(g);
        if self.discard {
            let io = &self.io;
            self.space.process_discards(&mut |ci| {
                let _ = io.punch_hole(cluster_off(ci as u64), CLUSTER_STRIDE);
            });
        }
        self.stored_pages.fetch_sub(n as u64, Ordering::Relaxed);
        (n * PAGE_SIZE) as u64
    }

    /// The child shares the file: at `Prepare` what this process has stored is frozen where it
    /// lies (both processes read it; neither writes a slot of it again until it holds the
    /// cluster alone); the holds do the rest ([`FileHolds`]).
    fn fork_share(&self, step: ShareStep) -> bool {
        match step {
            ShareStep::Prepare => {
                if !self.holds.share_for_fork() {
                    return false;
                }
                self.space.freeze_held();
                true
            }
            // No I/O engine: the child does not take its row (its parent gives it up).
            ShareStep::Child { .. } if self.io.after_fork_child().is_err() => false,
            ShareStep::Child { shared: true } => self.holds.forked_child(),
            ShareStep::Child { shared: false } => {
                self.holds.go_private();
                true
            }
            ShareStep::Parent { child_took } => {
                self.holds.forked_parent(child_took);
                true
            }
            ShareStep::Refresh => {
                self.holds.reap();
                self.space.refresh_holds();
                true
            }
        }
    }

    fn usage(&self) -> Usage {
        let pages = self.stored_pages.load(Ordering::Relaxed);
        Usage {
            stored_pages: pages,
            used_bytes: pages * PAGE_SIZE as u64,
            limit_bytes: self.space.nr_slots() * PAGE_SIZE as u64,
            sharers: if self.holds.is_private() { 1 } else { self.holds.sharers() as u64 },
            frozen_bytes: self.space.shared_clusters() as u64 * DATA_BYTES,
            raw_pages: 0,
        }
    }
}
