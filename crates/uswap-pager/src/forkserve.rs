//! Serving a fork child's faults until its own pager runs.
//!
//! glibc's `fork` runs code in the child before any atfork handler: it walks every thread's
//! descriptor (at the top of the thread's stack), marks each free and clears its
//! thread-specific blocks (`reclaim_stacks`), and resets its locks and name-service state. Any
//! of those pages may be swapped out at the fork, in the parent and so in the child, whose
//! pager the LD_PRELOAD library's child handler rebuilds only afterwards (`uswap_ffi::fork`).
//! Closing the `UFFD_EVENT_FORK` descriptor at once would drop the child's registrations, and
//! such a page would read as zeros: a child such as `redis-server`'s BGSAVE would die in
//! `reclaim_stacks` on a zeroed thread descriptor (and its SIGSEGV handler could wait forever
//! for a jemalloc lock held across the fork, and the parent for the child).
//!
//! So the event thread keeps that descriptor (the kernel's copy of the registrations, on the
//! child's memory) and serves the child's faults itself, from the parent's state, which is
//! still exactly what the child's copy holds: from the fork event until the child has taken
//! over, the parent's pager changes nothing (the event thread's rounds wait, the reclaimer and
//! the recompressor are quiesced for the fork, and [`crate::Pager::discard_range`] waits; a
//! discard already under way at the fork event is the one thing not held). A swapped-out page
//! is loaded from the store, a swap-cache page copied from the cache, any other page is zeros
//! (it was missing in the parent too); a write-protect fault (a clean page's protection) is
//! lifted, and the child's pager forgets clean pages anyway.
//!
//! In SIGBUS fault mode the kernel does not queue the child's faults on that descriptor (its
//! features, `UFFD_FEATURE_SIGBUS` among them, are the parent's): it raises SIGBUS in the
//! child. The child's SIGBUS path then asks instead ([`fault_from_fork_parent`]): it puts the
//! page's address in the shared page's request word and writes the eventfd, and the event
//! thread serves the request as it would the fault and clears the word, which the child
//! waits for.
//!
//! The child's handler first calls [`crate::Pager::fork_child_release`]: a word in a page
//! shared with the child ([`ForkServe`]'s slot). The event thread then closes the descriptor,
//! which lets the child register its regions on a uffd of its own. The pages served are listed
//! in the same page, and the child's pager settles them as it restarts: they are present, so
//! their entries are freed and they count as resident. The serving also ends when the
//! parent's handler ends the fork hold (the child wrote its byte, or died first). A child
//! that has not taken over after ten seconds (stopped, or traced) gets a warning on stderr, and
//! the parent's pager keeps waiting for it.
//!
//! Locking: atomics only. The slot is written by one side at a time: the parent's event thread
//! writes the list before it closes the descriptor, the child reads it after its registration
//! succeeded (which needs that close); `released` is the child's. The request word is taken by
//! a child thread with a compare-and-swap from 0 and cleared by the event thread once served
//! (one request at a time).

use crate::page::{kind, PageWord};
use crate::region;
use crate::stats::{inc, now_ns};
use crate::uffd::{Event, Filled, Uffd};
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use uswap::tier::shared::SharedMap;

/// Slot layout (8-byte words): the generation the child released, the generation of the
/// served list, its length, the child's request (a page address with [`REQ_PENDING`], or 0),
/// then the served list's addresses.
const RELEASED: usize = 0;
const LIST_GEN: usize = 8;
const LIST_LEN: usize = 16;
const REQUEST: usize = 24;
const LIST: usize = 32;
/// Low bit of the request word: a request is posted (addresses are page-aligned).
const REQ_PENDING: u64 = 1;
/// How long a fork child waits for its parent to serve a request before it gives up (the
/// caller then ends the child with a message: the parent stopped or died).
const ASK_TIMEOUT_NS: u64 = 30_000_000_000;
const SLOT_BYTES: usize = 4096;
const LIST_MAX: usize = (SLOT_BYTES - LIST) / 8;

/// After this long without the child taking over, say so (once).
const WARN_AFTER_NS: u64 = 10_000_000_000;

/// A pager's side of the serving: the page it shares with its fork children, and whether a
/// child is being served now.
pub(crate) struct ForkServe {
    /// None when the shared page could not be made: fork descriptors are then closed at once.
    slot: Option<SharedMap>,
    /// The slot could not be made this process's own (a fork child's `renew` failed): unused.
    off: AtomicBool,
    active: AtomicBool,
    /// An eventfd the child writes when it releases (inherited: the same object in both), so
    /// the event thread does not wait for its poll's timeout; -1 if none could be made.
    wake_fd: i32,
}

