//! Synchronization shim: the one place that names atomics, locks and epoch reclamation.
//!
//! Normal builds use `std` and `crossbeam-epoch`. Under `--cfg loom` the atomics, mutexes and
//! threads come from loom so its model checker can explore every interleaving of the small
//! kernels (slot allocation, add-or-get against delete). Tables retired under loom are kept
//! until the owner drops (loom cannot see inside crossbeam-epoch); under a normal build they are
//! freed once no pinned reader can hold them.
//!
//! # Lock classes and the fault path
//! Every engine mutex is a [`Mutex`] of this module and names its [`LockClass`] when it is
//! made. A pager marks the code that resolves a page fault with a [`FaultScope`] (the SIGBUS
//! handler, the event thread's fault resolution); while a thread is inside one, every lock it
//! takes is counted per class in process-wide counters ([`fault_lock_counts`]), so a test can
//! check that the fault path takes only the classes `docs/design.md` allows ("Deadlock
//! freedom"). Each thread also counts the engine locks it holds ([`held_locks`]): the pager
//! checks at the start of a fault that the faulting thread holds none (a fault taken under an
//! engine lock is the one way the fault path could wait for itself), and counts a violation in
//! [`fault_entries_holding_locks`]. The bookkeeping is a few thread-local cell updates per
//! lock, and a relaxed atomic add per class used when a thread's outermost fault scope ends;
//! under loom it is compiled out.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
use std::sync as inner;

#[cfg(loom)]
use loom::sync as inner;

use std::ops::{Deref, DerefMut};

/// What an engine mutex guards (one name per kind of lock, for the fault-path contract and
/// its test; see `docs/design.md`, "Deadlock freedom").
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LockClass {
    /// A cluster of a swap space (virtual, or a file tier's physical space): its table words.
    Cluster,
    /// A swap space's cluster lists (free / nonfull / frag / full / discard): one per space.
    SpaceLists,
    /// A swap space's per-thread-shard allocation cursor.
    SpaceShard,
    /// Retired tables under loom (never taken in a normal build).
    SpaceRetired,
    /// A swap-cache free-list shard (recycled folios).
    CacheFreeList,
    /// A swap-cache folio's wait mutex (waiting for its owner to unlock it).
    FolioWait,
    /// A size class of the compressed pool.
    PoolClass,
    /// The compressed pool's large-object area (one per pool).
    PoolLarge,
    /// The compressed pool's compaction pass (taken with `try_lock` only).
    PoolCompact,
    /// A free list of the page heap (one per block size), or its release batch (one per heap).
    PageHeap,
    /// A file tier's I/O buffer shard.
    FileBufs,
    /// A file tier's drop-behind ring (buffered I/O only; never held across a system call).
    FileDropBehind,
    /// An io_uring ring of a file tier (held across one submission and its completion).
    IoRing,
    /// The I/O engine's quarantine of buffers a cancelled request may still use.
    IoQuarantine,
    /// Test-only I/O fault plans.
    IoFaultPlan,
    /// The in-memory test backend (a `HashMap`: it allocates).
    MemBackend,
}

/// Number of [`LockClass`]es.
pub(crate) const NR_LOCK_CLASSES: usize = LockClass::MemBackend as usize + 1;

impl LockClass {
    /// Every class, in order.
    pub const ALL: [LockClass; NR_LOCK_CLASSES] = [
        LockClass::Cluster,
        LockClass::SpaceLists,
        LockClass::SpaceShard,
        LockClass::SpaceRetired,
        LockClass::CacheFreeList,
        LockClass::FolioWait,
        LockClass::PoolClass,
        LockClass::PoolLarge,
        LockClass::PoolCompact,
        LockClass::PageHeap,
        LockClass::FileBufs,
        LockClass::FileDropBehind,
        LockClass::IoRing,
        LockClass::IoQuarantine,
        LockClass::IoFaultPlan,
        LockClass::MemBackend,
    ];
}

#[cfg(not(loom))]
mod track {
    use super::{LockClass, NR_LOCK_CLASSES};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};

    // Const-initialised and without destructors: reading them allocates nothing and is
    // signal-safe (no lazy registration).
    thread_local! {
        static FAULT_DEPTH: Cell<u32> = const { Cell::new(0) };
        static HELD: Cell<u32> = const { Cell::new(0) };
        /// This thread's acquisitions per class in its current fault scope, added to `COUNTS`
        /// when the outermost scope ends: no shared cache line written per lock on the path.
        static LOCAL: [Cell<u64>; NR_LOCK_CLASSES] = const { [const { Cell::new(0) }; NR_LOCK_CLASSES] };
    }
    static COUNTS: [AtomicU64; NR_LOCK_CLASSES] = [const { AtomicU64::new(0) }; NR_LOCK_CLASSES];
    static HELD_AT_ENTRY: AtomicU64 = AtomicU64::new(0);

    pub(super) fn acquired(class: LockClass) {
        HELD.with(|h| h.set(h.get() + 1));
        if FAULT_DEPTH.with(Cell::get) > 0 {
            LOCAL.with(|l| l[class as usize].set(l[class as usize].get() + 1));
        }
    }
    pub(super) fn released() {
        HELD.with(|h| h.set(h.get().wrapping_sub(1)));
    }
    pub(super) fn reheld() {
        HELD.with(|h| h.set(h.get() + 1));
    }
    pub(super) fn enter() {
        if FAULT_DEPTH.with(|d| d.replace(d.get() + 1)) == 0 && HELD.with(Cell::get) != 0 {
            HELD_AT_ENTRY.fetch_add(1, Ordering::Relaxed);
        }
    }
    pub(super) fn leave() {
        if FAULT_DEPTH.with(|d| d.replace(d.get() - 1)) == 1 {
            LOCAL.with(|l| {
                for (c, n) in COUNTS.iter().zip(l) {
                    if n.get() != 0 {
                        c.fetch_add(n.replace(0), Ordering::Relaxed);
                    }
                }
            });
        }
    }
    pub(super) fn in_fault() -> bool {
        FAULT_DEPTH.with(Cell::get) > 0
    }
    pub(super) fn held() -> u32 {
        HELD.with(Cell::get)
    }
    pub(super) fn counts() -> [u64; NR_LOCK_CLASSES] {
        std::array::from_fn(|i| COUNTS[i].load(Ordering::Relaxed))
    }
    pub(super) fn held_at_entry() -> u64 {
        HELD_AT_ENTRY.load(Ordering::Relaxed)
    }
}

