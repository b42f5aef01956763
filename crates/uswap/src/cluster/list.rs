//! Intrusive index lists of clusters (the kernel's `list_head` in `swap_cluster_info`).
//!
//! Every cluster is on at most one list. The links are two `u32` arrays indexed by cluster
//! number plus the id of the list the cluster is on, so the lists cost 10 bytes per cluster
//! and no allocation after creation. The arrays hold every value one up (`c + 1`, `id + 1`),
//! so that zero means "no cluster" and "on no list": they lie in fresh mappings
//! ([`PageVec::zeroed`]), and the pages of the clusters a space never uses are never written
//! (a 64 GiB virtual space has 32 768 clusters, 320 KiB of links, in every process).
//!
//! Locking: none here. The whole structure lives behind the space's list lock
//! (`SwapSpace::lists`).

use crate::page_heap::PageVec;

/// "No cluster".
pub(super) const NIL: u32 = u32::MAX;
/// "On no list".
pub(super) const OFF: u16 = u16::MAX;

#[derive(Copy, Clone)]
struct Head {
    first: u32,
    last: u32,
    len: u32,
}

/// An array of links stored one up (see the module's paragraph): zero reads as `u32::MAX`
/// (`NIL`) or `u16::MAX` (`OFF`).
struct OneUp<T: Copy>(PageVec<T>);

impl OneUp<u32> {
    fn get(&self, i: usize) -> u32 {
        self.0[i].wrapping_sub(1)
    }
    fn set(&mut self, i: usize, v: u32) {
        self.0[i] = v.wrapping_add(1);
    }
}

impl OneUp<u16> {
    fn get(&self, i: usize) -> u16 {
        self.0[i].wrapping_sub(1)
    }
    fn set(&mut self, i: usize, v: u16) {
        self.0[i] = v.wrapping_add(1);
    }
}

/// A fixed set of lists over a fixed set of clusters.
pub(super) struct Lists {
    heads: Box<[Head]>,
    next: OneUp<u32>,
    prev: OneUp<u32>,
    on: OneUp<u16>,
}

impl Lists {
    /// `nr_lists` empty lists over `nr_clusters` clusters that are on no list.
    pub(super) fn new(nr_lists: usize, nr_clusters: usize) -> Self {
        Lists {
            heads: vec![Head { first: NIL, last: NIL, len: 0 }; nr_lists].into_boxed_slice(),
            next: OneUp(PageVec::zeroed(nr_clusters)),
            prev: OneUp(PageVec::zeroed(nr_clusters)),
            on: OneUp(PageVec::zeroed(nr_clusters)),
        }
    }

    /// Bytes of the links of the first `clusters` clusters (the pages of the others are
    /// written only when those clusters are used) and of the list heads.
    pub(super) fn bytes(&self, clusters: usize) -> usize {
        std::mem::size_of_val(&*self.heads) + clusters.min(self.on.0.len()) * (4 + 4 + 2)
    }

    /// Number of clusters on list `id`.
    pub(super) fn len(&self, id: u16) -> usize {
        self.heads[id as usize].len as usize
    }

    /// First cluster of list `id`, or `NIL`.
    pub(super) fn first(&self, id: u16) -> u32 {
        self.heads[id as usize].first
    }

    /// The cluster after `c` on its list, or `NIL`.
    pub(super) fn next_of(&self, c: u32) -> u32 {
        self.next.get(c as usize)
    }

    /// The clusters on list `id`, in order (allocates: not for the fault path).
    pub(super) fn members(&self, id: u16) -> Vec<usize> {
        let mut v = Vec::with_capacity(self.len(id));
        let mut c = self.first(id);
        while c != NIL {
            v.push(c as usize);
            c = self.next_of(c);
        }
        v
    }

    /// The list id `c` is on: a real list, `OFF`, or a tag set by [`Lists::tag`].
    pub(super) fn on(&self, c: u32) -> u16 {
        self.on.get(c as usize)
    }