impl ForkServe {
    pub(crate) fn new() -> ForkServe {
        ForkServe {
            slot: SharedMap::new(SLOT_BYTES).ok(),
            off: AtomicBool::new(false),
            active: AtomicBool::new(false),
            wake_fd: new_eventfd(),
        }
    }

    /// A child is being served: the parent's pager state must not change.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    /// Wait while a child is being served (a program thread about to change the pager's state).
    pub(crate) fn wait_idle(&self) {
        while self.active() {
            std::thread::yield_now();
        }
    }

    /// The shared page, if there is one for this process to use.
    fn slot(&self) -> Option<&SharedMap> {
        self.slot.as_ref().filter(|_| !self.off.load(Ordering::SeqCst))
    }

    fn word(&self, off: usize) -> Option<&AtomicU64> {
        self.slot().map(|s| s.u64_at(off))
    }

    /// In a fork child (after [`ForkServe::release`]): no child of its own is being served, and
    /// its wake-up eventfd is its own, on the inherited number (if a new one cannot be made, it
    /// keeps sharing the parent's: spurious wake-ups, no more).
    pub(crate) fn reset_in_fork_child(&self) {
        self.active.store(false, Ordering::SeqCst);
        let new = new_eventfd();
        if self.wake_fd >= 0 && new >= 0 {
            // SAFETY: dup3 puts the new eventfd on the inherited number (which this process
            // then no longer shares with its parent); the temporary number is closed.
            unsafe {
                libc::syscall(libc::SYS_dup3, new, self.wake_fd, libc::O_CLOEXEC);
                libc::syscall(libc::SYS_close, new);
            }
        }
    }

    /// The eventfd to poll while a child is served (-1: none).
    pub(crate) fn wake_fd(&self) -> i32 {
        self.wake_fd
    }

    /// Reset the eventfd after a wake-up.
    pub(crate) fn clear_wake(&self) {
        let fd = self.wake_fd;
        if fd >= 0 {
            let mut v = 0u64;
            // SAFETY: a non-blocking read of 8 bytes from our eventfd into a local.
            unsafe { libc::syscall(libc::SYS_read, fd, (&mut v as *mut u64).cast::<libc::c_void>(), 8) };
        }
    }

    /// In a fork child, first thing: the parent's event thread may stop serving this child
    /// (fork generation `gen`) and close its descriptor.
    pub(crate) fn release(&self, gen: u64) {
        if let Some(w) = self.word(RELEASED) {
            w.store(gen, Ordering::SeqCst);
            let fd = self.wake_fd;
            if fd >= 0 {
                let one = 1u64;
                // SAFETY: write of 8 bytes from a local to the eventfd inherited from the parent.
                unsafe { libc::syscall(libc::SYS_write, fd, (&one as *const u64).cast::<libc::c_void>(), 8) };
            }
        }
    }

    /// In a fork child, after its registration succeeded: call `f` for every page the parent
    /// served it (fork generation `gen`), then make the slot this process's own (its children's,
    /// no longer its parent's).
    pub(crate) fn take_served(&self, gen: u64, mut f: impl FnMut(usize)) {
        let Some(slot) = self.slot() else { return };
        if slot.u64_at(LIST_GEN).load(Ordering::SeqCst) == gen {
            let n = (slot.u64_at(LIST_LEN).load(Ordering::SeqCst) as usize).min(LIST_MAX);
            for i in 0..n {
                f(slot.u64_at(LIST + 8 * i).load(Ordering::Relaxed) as usize);
            }
        }
        if slot.renew().is_err() {
            // Still the parent's: this process's fork children are not served through it.
            self.off.store(true, Ordering::SeqCst);
        }
    }
}

/// Where a fork child's pager threads, started while the parent still serves the child's
/// faults, wait until the child's pager is set up ([`crate::Pager::start_threads_in_fork_child`]).
#[derive(Default)]
pub(crate) struct StartGate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl StartGate {
    /// Wait until [`StartGate::open`].
    pub(crate) fn wait(&self) {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            g = self.opened.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Let every waiter (and later caller of [`StartGate::wait`]) go.
    pub(crate) fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }
}

/// A non-blocking, close-on-exec eventfd, or -1.
fn new_eventfd() -> i32 {
    // SAFETY: eventfd2 with valid flags returns a new descriptor or -1.
    unsafe { libc::syscall(libc::SYS_eventfd2, 0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) as i32 }
}

