//! I/O engines for the swap file: positional `pread`/`pwrite` ([`PsyncEngine`]), io_uring
//! ([`UringEngine`]) and a fault-injecting wrapper ([`FaultEngine`]) for tests, all behind [`IoEngine`].
//!
//! Buffer ownership: a request moves its [`IoBuf`] *into* the engine and gets it back only once
//! every operation on it has completed. If an engine cannot prove that the kernel is done with a
//! buffer (an io_uring wait that fails with requests still in flight), it keeps the buffer for
//! the rest of its life (quarantine) and returns `None`, so the kernel can never write into
//! memory that was freed or reused: the use-after-free class of foyer issue #1286, where the
//! future owning a buffer could be dropped mid-I/O, cannot happen here.
//!
//! Locking: [`PsyncEngine`] takes no lock. [`UringEngine`] has one ring per shard
//! (picked by [`crate::sync::thread_shard`]), each behind its own mutex held for
//! one submit-and-reap; no other lock is taken inside an engine.

use crate::error::TierError;
use crate::page_heap::PageBuf;
use crate::sync::{lock, thread_shard, LockClass, Mutex};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const ALIGN: usize = 4096;

/// A 4 KiB-aligned, zero-initialised I/O buffer that grows on demand (never shrinks): a
/// `PageBuf` (page-heap memory, not the process's allocator: a file tier's store and load
/// run on the fault path).
pub struct IoBuf {
    buf: PageBuf,
}

impl IoBuf {
    /// A buffer of at least `cap` bytes (rounded up to 4 KiB).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(ALIGN).next_multiple_of(ALIGN);
        let buf = PageBuf::zeroed(cap).unwrap_or_else(|| {
            std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(cap, ALIGN).expect("I/O buffer layout"))
        });
        IoBuf { buf }
    }
    /// Capacity in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }
    /// Grow to at least `n` bytes (contents are not kept).
    pub(crate) fn reserve(&mut self, n: usize) {
        if n > self.capacity() {
            *self = IoBuf::new(n);
        }
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    /// The bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn raw(&self) -> *mut u8 {
        self.buf.as_raw()
    }
}

/// One positional transfer between a range of the buffer and a range of the file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IoOp {
    /// True to write buffer -> file, false to read file -> buffer.
    pub write: bool,
    /// Byte offset in the file.
    pub file_off: u64,
    /// Byte offset in the buffer.
    pub buf_off: usize,
    /// Length in bytes.
    pub len: usize,
}

impl IoOp {
    /// A read of `len` bytes at `file_off` into `buf[buf_off..]`.
    pub fn read(file_off: u64, buf_off: usize, len: usize) -> Self {
        IoOp { write: false, file_off, buf_off, len }
    }
    /// A write of `buf[buf_off..buf_off+len]` to `file_off`.
    pub fn write(file_off: u64, buf_off: usize, len: usize) -> Self {
        IoOp { write: true, file_off, buf_off, len }
    }
}

/// The result of a submission: the buffer back (None if quarantined) and the outcome.
pub(crate) type IoResult = (Option<IoBuf>, Result<(), TierError>);

/// An I/O engine over one file.
pub trait IoEngine: Send + Sync {
    /// Engine name ("psync", "io_uring", ...).
    fn name(&self) -> &'static str;
    /// Run every op to completion. Ops complete fully or the call fails; a short transfer is
    /// continued, and reported as an error only if it cannot progress.
    fn submit(&self, buf: IoBuf, ops: &[IoOp]) -> IoResult;
    /// True when the reads of one [`IoEngine::submit`] are in flight together (a queue), so
    /// a read added to a submission costs little more wait; false when they run one after
    /// another. Default: false.
    fn overlaps_reads(&self) -> bool {
        false
    }
    /// Release the disk blocks of a byte range (discard); reads of it return zeros.
    fn punch_hole(&self, off: u64, len: u64) -> Result<(), TierError>;
    /// In a `fork` child, before its first I/O: take whatever an engine cannot share with the
    /// parent anew (io_uring's rings). The caller guarantees no I/O of the parent was in
    /// flight at the fork (the pager is quiesced) and that the child runs one thread.
    fn after_fork_child(&self) -> Result<(), TierError> {
        Ok(())
    }
}

