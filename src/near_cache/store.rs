//! One shard of a near cache, plain data under the shard's lock: its
//! entries by command, its keys with their entries and links, its CLOCK
//! queue and its doorkeeper. Every byte it takes or gives back is
//! counted in the whole cache's [`Books`] too, against the budget (the
//! caller evicts, shard by shard, when they are past it).
//!
//! Each operation is constant-time per entry: an entry is found by the
//! hash of its command, and a key lists its entries and links in sets, so
//! that a key of thousands of entries (a hash read field by field) costs
//! a lookup no more than a key of one.
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::Pledge;
use crate::protocol::Reply;
use crate::stats::{Counter, Stats};

/// Commands a shard's doorkeeper remembers before it starts afresh.
const DOORKEEPER: usize = 4096;
/// What an entry costs beyond its bytes: its slot in the shard's map (at
/// 7/8 load), its hash in its key's set, its clock slot, the allocator's
/// headers of its command and reply.
const ENTRY_OVERHEAD: usize = (size_of::<(u64, Entry)>() + 1) * 8 / 7 + 16 + 16 + 32;
/// What a key costs beyond its bytes: its slot in the keys' map, its
/// `Arc`'s counts, the table of its first set.
const KEY_OVERHEAD: usize = (size_of::<(Arc<[u8]>, Keyed)>() + 1) * 8 / 7 + 16 + 64;
/// What a link costs: its ticket in its key's set.
const LINK_OVERHEAD: usize = 24;

/// Bytes and entries of every shard of a cache, counted as they change:
/// the budget is checked against `bytes`; the gauges are the same counts.
pub(super) struct Books {
    bytes: AtomicUsize,
    stats: Arc<Stats>,
}

impl Books {
    pub(super) fn new(stats: Arc<Stats>) -> Books {
        Books {
            bytes: AtomicUsize::new(0),
            stats,
        }
    }

    /// What every shard takes now.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// Hashes a `u64` that is a hash already (a command's) or a count (a
/// ticket) with one multiplication, which spreads it over every bit the
/// map uses (its bucket and its tag): no second SipHash per lookup.
#[derive(Default)]
pub(super) struct SpreadHasher(u64);

impl Hasher for SpreadHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Spread = BuildHasherDefault<SpreadHasher>;

/// Links to remove once the shard lock is let go: the other keys of an
/// entry that went, and its ticket.
pub(super) type Unlinks = Vec<(Box<[Box<[u8]>]>, u64)>;

#[derive(Default)]
pub(super) struct Shard {
    /// Entries by the hash of their command (the cache's hasher). A
    /// command whose hash another one holds is not kept.
    entries: HashMap<u64, Entry, Spread>,
    keys: HashMap<Arc<[u8]>, Keyed>,
    /// Entries (their command hash and ticket) in insertion order, for
    /// CLOCK eviction; one that left `entries` is skipped.
    clock: VecDeque<(u64, u64)>,
    bytes: usize,
    /// Hashes of commands missed once: the next miss fills.
    seen: HashSet<u64, Spread>,
}

/// What a Redis key holds in its shard; there while it holds something.
#[derive(Default)]
struct Keyed {
    /// Its entries (their command hashes).
    entries: HashSet<u64, Spread>,
    /// Tickets of entries kept under another key that read this one.
    links: HashSet<u64, Spread>,
}

pub(super) struct Entry {
    /// The key it is kept under (the command's first).
    pub(super) key: Arc<[u8]>,
    /// The command as sent (name and arguments, with their lengths).
    pub(super) command: Box<[u8]>,
    /// Its keys other than `key`: each holds a link.
    pub(super) others: Box<[Box<[u8]>]>,
    /// Taken by the miss that made it; its links carry it.
    pub(super) ticket: u64,
    /// Read since the clock hand last passed.
    pub(super) referenced: bool,
    pub(super) state: State,
}

pub(super) enum State {
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

impl Entry {
    fn unlinks(self) -> Unlinks {
        if self.others.is_empty() {
            Vec::new()
        } else {
            vec![(self.others, self.ticket)]
        }
    }
}

impl Shard {
    /// The entry of `command` (kept under `key`), by its hash.
    pub(super) fn find(&mut self, hash: u64, key: &[u8], command: &[u8]) -> Option<&mut Entry> {
        self.entries
            .get_mut(&hash)
            .filter(|entry| *entry.command == *command && *entry.key == *key)
    }

    /// Some entry holds `hash`: this command's, or (rarely) another's.
    pub(super) fn holds(&self, hash: u64) -> bool {
        self.entries.contains_key(&hash)
    }

    /// The doorkeeper: true at the second miss of a command, which may
    /// fill; the first only leaves its hash.
    pub(super) fn admits(&mut self, hash: u64) -> bool {
        if self.seen.remove(&hash) {
            return true;
        }
        if self.seen.len() >= DOORKEEPER {
            self.seen.clear();
        }
        self.seen.insert(hash);
        false
    }

