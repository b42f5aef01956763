//! The tiers the engine holds: each one's backend, kind, online flag, in-flight stores and
//! store failures; the accessors that report on them; and the passes a backend runs over its
//! own data (compaction, recompression) through the engine's relocate hook, idle marks and
//! fork sharing.
//!
//! Locking: the accessors take none (atomics). The relocate hook takes the cluster lock of the
//! object it rewrites; a backend calls it from its compaction or recompression pass without
//! holding a lock that its own `free` takes (cluster lock -> backend lock), and it refuses an
//! object in the swap cache, where a reader may be loading the old handle.

use super::Engine;
use crate::backend::{Backend, TierKind, Usage};
use crate::error::SwapError;
use crate::fails::{FailCounts, TierFails};
use crate::swap_cache::object_extent;
use crate::swap_table::{Kind, SwapEntry, Word, PAYLOAD_MAX, TIER_MAX};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One tier of the engine.
pub(super) struct Tier {
    /// Where its data lives.
    pub(super) backend: Arc<dyn Backend>,
    /// Its backend's kind (which charge its data takes).
    pub(super) kind: TierKind,
    /// Whether it takes new stores (a drain takes it offline).
    pub(super) online: AtomicBool,
    /// Stores that chose this tier and have not yet published their words.
    pub(super) inflight: AtomicU64,
    /// Its store failures ([`crate::fails`]).
    pub(super) fails: TierFails,
}

impl Tier {
    /// A tier over `backend`, online, with nothing in flight.
    pub(super) fn new(backend: Arc<dyn Backend>) -> Tier {
        Tier {
            kind: backend.kind(),
            backend,
            online: AtomicBool::new(true),
            inflight: AtomicU64::new(0),
            fails: TierFails::default(),
        }
    }
}

impl Engine {
    /// Tier `t`, or a `Config` error naming it.
    pub(super) fn tier(&self, t: usize) -> Result<&Tier, SwapError> {
        self.tiers.get(t).ok_or_else(|| SwapError::Config(format!("no tier {t}")))
    }
    /// Occupancy of tier `t`.
    pub fn tier_usage(&self, t: usize) -> Result<Usage, SwapError> {
        Ok(self.tier(t)?.backend.usage())
    }
    /// Store failures of tier `t` so far ([`crate::fails`]).
    pub fn tier_fails(&self, t: usize) -> Result<FailCounts, SwapError> {
        Ok(self.tier(t)?.fails.snapshot())
    }
    /// The name of tier `t` (`zpool:lz4`, `file:/var/tmp/...`).
    pub fn tier_name(&self, t: usize) -> Result<String, SwapError> {
        Ok(self.tier(t)?.backend.name().to_string())
    }
    /// Memory the tiers hold in this process (see [`Backend::ram_bytes`]): the RSS of the
    /// compressed pool, fragmentation and spare memory included.
    pub fn ram_bytes(&self) -> u64 {
        self.tiers.iter().map(|t| t.backend.ram_bytes()).sum()
    }
    /// Whether tier `t` takes new stores.
    pub fn tier_online(&self, t: usize) -> Result<bool, SwapError> {
        Ok(self.tier(t)?.online.load(Ordering::SeqCst))
    }
    /// Put tier `t` back online (after a drain) or take it offline without draining.
    pub fn set_tier_online(&self, t: usize, online: bool) -> Result<(), SwapError> {
        self.tier(t)?.online.store(online, Ordering::SeqCst);
        Ok(())
    }

    /// The relocate hook for tier `t` (see [`crate::backend::Relocate`]): the backend moved the
    /// object of `owner` from handle `old` to `new`. Takes the new handle (true) if the
    /// object's words still name `old`; refuses (false) otherwise, including while the object
    /// is in the swap cache, where a reader may be loading from `old`.
    pub(crate) fn relocate(&self, t: usize, owner: SwapEntry, old: u64, new: u64) -> bool {
        if new > PAYLOAD_MAX || t > usize::from(TIER_MAX) {
            return false;
        }
        let Ok(mut g) = self.space.lock_cluster(owner) else { return false };
        let off = owner.offset();
        let w = g.word(off);
        if w.kind() != Kind::Stored || usize::from(w.tier()) != t || w.payload() != old {
            return false;
        }
        let (s, m) = object_extent(&g, off);
        let loc = Word::stored(0, t as u8, new, 0);
        for i in s..s + (1 << m) {
            let w = g.word(i);
            if g.set(i, w.with_location_of(loc)).is_err() {
                return false;
            }
        }
        true
    }

    /// Compact tier `t`, rewriting the words of every object it moves. Returns bytes reclaimed.
    pub fn compact_tier(&self, t: usize) -> Result<u64, SwapError> {
        let tier = self.tier(t)?;
        Ok(tier.backend.compact(&mut |owner, old, new| self.relocate(t, owner, old, new)))
    }

    /// Recompress tier `t`'s objects idle since the last [`Engine::mark_idle_tier`] (or all,
    /// `idle_only` false) with its secondary algorithm, rewriting the words of every object it
    /// moves (see [`Backend::recompress`]). Not for the fault path: a background or explicit pass.
    pub fn recompress_tier(&self, t: usize, idle_only: bool) -> Result<crate::backend::Recompressed, SwapError> {
        let tier = self.tier(t)?;
        Ok(tier.backend.recompress(idle_only, &mut |owner, old, new| self.relocate(t, owner, old, new)))
    }

    /// One step of sharing storage with `fork` relatives, taken by every tier
    /// ([`Backend::fork_share`]; all are asked, no short circuit). False if some tier said
    /// false.
    pub fn fork_share(&self, step: crate::backend::ShareStep) -> bool {
        let ok = self.tiers.iter().filter(|t| !t.backend.fork_share(step)).count() == 0;
        if matches!(step, crate::backend::ShareStep::Child { .. }) {
            // The child's statistics start at the fork (the parent's stay with the parent).
            self.stats.reset();
            self.tiers.iter().for_each(|t| t.fails.reset());
        }
        ok
    }

    /// Mark everything in tier `t` idle (zram's `echo all > idle`, see [`Backend::mark_idle`]).
    pub fn mark_idle_tier(&self, t: usize) -> Result<(), SwapError> {
        self.tier(t)?.backend.mark_idle();
        Ok(())
    }
}
