//! CPU placement of the pager's threads in thread fault mode: the event thread follows the
//! thread whose faults it serves, and the background threads keep off that CPU.
//!
//! A fault served by the event thread is a hand-off: the faulting thread sleeps in the
//! kernel, the event thread resolves the fault, and `UFFDIO_COPY` wakes the faulting thread.
//! On two CPUs each hand-off is two cross-CPU wake-ups (an IPI each, and on a VM often the
//! exit of a halted vCPU); on one CPU it is a context switch each way. So while faults arrive,
//! every [`CHECK_NS`] the event thread reads the CPU of the thread that faulted last
//! (`/proc/self/task/TID/stat`, field 39, through raw system calls into a stack buffer), and
//! when that thread took nearly all the faults since the previous check ([`SHARED_FAULTS`])
//! and it has seen the same other CPU at two checks in a row, it pins itself there and moves
//! the pager's background threads (reclaimer, recompressor, the preload's scanner: those that
//! called [`Placement::join`]) to the other CPUs it may use, so that reclaim runs beside the
//! program rather than on its CPU. Measured on `python3 dict.py 3000000` under
//! `uswap run --limit 227M` (BENCHMARKS.md, "the event thread follows the faulting thread").
//!
//! When several threads share the faults, the event thread and the background threads get
//! their masks back: the event thread would serve the others across CPUs and take CPU time
//! from the one it sits with. The program's own threads are never moved: their affinity is theirs (runtimes size their
//! thread pools by it, and children inherit it). Nothing moves when the event thread may run
//! on one CPU only, when the kernel does not report the faulting thread's id
//! (`UFFD_FEATURE_THREAD_ID`), or when `follow_cpu` is off; a refused `sched_setaffinity` of
//! the event thread turns following off for good and gives every thread its mask back.
//!
//! Locking: none. [`Placement`] holds the background threads' ids in atomics, each written by
//! its own thread ([`Placement::join`]) and read by the event thread; a [`Follower`] belongs
//! to the event thread alone.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// How often the event thread looks at the faulting thread's CPU while faults arrive.
pub(crate) const CHECK_NS: u64 = 1_000_000;

/// The event thread follows a thread only while the others take less than this fraction
/// (1/N) of the faults: GNU sort (two threads sorting) took 35 % longer when it followed
/// whichever thread faulted last (BENCHMARKS.md, "the event thread follows the faulting
/// thread").
const SHARED_FAULTS: u32 = 8;

/// Most background threads one pager has (reclaimer, recompressor, scanner, and room).
const MAX_BACKGROUND: usize = 8;

/// The threads the event thread keeps off its CPU.
pub(crate) struct Placement {
    enabled: bool,
    tids: [AtomicI32; MAX_BACKGROUND],
    /// A thread joined since the event thread last set the background masks.
    joined: AtomicBool,
    /// Times the event thread moved to another CPU.
    pub(crate) moves: AtomicU64,
}

impl Placement {
    /// Placement that follows faults when `enabled`.
    pub(crate) fn new(enabled: bool) -> Placement {
        Placement {
            enabled,
            tids: std::array::from_fn(|_| AtomicI32::new(0)),
            joined: AtomicBool::new(false),
            moves: AtomicU64::new(0),
        }
    }

    /// The calling thread is a background thread of the pager: keep it off the event
    /// thread's CPU from the next check on.
    pub(crate) fn join(&self) {
        let tid = gettid();
        for t in &self.tids {
            if t.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.joined.store(true, Ordering::Release);
                return;
            }
        }
    }

    /// In a fork child: the parent's threads do not exist here.
    pub(crate) fn reset_in_fork_child(&self) {
        for t in &self.tids {
            t.store(0, Ordering::Release);
        }
    }

    /// Give every background thread the mask `set` (a thread that has exited is forgotten).
    fn set_background(&self, set: &libc::cpu_set_t) {
        for t in &self.tids {
            let tid = t.load(Ordering::Acquire);
            if tid != 0 && set_affinity(tid, set) == Err(libc::ESRCH) {
                let _ = t.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire);
            }
        }
    }
}

/// The event thread's side: where it is, and what it saw last.
pub(crate) struct Follower {
    /// The CPUs the event thread was allowed when it started (the program's mask).
    allowed: libc::cpu_set_t,
    /// False when there is nothing to do (off, one CPU) or following failed.
    on: bool,
    /// CPU the event thread is pinned to, or -1.
    here: i32,
    /// CPU the followed thread was on at the last check.
    seen: i32,
    /// The thread followed, and the faults since the last check from it and from others.
    tid: u32,
    mine: u32,
    others: u32,
    next_ns: u64,
    /// At the last check, more than 1/[`SHARED_FAULTS`] of the faults came from threads other
    /// than the one followed.
    shared: bool,
    /// A thread id and its `/proc/self/task/TID/stat`, open (`close` is not interposed).
    stat: Option<(u32, OwnedFd)>,
}

