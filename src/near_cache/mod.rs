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
//! key after that check kills the entry through its link. A link lost to
//! eviction kills its entry the same way (never a stale read, only a
//! miss); an entry that goes removes its links. In Cluster the keys of
//! such a command share a slot, hence a node and its tracking connection.
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
//! worker contends on) and 1/64 of the byte budget, reads in flight
//! (pending entries) included; past it, keys are
//! evicted in CLOCK order (second chance: a key read since it was last
//! passed over stays), which approximates LRU without a write on a hit.
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::protocol::Reply;
use crate::stats::{Counter, Stats};

mod fields;
pub(crate) mod promise;
mod replies;
pub(crate) mod tracking;
mod voids;

pub(crate) use fields::{hash_read, HashRead};
pub(crate) use promise::{Pledge, Promise, SlotSet, Unpledged};

const SHARDS: usize = 64;
/// Commands a shard's doorkeeper remembers before it starts afresh.
const DOORKEEPER: usize = 4096;
/// What an entry costs beyond its bytes (maps, queue, reply headers).
const ENTRY_OVERHEAD: usize = 96;
/// What a link costs beyond its key (its ticket, the map and queue slot).
const LINK_OVERHEAD: usize = 48;

/// One database's near cache.
pub(crate) struct NearCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
    budget_per_shard: usize,
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
    /// The database's: `ext.near_cache.*`.
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Shard {
    keys: HashMap<Box<[u8]>, Keyed>,
    /// Keys in insertion order, for CLOCK eviction (a key may be listed
    /// after it left `keys`: skipped then).
    clock: VecDeque<Box<[u8]>>,
    bytes: usize,
    /// Hashes of commands missed once: the next miss fills.
    seen: HashSet<u64>,
}

/// The entries of one Redis key (one per command it owns), and the links
/// of commands of several keys kept under another of their keys.
#[derive(Default)]
struct Keyed {
    entries: Vec<Entry>,
    /// Tickets of entries kept under another key that read this one.
    links: Vec<u64>,
    /// Read since the clock hand last passed.
    referenced: AtomicBool,
    bytes: usize,
}

struct Entry {
    /// The command as sent (name and arguments, with their lengths).
    command: Box<[u8]>,
    /// Its keys other than the one it is kept under: each holds a link.
    others: Box<[Box<[u8]>]>,
    /// Taken by the miss that made it; its links carry it.
    ticket: u64,
    state: State,
}

enum State {
    /// A read is in flight; its reply may replace this if the entry (its
    /// ticket) is still here when it comes.
    Pending,
    Ready {
        reply: Reply,
        /// When its read was sent (its ticket taken).
        stored: Instant,
        /// When the first of its keys' TTLs ends (`None`: they have none).
        expires: Option<Instant>,
        /// From a master (a `master=true` read takes only those).
        from_master: bool,
        /// The promise of the server that gave it: served while it holds.
        pledge: Pledge,
    },
}

