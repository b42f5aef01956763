//! The fault path: how a fault on a region's page is served, from the SIGBUS handler or the
//! event thread down to the `UFFDIO_COPY` that maps the page.
//!
//! The entry points are here: [`handle_fault`] serves a fault in the thread that took it (the
//! SIGBUS handler; it may wait and reclaim), [`try_fault`] a fault message on the thread that
//! reads the uffd (it never waits: a fault it cannot finish now is retried later). Both find
//! the region in the lock-free registry and resolve the page ([`resolve()`]). The files, each
//! one role, from the top down:
//! - [`sigbus`]: the SIGBUS handler (`UFFD_FEATURE_SIGBUS`), which calls [`handle_fault`] and
//!   passes on a SIGBUS that is not ours;
//! - [`event`]: the event thread's loop ([`event_loop`]): events (munmap, mremap, fork,
//!   madvise), the page-fault messages of [`FaultMode::Thread`](crate::FaultMode), its spin,
//!   and its part in a fork hold and a fork child's service;
//! - [`resolve`](mod@resolve): one page's fault by the page's word, and the waits on `BUSY`
//!   pages;
//! - [`fill`]: the fills, one sequence whichever way the data comes (swap cache, a large
//!   stored folio, one page of one, 4 KiB pages or zeros): claim the pages, load, copy,
//!   publish, put what held the data before;
//! - [`readahead`]: how many pages a fill takes (the stream rule, the readahead window);
//! - [`map`]: the copy (`UFFDIO_COPY`) and publish steps the fills share;
//! - [`clean`]: clean pages ([`KeepClean`], the policy that decides whether a read's swap-in
//!   keeps its swap entry and maps the page write-protected; the write fault that ends it);
//! - [`throttle`]: keeping to the limit on the fault path (direct reclaim before a blocking
//!   fault, the event thread's wait for the reclaimer, a program allocation's wait for it).
//!
//! The handler may have interrupted anything, `malloc` included. The contract of this path
//! is `docs/design.md`, "Deadlock freedom": it runs inside a [`uswap::FaultScope`]
//! (entered in [`handle_fault`] and [`try_fault`]); it calls no allocator (page claims are
//! CASes on the page words, buffers come from a fixed pool taken by CAS ([`crate::bufs`]; the
//! guard gives its buffer back when dropped), counters are atomics, and the engine takes its
//! memory from preallocated lists and its page heap); the only locks it takes are a ring's
//! spinlock and the engine locks of the classes the contract lists, none of which is ever
//! held by a thread that touches managed memory, so none is held by the thread the handler
//! interrupted; and asynchronous signals are blocked while it runs (the handler's mask), so no
//! program handler runs on top of it. `tests/contract.rs` counts all of this. It runs on the
//! stack of whatever the program was doing, so it keeps no per-page array there: every fill
//! takes a buffer first, whose side area ([`Scratch`](crate::bufs::Scratch)) holds its
//! claim's old words and a cached folio's kept entries, and the sets of pages held or refused
//! are 64-byte bitmaps ([`PageSet`](crate::page::PageSet)). Concurrent faults on one folio:
//! the first CASes its pages to `BUSY` and fills it; the others see `BUSY`, wait (spin, then
//! `sched_yield`) without holding anything, and retry.
//!
//! Locking: the page-word claims described in [`crate::page`], plus the engine locks of the
//! store calls and the rings' spinlocks (see above). A fault path claims pages through a
//! [`Claim`](crate::page::Claim) (CAS to `BUSY`), which rolls back to the old words when
//! dropped unpublished, so every way out of a fill leaves no page `BUSY`. A fill takes its
//! buffer before it claims a page, so it never waits for the pool while holding pages. A
//! fault taken inside this thread's own reclaim (on the folio it is copying) maps zeros and
//! reclaims nothing. The entry points here take the registry's read side
//! ([`region::enter`]/[`region::leave`]) around the lookup and the resolution.