impl Follower {
    /// For the event thread, on that thread.
    pub(crate) fn new(p: &Placement) -> Follower {
        let mask = affinity(0);
        let allowed = mask.unwrap_or_else(empty_set);
        // SAFETY: CPU_COUNT reads a valid set.
        let on = p.enabled && mask.is_some() && unsafe { libc::CPU_COUNT(&allowed) } >= 2;
        Follower { allowed, on, here: -1, seen: -1, tid: 0, mine: 0, others: 0, next_ns: 0, shared: false, stat: None }
    }

    /// A fault of thread `tid` (0: unknown) arrived at `now_ns`: follow its thread if it is
    /// time and that thread took most of the faults since the last check.
    pub(crate) fn on_fault(&mut self, p: &Placement, tid: u32, now_ns: u64) {
        if !self.on || tid == 0 {
            return;
        }
        if tid == self.tid {
            self.mine += 1;
        } else {
            self.others += 1;
        }
        if now_ns < self.next_ns {
            return;
        }
        self.next_ns = now_ns + CHECK_NS;
        let (mine, others) = (std::mem::take(&mut self.mine), std::mem::take(&mut self.others));
        self.shared = others > (mine + others) / SHARED_FAULTS;
        if self.shared {
            // Several threads fault (or another one took over): a pinned event thread would
            // serve the others across CPUs and take CPU time from the one it sits with.
            // Follow the latest, once it has the faults to itself.
            self.tid = tid;
            self.seen = -1;
            if self.here >= 0 {
                self.unpin(p);
            }
            return;
        }
        if self.here >= 0 && p.joined.swap(false, Ordering::AcqRel) {
            p.set_background(&self.others(self.here));
        }
        let Some(cpu) = self.cpu_of(tid) else { return };
        let seen = std::mem::replace(&mut self.seen, cpu);
        if cpu == self.here || cpu != seen || !self.may_use(cpu) {
            return;
        }
        let mut one = empty_set();
        // SAFETY: CPU_SET of a CPU below the set's size (checked by may_use).
        unsafe { libc::CPU_SET(cpu as usize, &mut one) };
        if set_affinity(0, &one).is_err() {
            self.stop(p);
            return;
        }
        p.joined.store(false, Ordering::Release);
        p.set_background(&self.others(cpu));
        self.here = cpu;
        p.moves.fetch_add(1, Ordering::Relaxed);
    }

    /// Several threads of the program took the faults of the last check: they run on several
    /// CPUs, and an event thread that polls between faults takes CPU time from one of them
    /// (known only while following is on).
    pub(crate) fn several_threads_fault(&self) -> bool {
        self.on && self.shared
    }

    /// Give the event thread and the background threads their mask back.
    fn unpin(&mut self, p: &Placement) {
        if set_affinity(0, &self.allowed).is_err() {
            self.on = false;
        }
        p.set_background(&self.allowed);
        self.here = -1;
    }

    /// Stop following for good.
    fn stop(&mut self, p: &Placement) {
        self.on = false;
        self.unpin(p);
    }

    fn may_use(&self, cpu: i32) -> bool {
        (cpu as usize) < 8 * std::mem::size_of::<libc::cpu_set_t>()
            // SAFETY: CPU_ISSET of a CPU below the set's size.
            && unsafe { libc::CPU_ISSET(cpu as usize, &self.allowed) }
    }

    /// The allowed CPUs but `cpu`.
    fn others(&self, cpu: i32) -> libc::cpu_set_t {
        let mut s = self.allowed;
        // SAFETY: `cpu` passed may_use, so it is below the set's size.
        unsafe { libc::CPU_CLR(cpu as usize, &mut s) };
        s
    }

    /// The CPU thread `tid` of this process last ran on.
    fn cpu_of(&mut self, tid: u32) -> Option<i32> {
        if self.stat.as_ref().is_none_or(|(t, _)| *t != tid) {
            self.stat = None;
            let mut path = [0u8; 48];
            stat_path(tid, &mut path);
            let path = std::ffi::CStr::from_bytes_until_nul(&path).ok()?;
            let fd = crate::sys::open_raw(path)?;
            // SAFETY: a new descriptor we own.
            self.stat = Some((tid, unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let fd = self.stat.as_ref()?.1.as_raw_fd();
        let mut buf = [0u8; 1024];
        // SAFETY: pread (raw: the preload interposes `pread`) into a stack buffer of the length
        // given, on a descriptor we own.
        let n = unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), 0) };
        if n <= 0 {
            self.stat = None;
            return None;
        }
        processor(&buf[..n as usize])
    }
}

fn empty_set() -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    unsafe { std::mem::zeroed() }
}

/// The CPU mask of thread `tid` of this process (0: the calling thread).
fn affinity(tid: i32) -> Option<libc::cpu_set_t> {
    let mut set = empty_set();
    // SAFETY: sched_getaffinity into a cpu_set_t of the size given.
    let r = unsafe {
        libc::syscall(libc::SYS_sched_getaffinity, tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set as *mut _)
    };
    (r > 0).then_some(set)
}

