//! The pager's own memory: mappings and thread stacks that must never be put under a pager.
//!
//! A pager that adopts a program's anonymous memory where it lies (the `vma` module) finds
//! that memory by reading `/proc/self/maps`, where its own mappings (page words, rings, the
//! swap cache, the engine's pool, the library's internal heap) and its threads' stacks look
//! like any other anonymous mapping. Managing one of them would make a pager thread fault on
//! memory only it can fill: a deadlock. So everything the pager (or a library embedding it)
//! maps for itself is recorded here ([`Mapping`] maps and records in one call, and unmaps and
//! forgets on drop), and every pager thread is started by [`spawn`], which records its stack
//! pointer and the signal stack the Rust runtime maps for it before the thread runs, and
//! forgets them only as it is joined; [`is_own`] tells an adopter to keep away.
//!
//! One piece of a pager thread's memory is not the pager's to place: its *dynamic thread
//! vector* (glibc's DTV, which every thread-local access of a shared library reads through
//! `__tls_get_addr`). glibc allocates it with the global `calloc` when the thread is created,
//! and when the executable defines `calloc` itself (rustc and Rust programs built with an
//! unprefixed jemalloc, programs linked with tcmalloc) that is the program's heap: managed
//! memory. Evicted, the event thread's next thread-local access would wait for the event
//! thread itself (every pager thread blocked in `__tls_get_addr`). So each pager thread
//! *pins* its vector ([`pin_thread_vector`], x86-64 glibc: the vector's address is at
//! `%fs:8`, its length one entry below it) and reclaim passes over folios that hold a pinned
//! range ([`pinned`]). A vector glibc moves later (it
//! grows when more than a dozen libraries with thread-locals are loaded after the thread
//! started) is pinned again by the thread's next loop. Pager threads also get stacks of an
//! unusual size ([`STACK_PAD`]): a fork child starts its pager threads on the stacks glibc
//! cached from the parent's threads, with their vectors, and the best fit for that size is a
//! parent pager thread's stack, whose vector was pinned (so it is resident in the child),
//! not a program thread's, whose vector may be swapped out with no event thread yet to
//! bring it back.
//!
//! Locking: none for the table. A fixed table of atomic words, each one whole range (start
//! page and length): [`add`] claims a free entry by CAS, [`remove`] trims or clears one by CAS
//! from the value it read; readers scan without locks (signal-safe,
//! allocation-free). A mapping added concurrently with a scan may be missed by that scan, so
//! own mappings are made under a [`Making`] guard, and an adopter registers a range only under
//! an [`Adopting`] guard: the two exclude each other (a Dekker pair of SeqCst counters, no
//! lock: `IN_FLIGHT` counts makers, `ADOPTING` adopters; each side raises its own counter,
//! then reads the other's). So when an adopter checks [`is_own`] under its guard, every own
//! mapping that exists is recorded and none can appear until it has registered. A maker waits
//! (spinning, then yielding) only for an adopter's check and its registration (a few system
//! calls); an adopter waits a bounded time for makers and gives up rather than wait longer.
//! A thread's creation and its exit are each held under a maker's guard, from the first
//! mapping the system makes for it until it is recorded, and from when it is forgotten until
//! it is gone. A [`Mapping`] has no lock: it is immutable after creation, and its contents
//! are its user's to synchronize.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The kernel's page: what `mmap` and `munmap` work in.
const PAGE: usize = crate::PAGE_SIZE;

/// Entries of the table. The engine maps many small areas of its own (each `PageVec` of the
/// pool and the page heap is a mapping), so a JVM or V8 under the pager has thousands; the
/// table holds many times that, since an own mapping it cannot hold stops adoption
/// ([`overflowed`]). 1 MiB of `.bss`, touched only as far as it is used.
const MAX_OWN: usize = 1 << 16;
const MAX_STACKS: usize = 64;

/// One recorded range in one atomic word, so a reader never sees half of one entry and half
/// of another: the start's page number in the high 35 bits, the length in pages in the low 29
/// (0: free). Two words (start, end) could be read torn: an entry freed and claimed again for
/// a mapping at the same address (`mmap` hands the same one back) between a reader's two
/// loads reads as a range nobody recorded, reading twice does not catch it when the addresses
/// repeat, and [`remove`] could then clear or trim another thread's new entry. Every change is
/// one CAS from the value its writer read.
struct Range(AtomicU64);