/// The fork child being served, held by the event thread. Dropping it closes the descriptor
/// and ends the serving (`ForkServe::active`), however the event loop lets go of it.
pub(crate) struct Child<'p> {
    serve: &'p ForkServe,
    uffd: Uffd,
    gen: u64,
    since: u64,
    warned: bool,
    /// Its queued faults (address, write-protect): one at a time in practice (the child has one
    /// thread), kept when an ioctl must wait for an event of the child.
    pending: [(usize, bool); 8],
    npending: usize,
}

impl<'p> Child<'p> {
    /// At a fork event (descriptor `fd`): serve the child if the fork is one the atfork
    /// handlers hold for (`gen`: the hold's generation) and the slot exists; else close the
    /// descriptor at once.
    pub(crate) fn begin(p: &'p Pager, fd: i32, gen: Option<u64>) -> Option<Child<'p>> {
        // SAFETY: the kernel gave this descriptor to this thread with the event.
        let uffd = unsafe { Uffd::from_fork_event(fd) };
        let (Some(gen), Some(slot)) = (gen, p.fork_serve.slot()) else {
            return None; // dropping `uffd` closes it
        };
        slot.u64_at(LIST_LEN).store(0, Ordering::SeqCst);
        slot.u64_at(REQUEST).store(0, Ordering::SeqCst);
        slot.u64_at(LIST_GEN).store(gen, Ordering::SeqCst);
        p.fork_serve.active.store(true, Ordering::SeqCst);
        Some(Child {
            serve: &p.fork_serve,
            uffd,
            gen,
            since: now_ns(),
            warned: false,
            pending: [(0, false); 8],
            npending: 0,
        })
    }

    /// The descriptor to poll.
    pub(crate) fn raw(&self) -> i32 {
        self.uffd.raw()
    }

    /// Read the child's messages and serve its faults; true when the serving is over (the
    /// descriptor is closed when `self` is dropped).
    pub(crate) fn step(&mut self, p: &Pager, msgs: &mut [linux_raw_sys::general::uffd_msg]) -> bool {
        p.fork_serve.clear_wake();
        let n = self.uffd.read_msgs(msgs).unwrap_or(0);
        for m in &msgs[..n] {
            // Other events (the child's munmap, madvise) are only read: that unblocks it; its
            // pager does not see them, as it saw nothing of the child's before this module.
            if let Event::Pagefault { addr, wp, .. } = crate::uffd::decode(m) {
                if self.npending < self.pending.len() {
                    self.pending[self.npending] = (addr as usize & !(PAGE_SIZE - 1), wp);
                    self.npending += 1;
                }
            }
        }
        let mut i = 0;
        while i < self.npending {
            let (a, wp) = self.pending[i];
            if serve(p, &self.uffd, a, wp, self.gen).is_some() {
                self.npending -= 1;
                self.pending[i] = self.pending[self.npending];
            } else {
                i += 1;
            }
        }
        if let Some(w) = p.fork_serve.word(REQUEST) {
            let req = w.load(Ordering::SeqCst);
            if req & REQ_PENDING != 0
                && serve_request(p, &self.uffd, (req & !(PAGE_SIZE as u64 - 1)) as usize, self.gen)
            {
                let _ = w.compare_exchange(req, 0, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
        let released = p.fork_serve.word(RELEASED).is_some_and(|w| w.load(Ordering::SeqCst) == self.gen);
        if released || p.hold.ended(self.gen) {
            return true;
        }
        if !self.warned && now_ns() - self.since > WARN_AFTER_NS {
            self.warned = true;
            let msg = b"uswap: warning: a fork child has not started in 10 s (stopped or traced?); its parent's pager waits for it\n";
            // SAFETY: write(2) of a static buffer to stderr.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }
        false
    }
}

impl Drop for Child<'_> {
    fn drop(&mut self) {
        self.serve.active.store(false, Ordering::SeqCst);
    }
}

/// Serve a request the child posted for page `a` (SIGBUS mode, which does not say whether the
/// fault was a write to a protected page or a missing page): fill the page, and where it was
/// present already, lift its protection. False to retry later.
fn serve_request(p: &Pager, u: &Uffd, a: usize, gen: u64) -> bool {
    match serve(p, u, a, false, gen) {
        None => false,
        Some(Filled::Done) => true,
        Some(Filled::Exists) => serve(p, u, a, true, gen).is_some(),
    }
}

/// Serve the child's fault at page `a`: `Done` when this filled it, `Exists` when it was
/// present (or `wp`: its protection lifted); None to retry later (an event of the child is
/// pending, or the page is held: neither lasts).
fn serve(p: &Pager, u: &Uffd, a: usize, wp: bool, gen: u64) -> Option<Filled> {
    crate::uffd::AGAIN.with(|c| c.set(false));
    let again = || crate::uffd::AGAIN.with(|c| c.replace(false));
    if wp {
        let _ = u.writeprotect(a, PAGE_SIZE, false, true);
        return (!again()).then_some(Filled::Exists);
    }
    let mut buf = p.bufs.take();
    region::enter();
    // SAFETY: between enter and leave; `r` and the cache pointer are not used after the leave.
    let r = unsafe { region::lookup(a) };
    let w = r.map_or(PageWord::NONE, |r| r.word((a - r.start) / PAGE_SIZE).load(Ordering::Acquire));
    let src: *const u8 = match (w.kind(), r) {
        (kind::SWAPPED, _) => {
            let page = &mut buf[..PAGE_SIZE];
            if p.store.load(w.payload(), page).is_err() {
                crate::sys::fatal("uswap-pager: serving a fork child: stored data is corrupt or missing\n");
            }
            page.as_ptr()
        }
        (kind::CACHED, Some(r)) => {
            let pg = (a - r.start) / PAGE_SIZE;
            let head = pg & !((1usize << w.order()) - 1);
            p.cache.ptr(region::cached_obj(w, w.order())).wrapping_add((pg - head) * PAGE_SIZE)
        }
        (kind::BUSY, _) => {
            region::leave();
            return None;
        }
        _ => p.bufs.zero(),
    };
    // SAFETY: `src` is one readable page (a buffer, the cache object, or the zero page); `a`
    // is the page the child faulted on, registered on its descriptor.
    let res = unsafe { u.copy(a, src, PAGE_SIZE, false, true) };
    region::leave();
    if again() {
        return None;
    }
    if matches!(res, Ok(Filled::Done)) {
        inc(&p.counters.fork_child_faults, 1);
        if let Some(slot) = p.fork_serve.slot() {
            let n = slot.u64_at(LIST_LEN).load(Ordering::SeqCst) as usize;
            if n < LIST_MAX && slot.u64_at(LIST_GEN).load(Ordering::SeqCst) == gen {
                slot.u64_at(LIST + 8 * n).store(a as u64, Ordering::Relaxed);
                slot.u64_at(LIST_LEN).store(n as u64 + 1, Ordering::SeqCst);
            }
        }
    }
    Some(res.unwrap_or(Filled::Done))
}

/// What [`fault_from_fork_parent`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkChildFault {
    /// The parent served the page: return and let the access run again.
    Served,
    /// The address is in no region: not the pager's fault.
    NotOurs,
    /// The child released its parent already (its own pager takes over next): wait for that.
    Released,
    /// The parent did not serve the request in time (it stopped or died).
    NoAnswer,
}

/// In a fork child whose pager is not rebuilt yet, in SIGBUS fault mode: have the parent's
/// event thread, which holds the child's registrations until the child releases it, resolve
/// the fault at `addr`. Allocates nothing and takes no lock (a SIGBUS handler's rules).
pub fn fault_from_fork_parent(addr: usize) -> ForkChildFault {
    region::enter();
    // SAFETY: between enter and leave; only the pager reference is kept, which outlives the
    // region (a region's pager is freed after its regions).
    let pager = unsafe { region::lookup(addr) }.map(|r| r.pager() as *const Pager);
    region::leave();
    let Some(pager) = pager else { return ForkChildFault::NotOurs };
    // SAFETY: as above: the pager outlives its regions, and a fork child frees none of them
    // before its own pager runs.
    let p = unsafe { &*pager };
    let serve = &p.fork_serve;
    let gen = p.hold.generation();
    let (Some(req_w), Some(released)) = (serve.word(REQUEST), serve.word(RELEASED)) else {
        return ForkChildFault::NoAnswer;
    };
    let req = (addr & !(PAGE_SIZE - 1)) as u64 | REQ_PENDING;
    let t0 = now_ns();
    let late = || now_ns() - t0 > ASK_TIMEOUT_NS;
    loop {
        if released.load(Ordering::SeqCst) == gen {
            return ForkChildFault::Released;
        }
        if req_w.compare_exchange(0, req, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            break;
        }
        if late() {
            return ForkChildFault::NoAnswer;
        }
        std::thread::yield_now();
    }
    if serve.wake_fd >= 0 {
        let one = 1u64;
        // SAFETY: write of 8 bytes from a local to the eventfd inherited from the parent.
        unsafe { libc::syscall(libc::SYS_write, serve.wake_fd, (&one as *const u64).cast::<libc::c_void>(), 8) };
    }
    while req_w.load(Ordering::SeqCst) == req {
        if late() {
            let _ = req_w.compare_exchange(req, 0, Ordering::SeqCst, Ordering::SeqCst);
            return ForkChildFault::NoAnswer;
        }
        std::thread::yield_now();
    }
    ForkChildFault::Served
}