/// Times the calling thread was preempted or gave way in `sched_yield` to another thread
/// (involuntary context switches, `getrusage(RUSAGE_THREAD)` by raw system call:
/// `ru_nivcsw`). 0 if the call fails.
pub(crate) fn preemptions() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage for the calling thread into a valid, writable rusage.
    let r = unsafe { libc::syscall(libc::SYS_getrusage, libc::RUSAGE_THREAD, &mut ru as *mut libc::rusage) };
    if r == 0 {
        ru.ru_nivcsw as u64
    } else {
        0
    }
}

/// The calling thread's id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// `sched_setaffinity(tid, set)` as a raw system call; Err(errno).
fn set_affinity(tid: i32, set: &libc::cpu_set_t) -> Result<(), i32> {
    // SAFETY: sched_setaffinity with a cpu_set_t of the size given.
    let r = unsafe {
        libc::syscall(libc::SYS_sched_setaffinity, tid, std::mem::size_of::<libc::cpu_set_t>(), set as *const _)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Write `/proc/self/task/TID/stat` and a NUL into `out` (formatting into a slice allocates
/// nothing); returns the length without the NUL.
fn stat_path(tid: u32, out: &mut [u8; 48]) -> usize {
    use std::io::Write;
    let mut rest = &mut out[..];
    write!(rest, "/proc/self/task/{tid}/stat\0").expect("48 bytes hold the longest path");
    let left = rest.len();
    out.len() - left - 1
}

/// Field 39 (`processor`) of a `/proc/.../stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses, so fields are counted after its last `)`.
fn processor(stat: &[u8]) -> Option<i32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let field = stat[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty()).nth(36)?;
    std::str::from_utf8(field).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processor_field_is_read_after_the_command_name() {
        // A real line of this machine's kernel, command name with a space and a parenthesis.
        let line = b"4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 123 1000 10 \
            18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(processor(line), Some(3));
        assert_eq!(processor(b"1 (x) S 1 2"), None);
        assert_eq!(processor(b"no parenthesis"), None);
    }

    #[test]
    fn the_stat_path_names_the_thread() {
        let mut p = [0u8; 48];
        let n = stat_path(4_294_967_295, &mut p);
        assert_eq!(&p[..n + 1], b"/proc/self/task/4294967295/stat\0");
        let n = stat_path(0, &mut p);
        assert_eq!(&p[..n], b"/proc/self/task/0/stat");
    }

    #[test]
    fn the_follower_reads_this_threads_cpu_and_moves_to_it() {
        let p = Placement::new(true);
        let mut f = Follower::new(&p);
        let tid = gettid() as u32;
        let cpu = f.cpu_of(tid).expect("this thread's CPU");
        // SAFETY: sched_getcpu has no preconditions.
        let now = unsafe { libc::sched_getcpu() };
        assert!((0..1024).contains(&cpu), "cpu {cpu}, running on {now}");
        if !f.on {
            // One CPU allowed: following is off, and a fault changes nothing.
            f.on_fault(&p, tid, 1);
            assert_eq!(f.here, -1);
            return;
        }
        // A background thread that joined is kept off the follower's CPU.
        let (tx, rx) = std::sync::mpsc::channel();
        let done = std::sync::Arc::new(std::sync::Barrier::new(2));
        let (p2, done2) = (std::sync::Arc::new(p), done.clone());
        let p = p2.clone();
        let bg = std::thread::spawn(move || {
            p2.join();
            tx.send(gettid()).unwrap();
            done2.wait();
        });
        let bg_tid = rx.recv().unwrap();
        // Two checks that see the same CPU pin the follower (this thread) there.
        let mut t = 1;
        for _ in 0..50 {
            f.on_fault(&p, tid, t);
            t += CHECK_NS;
            if f.here >= 0 {
                break;
            }
        }
        assert!(f.here >= 0, "never followed");
        // SAFETY: sched_getcpu has no preconditions.
        assert_eq!(unsafe { libc::sched_getcpu() }, f.here);
        assert!(p.moves.load(Ordering::Relaxed) >= 1);
        let bg_mask = affinity(bg_tid).expect("the background thread's mask");
        let want = f.others(f.here);
        // SAFETY: CPU_EQUAL of two valid sets.
        assert!(unsafe { libc::CPU_EQUAL(&bg_mask, &want) }, "background thread not moved off CPU {}", f.here);
        // Faults from two threads in turn: the follower lets go and stays unpinned.
        for i in 0..20u64 {
            f.on_fault(&p, if i % 2 == 0 { tid } else { bg_tid as u32 }, t);
            t += CHECK_NS;
            assert!(i < 2 || f.here == -1, "still pinned to {} after {i} shared faults", f.here);
        }
        assert!(f.on, "following turned off");
        f.stop(&p);
        done.wait();
        bg.join().unwrap();
        let mask = affinity(0).expect("this thread's mask");
        // SAFETY: CPU_EQUAL of two valid sets.
        assert!(unsafe { libc::CPU_EQUAL(&mask, &f.allowed) }, "mask not given back");
    }
}
