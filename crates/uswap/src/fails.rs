//! Store failures by tier and kind: why a tier did not take a page it was offered.
//!
//! A tier's store can fail for reasons that say something about the limit: the filesystem
//! under a swap file is full (`ENOSPC`, `EDQUOT`), read-only or not ours to write (`EROFS`,
//! `EACCES`, `EPERM`), the device fails (`EIO` and every other error), or the swap file has no
//! free slot left (the tier's own size). The engine passes such a tier over for the next one
//! ([`crate::vswap::Engine::swap_out`]) and counts the failure here, so that whoever runs the
//! engine can say what happened, once, and the statistics say how often. A tier that merely
//! declines a page by policy (the pool's cap, data that does not compress) is not a failure.
//!
//! Locking: none; every counter is an atomic, written with relaxed adds (a failure is rare and
//! its count is a statistic, not a synchronization point).

use crate::error::TierError;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Why a store into a tier failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum FailKind {
    /// The filesystem has no space left (`ENOSPC`) or the user's quota is spent (`EDQUOT`).
    NoSpace,
    /// The file cannot be written: a read-only filesystem or no permission.
    ReadOnly,
    /// Any other I/O error (`EIO`, a short write, an error without an errno).
    Io,
    /// The tier has no free slot left (a swap file at its size).
    Full,
}

impl FailKind {
    /// Every kind, in the order of [`FailCounts::by_kind`].
    pub const ALL: [FailKind; 4] = [FailKind::NoSpace, FailKind::ReadOnly, FailKind::Io, FailKind::Full];

    /// The kind of a tier error, or `None` for one that is not a store failure (a rejection,
    /// corrupt data on a read, a bad handle).
    pub(crate) fn of(e: &TierError) -> Option<FailKind> {
        match e {
            TierError::Io { errno, .. } => Some(match *errno {
                libc::ENOSPC | libc::EDQUOT => FailKind::NoSpace,
                libc::EROFS | libc::EACCES | libc::EPERM => FailKind::ReadOnly,
                _ => FailKind::Io,
            }),
            TierError::Reject | TierError::Corrupt { .. } | TierError::BadHandle(_) => None,
        }
    }

    /// The name used in statistics (`nospace`, `readonly`, `io`, `full`).
    pub fn name(self) -> &'static str {
        match self {
            FailKind::NoSpace => "nospace",
            FailKind::ReadOnly => "readonly",
            FailKind::Io => "io",
            FailKind::Full => "full",
        }
    }
}

/// A tier's failure counters.
#[derive(Default)]
pub(crate) struct TierFails {
    counts: [AtomicU64; 4],
    /// The `errno` of the last failure that had one (0: none yet).
    errno: AtomicI32,
}

impl TierFails {
    /// Count one failure of `kind` (with the system's `errno`, 0 if none).
    pub(crate) fn record(&self, kind: FailKind, errno: i32) {
        self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
        if errno != 0 {
            self.errno.store(errno, Ordering::Relaxed);
        }
    }

    /// Count `e` if it is a store failure; returns its kind.
    pub(crate) fn record_error(&self, e: &TierError) -> Option<FailKind> {
        let k = FailKind::of(e)?;
        let errno = match e {
            TierError::Io { errno, .. } => *errno,
            _ => 0,
        };
        self.record(k, errno);
        Some(k)
    }

    /// The counters now.
    pub(crate) fn snapshot(&self) -> FailCounts {
        FailCounts {
            by_kind: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            errno: self.errno.load(Ordering::Relaxed),
        }
    }

    /// Set the counters to zero (a fork child's engine counts its own failures).
    pub(crate) fn reset(&self) {
        self.counts.iter().for_each(|c| c.store(0, Ordering::Relaxed));
        self.errno.store(0, Ordering::Relaxed);
    }
}

/// A snapshot of `TierFails`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FailCounts {
    /// Failures of each kind, indexed as [`FailKind::ALL`].
    pub by_kind: [u64; 4],
    /// The `errno` of the last failure that had one (0: none).
    pub errno: i32,
}

impl FailCounts {
    /// Failures of `kind`.
    pub fn get(&self, kind: FailKind) -> u64 {
        self.by_kind[kind as usize]
    }
    /// Failures of every kind.
    pub fn total(&self) -> u64 {
        self.by_kind.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_told_apart_by_errno() {
        let io = |errno| TierError::io("write", &std::io::Error::from_raw_os_error(errno));
        assert_eq!(FailKind::of(&io(libc::ENOSPC)), Some(FailKind::NoSpace));
        assert_eq!(FailKind::of(&io(libc::EDQUOT)), Some(FailKind::NoSpace));
        assert_eq!(FailKind::of(&io(libc::EROFS)), Some(FailKind::ReadOnly));
        assert_eq!(FailKind::of(&io(libc::EIO)), Some(FailKind::Io));
        assert_eq!(FailKind::of(&TierError::Io { op: "write", msg: "short".into(), errno: 0 }), Some(FailKind::Io));
        assert_eq!(FailKind::of(&TierError::Reject), None);
    }

    #[test]
    fn counts_by_kind_and_keeps_the_last_errno() {
        let f = TierFails::default();
        let io = |errno| TierError::io("write", &std::io::Error::from_raw_os_error(errno));
        assert_eq!(f.record_error(&io(libc::ENOSPC)), Some(FailKind::NoSpace));
        f.record(FailKind::Full, 0);
        assert_eq!(f.record_error(&TierError::Reject), None);
        let s = f.snapshot();
        assert_eq!((s.get(FailKind::NoSpace), s.get(FailKind::Full), s.total()), (1, 1, 2));
        assert_eq!(s.errno, libc::ENOSPC);
        f.reset();
        assert_eq!(f.snapshot(), FailCounts::default());
    }
}