/// Links to remove once the shard lock is let go: the other keys of an
/// entry that went, and its ticket.
type Unlinks = Vec<(Box<[Box<[u8]>]>, u64)>;

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
    /// ticket (`None`: another read of it is in flight; do not keep).
    Miss(Option<Fill>),
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
            budget_per_shard: (budget / SHARDS).max(1),
            max_age,
            next_ticket: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            migrating: (0..crate::cluster::SLOTS)
                .map(|_| AtomicU16::new(0))
                .collect(),
            off: AtomicBool::new(false),
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
        match self.kept(key, command, master) {
            Kept::Reply(reply, ticket) if self.linked(others, ticket) => {
                self.stats.inc(Counter::NearCacheHits);
                return Lookup::Hit(reply);
            }
            // One of its other keys changed (or its link was evicted).
            Kept::Reply(_, ticket) => self.remove_entry(key, ticket),
            Kept::Pending | Kept::Unproven => {
                self.stats.inc(Counter::NearCacheMisses);
                return Lookup::Miss(None);
            }
            Kept::Nothing => {}
        }
        self.stats.inc(Counter::NearCacheMisses);
        self.admit(key, others, command)
    }

    /// What the shard of `key` holds for `command`; an entry too old, or
    /// a replica's for a master read, goes (fetched again, and replaced
    /// if this read may fill).
    fn kept(&self, key: &[u8], command: &[u8], master: bool) -> Kept {
        let now = Instant::now();
        let mut shard = self.shard(key).lock();
        let Some(keyed) = shard.keys.get_mut(key) else {
            return Kept::Nothing;
        };
        let Some(at) = keyed.entries.iter().position(|e| &*e.command == command) else {
            return Kept::Nothing;
        };
        let entry = &keyed.entries[at];
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
                keyed.referenced.store(true, Ordering::Relaxed);
                Kept::Reply(reply.clone(), entry.ticket)
            }
            State::Pending => Kept::Pending,
            State::Ready { .. } => {
                let removed = self.take_entry(&mut shard, key, at);
                drop(shard);
                self.unlink_all(removed);
                Kept::Nothing
            }
        }
    }

    /// A first miss of `command` only leaves its hash (the doorkeeper);
    /// the next takes a ticket: a pending entry under `key`, then a link
    /// under each of `others`, all before the command is sent.
    fn admit(&self, key: &[u8], others: &[&[u8]], command: &[u8]) -> Lookup {
        let mut shard = self.shard(key).lock();
        // Another read may have taken a ticket since this one looked.
        if shard
            .keys
            .get(key)
            .is_some_and(|keyed| keyed.entries.iter().any(|e| &*e.command == command))
        {
            return Lookup::Miss(None);
        }
        let hash = self.hasher.hash_one(command);
        if !shard.seen.remove(&hash) {
            if shard.seen.len() >= DOORKEEPER {
                shard.seen.clear();
            }
            shard.seen.insert(hash);
            return Lookup::Miss(None);
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let epoch = self.epoch.load(Ordering::Acquire);
        let others: Box<[Box<[u8]>]> = others.iter().map(|&other| other.into()).collect();
        let entry = Entry {
            command: command.into(),
            others: others.clone(),
            ticket,
            state: State::Pending,
        };
        let size = entry_size(key, &entry);
        let held = &mut *shard;
        if !held.keys.contains_key(key) {
            held.clock.push_back(key.into());
            compact_clock(held);
        }
        let keyed = held.keys.entry(key.into()).or_default();
        keyed.entries.push(entry);
        keyed.bytes += size;
        held.bytes += size;
        self.stats.inc(Counter::NearCacheEntries);
        self.stats.add(Counter::NearCacheBytes, size as u64);
        // A pending entry is memory too: with hundreds of reads in
        // flight, waiting for a fill to evict would go past the budget.
        let unlinks = self.evict(held);
        drop(shard);
        self.unlink_all(unlinks);
        for other in others.iter() {
            self.link(other, ticket);
        }
        Lookup::Miss(Some(Fill {
            key: key.into(),
            others,
            ticket,
            epoch,
            taken: Instant::now(),
        }))
    }

    /// The read of `fill` is over: keep `reply` (whether a master gave it,
    /// when its keys expire) if its entry is still there, pending, with
    /// every link, and no tracking changed since the ticket was taken.
    /// `None`: the read failed, or the server that answered is not
    /// tracked; the pending entry goes.
    pub(crate) fn complete(&self, fill: Fill, reply: Option<Filled<'_>>) {
        // Checked before the entry's own shard is locked (never two
        // locks): an invalidation of another key after this check kills
        // the entry through its link.
        let reply = reply.filter(|_| self.linked_boxed(&fill.others, fill.ticket));
        let mut guard = self.shard(&fill.key).lock();
        let shard = &mut *guard;
        let at = shard.keys.get(&fill.key).and_then(|keyed| {
            keyed
                .entries
                .iter()
                .position(|e| e.ticket == fill.ticket && matches!(e.state, State::Pending))
        });
        let Some(at) = at else {
            drop(guard);
            self.unlink(&fill.others, fill.ticket);
            return;
        };
        let keyed = shard.keys.get_mut(&fill.key).expect("just found");
        let keep = reply.filter(|filled| {
            !matches!(filled.reply, Reply::Error(_))
                && self.epoch.load(Ordering::Acquire) == fill.epoch
                && filled.slot.map_or(true, |slot| {
                    self.migrating[usize::from(slot)].load(Ordering::Acquire) == 0
                })
        });
        let old = entry_size(&fill.key, &keyed.entries[at]);
        // A reply past the shard's whole budget is not kept: keeping it
        // would evict every other key of the shard, for nothing.
        let keep = keep.filter(|filled| old + reply_size(filled.reply) <= self.budget_per_shard);
        let unlinks = match keep {
            Some(filled) => {
                keyed.entries[at].state = State::Ready {
                    reply: filled.reply.clone(),
                    stored: fill.taken,
                    expires: filled.expires,
                    from_master: filled.from_master,
                    pledge: filled.pledge,
                };
                let new = entry_size(&fill.key, &keyed.entries[at]);
                keyed.bytes = keyed.bytes + new - old;
                shard.bytes = shard.bytes + new - old;
                self.stats.add(Counter::NearCacheBytes, (new - old) as u64);
                self.evict(shard)
            }
            None => self.take_entry(shard, &fill.key, at),
        };
        drop(guard);
        self.unlink_all(unlinks);
    }

    /// Every link of `ticket` is still under `others` (marked read).
    fn linked(&self, others: &[&[u8]], ticket: u64) -> bool {
        others.iter().all(|other| self.has_link(other, ticket))
    }

    fn linked_boxed(&self, others: &[Box<[u8]>], ticket: u64) -> bool {
        others.iter().all(|other| self.has_link(other, ticket))
    }

    fn has_link(&self, key: &[u8], ticket: u64) -> bool {
        let shard = self.shard(key).lock();
        let Some(keyed) = shard.keys.get(key) else {
            return false;
        };
        let linked = keyed.links.contains(&ticket);
        if linked {
            keyed.referenced.store(true, Ordering::Relaxed);
        }
        linked
    }

    /// Under `key`: a link to the entry of `ticket`, kept under another
    /// key. Queued last for the clock, like a new key.
    fn link(&self, key: &[u8], ticket: u64) {
        let mut guard = self.shard(key).lock();
        let shard = &mut *guard;
        if !shard.keys.contains_key(key) {
            shard.clock.push_back(key.into());
            compact_clock(shard);
        }
        let keyed = shard.keys.entry(key.into()).or_default();
        keyed.links.push(ticket);
        let size = link_size(key);
        keyed.bytes += size;
        shard.bytes += size;
        self.stats.add(Counter::NearCacheBytes, size as u64);
        let unlinks = self.evict(shard);
        drop(guard);
        self.unlink_all(unlinks);
    }

    /// The links of `ticket` under `others` go (its entry went).
    fn unlink(&self, others: &[Box<[u8]>], ticket: u64) {
        for key in others.iter() {
            let mut shard = self.shard(key).lock();
            let shard = &mut *shard;
            let Some(keyed) = shard.keys.get_mut(key) else {
                continue;
            };
            let Some(at) = keyed.links.iter().position(|&t| t == ticket) else {
                continue;
            };
            keyed.links.swap_remove(at);
            let size = link_size(key);
            keyed.bytes -= size;
            shard.bytes -= size;
            self.stats.sub(Counter::NearCacheBytes, size as u64);
            if keyed.entries.is_empty() && keyed.links.is_empty() {
                shard.keys.remove(key);
            }
        }
    }

    fn unlink_all(&self, unlinks: Unlinks) {
        for (others, ticket) in unlinks {
            self.unlink(&others, ticket);
        }
    }

    /// The entry of `ticket` under `key` goes, if it is still there.
    fn remove_entry(&self, key: &[u8], ticket: u64) {
        let mut shard = self.shard(key).lock();
        let at = shard
            .keys
            .get(key)
            .and_then(|keyed| keyed.entries.iter().position(|e| e.ticket == ticket));
        let Some(at) = at else {
            return;
        };
        let unlinks = self.take_entry(&mut shard, key, at);
        drop(shard);
        self.unlink_all(unlinks);
    }

    /// Takes entry `at` of `key` out of `shard`; its links are returned,
    /// to remove once the lock is let go.
    fn take_entry(&self, shard: &mut Shard, key: &[u8], at: usize) -> Unlinks {
        let keyed = shard.keys.get_mut(key).expect("an entry of this key");
        let removed = keyed.entries.swap_remove(at);
        let size = entry_size(key, &removed);
        keyed.bytes -= size;
        shard.bytes -= size;
        if keyed.entries.is_empty() && keyed.links.is_empty() {
            shard.keys.remove(key);
        }
        self.stats.sub(Counter::NearCacheEntries, 1);
        self.stats.sub(Counter::NearCacheBytes, size as u64);
        if removed.others.is_empty() {
            Vec::new()
        } else {
            vec![(removed.others, removed.ticket)]
        }
    }

    /// Past the shard's budget: evicts keys in CLOCK order. The links of
    /// the entries evicted are returned, to remove once the lock is let
    /// go; the entries of links evicted are dead (a hit checks its links).
    fn evict(&self, shard: &mut Shard) -> Unlinks {
        let mut unlinks = Vec::new();
        // Each key is passed over at most twice (its second chance).
        let mut turns = shard.clock.len() * 2 + 1;
        while shard.bytes > self.budget_per_shard && turns > 0 {
            turns -= 1;
            let Some(key) = shard.clock.pop_front() else {
                break;
            };
            let Some(keyed) = shard.keys.get(&key) else {
                continue;
            };
            if keyed.referenced.swap(false, Ordering::Relaxed) {
                shard.clock.push_back(key);
                continue;
            }
            let keyed = shard.keys.remove(&key).expect("just found");
            shard.bytes -= keyed.bytes;
            self.stats.inc(Counter::NearCacheEvictions);
            self.forget(keyed, &mut unlinks);
        }
        unlinks
    }

    /// The counts of `keyed`, which left its shard; the links of its
    /// entries are added to `unlinks`.
    fn forget(&self, keyed: Keyed, unlinks: &mut Unlinks) {
        self.stats
            .sub(Counter::NearCacheEntries, keyed.entries.len() as u64);
        self.stats.sub(Counter::NearCacheBytes, keyed.bytes as u64);
        unlinks.extend(
            keyed
                .entries
                .into_iter()
                .filter(|entry| !entry.others.is_empty())
                .map(|entry| (entry.others, entry.ticket)),
        );
    }

    /// Redis says `key` changed: every entry of it goes, pending ones
    /// included (their reads may have been answered before the change),
    /// and every link under it (killing the entries of several keys that
    /// read it).
    pub(crate) fn invalidate(&self, key: &[u8]) {
        self.stats.inc(Counter::NearCacheInvalidations);
        let mut shard = self.shard(key).lock();
        if let Some(keyed) = shard.keys.remove(key) {
            shard.bytes -= keyed.bytes;
            drop(shard);
            let mut unlinks = Vec::new();
            self.forget(keyed, &mut unlinks);
            self.unlink_all(unlinks);
        }
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

/// Keys leave the map without leaving the clock queue (invalidations,
/// fills that keep nothing), and come back: past twice the keys kept (and
/// a margin), the queue is rebuilt with the keys still there, once each.
fn compact_clock(shard: &mut Shard) {
    if shard.clock.len() <= 2 * shard.keys.len() + 64 {
        return;
    }
    let keys = &shard.keys;
    let mut queued = HashSet::new();
    shard
        .clock
        .retain(|key| keys.contains_key(key) && queued.insert(key.clone()));
}

fn entry_size(key: &[u8], entry: &Entry) -> usize {
    let reply = match &entry.state {
        State::Pending => 0,
        State::Ready { reply, .. } => reply_size(reply),
    };
    let others: usize = entry
        .others
        .iter()
        .map(|other| std::mem::size_of::<Box<[u8]>>() + other.len())
        .sum();
    ENTRY_OVERHEAD + key.len() + entry.command.len() + others + reply
}

fn link_size(key: &[u8]) -> usize {
    LINK_OVERHEAD + key.len()
}

/// About what a reply takes in memory.
fn reply_size(reply: &Reply) -> usize {
    let mut size = 0;
    let mut stack = vec![reply];
    while let Some(reply) = stack.pop() {
        size += std::mem::size_of::<Reply>();
        match reply {
            Reply::String(bytes) => size += bytes.len(),
            Reply::Error(text) | Reply::Status(text) => size += text.len(),
            Reply::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    size
}

#[cfg(test)]
mod tests;