    /// A pending entry for `command` under `key`, queued last for the
    /// clock. `hash` is held by no entry.
    pub(super) fn insert(
        &mut self,
        hash: u64,
        key: &[u8],
        command: &[u8],
        others: Box<[Box<[u8]>]>,
        ticket: u64,
        books: &Books,
    ) {
        let (key, keyed) = self.keyed(key, books);
        keyed.entries.insert(hash);
        let entry = Entry {
            key,
            command: command.into(),
            others,
            ticket,
            referenced: false,
            state: State::Pending,
        };
        self.charge(books, 1, entry_size(&entry));
        self.entries.insert(hash, entry);
        self.clock.push_back((hash, ticket));
        self.compact_clock();
    }

    /// The pending entry of `ticket` at `hash`, if it is still there.
    pub(super) fn pending(&self, hash: u64, ticket: u64) -> Option<&Entry> {
        self.entries
            .get(&hash)
            .filter(|entry| entry.ticket == ticket && matches!(entry.state, State::Pending))
    }

    /// The entry at `hash` takes `state` (its reply), counted.
    pub(super) fn fill(&mut self, hash: u64, state: State, books: &Books) {
        let Some(entry) = self.entries.get_mut(&hash) else {
            return;
        };
        let old = entry_size(entry);
        entry.state = state;
        let new = entry_size(entry);
        if new >= old {
            self.charge(books, 0, new - old);
        } else {
            self.refund(books, 0, old - new);
        }
    }

    /// Takes the entry at `hash` out (only if its ticket is `ticket`,
    /// when given); its links are returned, to remove once the lock is
    /// let go.
    pub(super) fn remove(&mut self, hash: u64, ticket: Option<u64>, books: &Books) -> Unlinks {
        match self.entries.get(&hash) {
            Some(entry) if ticket.map_or(true, |ticket| entry.ticket == ticket) => {}
            _ => return Vec::new(),
        }
        let entry = self.entries.remove(&hash).expect("just found");
        self.refund(books, 1, entry_size(&entry));
        if let Some(keyed) = self.keys.get_mut(&entry.key) {
            keyed.entries.remove(&hash);
            self.forget_if_empty(&entry.key, books);
        }
        entry.unlinks()
    }

    /// Every entry `picks` picks goes; their links are returned.
    pub(super) fn remove_where(
        &mut self,
        picks: impl Fn(&Entry) -> bool,
        books: &Books,
    ) -> Unlinks {
        let doomed: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, entry)| picks(entry))
            .map(|(&hash, _)| hash)
            .collect();
        doomed
            .into_iter()
            .flat_map(|hash| self.remove(hash, None, books))
            .collect()
    }

    /// Redis says `key` changed: its entries and links go; the links of
    /// those entries are returned.
    pub(super) fn invalidate(&mut self, key: &[u8], books: &Books) -> Unlinks {
        let Some((key, keyed)) = self.keys.remove_entry(key) else {
            return Vec::new();
        };
        let mut unlinks = Vec::new();
        for hash in keyed.entries {
            if let Some(entry) = self.entries.remove(&hash) {
                self.refund(books, 1, entry_size(&entry));
                unlinks.extend(entry.unlinks());
            }
        }
        self.refund(books, 0, keyed.links.len() * LINK_OVERHEAD + key_size(&key));
        unlinks
    }

    /// Under `key`: a link to the entry of `ticket`, kept under another key.
    pub(super) fn link(&mut self, key: &[u8], ticket: u64, books: &Books) {
        let (_, keyed) = self.keyed(key, books);
        if keyed.links.insert(ticket) {
            self.charge(books, 0, LINK_OVERHEAD);
        }
    }

    pub(super) fn has_link(&self, key: &[u8], ticket: u64) -> bool {
        self.keys
            .get(key)
            .is_some_and(|keyed| keyed.links.contains(&ticket))
    }

    /// The link of `ticket` under `key` goes (its entry went).
    pub(super) fn unlink(&mut self, key: &[u8], ticket: u64, books: &Books) {
        let Some(keyed) = self.keys.get_mut(key) else {
            return;
        };
        if keyed.links.remove(&ticket) {
            self.refund(books, 0, LINK_OVERHEAD);
            self.forget_if_empty(key, books);
        }
    }

    /// CLOCK: the first entry not read since the hand last passed goes
    /// (its links returned); those read are passed over, once. `None`:
    /// every entry here was read (now passed over), or there is none.
    pub(super) fn evict_one(&mut self, books: &Books) -> Option<Unlinks> {
        for _ in 0..self.clock.len() {
            let (hash, ticket) = self.clock.pop_front()?;
            let Some(entry) = self.entries.get_mut(&hash) else {
                continue;
            };
            if entry.ticket != ticket {
                continue;
            }
            if std::mem::take(&mut entry.referenced) {
                self.clock.push_back((hash, ticket));
                continue;
            }
            return Some(self.remove(hash, None, books));
        }
        None
    }

    /// Everything goes (the doorkeeper stays).
    pub(super) fn clear(&mut self, books: &Books) {
        self.refund(books, self.entries.len() as u64, self.bytes);
        self.entries.clear();
        self.keys.clear();
        self.clock.clear();
    }