/// Bits of a [`Range`] word that hold the length in pages.
const LEN_BITS: u32 = 29;
/// The longest range one entry holds, in pages (a longer one takes several entries).
const MAX_ENTRY_PAGES: usize = (1 << LEN_BITS) - 1;
/// A [`PINNED`] slot claimed by a thread that has not stored its range yet.
const CLAIMED: u64 = u64::MAX;

impl Range {
    /// The word for `[start, end)` (page aligned, at most [`MAX_ENTRY_PAGES`] long), or `None`
    /// for an address a word cannot hold (above 2^47: only with an explicit high hint).
    fn pack(start: usize, end: usize) -> Option<u64> {
        let (page, pages) = (start / PAGE, (end - start) / PAGE);
        (pages > 0 && pages <= MAX_ENTRY_PAGES && end <= 1 << 47).then_some(((page as u64) << LEN_BITS) | pages as u64)
    }

    /// `(start, end)` of a word, `None` for a free or claimed entry.
    fn unpack(w: u64) -> Option<(usize, usize)> {
        if w == 0 || w == CLAIMED {
            return None;
        }
        let start = (w >> LEN_BITS) as usize * PAGE;
        Some((start, start + (w & MAX_ENTRY_PAGES as u64) as usize * PAGE))
    }

    /// The entry's `(start, end)`, or `None` if it is free.
    fn read(&self) -> Option<(usize, usize)> {
        Range::unpack(self.0.load(Ordering::Acquire))
    }
}

static OWN: [Range; MAX_OWN] = [const { Range(AtomicU64::new(0)) }; MAX_OWN];
static HIGH: AtomicUsize = AtomicUsize::new(0);
static STACKS: [AtomicUsize; MAX_STACKS] = [const { AtomicUsize::new(0) }; MAX_STACKS];
/// Pinned ranges (pager threads' dynamic thread vectors), one slot per thread.
static PINNED: [Range; MAX_STACKS] = [const { Range(AtomicU64::new(0)) }; MAX_STACKS];
/// Slots of [`PINNED`] ever claimed (readers scan only these).
static PIN_HIGH: AtomicUsize = AtomicUsize::new(0);
/// Ranges of the program's memory pinned by its embedder ([`pin_range`]): in SIGBUS fault
/// mode, each program thread's thread control block and static TLS, which the fault handler
/// reads through `%fs` on that thread (a missing page there would fault again inside the
/// handler, for ever).
static PROGRAM_PINNED: [Range; MAX_PROGRAM_PINS] = [const { Range(AtomicU64::new(0)) }; MAX_PROGRAM_PINS];
/// Slots of [`PROGRAM_PINNED`] ever claimed.
static PROGRAM_PIN_HIGH: AtomicUsize = AtomicUsize::new(0);
const MAX_PROGRAM_PINS: usize = 4096;
/// Added to every pager thread's stack size (see the module's paragraph).
pub const STACK_PAD: usize = 68 << 10;
/// The default stack of a pager thread, before [`STACK_PAD`] (the Rust runtime's default).
const DEFAULT_STACK: usize = 2 << 20;
/// Own mappings that did not fit in the table (then adoption must be conservative).
static OVERFLOW: AtomicUsize = AtomicUsize::new(0);

/// Own mappings being made: counted from before their `mmap` until they are recorded.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Bumped each time a [`Making`] guard ends.
static GENERATION: AtomicUsize = AtomicUsize::new(0);

/// Held while an own mapping is made and recorded (take it before the `mmap`/`mremap`, drop
/// it after [`add`]): a reconciler that reads the process's mappings meanwhile would see the
/// new mapping, not recorded yet, as the program's memory and adopt it, and the pager could
/// then fault on its own memory with no thread left to serve it. See [`quiet_generation`].
#[must_use = "the mapping counts as in flight only while the guard lives"]
pub struct Making(());

/// Adopters between their [`is_own`] check and their registration (see [`Adopting`]).
static ADOPTING: AtomicUsize = AtomicUsize::new(0);

/// Start making an own mapping (see [`Making`]). Waits while an adopter holds an
/// [`Adopting`] guard (a check and a registration: a few system calls).
pub fn making() -> Making {
    loop {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        if ADOPTING.load(Ordering::SeqCst) == 0 {
            return Making(());
        }
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        let mut backoff = crate::sys::Backoff::default();
        while ADOPTING.load(Ordering::SeqCst) != 0 {
            backoff.snooze();
        }
    }
}

/// Held by an adopter from its last [`is_own`] check until its range is registered with the
/// uffd: no own mapping is in flight meanwhile, and none can start, so a range that is not own
/// at the check is the program's until the registration is done (the program's address space
/// can change meanwhile, but the pager's cannot move into it). The holder must not make an own
/// mapping (nor allocate from a heap that may map), or it waits for itself.
#[must_use = "own mappings are held off only while the guard lives"]
pub struct Adopting(());

