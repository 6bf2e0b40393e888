//! [ext] The near cache of a database (`redis.db(near_cache = bytes)`):
//! replies of read-only commands with keys, kept in the process and
//! served with no round trip until Redis says one of their keys changed.
//!
//! **How it stays exact.** Every server of the database has one tracking
//! connection of its own (`tracking.rs`): RESP3, `CLIENT TRACKING ON
//! BCAST`, so Redis pushes the name of every key any client changes on
//! that server (and a flush). Broadcast mode keeps the connections that
//! carry commands untouched (private, pooled and pipelined ones alike: no
//! tracking state on them, nothing that could cross from one request to
//! another), and serves replicas and cluster nodes the same way. An entry
//! is served only while the server that gave it still keeps that promise,
//! as its heartbeat proves (`promise.rs`: the rule, and what voids it).
//!
//! **The race of a read in flight.** A read sent before a write and
//! answered after its invalidation arrived would leave the old value for
//! good. So a miss first registers a *pending* entry (a ticket), then
//! sends the command; the reply replaces the pending entry only if that
//! same ticket is still there. An invalidation of the key removes the
//! entry whatever its state, so a reply that comes after it finds its
//! ticket gone and is not kept. An invalidation that came before the
//! ticket concerns a write that Redis applied before our read. The two
//! arrive on different connections, in either order; both orders are
//! covered.
//!
//! **Tracking lost.** A reply is kept only if its server's promise holds
//! when it comes (a [`Pledge`]), and no promise was voided since the
//! ticket was taken (`epoch`: the server that answers is not known
//! before). When a tracking connection breaks (or the server restarts,
//! flushes, changes role, or leaves the topology; or a cluster node stops
//! serving a slot), exactly the entries that promise covered go, and the
//! epoch moves, so no fill in flight completes; it fills again once
//! tracking is back.
//!
//! **Commands of several keys** (`MGET a b`, `SUNION`, `EXISTS a b`...).
//! The entry is kept under its first key (its *owner*), and each of its
//! other keys holds a *link*: the entry's ticket, in that key's own shard.
//! An invalidation of any key removes that key's entries and links, in
//! its shard alone, as for a command of one key; an entry whose link is
//! gone is dead. So a hit checks, after it found the entry, that every
//! link is still there (one shard lock at a time, never two held): an
//! invalidation that came before the hit began has removed one, and the
//! hit is a miss. The in-flight race is ruled out for every key the same
//! way as for one: the links are made before the command is sent (an
//! invalidation before that is of a write Redis applied before our read),
//! and the fill is kept only if its ticket is still pending and every
//! link is still there when the reply comes; an invalidation of another
//! key after that check kills the entry through its link. A link goes
//! only with its key (an invalidation) or with its entry (which removes
//! its links when it goes, evicted or not). In Cluster the keys of such
//! a command share a slot, hence a node and its tracking connection.
//!
//! **Expiry.** A key with a TTL expires in Redis without a write, and an
//! expired key Redis has not deleted yet sends no invalidation. So a fill
//! asks the `PTTL` of its keys right after its read (same ticket: a change in
//! between withdraws it) and the entry is served only until then. A key
//! gone by then (-2) may have expired after the read, and a replica or a
//! paused master deletes nothing, so no invalidation comes: the fill
//! reads again and keeps the reply only if the second read agrees
//! (`src/database/near.rs`).
//!
//! **Admission.** A command is kept at its second miss within a while (a
//! per-shard doorkeeper of hashes): reads of keys that are read once (a
//! write-heavy or scan-like load) cost nothing more than without a cache,
//! and the `PTTL` of a fill is paid only by keys read again.
//!
//! **Memory.** 64 shards, each with a lock of its own (no lock every
//! worker contends on), under one byte budget: every shard counts what it
//! takes (reads in flight, their pending entries, included) in one count
//! for the whole cache, and whatever grows it past the budget evicts,
//! once its own lock is let go, from the shards in turn, one entry each
//! in CLOCK order (second chance: an entry read since the hand last
//! passed stays), until it is back within the budget: about LRU over the
//! whole cache, without a write on a hit beyond the entry's own bit. Entries
//! go one by one, not their key's others with them: the fields of one
//! hash read field by field are kept as separate keys are
//! (`store.rs`: every lookup is constant-time per entry).
//!
//! **One entry** may take up to a 16th of the budget ([`ENTRY_SHARE`]:
//! its reply, command, keys and links): larger, it is not kept (counted in
//! `ext.near_cache.too_large`, said once), and evicts nothing. A 16th
//! keeps values of a few 64ths of the cache (a 20 KB value in 1 MiB), and
//! one such fill evicts at most a 16th of what others read; it also
//! bounds by how much fills that complete at once may pass the budget
//! before they evict (each at most a 16th).
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::protocol::Reply;
use crate::stats::{Counter, Stats};