fn check_ops(buf: &IoBuf, ops: &[IoOp]) -> Result<(), TierError> {
    for op in ops {
        if op.buf_off.checked_add(op.len).is_none_or(|e| e > buf.capacity()) {
            return Err(TierError::Io {
                errno: 0,
                op: "submit",
                msg: format!("op {op:?} outside buffer of {}", buf.capacity()),
            });
        }
    }
    Ok(())
}

fn punch(file: &File, off: u64, len: u64) -> Result<(), TierError> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate on a valid open fd with plain integer arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) };
    if r != 0 {
        return Err(TierError::io("punch hole", &std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Do one op with positional syscalls (`pread`/`pwrite`, retried on EINTR and continued after a
/// short transfer).
fn psync_op(file: &File, buf: &mut IoBuf, op: &IoOp) -> Result<(), TierError> {
    let r = &mut buf.as_mut_slice()[op.buf_off..op.buf_off + op.len];
    if op.write {
        file.write_all_at(r, op.file_off).map_err(|e| TierError::io("write", &e))
    } else {
        file.read_exact_at(r, op.file_off).map_err(|e| TierError::io("read", &e))
    }
}

/// Positional read/write, one syscall per op (synchronous, no queue).
pub struct PsyncEngine {
    file: Arc<File>,
}

impl PsyncEngine {
    /// An engine over `file`.
    pub fn new(file: Arc<File>) -> Self {
        PsyncEngine { file }
    }
}

impl IoEngine for PsyncEngine {
    fn name(&self) -> &'static str {
        "psync"
    }
    fn submit(&self, mut buf: IoBuf, ops: &[IoOp]) -> IoResult {
        let res = check_ops(&buf, ops).and_then(|()| ops.iter().try_for_each(|op| psync_op(&self.file, &mut buf, op)));
        (Some(buf), res)
    }
    fn punch_hole(&self, off: u64, len: u64) -> Result<(), TierError> {
        punch(&self.file, off, len)
    }
}

/// io_uring: all ops of a call are submitted together and reaped before returning, on a ring
/// picked by the calling thread's shard.
pub struct UringEngine {
    file: Arc<File>,
    rings: Box<[Mutex<io_uring::IoUring>]>,
    depth: usize,
    /// Buffers that may still be targeted by an in-flight request: kept until drop, then leaked.
    quarantine: Mutex<Vec<IoBuf>>,
}

impl UringEngine {
    /// An engine with `nr_rings` rings of `depth` entries each.
    pub fn new(file: Arc<File>, nr_rings: usize, depth: u32) -> Result<Self, TierError> {
        let rings = (0..nr_rings.max(1))
            .map(|_| {
                io_uring::IoUring::new(depth)
                    .map(|r| Mutex::new(LockClass::IoRing, r))
                    .map_err(|e| TierError::io("io_uring setup", &e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(UringEngine {
            file,
            rings: rings.into_boxed_slice(),
            depth: depth as usize,
            quarantine: Mutex::new(LockClass::IoQuarantine, Vec::new()),
        })
    }

    /// Submit one batch (at most `depth` ops) and reap all of its completions. `Err(true)` means
    /// requests may still be in flight (the buffer must be quarantined).
    fn batch(
        &self,
        ring: &mut io_uring::IoUring,
        buf: &mut IoBuf,
        ops: &[IoOp],
        done: &mut [usize],
    ) -> Result<(), (bool, TierError)> {
        use io_uring::{opcode, types};
        let fd = types::Fd(self.file.as_raw_fd());
        for (i, op) in ops.iter().enumerate() {
            let off = done[i];
            if off == op.len {
                continue;
            }
            // SAFETY: buf_off + len <= capacity was checked by `check_ops`, and done[i] < len.
            let p = unsafe { buf.raw().add(op.buf_off + off) };
            let n = (op.len - off) as u32;
            let e = if op.write {
                opcode::Write::new(fd, p, n).offset(op.file_off + off as u64).build()
            } else {
                opcode::Read::new(fd, p, n).offset(op.file_off + off as u64).build()
            }
            .user_data(i as u64);
            // SAFETY: the buffer range stays valid until the completion is reaped: `buf` is owned
            // by this engine for the whole call and is only given back after every completion was
            // reaped, or kept forever (quarantine) if that cannot be established.
            if unsafe { ring.submission().push(&e) }.is_err() {
                return Err((false, TierError::Io { errno: 0, op: "io_uring", msg: "submission queue full".into() }));
            }
        }
        let want = ops.iter().zip(done.iter()).filter(|(o, d)| o.len != **d).count();
        let mut reaped = 0;
        let mut err = None;
        while reaped < want {
            match ring.submit_and_wait(want - reaped) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)) => {}
                Err(e) => return Err((true, TierError::io("io_uring wait", &e))),
            }
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                // A completion that is not ours cannot happen on a healthy ring (rings that lost
                // track of a request are replaced); ignore it rather than misattribute it.
                let Some(&op) = ops.get(i) else { continue };
                reaped += 1;
                let r = cqe.result();
                if r < 0 {
                    let e = std::io::Error::from_raw_os_error(-r);
                    err.get_or_insert(TierError::io(if op.write { "write" } else { "read" }, &e));
                } else if r == 0 {
                    err.get_or_insert(TierError::Io {
                        errno: 0,
                        op: if op.write { "write" } else { "read" },
                        msg: format!(
                            "short {}: no progress at offset {}",
                            if op.write { "write" } else { "read" },
                            op.file_off + done[i] as u64
                        ),
                    });
                } else {
                    done[i] += r as usize;
                }
            }
        }
        match err {
            Some(e) => Err((false, e)),
            None => Ok(()),
        }
    }
}

impl IoEngine for UringEngine {
    fn name(&self) -> &'static str {
        "io_uring"
    }
    fn overlaps_reads(&self) -> bool {
        true
    }
    fn submit(&self, mut buf: IoBuf, ops: &[IoOp]) -> IoResult {
        if let Err(e) = check_ops(&buf, ops) {
            return (Some(buf), Err(e));
        }
        let mut ring = lock(&self.rings[thread_shard() % self.rings.len()]);
        for chunk in ops.chunks(self.depth) {
            let mut done = [0usize; 64];
            let mut done_v;
            let done: &mut [usize] = if chunk.len() <= 64 {
                &mut done[..chunk.len()]
            } else {
                done_v = vec![0usize; chunk.len()];
                &mut done_v
            };
            // Short transfers are resubmitted for the remainder until no progress is made.
            loop {
                match self.batch(&mut ring, &mut buf, chunk, done) {
                    Ok(()) if chunk.iter().zip(done.iter()).all(|(o, d)| o.len == *d) => break,
                    Ok(()) => continue,
                    Err((false, e)) => return (Some(buf), Err(e)),
                    Err((true, e)) => {
                        lock(&self.quarantine).push(buf);
                        // The ring may still complete requests we no longer track: retire it
                        // (leaked, never closed under an in-flight request) and start afresh.
                        if let Ok(fresh) = io_uring::IoUring::new(self.depth as u32) {
                            std::mem::forget(std::mem::replace(&mut *ring, fresh));
                        }
                        return (None, Err(e));
                    }
                }
            }
        }
        (Some(buf), Ok(()))
    }
    fn punch_hole(&self, off: u64, len: u64) -> Result<(), TierError> {
        punch(&self.file, off, len)
    }
    /// A child's rings of its own. The inherited ones are the parent's: their queues are
    /// mapped shared with it, so a request the child put there would be the parent's to reap
    /// (and the reverse). Dropping them unmaps the child's view and closes its descriptors;
    /// the parent's rings stay as they are.
    fn after_fork_child(&self) -> Result<(), TierError> {
        for r in self.rings.iter() {
            let fresh = io_uring::IoUring::new(self.depth as u32).map_err(|e| TierError::io("io_uring setup", &e))?;
            drop(std::mem::replace(&mut *lock(r), fresh));
        }
        Ok(())
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        // The rings are closed after this body; a quarantined buffer might still be the target of
        // a request the kernel is tearing down, so it is leaked rather than freed.
        for b in lock(&self.quarantine).drain(..) {
            std::mem::forget(b);
        }
    }
}

/// A fault to inject into the next matching submission.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next write fails with ENOSPC (nothing written).
    WriteEnospc,
    /// The next write fails with EIO (nothing written).
    WriteEio,
    /// The next write transfers only the first half of its first op, then fails.
    ShortWrite,
    /// The next read fails with EIO.
    ReadEio,
    /// The next read transfers only half of its first op, then fails.
    ShortRead,
    /// The next read returns its data with one byte flipped (corruption in transit).
    FlipReadByte {
        /// Offset within the first op's buffer range.
        at: usize,
    },
}

/// Wraps an engine and injects queued faults, one per matching submission.
pub struct FaultEngine {
    inner: Box<dyn IoEngine>,
    plan: Mutex<std::collections::VecDeque<Fault>>,
}

impl FaultEngine {
    /// Wrap `inner`.
    pub fn new(inner: Box<dyn IoEngine>) -> Self {
        FaultEngine { inner, plan: Mutex::new(LockClass::IoFaultPlan, Default::default()) }
    }
    /// Queue a fault (faults fire in order, each on the next submission of its direction).
    pub fn inject(&self, f: Fault) {
        lock(&self.plan).push_back(f);
    }
    /// Faults queued and not yet fired.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        lock(&self.plan).len()
    }
    fn take(&self, write: bool) -> Option<Fault> {
        let mut p = lock(&self.plan);
        let is_write = |f: &Fault| matches!(f, Fault::WriteEnospc | Fault::WriteEio | Fault::ShortWrite);
        match p.front() {
            Some(f) if is_write(f) == write => p.pop_front(),
            _ => None,
        }
    }
}