/// Take an [`Adopting`] guard: hold off new own mappings and wait for those in flight to be
/// recorded. `None` if some are still in flight after a few thousand tries (a maker can be
/// preempted in its `mmap`): the caller adopts nothing now rather than wait on it.
pub fn adopting() -> Option<Adopting> {
    ADOPTING.fetch_add(1, Ordering::SeqCst);
    let mut backoff = crate::sys::Backoff::default();
    for _ in 0..4096 {
        if IN_FLIGHT.load(Ordering::SeqCst) == 0 {
            return Some(Adopting(()));
        }
        backoff.snooze();
    }
    ADOPTING.fetch_sub(1, Ordering::SeqCst);
    None
}

impl Drop for Adopting {
    fn drop(&mut self) {
        ADOPTING.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        GENERATION.fetch_add(1, Ordering::SeqCst);
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A token for "no own mapping in flight": equal tokens taken before and after reading the
/// process's mappings prove every own mapping in that reading was recorded. `None` while one
/// is in flight.
pub fn quiet_generation() -> Option<usize> {
    let g = GENERATION.load(Ordering::SeqCst);
    (IN_FLIGHT.load(Ordering::SeqCst) == 0).then_some(g)
}

/// Record `[start, start + len)` as the pager's own memory (rounded out to whole pages: the
/// kernel maps pages, so the rest of a partly used last page is the mapping's too).
pub fn add(start: usize, len: usize) {
    let end = (start + len).div_ceil(PAGE) * PAGE;
    let start = start & !(PAGE - 1);
    let len = end - start;
    let covered = entries().any(|(s, e)| s <= start && e >= start + len);
    if len == 0 || covered {
        return;
    }
    insert(start, len);
}

/// Record `[start, start + len)` (page aligned) in free slots (one per [`MAX_ENTRY_PAGES`]),
/// covered already or not. What does not fit is counted in [`OVERFLOW`].
fn insert(start: usize, len: usize) {
    let end = start + len;
    let mut at = start;
    while at < end {
        let to = end.min(at + MAX_ENTRY_PAGES * PAGE);
        if !insert_one(at, to) {
            OVERFLOW.fetch_add(1, Ordering::Relaxed);
            return;
        }
        at = to;
    }
}

/// Record `[start, end)` in one free slot; false if the table is full or the range unfit.
fn insert_one(start: usize, end: usize) -> bool {
    let Some(w) = Range::pack(start, end) else { return false };
    for (i, r) in OWN.iter().enumerate() {
        if r.0.load(Ordering::Relaxed) == 0 && r.0.compare_exchange(0, w, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            HIGH.fetch_max(i + 1, Ordering::AcqRel);
            return true;
        }
    }
    false
}

/// Held around the `munmap` of an own range (or the `mremap` that moves it away): the range
/// is forgotten when the guard is taken, *before* the call, and adopters are held off (a
/// [`Making`] guard) until it is dropped. Entries are address ranges, not owners, so a
/// [`remove`] after the unmap could erase the entry of another thread's new mapping that the
/// kernel put in the freed range meanwhile (or that mapping's [`add`] found the old entry
/// still covering it and recorded nothing), leaving the pager's page words unrecorded for a
/// reconciler to adopt: the event thread would fault on its own memory (a deadlock). Forgotten
/// first, the range is unrecorded only while it is still mapped and adopters are held off.
#[must_use = "adopters are held off only while the guard lives"]
pub struct Unmapping {
    range: (usize, usize),
    _making: Making,
}

impl Unmapping {
    /// Forget `[start, start + len)`, about to be unmapped.
    pub fn begin(start: usize, len: usize) -> Unmapping {
        let making = making();
        remove(start, len);
        Unmapping { range: (start, len), _making: making }
    }

    /// The call failed: the range is still mapped, record it again.
    pub fn failed(self) {
        add(self.range.0, self.range.1);
    }
}

/// Forget `[start, start + len)` (whole pages). Entries overlapping the range are trimmed to
/// what is left of them; an entry split in two keeps its lower part and its upper part gets
/// an entry of its own. Around an unmap, use [`Unmapping`] instead.
pub fn remove(start: usize, len: usize) {
    let end = (start + len).div_ceil(PAGE) * PAGE;
    let start = start & !(PAGE - 1);
    let n = HIGH.load(Ordering::Acquire);
    for r in &OWN[..n] {
        let mut w = r.0.load(Ordering::Acquire);
        // An entry changed under us (another thread's remove trimmed it) is looked at again.
        while let Some((s, e)) = Range::unpack(w) {
            if s >= end || e <= start {
                break;
            }
            // The part above the hole is recorded before the entry shrinks: a mapping of
            // another thread's in it that found this entry covering it (and so recorded
            // nothing) must never look unrecorded, not even for a moment. Recorded twice if
            // the CAS below loses; harmless (a later remove clears both).
            if start > s && end < e {
                insert(end, e - end);
            }
            let new = if start <= s && end >= e {
                0
            } else if start <= s {
                Range::pack(end, e).unwrap_or(0)
            } else {
                Range::pack(s, start).unwrap_or(0)
            };
            match r.0.compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
    }
}

/// A pager thread, started by [`spawn`]: its stack and its signal stack are recorded as own
/// memory from before it runs any code of the caller's until it has exited (see [`spawn`]).
/// Dropped without [`Thread::join`], the thread runs on detached and its records stay (a
/// thread that lives as long as the process, such as the preload's scanner).
#[must_use = "join the thread, or its records outlive it"]
pub struct Thread<T> {
    handle: std::thread::JoinHandle<T>,
    mem: ThreadMem,
}

/// What [`spawn`] recorded for one thread: its slot in the stack table and its signal stack.
#[derive(Clone, Copy, Default)]
struct ThreadMem {
    stack_slot: Option<usize>,
    sigaltstack: Option<(usize, usize)>,
    /// Its slot in the pinned table (its dynamic thread vector).
    pin_slot: Option<usize>,
}

/// Start a pager thread named `name` (with `stack_size` bytes of stack, or 2 MiB, plus [`STACK_PAD`]) that
/// runs `f`. A thread's memory is mapped before its code runs, by `pthread_create` (the
/// stack) and by the Rust runtime's thread start (a signal stack, `MAP_PRIVATE|MAP_ANONYMOUS`),
/// and unmapped after it returns; none of that goes through [`Mapping`]. Unrecorded, such a
/// mapping found where the program had just unmapped memory could be registered with the uffd
/// by an adopter, and the event thread's exit would then unmap its own registered signal stack
/// and wait for its own UNMAP event: a deadlock. So a [`Making`] guard is held from before
/// the thread is created until it has recorded its stack pointer and signal stack, and
/// another from before the records are forgotten until it has exited ([`Thread::join`]).
pub fn spawn<T: Send + 'static>(
    name: &str,
    stack_size: Option<usize>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<Thread<T>> {
    let making = making();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let b = std::thread::Builder::new().name(name.into()).stack_size(stack_size.unwrap_or(DEFAULT_STACK) + STACK_PAD);
    let handle = b.spawn(move || {
        let _ = tx.send(ThreadMem::record_this_thread());
        f()
    })?;
    // The thread sends before it runs `f`; an error means it died before that (no records).
    let mem = rx.recv().unwrap_or_default();
    drop(making);
    Ok(Thread { handle, mem })
}

/// Start a pager thread that lives as long as the process, without waiting for it: it records
/// its stack and signal stack itself, first, then sets `recorded` (Release) and runs `f`.
/// Until `recorded` is set its memory is not known as the pager's, so this is only for a
/// process where no adopter can run until then: the caller makes whatever would adopt wait
/// for `recorded` (a dormant process's watcher, which runs before any pager exists). Saves
/// [`spawn`]'s wait for the new thread to be scheduled.
pub fn spawn_detached(
    name: &str,
    stack_size: Option<usize>,
    recorded: &'static AtomicBool,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    recorded.store(false, Ordering::Release);
    let b = std::thread::Builder::new().name(name.into()).stack_size(stack_size.unwrap_or(DEFAULT_STACK) + STACK_PAD);
    b.spawn(move || {
        let _ = ThreadMem::record_this_thread();
        recorded.store(true, Ordering::Release);
        f()
    })
    .map(drop)
}

impl<T> Thread<T> {
    /// Forget the thread's records and wait for it to exit (as
    /// [`std::thread::JoinHandle::join`]; call it once the thread has been told to stop).
    /// Adopters are held off from the moment the records are forgotten until the
    /// thread is gone, its signal stack unmapped by the runtime and its stack unmapped or
    /// cached by libc (a cached stack is the program's to adopt: a thread made later gets it
    /// back only through [`spawn`], which records it again).
    pub fn join(self) -> std::thread::Result<T> {
        let _making = making();
        self.mem.forget();
        self.handle.join()
    }
}

impl ThreadMem {
    /// Record the calling thread's stack pointer (any mapping that contains it is the
    /// thread's stack) and its signal stack, if it has one (with the guard page below it that
    /// the Rust runtime maps with it).
    fn record_this_thread() -> ThreadMem {
        let probe = 0u8;
        let sp = std::hint::black_box(&probe) as *const u8 as usize;
        let stack_slot =
            STACKS.iter().position(|s| s.compare_exchange(0, sp, Ordering::AcqRel, Ordering::Relaxed).is_ok());
        if stack_slot.is_none() {
            OVERFLOW.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: sigaltstack with no new stack only reads the current one into `ss`.
        let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `ss` is a valid, writable stack_t.
        let rc = unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) };
        let sigaltstack = (rc == 0 && ss.ss_flags & libc::SS_DISABLE == 0 && !ss.ss_sp.is_null()).then(|| {
            let start = (ss.ss_sp as usize & !(PAGE - 1)).saturating_sub(PAGE);
            (start, ss.ss_sp as usize + ss.ss_size - start)
        });
        if let Some((start, len)) = sigaltstack {
            add(start, len);
        }
        ThreadMem { stack_slot, sigaltstack, pin_slot: pin_thread_vector() }
    }

    /// Forget what [`ThreadMem::record_this_thread`] recorded (under a [`Making`] guard).
    fn forget(self) {
        if let Some(i) = self.stack_slot {
            STACKS[i].store(0, Ordering::Release);
        }
        if let Some((start, len)) = self.sigaltstack {
            remove(start, len);
        }
        if let Some(i) = self.pin_slot {
            PINNED[i].0.store(0, Ordering::Release);
        }
    }
}

thread_local! {
    /// The calling pager thread's slot in [`PINNED`] and the vector pinned there
    /// (`usize::MAX`: none yet).
    static PIN: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((usize::MAX, 0)) };
}

/// Pin the calling pager thread's dynamic thread vector, or pin it again where glibc moved it
/// (see the module's paragraph); cheap when it has not moved. Called by [`spawn`] before the
/// thread runs its function, and by the pager threads' loops. Returns the thread's slot, or
/// `None` where the vector cannot be found (not x86-64 glibc) or the table is full.
pub fn pin_thread_vector() -> Option<usize> {
    let dtv = thread_vector_at()?;
    let (mut slot, at) = PIN.with(std::cell::Cell::get);
    if slot != usize::MAX && at == dtv {
        return Some(slot);
    }
    let (start, end) = thread_vector(dtv)?;
    if slot == usize::MAX {
        slot = PINNED.iter().position(|r| {
            r.0.load(Ordering::Relaxed) == 0
                && r.0.compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        })?;
        PIN_HIGH.fetch_max(slot + 1, Ordering::AcqRel);
    }
    // One store: a reader sees the old range or the new one. A vector too odd for a word
    // (never on x86-64) leaves the slot claimed and nothing pinned.
    let start = start & !(PAGE - 1);
    let end = end.div_ceil(PAGE) * PAGE;
    PINNED[slot].0.store(Range::pack(start, end).unwrap_or(CLAIMED), Ordering::Release);
    PIN.with(|c| c.set((slot, dtv)));
    Some(slot)
}

/// True if `[start, end)` holds a pinned range: reclaim must leave the folio resident.
pub fn pinned(start: usize, end: usize) -> bool {
    let hit = |t: &[Range]| t.iter().filter_map(Range::read).any(|(s, e)| s < end && e > start);
    hit(&PINNED[..PIN_HIGH.load(Ordering::Acquire)]) || hit(&PROGRAM_PINNED[..PROGRAM_PIN_HIGH.load(Ordering::Acquire)])
}

/// Keep the program's pages of `[start, end)` (rounded out to pages) resident for the rest of
/// the process: reclaim passes over the folios that hold them. A range pinned already (a
/// thread started on a stack glibc cached from one that ended) takes no new slot. False when
/// the table is full or the range cannot be packed. Allocates nothing (a signal handler may
/// call it).
pub fn pin_range(start: usize, end: usize) -> bool {
    let Some(w) = Range::pack(start & !(PAGE - 1), end.div_ceil(PAGE) * PAGE) else { return false };
    let high = PROGRAM_PIN_HIGH.load(Ordering::Acquire);
    if PROGRAM_PINNED[..high].iter().any(|r| r.0.load(Ordering::Relaxed) == w) {
        return true;
    }
    let Some(slot) = PROGRAM_PINNED.iter().position(|r| {
        r.0.load(Ordering::Relaxed) == 0 && r.0.compare_exchange(0, w, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }) else {
        return false;
    };
    PROGRAM_PIN_HIGH.fetch_max(slot + 1, Ordering::AcqRel);
    true
}

/// Where the calling thread's dynamic thread vector is (glibc's `dtv` pointer: its entry 0;
/// one 16-byte entry before it holds its length in entries), or `None` on a platform where
/// this is not known.
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
pub fn thread_vector_at() -> Option<usize> {
    let dtv: usize;
    // SAFETY: on x86-64 glibc `%fs` holds the thread's TCB (`tcbhead_t`), whose second word is
    // the pointer to its dynamic thread vector; reading it has no side effect.
    unsafe { std::arch::asm!("mov {}, qword ptr fs:[8]", out(reg) dtv, options(nostack, readonly, preserves_flags)) };
    (dtv >= PAGE).then_some(dtv)
}

/// Where the calling thread's dynamic thread vector is: not known on this platform.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
pub fn thread_vector_at() -> Option<usize> {
    None
}

/// The calling pager thread's dynamic thread vector at `dtv`, `[start, end)` of its allocation.
fn thread_vector(dtv: usize) -> Option<(usize, usize)> {
    // SAFETY: glibc allocates the vector with one 16-byte entry before the pointer, holding its
    // length in entries (`allocate_dtv`); the thread's own vector stays allocated while it runs,
    // and a pager thread has just read it (its thread-locals), so it is resident.
    let len = unsafe { ((dtv - 16) as *const usize).read_volatile() };
    (len > 0 && len < 1 << 20).then(|| (dtv - 16, dtv + (len + 1) * 16))
}

/// The recorded ranges, as `(start, end)` (free entries left out).
fn entries() -> impl Iterator<Item = (usize, usize)> {
    OWN[..HIGH.load(Ordering::Acquire)].iter().filter_map(Range::read)
}

/// True if `[start, end)` overlaps the pager's own memory or contains a pager thread's stack.
pub fn is_own(start: usize, end: usize) -> bool {
    entries().any(|(s, e)| s < end && e > start) || has_stack(start, end)
}

/// The parts of `[start, end)` that are not recorded as the pager's own, in address order
/// (none if a pager thread's stack lies in it: a stack's extent is not recorded). For a
/// mapping the kernel merged out of program memory and a small mapping of the pager's (a
/// pager thread's signal stack next to a program's buffer: same flags, one VMA), read from a
/// stable reading of the maps (no own mapping in flight, see [`quiet_generation`]): every own
/// part is then recorded, and the rest is the program's.
pub fn gaps(start: usize, end: usize) -> Vec<(usize, usize)> {
    if has_stack(start, end) {
        return Vec::new();
    }
    let mut own: Vec<(usize, usize)> =
        entries().filter(|&(s, e)| s < end && e > start).map(|(s, e)| (s.max(start), e.min(end))).collect();
    own.sort_unstable();
    let mut out = Vec::new();
    let mut at = start;
    for (s, e) in own {
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        out.push((at, end));
    }
    out
}

/// True if a pager thread's stack pointer lies in `[start, end)` (the whole mapping is then a
/// pager thread's stack: its extent is not recorded, only the pointer).
fn has_stack(start: usize, end: usize) -> bool {
    STACKS.iter().any(|s| {
        let v = s.load(Ordering::Acquire);
        v != 0 && v >= start && v < end
    })
}

/// Entries of the table in use, the highest count so far (for the statistics).
pub fn recorded_high() -> usize {
    HIGH.load(Ordering::Relaxed)
}

/// Own mappings that could not be recorded (the table was full). While any are, nothing can
/// prove a range is not the pager's, so adoption stops (`crate::vma`).
pub fn overflowed() -> usize {
    OVERFLOW.load(Ordering::Relaxed)
}

/// An anonymous private read-write mapping of the pager's own (`MAP_NORESERVE`: pages cost only
/// once touched), recorded here while it lives: mapped and recorded by [`Mapping::new`],
/// unmapped and forgotten on drop. The one owner of the raw `mmap`/`munmap` pattern for the
/// pager's own memory (page words, rings, the swap cache, buffers).
///
/// It hands out raw pointers ([`Mapping::as_ptr`]); what the bytes mean, and who may touch
/// which of them when, is its user's business. The only safe view is
/// [`Mapping::atomic_words`], sound for any contents.
#[derive(Debug)]
pub struct Mapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an owned range of address space; moving it to or sharing it with another
// thread is like moving or sharing a `Box<[AtomicU8]>`. Its safe API is `len` and
// `atomic_words` (atomics, so shared access is fine); access through `as_ptr` is unsafe code
// whose callers synchronize it themselves.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes (rounded up to whole pages by the kernel; [`Mapping::len`] is `len`) of
    /// zeroed anonymous private memory, `MAP_NORESERVE`, and record it as the pager's own.
    /// Goes through the `mmap` symbol (in the LD_PRELOAD library that is the interposer, which
    /// passes uswap's own calls straight to the system call).
    pub fn new(len: usize) -> std::io::Result<Mapping> {
        let _making = making();
        // SAFETY: anonymous private mapping, no address hint: it replaces nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let Some(ptr) = std::ptr::NonNull::new(p.cast::<u8>()) else {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        };
        add(p as usize, len);
        Ok(Mapping { ptr, len })
    }

    /// The first byte (page aligned).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length asked for.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a mapping of no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as `len / 8` atomic words. Sound whatever else its user does: the memory
    /// is page aligned, mapped read-write for the mapping's life, any bit pattern is a valid
    /// `AtomicU64`, and atomics may be shared (code that also writes these bytes through
    /// [`Mapping::as_ptr`] without atomics is unsafe code with a data race of its own making).
    #[inline]
    pub fn atomic_words(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: see above; len / 8 words fit in the mapping, which lives as long as &self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len / 8) }
    }

    /// Give the whole pages of `[off, off + len)` back to the kernel (`MADV_DONTNEED`, by raw
    /// system call: no interposed symbol): they read as zero from now on and cost no memory
    /// until written again. Safe as a concurrent store of zeros would be (see
    /// [`Mapping::atomic_words`]); a caller that wants the bytes kept must not call it.
    pub fn discard(&self, off: usize, len: usize) {
        assert!(off.is_multiple_of(4096) && len.is_multiple_of(4096) && off + len <= self.len.next_multiple_of(4096));
        // SAFETY: a page-aligned range inside this mapping, which stays mapped; only its contents
        // change (to zeros), which no reference of the safe API can observe as UB.
        unsafe { libc::syscall(libc::SYS_madvise, self.ptr.as_ptr().add(off), len, libc::MADV_DONTNEED) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let _unmapping = Unmapping::begin(self.ptr.as_ptr() as usize, self.len);
        // SAFETY: the mapping made in new, owned by self; nothing borrows it any more (borrows
        // of `atomic_words` end with &self; raw pointers from `as_ptr` are their users' to drop
        // first).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_and_split() {
        let base = 0x7000_0000_0000usize;
        add(base, 0x10000);
        assert!(is_own(base + 0x1000, base + 0x2000));
        assert!(!is_own(base + 0x10000, base + 0x20000));
        remove(base + 0x4000, 0x1000);
        assert!(is_own(base + 0x3000, base + 0x4000), "below the hole");
        assert!(!is_own(base + 0x4000, base + 0x5000), "the hole");
        assert!(is_own(base + 0x5000, base + 0x6000), "above the hole");
        remove(base + 0x8000, 0x8000);
        assert!(is_own(base, base + 0x1000));
        assert!(!is_own(base + 0x8000, base + 0x9000));
        remove(base, 0x8000);
        assert!(!is_own(base, base + 0x10000));
    }

    /// Run `f` on a thread started by [`spawn`] and return its result, taken before the join
    /// (which forgets the thread's records).
    fn on_spawned_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = spawn("own-test", None, move || {
            tx.send(f()).unwrap();
            let _ = done_rx.recv();
        })
        .unwrap();
        let r = rx.recv().unwrap();
        done_tx.send(()).unwrap();
        t.join().unwrap();
        r
    }

    #[test]
    fn gaps_are_what_is_not_own() {
        let base = 0x7100_0000_0000usize;
        assert_eq!(gaps(base, base + 0x8000), [(base, base + 0x8000)], "nothing own");
        add(base + 0x2000, 0x1000);
        add(base + 0x5000, 0x2000);
        assert_eq!(
            gaps(base, base + 0x8000),
            [(base, base + 0x2000), (base + 0x3000, base + 0x5000), (base + 0x7000, base + 0x8000)]
        );
        assert_eq!(gaps(base + 0x2000, base + 0x3000), [], "all own");
        assert_eq!(gaps(base + 0x2800, base + 0x6000), [(base + 0x3000, base + 0x5000)], "own at both ends");
        remove(base, 0x8000);
        // A pager thread's stack in the range: its extent is unknown, nothing is a gap.
        let found = on_spawned_thread(|| {
            let probe = 0u8;
            let sp = std::hint::black_box(&probe) as *const u8 as usize;
            // (The pointer recorded lies in this stack, a few frames up.)
            gaps((sp & !0xfff) - (64 << 10), (sp & !0xfff) + (64 << 10))
        });
        assert_eq!(found, []);
    }

    /// A mapping freed by one thread and one made by another at the same address: the new one
    /// stays recorded for as long as it lives. (Were the entry forgotten after the unmap, the
    /// new mapping's `add` could find the old entry still covering its range and skip, or the
    /// old owner's late `remove` erase it.)
    #[test]
    fn a_mapping_made_where_another_was_just_freed_stays_own() {
        const LEN: usize = 3 * 4096 + 100;
        let churn = || {
            let mut lost = 0u64;
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_secs(2) {
                let m = Mapping::new(LEN).unwrap();
                let a = m.as_ptr() as usize;
                for _ in 0..8 {
                    if !is_own(a, a + 1) || !is_own(a + LEN - 1, a + LEN) {
                        lost += 1;
                        break;
                    }
                    std::hint::spin_loop();
                }
                drop(m);
            }
            lost
        };
        let threads: Vec<_> = (0..3).map(|_| std::thread::spawn(churn)).collect();
        let lost: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(lost, 0, "live own mappings found unrecorded");
    }

    /// A range longer than one entry holds is recorded in several, and forgotten whole; a hole
    /// punched in it leaves both sides recorded. (Addresses only: nothing is mapped there.)
    #[test]
    fn a_range_longer_than_an_entry_is_recorded_and_forgotten_whole() {
        let start = 1usize << 40;
        let len = 3 * MAX_ENTRY_PAGES * PAGE + 5 * PAGE;
        add(start, len);
        let end = start + len;
        assert!(is_own(start, start + 1) && is_own(end - 1, end));
        assert!((0..4).all(|k| is_own(start + k * MAX_ENTRY_PAGES * PAGE, start + k * MAX_ENTRY_PAGES * PAGE + 1)));
        let hole = start + MAX_ENTRY_PAGES * PAGE + 7 * PAGE;
        remove(hole, 2 * PAGE);
        assert!(!is_own(hole, hole + 2 * PAGE));
        assert!(is_own(hole - 1, hole) && is_own(hole + 2 * PAGE, hole + 2 * PAGE + 1));
        remove(start, len);
        assert!(!is_own(start, end), "a forgotten range is not own");
        assert_eq!(Range::unpack(Range::pack(start, start + PAGE).unwrap()), Some((start, start + PAGE)));
        assert_eq!(Range::pack(start, start), None, "an empty range has no word");
    }

    #[test]
    fn adopting_and_making_exclude_each_other() {
        let m = making();
        assert!(adopting().is_none(), "an adopter must not proceed while an own mapping is in flight");
        drop(m);
        // Other tests may be making mappings now: retry until none is in flight.
        let g = (0..1000).find_map(|_| adopting()).expect("an adopter gets in once nothing is in flight");
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let t = std::thread::spawn(move || {
            let _m = making();
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!done.load(Ordering::SeqCst), "a maker must wait while an adopter holds its guard");
        drop(g);
        t.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }

    /// A thread started by [`spawn`] finds its stack and its signal stack own while it runs
    /// (checked before the join, which forgets them first).
    #[test]
    fn a_spawned_threads_stack_and_signal_stack_are_own_while_it_runs() {
        let (stack, alt, alt_own) = on_spawned_thread(|| {
            let probe = 0u8;
            let sp = std::hint::black_box(&probe) as *const u8 as usize;
            // SAFETY: sigaltstack with no new stack only reads the current one.
            let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above; `ss` is a valid, writable stack_t.
            assert_eq!(unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) }, 0);
            let alt =
                (ss.ss_flags & libc::SS_DISABLE == 0).then(|| (ss.ss_sp as usize, ss.ss_sp as usize + ss.ss_size));
            // (The pointer recorded lies in this stack, a few frames up.)
            let stack = is_own(sp - (64 << 10), sp + (64 << 10));
            let alt_own = alt.map(|(s, e)| is_own(s, s + 1) && is_own(e - 1, e) && is_own(s - 1, s));
            (stack, alt, alt_own)
        });
        assert!(stack, "the thread's stack is not own");
        // The test harness's runtime gives every thread a signal stack.
        assert!(alt.is_some(), "no signal stack in a test thread");
        assert_eq!(alt_own, Some(true), "the signal stack (with its guard page) is not own");
    }
}