mod bench;
mod fields;
pub(crate) mod promise;
mod replies;
mod store;
pub(crate) mod tracking;
mod voids;

pub use bench::NearCacheBench;
pub(crate) use fields::{hash_read, HashRead};
pub(crate) use promise::{Pledge, Promise, SlotSet, Unpledged};
use store::{Books, Shard, State, Unlinks};

const SHARDS: usize = 64;
/// One entry may take up to the budget over this (see "One entry" above).
const ENTRY_SHARE: usize = 16;

/// One database's near cache.
pub(crate) struct NearCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
    /// `near_cache`: the bytes of every shard together.
    budget: usize,
    /// The most one entry may take (a [`ENTRY_SHARE`] of the budget).
    entry_most: usize,
    books: Books,
    /// The shard the next eviction looks in: each in turn.
    hand: AtomicUsize,
    /// `near_cache_ttl`: no entry is served older than this.
    max_age: Option<Duration>,
    next_ticket: AtomicU64,
    /// Moves whenever a server's tracking starts or stops.
    epoch: AtomicU64,
    /// Cluster: how many nodes say each slot is being migrated (from or
    /// to them); nothing of such a slot is kept.
    migrating: Box<[AtomicU16]>,
    /// Off for good: a server refused what a fill needs (see
    /// [`NearCache::refused`]).
    off: AtomicBool,
    /// An entry too large to keep was said (once).
    too_large_said: AtomicBool,
    /// The database's: `ext.near_cache.*`.
    stats: Arc<Stats>,
}

/// What the writes a task queued in `MULTI` change, forgotten at its
/// `EXEC` or `DISCARD` (see [`NearCache::forget_written`]).
#[derive(Debug, Default)]
pub(crate) struct QueuedWrites {
    keys: Vec<Box<[u8]>>,
    everything: bool,
}

/// What a lookup found.
pub(crate) enum Lookup {
    Hit(Reply),
    /// Not there: send the command, then [`NearCache::complete`] with the
    /// ticket (`None`: another read of it is in flight, or its command
    /// and keys alone are past an entry's share; do not keep).
    Miss(Option<Fill>),
    /// Not there, and its command and keys alone are past an entry's
    /// share the first time: the same as `Miss(None)`, to be said.
    TooLarge(TooLarge),
}

/// An entry not kept for its size, the first time (to be said once).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TooLarge {
    /// What it would take.
    pub bytes: usize,
    /// What one entry may take.
    pub most: usize,
}

impl TooLarge {
    /// The log line, for a reply to `command` (its name).
    pub(crate) fn said(&self, command: &str) -> String {
        format!(
            "near cache: a reply to {command} is not kept: {} bytes, past the {} an entry \
             may take (a {ENTRY_SHARE}th of near_cache); counted in ext.near_cache.too_large, \
             said once",
            self.bytes, self.most
        )
    }
}

/// The reply of a fill, and what is known of it.
pub(crate) struct Filled<'r> {
    pub reply: &'r Reply,
    /// A master gave it.
    pub from_master: bool,
    /// When the first of its keys' TTLs ends (`None`: no TTL).
    pub expires: Option<Instant>,
    /// The promise of the server that gave it, as it held then.
    pub pledge: Pledge,
    /// Cluster: the slot of its keys.
    pub slot: Option<crate::cluster::HashSlot>,
}

