//! Fault resolution: what one page's fault does, by the page's word ([`resolve`]).
//!
//! A page found `NONE`, `SWAPPED` or `CACHED` is filled ([`super::fill`]); `CLEAN` is made
//! writable ([`unclean`]); `RESIDENT` (mapped as far as the pager knows) is made present
//! again, as zeros if the program dropped it; `UNMAPPED` is no longer the region's. A page
//! another thread holds (`BUSY`) is waited for (spin, then `sched_yield`, holding nothing)
//! and retried, except on the thread that reads the uffd, which never waits ([`Wait`]): there a
//! write to a page an eviction is copying takes the page back ([`take_back`]), and anything
//! else it cannot finish now is retried later. A fault taken inside this thread's own reclaim
//! (on the folio it is copying) maps zeros and reclaims nothing.
//!
//! Locking: the page-word claims described in [`crate::page`] (the fills' [`Claim`]s, the
//! CAS that holds a `RESIDENT` page while zeros are mapped, the take-back's CAS to
//! `BUSY_WANTED`); before a blocking fault, the direct reclaim of [`maybe_reclaim`].
//!
//! [`Claim`]: crate::page::Claim

use super::clean::unclean;
use super::fill::fill;
use super::map::wake_page;
use super::throttle::maybe_reclaim;
use crate::page::{kind, PageWord};
use crate::reclaim;
use crate::region::RegionInner;
use crate::stats::inc;
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// How a fault may wait.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The faulting thread itself (SIGBUS mode, tests): it may wait for a `BUSY` page and
    /// reclaim directly.
    Block,
    /// The thread that reads the uffd (thread fault mode): it must never wait for another
    /// thread (that thread may be blocked until this one reads its event), so a fault it
    /// cannot finish now is retried later. `wp`: the message was a write-protect fault (the
    /// page is present).
    NoWait {
        /// A write-protect fault.
        wp: bool,
    },
}

/// Resolve page `pg` of `r` (the fault path proper). Returns false when it could not finish
/// without waiting (only with [`Wait::NoWait`]; the caller retries later).
pub(crate) fn resolve(p: &Pager, r: &'static RegionInner, pg: usize, write: bool, wake: bool, wait: Wait) -> bool {
    // Not inside this thread's own reclaim: a fault there is on the folio it is copying (BUSY,
    // mapped as zeros below), and reclaiming again could re-enter the store it interrupted.
    if wait == Wait::Block && reclaim::IN_RECLAIM.with(|c| c.get()) == 0 {
        maybe_reclaim(p, (PAGE_SIZE << r.folio_order) as u64);
    }
    loop {
        let w = r.word(pg).load(Ordering::Acquire);
        match w.kind() {
            kind::UNMAPPED => {
                // Not the region's any more: the access retries elsewhere.
                wake_page(p, r, pg, wake);
                return true;
            }
            kind::RESIDENT => {
                // Mapped as far as we know: another thread just filled it, or the program
                // dropped it with madvise (then it reads as zero, as anonymous memory does).
                // Held while anything is mapped: between the load above and the ioctl an
                // eviction may take the page, drop it and publish it SWAPPED, and zeros mapped
                // then would stand in for the data it stored.
                inc(&p.counters.fault_spurious, 1);
                if r.word(pg).compare_exchange(w, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                    continue;
                }
                if p.uffd.zeropage(r.addr(pg), PAGE_SIZE, wake).is_err() && wait != Wait::Block {
                    r.word(pg).store(w, Ordering::Release);
                    return false;
                }
                if write {
                    // A write-protect bit left over (a clean page's, in a mixed eviction that
                    // failed): lift it, holding the page so no eviction protects it meanwhile
                    // (lifting an eviction's protection would let a write slip past its copy).
                    let _ = p.uffd.writeprotect(r.addr(pg), PAGE_SIZE, false, wake);
                }
                r.word(pg).store(w, Ordering::Release);
                wake_page(p, r, pg, wake);
                return true;
            }
            kind::CLEAN => {
                if unclean(p, r, pg, w, wake) {
                    return true;
                }
            }
            kind::BUSY => {
                if reclaim::IN_RECLAIM.with(|c| c.get()) > 0 {
                    // A fault inside our own reclaim on a page we hold (its copy): the program
                    // discarded it behind our back; it reads as zero (see zero_held). Nothing
                    // else drops a page this thread is copying, so if the page is not ours to
                    // take back, zeros are still right, and the access must not fault again.
                    if !zero_held(p, r, pg, w, wake) {
                        let _ = p.uffd.zeropage(r.addr(pg), PAGE_SIZE, wake);
                    }
                    return true;
                }
                if let Wait::NoWait { wp } = wait {
                    let copying = w == PageWord::BUSY_COPY || w == PageWord::BUSY_HANDED;
                    if wp && copying {
                        // A write to a page an eviction is copying: take it back rather than
                        // wait for the whole batch and then swap the page in again (the
                        // eviction gives the block up, see `take_back`), and let the write
                        // through; if the eviction got there first the fault waits as before.
                        let lifted =
                            take_back(r, pg, w, || p.uffd.writeprotect(r.addr(pg), PAGE_SIZE, false, wake).is_ok());
                        if lifted == Some(true) {
                            inc(&p.counters.reclaim_handed_back, 1);
                            return true;
                        }
                        inc(&p.counters.fault_waits, 1);
                        return false;
                    }
                    if !wp && copying {
                        // A missing-page fault on a page an eviction is copying: the program
                        // dropped it (madvise) under the copy. It reads as zero now, and the
                        // eviction copies (and stores) those zeros.
                        inc(&p.counters.fault_spurious, 1);
                        return zero_held(p, r, pg, w, wake);
                    }
                    inc(&p.counters.fault_waits, 1);
                    return false;
                }
                wait_not_busy(p, r, pg);
            }
            _ => {
                let again0 = crate::uffd::AGAIN.with(|c| c.get());
                if fill(p, r, pg, w, write, wake) {
                    return true;
                }
                if wait != Wait::Block && (crate::uffd::AGAIN.with(|c| c.get()) || again0) {
                    return false;
                }
            }
        }
        if wait != Wait::Block && crate::uffd::AGAIN.with(|c| c.get()) {
            return false;
        }
    }
}