    /// The key's `Arc` and what it holds, made (and counted) if new.
    fn keyed(&mut self, key: &[u8], books: &Books) -> (Arc<[u8]>, &mut Keyed) {
        if !self.keys.contains_key(key) {
            self.charge(books, 0, key_size(key));
            self.keys.insert(key.into(), Keyed::default());
        }
        let key = self.keys.get_key_value(key).expect("just made").0.clone();
        let keyed = self.keys.get_mut(&key).expect("just made");
        (key, keyed)
    }

    /// A key that holds nothing leaves.
    fn forget_if_empty(&mut self, key: &[u8], books: &Books) {
        if self
            .keys
            .get(key)
            .is_some_and(|keyed| keyed.entries.is_empty() && keyed.links.is_empty())
        {
            self.keys.remove(key);
            self.refund(books, 0, key_size(key));
        }
    }

    /// Entries leave the map without leaving the clock queue (removed,
    /// invalidated): past twice the entries kept (and a margin), the
    /// queue is rebuilt with those still there.
    fn compact_clock(&mut self) {
        if self.clock.len() <= 2 * self.entries.len() + 64 {
            return;
        }
        let entries = &self.entries;
        self.clock.retain(|(hash, ticket)| {
            entries
                .get(hash)
                .is_some_and(|entry| entry.ticket == *ticket)
        });
    }

    fn charge(&mut self, books: &Books, entries: u64, bytes: usize) {
        self.bytes += bytes;
        books.bytes.fetch_add(bytes, Ordering::Relaxed);
        books.stats.add(Counter::NearCacheEntries, entries);
        books.stats.add(Counter::NearCacheBytes, bytes as u64);
    }

    fn refund(&mut self, books: &Books, entries: u64, bytes: usize) {
        self.bytes -= bytes;
        books.bytes.fetch_sub(bytes, Ordering::Relaxed);
        books.stats.sub(Counter::NearCacheEntries, entries);
        books.stats.sub(Counter::NearCacheBytes, bytes as u64);
    }
}

/// What an entry takes with `reply` as its reply, its links included:
/// what the share of the budget one entry may take bounds.
pub(super) fn entry_bound(entry: &Entry, reply: &Reply) -> usize {
    entry_size(entry) + reply_size(reply) + entry.others.len() * LINK_OVERHEAD
}

/// What a pending entry for `command` with `others` would take, its links
/// included.
pub(super) fn pending_bound(command: &[u8], others: &[&[u8]]) -> usize {
    ENTRY_OVERHEAD
        + command.len()
        + others
            .iter()
            .map(|other| size_of::<Box<[u8]>>() + other.len() + LINK_OVERHEAD)
            .sum::<usize>()
}

fn entry_size(entry: &Entry) -> usize {
    let reply = match &entry.state {
        State::Pending => 0,
        State::Ready { reply, .. } => reply_size(reply),
    };
    let others: usize = entry
        .others
        .iter()
        .map(|other| size_of::<Box<[u8]>>() + other.len())
        .sum();
    ENTRY_OVERHEAD + entry.command.len() + others + reply
}

fn key_size(key: &[u8]) -> usize {
    KEY_OVERHEAD + key.len()
}

/// About what a reply takes in memory.
fn reply_size(reply: &Reply) -> usize {
    let mut size = 0;
    let mut stack = vec![reply];
    while let Some(reply) = stack.pop() {
        size += size_of::<Reply>();
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
impl Shard {
    /// Recounts the shard: every entry listed under its key and every
    /// listed one there, no key that holds nothing, its bytes exactly
    /// what it holds. Its entries and bytes.
    pub(super) fn recount(&self) -> (usize, usize) {
        let mut bytes = 0;
        for (hash, entry) in &self.entries {
            let keyed = self.keys.get(&entry.key).expect("an entry's key");
            assert!(keyed.entries.contains(hash), "an entry not under its key");
            bytes += entry_size(entry);
        }
        for (key, keyed) in &self.keys {
            assert!(!keyed.entries.is_empty() || !keyed.links.is_empty());
            for hash in &keyed.entries {
                let entry = self.entries.get(hash).expect("a key's entry");
                assert_eq!(*entry.key, **key);
            }
            bytes += key_size(key) + keyed.links.len() * LINK_OVERHEAD;
        }
        assert_eq!(self.bytes, bytes);
        (self.entries.len(), bytes)
    }

    pub(super) fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Every entry's ticket and other keys.
    pub(super) fn tickets(&self) -> Vec<(u64, Vec<Box<[u8]>>)> {
        self.entries
            .values()
            .map(|entry| (entry.ticket, entry.others.to_vec()))
            .collect()
    }

    /// Every link: its key and ticket.
    pub(super) fn links(&self) -> Vec<(Box<[u8]>, u64)> {
        self.keys
            .iter()
            .flat_map(|(key, keyed)| {
                keyed
                    .links
                    .iter()
                    .map(|&ticket| (Box::from(&**key), ticket))
            })
            .collect()
    }

    pub(super) fn queued(&self) -> usize {
        self.clock.len()
    }

    pub(super) fn has_key(&self, key: &[u8]) -> bool {
        self.keys.contains_key(key)
    }
}
