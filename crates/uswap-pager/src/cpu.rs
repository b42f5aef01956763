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
//! program rather than on its CPU.
//!
//! **The followed thread is pinned too** while it has the faults to itself. Following alone
//! leaves the program behind: `UFFDIO_COPY` wakes the faulting thread from the event thread's
//! CPU, which is busy at that instant, so the scheduler puts the woken thread on the idle
//! one, and every fault until the next check is a cross-CPU hand-off. A pin is the program's
//! business as much as ours, so it is kept out of the program's sight and out of its children:
//! - the preload's `sched_getaffinity` and `pthread_getaffinity_np` report the program's own
//!   mask to the pinned thread ([`Placement::reported_mask`]);
//! - threads and processes it starts get that mask: the preload lifts the pin around
//!   `pthread_create`, `posix_spawn`, `system` and `popen`, and before the `exec` functions
//!   ([`Placement::without_pin`]); a `fork` child takes it back in the atfork handler
//!   ([`Placement::reset_in_fork_child`]);
//! - a program that sets masks itself (`sched_setaffinity`, `pthread_setaffinity_np`) is
//!   never pinned again ([`Placement::program_sets_masks`]);
//! - no thread is pinned while another process of the tree is live
//!   ([`Placement::set_relatives_busy`]);
//! - a pinned thread that waited to run for more than a quarter of a [`PIN_WINDOW_NS`] window
//!   (`/proc/self/task/TID/schedstat`, `run_delay`: another thread wants its CPU) is given its
//!   mask back, and no thread is pinned for [`PIN_BACKOFF_NS`], so the scheduler can move it.
//!
//! (Threads and processes started by raw `clone` system calls, which no preload sees, keep
//! the pin: Go and other runtimes that do so are not run under the preload.)
//!
//! When several threads share the faults, the event thread, the pinned thread and the
//! background threads get their masks back: the event thread would serve the others across
//! CPUs and take CPU time from the one it sits with. Nothing moves when the event thread may
//! run on one CPU only, when the kernel does not report the faulting thread's id
//! (`UFFD_FEATURE_THREAD_ID`), or when `follow_cpu` is off; a refused `sched_setaffinity` of
//! the event thread turns following off for good and gives every thread its mask back.
//!
//! Locking: one [`YieldLock`], `Placement::pin_lock`, held for one `sched_setaffinity` by the
//! event thread setting a pin and by a wrapper marking its thread held off pins
//! (`Placement::hold_pins`), so no pin lands between a wrapper's lifting of it and the
//! `clone` that would inherit it; the event thread only tries it (a pin skipped waits for the
//! next check). Everything else is atomics: the background threads' ids, each written by its
//! own thread ([`Placement::join`]) and read by the event thread; the pinned thread in one
//! word, set by the event thread and cleared by it or the wrappers (a pinned thread whose mask
//! is not its pin any more is forgotten at the next window). A [`Follower`] belongs to the
//! event thread alone.

use crate::sys::YieldLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// How often the event thread looks at the faulting thread's CPU while faults arrive.
pub(crate) const CHECK_NS: u64 = 1_000_000;

/// The event thread follows a thread only while the others take less than this fraction
/// (1/N) of the faults: following whichever thread faulted last slows a program whose
/// threads fault in turn (GNU sort's two sorting threads).
const SHARED_FAULTS: u32 = 8;

/// The window over which a pinned thread's wait for its CPU is judged: long enough that a
/// moment's neighbour (the client of a server, a kernel worker) does not count.
const PIN_WINDOW_NS: u64 = 100_000_000;

/// How long a thread that went through a `vfork` or `execl` trampoline is not pinned again.
const HOLD_NS: u64 = 100_000_000;

/// How long no thread is pinned after a pinned thread had to wait for its CPU.
const PIN_BACKOFF_NS: u64 = 1_000_000_000;