/// Wait, holding nothing, until page `pg` of `r` is no longer `BUSY` (a blocking fault only).
fn wait_not_busy(p: &Pager, r: &RegionInner, pg: usize) {
    inc(&p.counters.fault_waits, 1);
    let mut backoff = crate::sys::Backoff::default();
    while r.word(pg).load(Ordering::Acquire).is_busy() {
        backoff.snooze();
    }
}

/// after an earlier take-back) and run `op` on it: CAS to `BUSY_WANTED`, `op`, then
/// `BUSY_HANDED`. From the CAS on, the eviction gives the page's block up instead of dropping
/// it (it turns pages from `BUSY_COPY` to `BUSY_DROP` only by CAS), and it publishes the block
/// only once the word is `BUSY_HANDED` (`reclaim::publish`), so `op`'s ioctl always acts on a
/// page this eviction still holds: run late, on a page republished and taken by another
/// eviction, an unprotect would let a write slip past that one's copy, and zeros could land
/// on a page it has just dropped. `None` if the page was not the eviction's to give (the CAS
/// failed).
fn take_back(r: &RegionInner, pg: usize, w: PageWord, op: impl FnOnce() -> bool) -> Option<bool> {
    let word = r.word(pg);
    if w == PageWord::BUSY_WANTED
        || word.compare_exchange(w, PageWord::BUSY_WANTED, Ordering::AcqRel, Ordering::Relaxed).is_err()
    {
        return None;
    }
    let done = op();
    word.store(PageWord::BUSY_HANDED, Ordering::Release);
    Some(done)
}

/// A missing-page fault on page `pg`, which an eviction holds (`w`): the program dropped it
/// where no call of ours saw (glibc's internal `madvise` of an exited thread's stack, a raw
/// system call) and the eviction's copy faulted on it, or the fault is an old one, read after
/// the page was filled. The page is taken back ([`take_back`]: the eviction gives the block
/// up) and zeros are mapped write-protected (a present page is left as it is), so the copy
/// can go on. False when the page was not the eviction's to give, or the copy failed (retry).
fn zero_held(p: &Pager, r: &RegionInner, pg: usize, w: PageWord, wake: bool) -> bool {
    take_back(r, pg, w, || {
        // SAFETY: the zero buffer holds one readable page; the page is taken back from the
        // eviction (an EEXIST, a present page, is reported as Filled::Exists, not an error).
        unsafe { p.uffd.copy(r.addr(pg), p.bufs.zero(), PAGE_SIZE, true, wake) }.is_ok()
    }) == Some(true)
}
