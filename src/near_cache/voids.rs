//! What drops entries in bulk: a server's promise voided, the slots a
//! cluster node lost or moves, our own `FLUSHALL`. Each moves the epoch
//! first, so a fill in flight that passed a shard already is refused at
//! its completion (it checks the epoch under the shard lock).
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{NearCache, Promise, SlotSet, State};

impl NearCache {
    /// `promise` was made, broken or renewed (its generation moved):
    /// what its server gave goes, and no read in flight may fill (its
    /// server is not known until it is answered).
    pub(crate) fn voided(&self, promise: &Arc<Promise>) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sweep(|entry_promise, _| Arc::ptr_eq(entry_promise, promise));
    }

    /// A cluster node no longer serves `lost` (a slot moved, taken over,
    /// or migrating): what it gave of them goes, and no read in flight may
    /// fill. Its promise no longer covers them (cleared first), so a
    /// fill that takes its pledge from now on is not kept.
    pub(crate) fn slots_lost(&self, promise: &Arc<Promise>, lost: &SlotSet) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sweep(|entry_promise, key| {
            Arc::ptr_eq(entry_promise, promise) && lost.contains(crate::cluster::key_slot(key))
        });
    }

    /// A cluster node was migrating `before` and now `now` (slots moved
    /// from or to it): the slots it begins to move leave the cache, from
    /// whichever node, and are not kept until no node moves them.
    pub(crate) fn set_migrating(&self, before: &SlotSet, now: &SlotSet) {
        if before == now {
            return;
        }
        let mut began = SlotSet::default();
        for slot in 0..crate::cluster::SLOTS as u16 {
            let counter = &self.migrating[usize::from(slot)];
            match (before.contains(slot), now.contains(slot)) {
                (false, true) => {
                    counter.fetch_add(1, Ordering::AcqRel);
                    began.insert(slot);
                }
                (true, false) => {
                    counter.fetch_sub(1, Ordering::AcqRel);
                }
                _ => {}
            }
        }
        if !began.is_empty() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.sweep(|_, key| began.contains(crate::cluster::key_slot(key)));
        }
    }

    /// Removes every ready entry whose promise and key `picks` picks; the
    /// epoch moved first, so a fill in flight that passed the shard
    /// already is refused at its completion.
    fn sweep(&self, picks: impl Fn(&Arc<Promise>, &[u8]) -> bool) {
        for shard in self.shards.iter() {
            let unlinks = shard.lock().remove_where(
                |entry| match &entry.state {
                    State::Ready { pledge, .. } => picks(&pledge.promise, &entry.key),
                    State::Pending => false,
                },
                &self.books,
            );
            self.unlink_all(unlinks);
        }
    }

    /// Everything goes (our own `FLUSHALL`), and no read in flight may
    /// fill.
    pub(crate) fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for shard in self.shards.iter() {
            shard.lock().clear(&self.books);
        }
    }
}