/// The pin word of [`Placement::pinned`]: `(tid, cpu)`, or None for 0.
fn decode_pin(pin: u64) -> Option<(i32, i32)> {
    (pin != 0).then_some(((pin >> 32) as i32, (pin & 0xffff_ffff) as i32))
}

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
    /// The program's CPU mask when the pager started (a pinned thread's mask given back).
    allowed: Option<libc::cpu_set_t>,
    /// The program thread pinned beside the event thread: `tid << 32 | cpu`, or 0.
    pinned: AtomicU64,
    /// The program sets CPU masks itself: pin nothing.
    program_pins: AtomicBool,
    /// In a fork child: the CPU the parent had pinned a thread to (-1: none). The child pins
    /// nothing there: the parent goes on running on it.
    parent_pin: AtomicI32,
    /// Another process of the tree is live, or the tree has not said yet (`tree::update`):
    /// pin nothing meanwhile.
    relatives_busy: AtomicBool,
    /// A thread the wrappers hold off pinning (`tid << 32`, 0: none), until `hold_until_ns`
    /// (u64::MAX while a wrapped call runs; a while after a `vfork` or `execl` trampoline).
    hold: AtomicU64,
    hold_until_ns: AtomicU64,
    /// Taken by the event thread around a pin, and by a wrapper around setting [`Self::hold`]:
    /// a pin is never set between a wrapper's lifting of the pin and its `clone`.
    pin_lock: YieldLock,
    /// Times a program thread was pinned, and times a pin was given up because the thread
    /// waited for its CPU.
    pub(crate) pins: AtomicU64,
    pub(crate) pin_backoffs: AtomicU64,
}

impl Placement {
    /// Placement that follows faults when `enabled`, and pins the followed thread with
    /// `pin_thread`.
    pub(crate) fn new(enabled: bool, pin_thread: bool) -> Placement {
        Placement {
            enabled,
            tids: std::array::from_fn(|_| AtomicI32::new(0)),
            joined: AtomicBool::new(false),
            moves: AtomicU64::new(0),
            allowed: affinity(0),
            pinned: AtomicU64::new(0),
            // The preload's `vfork` and `execl` trampolines are x86-64 assembly: elsewhere a
            // child started that way would inherit a pin, so nothing is pinned.
            program_pins: AtomicBool::new(!pin_thread || !cfg!(target_arch = "x86_64")),
            parent_pin: AtomicI32::new(-1),
            // Until the tree's first update says otherwise (`tree::update`; a pager outside a
            // `uswap run` tree never pins): an exec'd child must not pin itself before it knows
            // its parent is live.
            relatives_busy: AtomicBool::new(true),
            hold: AtomicU64::new(0),
            hold_until_ns: AtomicU64::new(0),
            pin_lock: YieldLock::new(),
            pins: AtomicU64::new(0),
            pin_backoffs: AtomicU64::new(0),
        }
    }

    /// Run `f` with the calling thread's pin lifted, if it is the pinned thread, and pin it
    /// again after, unless the event thread let it go meanwhile: for the preload's
    /// `pthread_create`, `posix_spawn`, `system` and `popen`, whose new thread or process
    /// inherits the caller's mask, and (no return) its `exec` functions.
    pub(crate) fn without_pin<R>(&self, f: impl FnOnce() -> R) -> R {
        let tid = gettid();
        let (Some((pin, cpu)), Some(allowed)) = (self.pin_of(tid), self.allowed) else { return f() };
        self.hold_pins(tid, u64::MAX);
        let _ = set_affinity(0, &allowed);
        let r = f();
        self.hold_pins(tid, 0);
        if self.pinned.load(Ordering::Acquire) == pin {
            let _ = set_affinity(0, &one_cpu(cpu));
        }
        r
    }

    /// The pin word and CPU if thread `tid` is the pinned one.
    fn pin_of(&self, tid: i32) -> Option<(u64, i32)> {
        let pin = self.pinned.load(Ordering::Acquire);
        decode_pin(pin).filter(|&(t, _)| t == tid).map(|(_, cpu)| (pin, cpu))
    }

    /// No pin of thread `tid` until `until_ns` (u64::MAX: until the next call; 0: from now).
    /// Under [`Self::pin_lock`], so that a pin the event thread is setting is set before this
    /// returns and none after.
    fn hold_pins(&self, tid: i32, until_ns: u64) {
        // The event thread holds the lock for one sched_setaffinity call at most.
        let _g = self.pin_lock.lock();
        self.hold_until_ns.store(until_ns, Ordering::Release);
        self.hold.store((tid as u64) << 32, Ordering::Release);
    }