    /// Take `c` off whatever list it is on (no-op when it is on none).
    pub(super) fn remove(&mut self, c: u32) {
        let c = c as usize;
        let id = self.on.get(c);
        if id == OFF {
            return;
        }
        self.on.set(c, OFF);
        if id as usize >= self.heads.len() {
            // A tag, not a list: nothing is linked.
            return;
        }
        let (p, n) = (self.prev.get(c), self.next.get(c));
        let h = &mut self.heads[id as usize];
        if p == NIL {
            h.first = n;
        } else {
            self.next.set(p as usize, n);
        }
        if n == NIL {
            h.last = p;
        } else {
            self.prev.set(n as usize, p);
        }
        h.len -= 1;
        self.next.set(c, NIL);
        self.prev.set(c, NIL);
    }

    /// Put `c` at the tail of list `id`, taking it off its current list first.
    pub(super) fn move_tail(&mut self, c: u32, id: u16) {
        self.remove(c);
        let h = &mut self.heads[id as usize];
        let last = h.last;
        self.prev.set(c as usize, last);
        self.next.set(c as usize, NIL);
        if last == NIL {
            h.first = c;
        } else {
            self.next.set(last as usize, c);
        }
        h.last = c;
        h.len += 1;
        self.on.set(c as usize, id);
    }

    /// Take `c` off its list and mark it with `tag` (an id past the last list), for a cluster
    /// that is owned by someone outside the lists (the discard worker).
    pub(super) fn tag(&mut self, c: u32, tag: u16) {
        debug_assert!(tag as usize >= self.heads.len());
        self.remove(c);
        self.on.set(c as usize, tag);
    }

    /// Check the links: every list is a consistent doubly linked chain of its members, with
    /// the right length, and every cluster's `on` names the list it was found on.
    pub(super) fn check(&self) -> Result<(), String> {
        let nr = self.on.0.len();
        let mut seen = vec![OFF; nr];
        for (id, h) in self.heads.iter().enumerate() {
            let mut c = h.first;
            let mut prev = NIL;
            let mut n = 0u32;
            while c != NIL {
                let ci = c as usize;
                if ci >= nr {
                    return Err(format!("list {id}: bad link {c}"));
                }
                if seen[ci] != OFF {
                    return Err(format!("cluster {c} is on lists {} and {id}", seen[ci]));
                }
                seen[ci] = id as u16;
                if self.prev.get(ci) != prev {
                    return Err(format!("list {id}: cluster {c} prev {} != {prev}", self.prev.get(ci)));
                }
                if self.on.get(ci) != id as u16 {
                    return Err(format!("list {id}: cluster {c} says it is on {}", self.on.get(ci)));
                }
                prev = c;
                c = self.next.get(ci);
                n += 1;
            }
            if h.last != prev || h.len != n {
                return Err(format!("list {id}: last {} len {} but walked to {prev} with {n}", h.last, h.len));
            }
        }
        for (c, &seen) in seen.iter().enumerate() {
            let id = self.on.get(c);
            if (id as usize) < self.heads.len() && seen != id {
                return Err(format!("cluster {c} says it is on list {id} but is not linked there"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_and_remove_keep_links() {
        let mut l = Lists::new(3, 5);
        for c in 0..5 {
            l.move_tail(c, 0);
        }
        l.move_tail(2, 1);
        l.move_tail(0, 1);
        l.remove(4);
        l.tag(3, 7);
        l.check().unwrap();
        assert_eq!((l.len(0), l.len(1), l.len(2)), (1, 2, 0));
        assert_eq!(l.first(1), 2);
        assert_eq!(l.next_of(2), 0);
        assert_eq!(l.on(3), 7);
        assert_eq!(l.on(4), OFF);
        l.move_tail(3, 2);
        l.check().unwrap();
        assert_eq!(l.first(2), 3);
    }
}
