//! Moving one object: its data into another tier (or, for a drain, out of one tier into the
//! next that takes it, else into memory), the entry unchanged. Every move either succeeds with
//! the exact bytes in the new place or leaves the object where it was.
//!
//! Locking: the mover takes the object into the swap cache (add-or-get, under the cluster
//! lock) and so owns the read; it loads and stores with no lock held, then finishes the folio
//! under the cluster lock (`finish.rs`) and frees the old location after.

use super::store::Cap;
use super::Engine;
use crate::error::{SwapError, TierError};
use crate::swap_cache::{AddMode, Lookup, RefBit};
use crate::swap_table::{SwapEntry, Word};
use crate::sync::Ordering;

/// What to do when a move meets a folio somebody else holds.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Busy {
    /// Wait for it.
    Wait,
    /// Pass it over.
    Skip,
}

/// Where a move sends the data.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Dest {
    /// Into this tier.
    Tier(usize),
    /// Out of this tier: into the first other online tier that accepts, else into memory.
    Drain(usize),
}

/// What a move did.
pub(super) enum Moved {
    /// Moved this many pages.
    Pages(u64),
    /// Already where it should be (or a zero page, stored nowhere).
    NotNeeded,
    /// Held by somebody else, passed over.
    Busy,
}

impl Engine {
    /// Move the object holding `entry` to `dest`.
    pub(super) fn move_object(&self, entry: SwapEntry, dest: Dest, busy: Busy) -> Result<Moved, SwapError> {
        let mut lf = loop {
            match self.cache.add_or_get(&self.space, entry, 0, AddMode::Move)? {
                Lookup::Zero | Lookup::Mixed => return Ok(Moved::NotNeeded),
                Lookup::Existing(f) => {
                    if busy == Busy::Skip {
                        return Ok(Moved::Busy);
                    }
                    f.wait_unlocked();
                }
                Lookup::Locked(lf) => break lf,
                Lookup::Added(mut lf) => {
                    let needed = match dest {
                        Dest::Tier(t) => usize::from(lf.backing().tier()) != t,
                        Dest::Drain(t) => usize::from(lf.backing().tier()) == t,
                    };
                    if !needed {
                        self.finish(lf, RefBit::Keep, None)?;
                        return Ok(Moved::NotNeeded);
                    }
                    if let Err(e) = self.fill(&mut lf) {
                        lf.set_error();
                        self.finish(lf, RefBit::Keep, None)?;
                        return Err(e);
                    }
                    break lf;
                }
            }
        };
        let old = lf.backing();
        let needed = match dest {
            Dest::Tier(t) => old.is_free() || usize::from(old.tier()) != t,
            Dest::Drain(t) => !old.is_free() && usize::from(old.tier()) == t,
        };
        if !needed {
            self.finish(lf, RefBit::Keep, None)?;
            return Ok(Moved::NotNeeded);
        }
        let (first, order) = lf.swap();
        let pages = 1u64 << order;
        let group = match self.space.load(first) {
            Ok(w) => w.group(),
            Err(e) => {
                self.finish(lf, RefBit::Keep, None)?;
                return Err(e);
            }
        };
        let stored = {
            let Some(data) = lf.data() else {
                self.finish(lf, RefBit::Keep, None)?;
                return Err(SwapError::Config("moving a folio that is not uptodate".into()));
            };
            match dest {
                Dest::Tier(t) => self.store_in(t, group, data, first, Cap::Keep).map(|s| (t, s)),
                Dest::Drain(from) => self.store_anywhere(group, data, first, Some(from)),
            }
        };
        match stored {
            Ok((t, s)) => {
                lf.set_backing(Word::stored(0, t as u8, s.handle, 0));
                let r = self.finish(lf, self.ref_on_move_into(t), None);
                self.tiers[t].inflight.fetch_sub(1, Ordering::SeqCst);
                r?;
                self.free_data(group, old, pages);
                Ok(Moved::Pages(pages))
            }
            Err(SwapError::Tier(TierError::Reject)) | Err(SwapError::GroupLimit(_))
                if matches!(dest, Dest::Drain(_)) =>
            {
                // No tier takes it: keep it in memory, as the only copy.
                lf.set_backing(Word::FREE);
                self.finish(lf, RefBit::Keep, None)?;
                self.free_data(group, old, pages);
                Ok(Moved::Pages(pages))
            }
            Err(e) => {
                self.finish(lf, RefBit::Keep, None)?;
                Err(e)
            }
        }
    }

    /// Move the data of the object holding `entry` into tier `to` (from wherever it is,
    /// including memory). Returns the pages moved (0 if it was already there, or is a zero
    /// page). The entry does not change; on error the data stays where it was.
    pub fn move_entry(&self, entry: SwapEntry, to: usize) -> Result<u64, SwapError> {
        self.check_range(entry, 1)?;
        self.tier(to)?;
        match self.move_object(entry, Dest::Tier(to), Busy::Wait)? {
            Moved::Pages(p) => Ok(p),
            _ => Ok(0),
        }
    }
}