impl IoEngine for FaultEngine {
    fn name(&self) -> &'static str {
        "fault"
    }
    fn submit(&self, buf: IoBuf, ops: &[IoOp]) -> IoResult {
        let write = ops.iter().any(|o| o.write);
        let Some(f) = self.take(write) else { return self.inner.submit(buf, ops) };
        let errno = |op, e| TierError::io(op, &std::io::Error::from_raw_os_error(e));
        match f {
            Fault::WriteEnospc => (Some(buf), Err(errno("write", libc::ENOSPC))),
            Fault::WriteEio => (Some(buf), Err(errno("write", libc::EIO))),
            Fault::ReadEio => (Some(buf), Err(errno("read", libc::EIO))),
            Fault::ShortWrite | Fault::ShortRead => {
                let mut half = ops[0];
                half.len /= 2;
                let (b, r) = self.inner.submit(buf, &[half]);
                let what = if write { "write" } else { "read" };
                let e = r.err().unwrap_or(TierError::Io {
                    errno: 0,
                    op: what,
                    msg: format!("short {what}: {} of {} bytes, then no progress", half.len, ops[0].len),
                });
                (b, Err(e))
            }
            Fault::FlipReadByte { at } => {
                let (b, r) = self.inner.submit(buf, ops);
                match b {
                    Some(mut b) => {
                        if r.is_ok() && at < ops[0].len {
                            b.as_mut_slice()[ops[0].buf_off + at] ^= 0x20;
                        }
                        (Some(b), r)
                    }
                    None => (None, r),
                }
            }
        }
    }
    fn overlaps_reads(&self) -> bool {
        self.inner.overlaps_reads()
    }
    fn punch_hole(&self, off: u64, len: u64) -> Result<(), TierError> {
        self.inner.punch_hole(off, len)
    }
    fn after_fork_child(&self) -> Result<(), TierError> {
        self.inner.after_fork_child()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engines(f: &Arc<File>) -> Vec<Box<dyn IoEngine>> {
        let mut v: Vec<Box<dyn IoEngine>> = vec![Box::new(PsyncEngine::new(f.clone()))];
        match UringEngine::new(f.clone(), 2, 8) {
            Ok(u) => v.push(Box::new(u)),
            Err(e) => eprintln!("io_uring unavailable, skipping it: {e}"),
        }
        v
    }

    #[test]
    fn write_then_read_back_many_ops() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        for eng in engines(&f) {
            let mut b = IoBuf::new(64 * 4096);
            for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
                *x = (i * 31 % 251) as u8;
            }
            let expect = b.as_slice().to_vec();
            // More ops than the ring depth, and one 128 KiB op.
            let mut ops: Vec<IoOp> = (0..20).map(|i| IoOp::write(i as u64 * 8192, i * 4096, 4096)).collect();
            ops.push(IoOp::write(1 << 20, 20 * 4096, 32 * 4096));
            let (b, r) = eng.submit(b, &ops);
            r.unwrap();
            let mut b = b.unwrap();
            b.as_mut_slice().fill(0);
            let rops: Vec<IoOp> = ops.iter().map(|o| IoOp { write: false, ..*o }).collect();
            let (b, r) = eng.submit(b, &rops);
            r.unwrap();
            let b = b.unwrap();
            assert_eq!(&b.as_slice()[..52 * 4096], &expect[..52 * 4096], "{}", eng.name());
        }
    }

    #[test]
    fn read_past_end_is_a_short_read_error() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        for eng in engines(&f) {
            let (_, r) = eng.submit(IoBuf::new(4096), &[IoOp::read(1 << 30, 0, 4096)]);
            assert!(matches!(r, Err(TierError::Io { .. })), "{}: {r:?}", eng.name());
        }
    }

    #[test]
    fn op_outside_buffer_is_an_error() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        for eng in engines(&f) {
            let (b, r) = eng.submit(IoBuf::new(4096), &[IoOp::write(0, 4000, 200)]);
            assert!(r.is_err() && b.is_some());
        }
    }

    /// A fork child that takes rings of its own reads what the parent wrote and writes what the
    /// parent then reads, the parent's rings untouched; one that used the inherited rings
    /// would have put its requests in the parent's queues.
    #[test]
    fn an_io_uring_engine_works_on_both_sides_of_a_fork() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        let eng = UringEngine::new(f.clone(), 2, 8).expect("io_uring (this test needs it)");
        let mut b = IoBuf::new(4096);
        b.as_mut_slice().fill(0x5a);
        let (b, r) = eng.submit(b, &[IoOp::write(0, 0, 4096)]);
        r.unwrap();
        let mut b = b.unwrap();
        // SAFETY: fork; the child only runs the engine and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let ok = eng.after_fork_child().is_ok() && {
                let (b, r) = eng.submit(IoBuf::new(4096), &[IoOp::read(0, 0, 4096)]);
                r.is_ok() && b.is_some_and(|b| b.as_slice().iter().all(|&x| x == 0x5a)) && {
                    let mut w = IoBuf::new(4096);
                    w.as_mut_slice().fill(0xc3);
                    eng.submit(w, &[IoOp::write(8192, 0, 4096)]).1.is_ok()
                }
            };
            // SAFETY: leaving the child without running the test harness's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
        b.as_mut_slice().fill(0);
        let (b, r) = eng.submit(b, &[IoOp::read(8192, 0, 4096)]);
        r.unwrap();
        assert!(b.unwrap().as_slice().iter().all(|&x| x == 0xc3), "the parent reads the child's write");
    }

    #[test]
    fn faults_fire_once_in_order() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        let fe = FaultEngine::new(Box::new(PsyncEngine::new(f)));
        fe.inject(Fault::WriteEnospc);
        let (b, r) = fe.submit(IoBuf::new(4096), &[IoOp::write(0, 0, 4096)]);
        assert!(matches!(r, Err(TierError::Io { ref msg, .. }) if msg.contains("space")), "{r:?}");
        let (b, r) = fe.submit(b.unwrap(), &[IoOp::write(0, 0, 4096)]);
        r.unwrap();
        assert_eq!(fe.pending(), 0);
        fe.inject(Fault::ShortRead);
        let (_, r) = fe.submit(b.unwrap(), &[IoOp::read(0, 0, 4096)]);
        assert!(matches!(r, Err(TierError::Io { ref msg, .. }) if msg.contains("short")), "{r:?}");
    }
}