/// A read in flight that may fill the cache.
pub(crate) struct Fill {
    key: Box<[u8]>,
    /// The hash of its command, where its entry is.
    hash: u64,
    others: Box<[Box<[u8]>]>,
    ticket: u64,
    epoch: u64,
    /// When the ticket was taken, before the read was sent: the age of
    /// what it keeps (`near_cache_ttl`) counts from then, not from its
    /// reply or the `PTTL` after.
    taken: Instant,
}

/// What a shard holds for a command.
enum Kept {
    Reply(Reply, u64),
    Pending,
    /// Kept, but its server's tracking link has not been heard from
    /// lately: not served, kept for when it is.
    Unproven,
    Nothing,
}

impl NearCache {
    pub(crate) fn new(budget: usize, max_age: Option<Duration>, stats: Arc<Stats>) -> NearCache {
        NearCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            budget,
            entry_most: budget / ENTRY_SHARE,
            books: Books::new(stats.clone()),
            hand: AtomicUsize::new(0),
            max_age,
            next_ticket: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            migrating: (0..crate::cluster::SLOTS)
                .map(|_| AtomicU16::new(0))
                .collect(),
            off: AtomicBool::new(false),
            too_large_said: AtomicBool::new(false),
            stats,
        }
    }

    /// Nothing is served or filled once [`refused`](Self::refused).
    pub(crate) fn works(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }

    /// A server refused what a fill needs (its `PTTL`: an ACL user
    /// without it, the command renamed away), so no entry can ever be
    /// kept: counted, and the cache goes off, emptied. True the first
    /// time, for the caller to say why once.
    pub(crate) fn refused(&self) -> bool {
        self.stats.inc(Counter::NearCacheRefused);
        let first = !self.off.swap(true, Ordering::AcqRel);
        if first {
            self.clear();
        }
        first
    }

    /// A server cannot vouch for what it answers (it refused what its
    /// tracking connection needs, or a balancer behind its location sends
    /// reads elsewhere): counted; those replies are never kept, others'
    /// are.
    pub(crate) fn count_refused(&self) {
        self.stats.inc(Counter::NearCacheRefused);
    }

    /// An entry of `bytes` is not kept for its size: counted; what to say
    /// the first time.
    fn too_large(&self, bytes: usize) -> Option<TooLarge> {
        self.stats.inc(Counter::NearCacheTooLarge);
        (!self.too_large_said.swap(true, Ordering::Relaxed)).then_some(TooLarge {
            bytes,
            most: self.entry_most,
        })
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// The reply kept for `command` (of the distinct keys `keys`, in
    /// order), or a ticket to fill it. `master`: only a reply a master
    /// gave will do.
    pub(crate) fn lookup(&self, keys: &[&[u8]], command: &[u8], master: bool) -> Lookup {
        let Some((&key, others)) = keys.split_first() else {
            return Lookup::Miss(None);
        };
        let hash = self.hasher.hash_one(command);
        match self.kept(key, hash, command, master) {
            Kept::Reply(reply, ticket) if self.linked(others, ticket) => {
                self.stats.inc(Counter::NearCacheHits);
                return Lookup::Hit(reply);
            }
            // One of its other keys changed.
            Kept::Reply(_, ticket) => self.remove_entry(key, hash, ticket),
            Kept::Pending | Kept::Unproven => {
                self.stats.inc(Counter::NearCacheMisses);
                return Lookup::Miss(None);
            }
            Kept::Nothing => {}
        }
        self.stats.inc(Counter::NearCacheMisses);
        self.admit(key, others, hash, command)
    }

    /// What the shard of `key` holds for `command` (of hash `hash`); an
    /// entry too old, or a replica's for a master read, goes (fetched
    /// again, and replaced if this read may fill).
    fn kept(&self, key: &[u8], hash: u64, command: &[u8], master: bool) -> Kept {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        let Some(entry) = shard.find(hash, key, command) else {
            return Kept::Nothing;
        };
        match &entry.state {
            State::Ready {
                reply,
                stored,
                expires,
                from_master,
                pledge,
            } if (*from_master || !master)
                && expires.map_or(true, |at| now < at)
                && self
                    .max_age
                    .map_or(true, |max| now.saturating_duration_since(*stored) <= max)
                && !pledge.voided() =>
            {
                if !pledge.holds(now) {
                    return Kept::Unproven;
                }
                let kept = Kept::Reply(reply.clone(), entry.ticket);
                entry.referenced = true;
                kept
            }
            State::Pending => Kept::Pending,
            State::Ready { .. } => {
                let unlinks = shard.remove(hash, None, &self.books);
                drop(shard);
                self.unlink_all(unlinks);
                Kept::Nothing
            }
        }
    }

    /// A first miss of `command` only leaves its hash (the doorkeeper);
    /// the next takes a ticket: a pending entry under `key`, then a link
    /// under each of `others`, all before the command is sent.
    fn admit(&self, key: &[u8], others: &[&[u8]], hash: u64, command: &[u8]) -> Lookup {
        let mut shard = self.shard(key).lock();
        // Another read may have taken a ticket since this one looked.
        if shard.holds(hash) || !shard.admits(hash) {
            return Lookup::Miss(None);
        }
        let bytes = store::pending_bound(command, others);
        if bytes > self.entry_most {
            drop(shard);
            return self
                .too_large(bytes)
                .map_or(Lookup::Miss(None), Lookup::TooLarge);
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let epoch = self.epoch.load(Ordering::Acquire);
        let others: Box<[Box<[u8]>]> = others.iter().map(|&other| other.into()).collect();
        shard.insert(hash, key, command, others.clone(), ticket, &self.books);
        drop(shard);
        for other in others.iter() {
            self.shard(other).lock().link(other, ticket, &self.books);
        }
        // A pending entry is memory too: with hundreds of reads in
        // flight, waiting for a fill to evict would go past the budget.
        self.make_room();
        Lookup::Miss(Some(Fill {
            key: key.into(),
            hash,
            others,
            ticket,
            epoch,
            taken: Instant::now(),
        }))
    }

    /// The read of `fill` is over: keep `reply` (whether a master gave it,
    /// when its keys expire) if its entry is still there, pending, with
    /// every link, no tracking changed since the ticket was taken, and it
    /// is within an entry's share. `None`: the read failed, or the server
    /// that answered is not tracked; the pending entry goes. `Some` the
    /// first time a reply is not kept for its size, to be said.
    pub(crate) fn complete(&self, fill: Fill, reply: Option<Filled<'_>>) -> Option<TooLarge> {
        // Checked before the entry's own shard is locked (never two
        // locks): an invalidation of another key after this check kills
        // the entry through its link.
        let reply = reply.filter(|_| self.linked(&fill.others, fill.ticket));
        let mut shard = self.shard(&fill.key).lock();
        let Some(entry) = shard.pending(fill.hash, fill.ticket) else {
            drop(shard);
            self.unlink(&fill.others, fill.ticket);
            return None;
        };
        let keep = reply.filter(|filled| {
            !matches!(filled.reply, Reply::Error(_))
                && self.epoch.load(Ordering::Acquire) == fill.epoch
                && filled.slot.map_or(true, |slot| {
                    self.migrating[usize::from(slot)].load(Ordering::Acquire) == 0
                })
        });
        // Past an entry's share it is not kept, and evicts nothing.
        let mut too_large = None;
        let keep = keep.filter(|filled| {
            let bytes = store::entry_bound(entry, filled.reply);
            let fits = bytes <= self.entry_most;
            if !fits {
                too_large = Some(bytes);
            }
            fits
        });
        let unlinks = match keep {
            Some(filled) => {
                let state = State::Ready {
                    reply: filled.reply.clone(),
                    stored: fill.taken,
                    expires: filled.expires,
                    from_master: filled.from_master,
                    pledge: filled.pledge,
                };
                shard.fill(fill.hash, state, &self.books);
                Vec::new()
            }
            None => shard.remove(fill.hash, Some(fill.ticket), &self.books),
        };
        drop(shard);
        self.unlink_all(unlinks);
        self.make_room();
        too_large.and_then(|bytes| self.too_large(bytes))
    }

    /// Past the budget: evicts from the shards in turn, one entry each
    /// (CLOCK), until back within it, one shard lock at a time; the links
    /// of those entries go too. Stops after two rounds that evicted
    /// nothing (the first clears every entry's bit): only reads in flight
    /// of other workers, and their links, may be left past the budget
    /// then, until they evict.
    fn make_room(&self) {
        let mut idle = 0;
        while self.books.bytes() > self.budget && idle < 2 * SHARDS {
            let at = self.hand.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let evicted = self.shards[at].lock().evict_one(&self.books);
            match evicted {
                Some(unlinks) => {
                    idle = 0;
                    self.stats.inc(Counter::NearCacheEvictions);
                    self.unlink_all(unlinks);
                }
                None => idle += 1,
            }
        }
    }

    /// Every link of `ticket` is still under `others`.
    fn linked<K: AsRef<[u8]>>(&self, others: &[K], ticket: u64) -> bool {
        others.iter().all(|other| {
            let other = other.as_ref();
            self.shard(other).lock().has_link(other, ticket)
        })
    }

    /// The links of `ticket` under `others` go (its entry went).
    fn unlink(&self, others: &[Box<[u8]>], ticket: u64) {
        for key in others.iter() {
            self.shard(key).lock().unlink(key, ticket, &self.books);
        }
    }

    fn unlink_all(&self, unlinks: Unlinks) {
        for (others, ticket) in unlinks {
            self.unlink(&others, ticket);
        }
    }

    /// The entry of `ticket` under `key` (its command's hash `hash`)
    /// goes, if it is still there.
    fn remove_entry(&self, key: &[u8], hash: u64, ticket: u64) {
        let unlinks = self
            .shard(key)
            .lock()
            .remove(hash, Some(ticket), &self.books);
        self.unlink_all(unlinks);
    }

    /// Redis says `key` changed: every entry of it goes, pending ones
    /// included (their reads may have been answered before the change),
    /// and every link under it (killing the entries of several keys that
    /// read it).
    pub(crate) fn invalidate(&self, key: &[u8]) {
        self.stats.inc(Counter::NearCacheInvalidations);
        let unlinks = self.shard(key).lock().invalidate(key, &self.books);
        self.unlink_all(unlinks);
    }

    /// A command of ours that may have written `keys` (`Some(empty)`: a
    /// write without keys, `FLUSHALL`) was answered (or failed): they are
    /// forgotten now, so that the task's next read (and every other
    /// one) sees the write without waiting for Redis's invalidation,
    /// which travels on another connection. Queued in a transaction
    /// (`queued`), they are forgotten at its end instead: before it
    /// runs, another task could fill them again. `ended`: the command
    /// ended the task's transaction (`EXEC`, `DISCARD`).
    pub(crate) fn forget_written(
        &self,
        keys: Option<Vec<&[u8]>>,
        queued: Option<&mut QueuedWrites>,
        ended: Option<&mut QueuedWrites>,
    ) {
        if let Some(keys) = keys {
            match queued {
                Some(queue) => {
                    queue.everything |= keys.is_empty();
                    queue.keys.extend(keys.into_iter().map(Box::from));
                }
                None if keys.is_empty() => self.clear(),
                None => keys.into_iter().for_each(|key| self.invalidate(key)),
            }
        }
        if let Some(queue) = ended {
            if std::mem::take(&mut queue.everything) {
                self.clear();
            }
            for key in queue.keys.drain(..) {
                self.invalidate(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests;