    /// Does a wrapper hold thread `tid` off pinning at `now_ns`? Read under `pin_lock`.
    fn held(&self, tid: u32, now_ns: u64) -> bool {
        self.hold.load(Ordering::Acquire) >> 32 == u64::from(tid) && now_ns < self.hold_until_ns.load(Ordering::Acquire)
    }

    /// If the calling thread is the pinned one, give it the program's mask back and forget
    /// the pin (for `vfork` and the `execl` family, which cannot be wrapped to put it back):
    /// the event thread may pin it again at a later check.
    pub(crate) fn leave_pin(&self) {
        let tid = gettid();
        let Some((pin, _)) = self.pin_of(tid) else { return };
        // Long enough for the `vfork` or `exec` that follows: a pin set before it would be
        // inherited.
        self.hold_pins(tid, crate::stats::now_ns() + HOLD_NS);
        if let Some(allowed) = self.allowed {
            let _ = set_affinity(0, &allowed);
        }
        let _ = self.pinned.compare_exchange(pin, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The mask to report to thread `tid` asking for its own: the program's when it is the
    /// pinned thread, else None (the kernel's answer stands).
    pub(crate) fn reported_mask(&self, tid: i32) -> Option<libc::cpu_set_t> {
        self.pin_of(tid).and(self.allowed)
    }

    /// The program is about to set a CPU mask itself: give the pinned thread its mask back and
    /// pin nothing from now on.
    pub(crate) fn program_sets_masks(&self) {
        self.program_pins.store(true, Ordering::Release);
        self.release_pin();
    }

    /// Another process of the tree is live (true) or none is (false): while one is, no thread
    /// is pinned (two processes, each pinned beside its event thread, may share one CPU that
    /// the scheduler could not part them on, as a Redis server and its BGSAVE child would).
    pub(crate) fn set_relatives_busy(&self, busy: bool) {
        if self.relatives_busy.swap(busy, Ordering::AcqRel) != busy && busy {
            self.release_pin();
        }
    }

    /// Give the pinned thread, if any, the program's mask back, if its mask is still our pin.
    fn release_pin(&self) {
        if let (Some((tid, cpu)), Some(allowed)) = (decode_pin(self.pinned.swap(0, Ordering::AcqRel)), self.allowed) {
            if pinned_to(tid, cpu) {
                let _ = set_affinity(tid, &allowed);
            }
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

    /// In a fork child: the parent's threads do not exist here, and the child's one thread
    /// gets the program's mask back if it was the pinned one.
    pub(crate) fn reset_in_fork_child(&self) {
        let pin = decode_pin(self.pinned.swap(0, Ordering::AcqRel));
        self.parent_pin.store(pin.map_or(-1, |(_, cpu)| cpu), Ordering::Release);
        // The parent is a relative, busy or not; the tree's next update says.
        self.relatives_busy.store(true, Ordering::Release);
        // Its event thread, which may have held the lock at the fork, does not exist here.
        self.pin_lock.force_unlock();
        if let (Some((_, cpu)), Some(allowed)) = (pin, self.allowed) {
            if pinned_to(0, cpu) {
                let _ = set_affinity(0, &allowed);
            }
        }
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
    /// At the previous check of the pinned thread's `schedstat`, the time and its run delay
    /// (ns).
    sched_at_ns: u64,
    sched_delay_ns: u64,
    /// No pin before this time (after a pinned thread waited for its CPU).
    pin_not_before_ns: u64,
}

impl Follower {
    /// For the event thread, on that thread.
    pub(crate) fn new(p: &Placement) -> Follower {
        let mask = affinity(0);
        let allowed = mask.unwrap_or_else(empty_set);
        // SAFETY: CPU_COUNT reads a valid set.
        let on = p.enabled && mask.is_some() && unsafe { libc::CPU_COUNT(&allowed) } >= 2;
        Follower {
            allowed,
            on,
            here: -1,
            seen: -1,
            tid: 0,
            mine: 0,
            others: 0,
            next_ns: 0,
            shared: false,
            sched_at_ns: 0,
            sched_delay_ns: 0,
            pin_not_before_ns: 0,
        }
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
        self.check_pin(p, now_ns);
        let Some(cpu) = self.cpu_of(tid) else { return };
        let seen = std::mem::replace(&mut self.seen, cpu);
        if cpu == self.here || cpu != seen || !self.may_use(cpu) {
            if cpu == self.here && p.pinned.load(Ordering::Acquire) == 0 {
                self.pin(p, tid, cpu, now_ns);
            }
            return;
        }
        if set_affinity(0, &one_cpu(cpu)).is_err() {
            self.stop(p);
            return;
        }
        p.joined.store(false, Ordering::Release);
        p.set_background(&self.others(cpu));
        self.here = cpu;
        p.moves.fetch_add(1, Ordering::Relaxed);
        p.release_pin();
        self.pin(p, tid, cpu, now_ns);
    }

    /// Pin thread `tid`, which runs on the event thread's CPU `cpu`, there: unless the program
    /// sets masks itself or a pin was given up less than [`PIN_BACKOFF_NS`] ago.
    fn pin(&mut self, p: &Placement, tid: u32, cpu: i32, now_ns: u64) {
        if p.program_pins.load(Ordering::Acquire)
            || now_ns < self.pin_not_before_ns
            || p.allowed.is_none()
            || p.parent_pin.load(Ordering::Acquire) == cpu
            || p.relatives_busy.load(Ordering::Acquire)
        {
            return;
        }
        let Some((_, delay)) = schedstat(tid) else { return };
        // A wrapper lifting the pin to start a thread or a process waits for this, or it is
        // held off here (`Placement::hold_pins`).
        let Some(g) = p.pin_lock.try_lock() else { return };
        let pinned = !p.held(tid, crate::stats::now_ns()) && set_affinity(tid as i32, &one_cpu(cpu)).is_ok();
        if pinned {
            p.pinned.store(u64::from(tid) << 32 | cpu as u64, Ordering::Release);
        }
        drop(g);
        if pinned {
            (self.sched_at_ns, self.sched_delay_ns) = (now_ns, delay);
            p.pins.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Once a [`PIN_WINDOW_NS`] window: forget a pin the program or a wrapper changed, and give
    /// up one whose thread waited to run for more than a quarter of the window.
    fn check_pin(&mut self, p: &Placement, now_ns: u64) {
        let pin = p.pinned.load(Ordering::Acquire);
        let Some((tid, cpu)) = decode_pin(pin) else { return };
        // Judged once a window, so the checks in between cost no system call.
        let dt = now_ns.saturating_sub(self.sched_at_ns);
        if dt < PIN_WINDOW_NS {
            return;
        }
        if !pinned_to(tid, cpu) {
            let _ = p.pinned.compare_exchange(pin, 0, Ordering::AcqRel, Ordering::Acquire);
            return;
        }
        let Some((_, delay)) = schedstat(tid as u32) else {
            p.release_pin();
            return;
        };
        let waited = delay.saturating_sub(self.sched_delay_ns);
        (self.sched_at_ns, self.sched_delay_ns) = (now_ns, delay);
        if waited > dt / 4 {
            p.release_pin();
            p.pin_backoffs.fetch_add(1, Ordering::Relaxed);
            self.pin_not_before_ns = now_ns + PIN_BACKOFF_NS;
        }
    }

    /// Several threads of the program took the faults of the last check: they run on several
    /// CPUs, and an event thread that polls between faults takes CPU time from one of them
    /// (known only while following is on).
    pub(crate) fn several_threads_fault(&self) -> bool {
        self.on && self.shared
    }

    /// Give the event thread, the pinned thread and the background threads their mask back.
    fn unpin(&mut self, p: &Placement) {
        p.release_pin();
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
        let mut buf = [0u8; 1024];
        processor(read_task_file(tid, "stat", &mut buf)?)
    }
}

/// Read `/proc/self/task/TID/FILE` of thread `tid` into `buf`, on the `uswap-procfs` thread
/// (`uswap::procfs`: a descriptor opened here could take a number the program is about to
/// use). `None` when it cannot be read, or that thread is serving another caller (the event
/// thread does not wait: this check comes again). The event thread allocates nothing.
fn read_task_file<'b>(tid: u32, file: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let mut path = [0u8; 56];
    task_path(tid, file, &mut path);
    let path = std::ffi::CStr::from_bytes_until_nul(&path).ok()?;
    let n = uswap::procfs::try_read_start(path, buf)?;
    Some(&buf[..n])
}

/// `(sum_exec_runtime, run_delay)` in ns of thread `tid` ([`read_task_file`] of `schedstat`).
fn schedstat(tid: u32) -> Option<(u64, u64)> {
    let mut buf = [0u8; 128];
    parse_schedstat(read_task_file(tid, "schedstat", &mut buf)?)
}

/// The first two numbers of a `schedstat` line: time run and time waited to run (ns).
fn parse_schedstat(line: &[u8]) -> Option<(u64, u64)> {
    let mut f = line.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty());
    let mut num = || std::str::from_utf8(f.next()?).ok()?.parse::<u64>().ok();
    Some((num()?, num()?))
}

/// The set of CPU `cpu` alone (`cpu` below the set's size).
fn one_cpu(cpu: i32) -> libc::cpu_set_t {
    let mut one = empty_set();
    if (0..8 * std::mem::size_of::<libc::cpu_set_t>() as i32).contains(&cpu) {
        // SAFETY: CPU_SET of a CPU below the set's size (checked above).
        unsafe { libc::CPU_SET(cpu as usize, &mut one) };
    }
    one
}

/// Whether thread `tid` (0: the caller) has CPU `cpu` alone as its mask: still our pin.
fn pinned_to(tid: i32, cpu: i32) -> bool {
    affinity(tid).is_some_and(|m| same_set(&m, &one_cpu(cpu)))
}

fn same_set(a: &libc::cpu_set_t, b: &libc::cpu_set_t) -> bool {
    // SAFETY: CPU_EQUAL of two valid sets.
    unsafe { libc::CPU_EQUAL(a, b) }
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

/// Write `/proc/self/task/TID/FILE` and a NUL into `out` (formatting into a slice allocates
/// nothing); returns the length without the NUL. `file` is `stat` or `schedstat`.
fn task_path(tid: u32, file: &str, out: &mut [u8; 56]) -> usize {
    use std::io::Write;
    let mut rest = &mut out[..];
    write!(rest, "/proc/self/task/{tid}/{file}\0").expect("56 bytes hold the longest path");
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
    fn the_task_path_names_the_thread() {
        let mut p = [0u8; 56];
        let n = task_path(4_294_967_295, "stat", &mut p);
        assert_eq!(&p[..n + 1], b"/proc/self/task/4294967295/stat\0");
        let n = task_path(4_294_967_295, "schedstat", &mut p);
        assert_eq!(&p[..n + 1], b"/proc/self/task/4294967295/schedstat\0");
        let n = task_path(0, "stat", &mut p);
        assert_eq!(&p[..n], b"/proc/self/task/0/stat");
    }

    #[test]
    fn schedstat_gives_run_time_and_run_delay() {
        assert_eq!(parse_schedstat(b"1409874 250 1\n"), Some((1_409_874, 250)));
        assert_eq!(parse_schedstat(b"12"), None);
        assert_eq!(parse_schedstat(b""), None);
        // The run time is brought up to date when the thread is switched out (or at a tick):
        // run a little, then give the CPU away once.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        // SAFETY: sched_yield has no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_sched_yield) };
        let (run, delay) = schedstat(gettid() as u32).expect("this kernel has schedstat");
        assert!(run > 0, "no run time after 5 ms of running");
        let (run2, delay2) = schedstat(gettid() as u32).expect("read again");
        assert!(run2 >= run && delay2 >= delay);
    }

    /// The followed thread (here a helper thread, the test's own being the event thread) is
    /// pinned beside the event thread; the pin is hidden from it, lifted around what it starts,
    /// left for good by `leave_pin`, given up when relatives are busy or the program sets
    /// masks itself.
    #[test]
    fn the_followed_thread_is_pinned_and_let_go() {
        let p = std::sync::Arc::new(Placement::new(true, true));
        let mut f = Follower::new(&p);
        assert!(f.on, "this test needs two CPUs or more (and following on): the pager pins nothing on one");
        // As the tree's first update does for a process alone in its tree.
        p.set_relatives_busy(false);
        let allowed = p.allowed.expect("the program's mask");
        type Job = Box<dyn FnOnce(&Placement) + Send>;
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (tx, tids) = std::sync::mpsc::channel();
        let p2 = p.clone();
        let followed = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            for job in rx {
                job(&p2);
            }
        });
        let tid = tids.recv().unwrap() as u32;
        let on_followed = |job: Job| {
            let (done, wait) = std::sync::mpsc::channel();
            jobs.send(Box::new(move |p: &Placement| {
                job(p);
                done.send(()).unwrap();
            }))
            .unwrap();
            wait.recv().unwrap();
        };
        // Fifty checks (`patient`: and then more for up to five seconds, a millisecond apart:
        // a check that finds the uswap-procfs thread serving another caller, another test's
        // here, reads nothing and comes again).
        let mut t = 1;
        let mut follow = |f: &mut Follower, patient: bool| {
            let t0 = std::time::Instant::now();
            for i in 0.. {
                f.on_fault(&p, tid, t);
                t += CHECK_NS;
                if p.pinned.load(Ordering::Acquire) != 0 {
                    return true;
                }
                if i >= 50 && (!patient || t0.elapsed() > std::time::Duration::from_secs(5)) {
                    break;
                }
                if i >= 50 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            false
        };
        assert!(follow(&mut f, true), "never pinned");
        let cpu = f.here;
        assert!(affinity(tid as i32).is_some_and(|m| same_set(&m, &one_cpu(cpu))), "followed thread not on CPU {cpu}");
        assert!(p.reported_mask(tid as i32).is_some_and(|m| same_set(&m, &allowed)), "the pin is not hidden");
        assert!(p.reported_mask(gettid()).is_none(), "another thread's mask is reported as the program's");
        // Lifted around what it starts, put back after.
        on_followed(Box::new(move |p: &Placement| {
            p.without_pin(|| assert!(same_set(&affinity(0).unwrap(), &allowed), "pin not lifted"));
            assert!(same_set(&affinity(0).unwrap(), &one_cpu(cpu)), "pin not put back");
        }));
        // Left for good (vfork, execl): the program's mask, the pin forgotten.
        on_followed(Box::new(move |p: &Placement| {
            p.leave_pin();
            assert!(same_set(&affinity(0).unwrap(), &allowed), "pin not left");
        }));
        assert_eq!(p.pinned.load(Ordering::Acquire), 0);
        // Not pinned again before the vfork or exec that follows could have cloned.
        assert!(!follow(&mut f, false), "pinned again at once after leaving the pin");
        std::thread::sleep(std::time::Duration::from_nanos(HOLD_NS + 10_000_000));
        assert!(follow(&mut f, true), "not pinned again");
        // Busy relatives: the pin goes, and no new one comes.
        p.set_relatives_busy(true);
        assert_eq!(p.pinned.load(Ordering::Acquire), 0);
        assert!(same_set(&affinity(tid as i32).unwrap(), &allowed), "pin not released for busy relatives");
        assert!(!follow(&mut f, false), "pinned while relatives are busy");
        p.set_relatives_busy(false);
        assert!(follow(&mut f, true), "not pinned once the relatives are idle");
        // The program sets masks: never again.
        p.program_sets_masks();
        assert!(same_set(&affinity(tid as i32).unwrap(), &allowed), "pin not released for the program");
        assert!(!follow(&mut f, false), "pinned after the program set masks itself");
        assert!(p.pins.load(Ordering::Relaxed) >= 3);
        f.stop(&p);
        drop(jobs);
        followed.join().unwrap();
    }

    #[test]
    fn the_follower_reads_this_threads_cpu_and_moves_to_it() {
        let p = Placement::new(true, true);
        let mut f = Follower::new(&p);
        let tid = gettid() as u32;
        // A read that finds the uswap-procfs thread serving another test gives nothing: again.
        let t0 = std::time::Instant::now();
        let cpu = loop {
            match f.cpu_of(tid) {
                Some(c) => break c,
                None if t0.elapsed() < std::time::Duration::from_secs(5) => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                None => panic!("this thread's CPU cannot be read"),
            }
        };
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
        let t0 = std::time::Instant::now();
        for i in 0.. {
            f.on_fault(&p, tid, t);
            t += CHECK_NS;
            if f.here >= 0 || t0.elapsed() > std::time::Duration::from_secs(5) {
                break;
            }
            // Fifty checks at once, then a millisecond apart (a check that finds the
            // uswap-procfs thread serving another test reads nothing).
            if i >= 50 {
                std::thread::sleep(std::time::Duration::from_millis(1));
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