mod clean;
mod event;
mod fill;
mod map;
mod readahead;
mod resolve;
mod sigbus;
mod throttle;

#[cfg(test)]
mod tests;

pub(crate) use clean::KeepClean;
pub(crate) use event::{event_loop, on_event_thread, EventState};
pub(crate) use readahead::AheadTracker;
pub(crate) use resolve::{resolve, Wait};
pub(crate) use sigbus::install_sigbus_handler;
pub use sigbus::{sigbus_outside_regions, Outside};
pub(crate) use throttle::wait_for_room;

use crate::region;
use crate::stats::{inc, now_ns};
use crate::{Pager, PAGE_SIZE};

/// Outcome of [`handle_fault`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Handled {
    /// The address is in a region and was served (or the region is going away).
    Yes,
    /// Not one of ours.
    NotOurs,
}

/// Serve a fault at `addr`. `write` = the access was a write; `wake` = wake threads blocked
/// on the page (message mode).
pub(crate) fn handle_fault(addr: usize, write: bool, wake: bool) -> Handled {
    let _fault = uswap::FaultScope::enter();
    region::enter();
    // SAFETY: between enter and leave; r is not used after the leave below.
    let Some(r) = (unsafe { region::lookup(addr) }) else {
        region::leave();
        return Handled::NotOurs;
    };
    let p = r.pager();
    let t0 = if p.cfg.record_latency { now_ns() } else { 0 };
    inc(&p.counters.faults, 1);
    let pg = (addr - r.start) / PAGE_SIZE;
    resolve(p, r, pg, write, wake, Wait::Block);
    if p.cfg.record_latency {
        p.counters.record_latency(now_ns() - t0);
    }
    region::leave();
    Handled::Yes
}

/// Outcome of [`try_fault`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Try {
    /// Resolved (the faulting thread was woken).
    Done,
    /// Not now: retry after reading more messages (a page is held by another thread, an
    /// event is pending, or the charge is over the limit while reclaim catches up).
    Retry,
    /// No region holds the address.
    NotOurs,
}

/// Serve a fault message on the thread that reads the uffd, without waiting for anything
/// (see [`Wait::NoWait`]). `force`: map it even if the charge is over the limit (the fault
/// has waited long enough for reclaim). `wake`: wake the faulting thread (false during a fork
/// hold, whose round wakes everyone at its end: [`crate::forkhold`]).
pub(crate) fn try_fault(p: &Pager, addr: usize, write: bool, wp: bool, force: bool, wake: bool) -> Try {
    let _fault = uswap::FaultScope::enter();
    region::enter();
    // SAFETY: between enter and leave; r is not used after the leaves below.
    let Some(r) = (unsafe { region::lookup(addr) }) else {
        region::leave();
        return Try::NotOurs;
    };
    let t0 = if p.cfg.record_latency { now_ns() } else { 0 };
    let pg = (addr - r.start) / PAGE_SIZE;
    if throttle::throttled(p, r, pg, force, wp) {
        region::leave();
        return Try::Retry;
    }
    crate::uffd::AGAIN.with(|c| c.set(false));
    let done = resolve(p, r, pg, write, wake, Wait::NoWait { wp });
    let again = crate::uffd::AGAIN.with(|c| c.replace(false));
    if done && !again {
        inc(&p.counters.faults, 1);
        if p.cfg.record_latency {
            p.counters.record_latency(now_ns() - t0);
        }
    }
    region::leave();
    if done && !again {
        Try::Done
    } else {
        Try::Retry
    }
}

/// In a fork child: page `addr`, which the parent filled for it before its pager ran
/// (`forkserve`), is present; run the fault path on it so that its word agrees (the fill
/// finds the page present, frees its entry and publishes it resident).
pub(crate) fn settle_present(p: &Pager, addr: usize) {
    for _ in 0..1000 {
        if !matches!(try_fault(p, addr, true, false, true, false), Try::Retry) {
            return;
        }
        std::thread::yield_now();
    }
}