#[cfg(loom)]
mod track {
    use super::{LockClass, NR_LOCK_CLASSES};
    pub(super) fn acquired(_: LockClass) {}
    pub(super) fn released() {}
    pub(super) fn reheld() {}
    pub(super) fn enter() {}
    pub(super) fn leave() {}
    pub(super) fn in_fault() -> bool {
        false
    }
    pub(super) fn held() -> u32 {
        0
    }
    pub(super) fn counts() -> [u64; NR_LOCK_CLASSES] {
        [0; NR_LOCK_CLASSES]
    }
    pub(super) fn held_at_entry() -> u64 {
        0
    }
}

/// The token of the fault path: while one is alive on a thread, that thread is resolving a
/// page fault (in a SIGBUS handler, or on the event thread), and the locks it takes are
/// counted per class. Scopes nest (a fault inside a fault's own reclaim). Not `Send`: it
/// marks the thread that made it.
pub struct FaultScope {
    _thread: std::marker::PhantomData<*const ()>,
}

impl FaultScope {
    /// Enter the fault path on this thread. Counts a violation
    /// ([`fault_entries_holding_locks`]) if the thread holds an engine lock at the outermost
    /// entry: the fault was taken inside engine code, which must never touch managed memory.
    #[inline]
    pub fn enter() -> FaultScope {
        track::enter();
        FaultScope { _thread: std::marker::PhantomData }
    }
}

impl Drop for FaultScope {
    #[inline]
    fn drop(&mut self) {
        track::leave();
    }
}

/// True while this thread is inside a [`FaultScope`].
#[inline]
pub fn in_fault_path() -> bool {
    track::in_fault()
}

/// Engine locks this thread holds now.
#[inline]
pub fn held_locks() -> u32 {
    track::held()
}

/// Locks taken inside fault scopes since the process started, by class (index = `class as
/// usize`, see [`LockClass::ALL`]), summed over all threads (a scope's count is added when the
/// thread's outermost scope ends).
pub fn fault_lock_counts() -> [u64; NR_LOCK_CLASSES] {
    track::counts()
}

/// Outermost fault scopes entered by a thread that held an engine lock (must stay 0).
pub fn fault_entries_holding_locks() -> u64 {
    track::held_at_entry()
}

/// An engine mutex: the platform (or loom) mutex plus its [`LockClass`]. Every acquisition
/// goes through [`Mutex::lock`] or `Mutex::try_lock`, which do the bookkeeping above.
pub struct Mutex<T> {
    class: LockClass,
    m: inner::Mutex<T>,
}

/// A held [`Mutex`].
pub struct MutexGuard<'a, T> {
    g: Option<inner::MutexGuard<'a, T>>,
}

impl<T> Mutex<T> {
    /// A mutex of `class` holding `v`.
    pub fn new(class: LockClass, v: T) -> Self {
        Mutex { class, m: inner::Mutex::new(v) }
    }

    /// Take the lock, waiting for it, ignoring poisoning: a panic in another thread already
    /// failed the test or aborted the process, and the protected state is kept consistent step
    /// by step.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let g = match self.m.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        track::acquired(self.class);
        MutexGuard { g: Some(g) }
    }

    /// Take the lock if nobody holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let g = match self.m.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        track::acquired(self.class);
        Some(MutexGuard { g: Some(g) })
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.g.as_ref().expect("guard taken only by Condvar::wait")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.g.as_mut().expect("guard taken only by Condvar::wait")
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        if self.g.is_some() {
            track::released();
        }
    }
}

/// A condition variable over a [`Mutex`].
#[derive(Default)]
pub(crate) struct Condvar {
    cv: inner::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub(crate) fn new() -> Self {
        Condvar { cv: inner::Condvar::new() }
    }

    /// Release the guard's lock, wait for a notification, and take the lock again.
    pub(crate) fn wait<'a, T>(&self, mut g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let inner_g = g.g.take().expect("guard taken only by Condvar::wait");
        drop(g);
        track::released();
        let inner_g = match self.cv.wait(inner_g) {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        // Held again; not a new acquisition (counted when first taken).
        track::reheld();
        MutexGuard { g: Some(inner_g) }
    }

    /// Wake every waiter.
    pub(crate) fn notify_all(&self) {
        self.cv.notify_all();
    }
}

/// Lock a mutex (see [`Mutex::lock`]).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// A small stable per-thread index, used to pick a counter shard or an allocator shard
/// (the user-space stand-in for "the current CPU").
pub(crate) fn thread_shard() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        s.set(n);
        n
    })
}
