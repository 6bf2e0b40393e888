//! A server's promise to report every change of its keys, and what proves
//! it still holds: one per server of a database with a near cache, kept
//! by that server's tracking connection (`tracking.rs`), read by every
//! hit (`mod.rs`).
//!
//! **The rule.** An entry is served only while the server it was read
//! from has promised to tell us of every later write to its key, and we
//! can tell that the promise still holds:
//! - *made*: `CLIENT TRACKING ON BCAST` was accepted on the tracking
//!   connection, which is still open (`generation` odd);
//! - *the same*: no event voided it since the entry was read
//!   (`generation` unchanged): a reconnect, a flush, a role change, a
//!   replica that synced again each move it;
//! - *proven recently*: the last heartbeat answered on the tracking
//!   connection was sent less than [`PROOF_LASTS`] ago. Its reply comes
//!   after every invalidation the server queued before it read the
//!   heartbeat, on the same connection: every write the server applied
//!   before the heartbeat was sent has been reported by the time it is
//!   answered. A link that goes silent without a reset (a frozen server,
//!   a dropped route, a NAT table flushed) stops the hits within that
//!   bound; they resume, with nothing lost, when the answers come again
//!   on the same connection.
//! - *for that slot* (Cluster): the node, by its own word in its last
//!   heartbeat (`CLUSTER NODES`), serves the entry's slot and no node of
//!   the cluster is migrating it (`slots`). A node that loses a slot (a
//!   takeover) deletes its keys without a word, and a slot on its way
//!   to another node gets writes there.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::cluster::{HashSlot, SLOTS};

/// How long the answer to a heartbeat proves the promise: past it, the
/// server's entries are not served (a miss), and kept for when it answers
/// again. The bound of staleness when a tracking link goes silent.
pub(crate) const PROOF_LASTS: Duration = Duration::from_millis(250);

/// The clock the proofs are kept on: nanoseconds since the first use.
fn nanos(at: Instant) -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

/// One server's promise (see the module documentation).
#[derive(Default)]
pub(crate) struct Promise {
    /// Odd while tracking is on; moved by every event that voids what was
    /// read before it.
    generation: AtomicU64,
    /// [`nanos`] of the send time of the last heartbeat answered, + 1 (0:
    /// none yet).
    proven: AtomicU64,
    /// The server's `run_id` as its tracking connection found it: a read
    /// on a connection that reached another server (a balancer behind
    /// one location) is never kept.
    identity: Mutex<Option<Arc<str>>>,
    /// Cluster: the slots the node serves with no migration under way,
    /// one bit each (`None`: not a cluster node, every slot).
    slots: OnceLock<Box<[AtomicU64]>>,
    /// A read that reached another server was reported.
    mismatch_said: AtomicBool,
    /// The server has hash fields with TTLs of their own (Redis 7.4,
    /// Valkey 9.0): a field expires with no write, and no key TTL says
    /// when.
    field_expiry: AtomicBool,
}

/// Why a reply is not kept.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unpledged {
    /// Tracking is off, or not heard from lately.
    NotTracked,
    /// The connection that read reached another server than the tracking
    /// connection (`run_id`s): a balancer behind one location.
    AnotherServer { read: String, tracked: String },
    /// Which server the connection reached is not known (`INFO` refused).
    Unknown,
    /// A cluster node that does not serve the slot now (or it moves).
    SlotNotServed,
}

/// A promise as an entry saw it when it was read: its generation.
#[derive(Clone)]
pub(crate) struct Pledge {
    pub(super) promise: Arc<Promise>,
    pub(super) generation: u64,
    /// Cluster, a replica's reply: its slot's master's pledge too. Only
    /// the master knows that the slot is being migrated (its own line
    /// of `CLUSTER NODES`); while its link is silent, a migration could
    /// begin unseen, and a key written on the node the slot goes to.
    overseer: Option<Box<Pledge>>,
}

impl Pledge {
    /// Whether what was read under this pledge may be served at `now`.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.promise.generation.load(Ordering::Acquire) == self.generation
            && self.promise.proven_at(now)
            && self
                .overseer
                .as_ref()
                .map_or(true, |master| master.holds(now))
    }

    /// The same, overseen by `master`'s pledge (see `overseer`).
    pub(crate) fn overseen_by(self, master: Pledge) -> Pledge {
        Pledge {
            overseer: Some(Box::new(master)),
            ..self
        }
    }

    /// Whether its server's hash fields may expire on their own.
    pub(crate) fn field_expiry(&self) -> bool {
        self.promise.field_expiry.load(Ordering::Acquire)
    }

    /// Made anew or voided since: what was read under it is dead.
    pub(super) fn voided(&self) -> bool {
        self.promise.generation.load(Ordering::Acquire) != self.generation
            || self.overseer.as_ref().is_some_and(|master| master.voided())
    }
}

impl Promise {
    /// The promise of a cluster node: its slots are checked too, none
    /// served until its first heartbeat says which.
    pub(crate) fn for_cluster_node() -> Promise {
        let promise = Promise::default();
        let _ = promise
            .slots
            .set((0..SLOTS / 64).map(|_| AtomicU64::new(0)).collect());
        promise
    }

    /// Tracking is on (the server accepted it), seen from `identity`, a
    /// server with hash-field expiry or not.
    pub(crate) fn made(&self, identity: Option<Arc<str>>, field_expiry: bool) {
        // The clock of the proofs starts by now: every heartbeat of this
        // promise is sent later, so none is dated later than it was.
        nanos(Instant::now());
        *self.identity.lock() = identity;
        // A new session: a read that reaches another server is said again
        // (once per session: a restart seen before its tracking
        // reconnects is said, a balancer is said again after a reconnect).
        self.mismatch_said.store(false, Ordering::Relaxed);
        self.field_expiry.store(field_expiry, Ordering::Release);
        // Made again without a break: what came before is void too.
        self.step(|generation| generation + if generation % 2 == 0 { 1 } else { 2 });
    }

    fn step(&self, next: impl Fn(u64) -> u64) {
        let _ = self
            .generation
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |g| Some(next(g)));
    }

    /// Tracking is off (the connection ended): nothing read before is
    /// served, nor kept.
    /// Broken already: nothing moves.
    pub(crate) fn broken(&self) {
        self.step(|generation| generation + generation % 2);
        self.proven.store(0, Ordering::Release);
    }

    /// Still tracked, but what was read before may be wrong now (a flush,
    /// a replica that synced again, a role change).
    pub(crate) fn renewed(&self) {
        self.generation.fetch_add(2, Ordering::AcqRel);
    }

    /// A heartbeat sent at `sent` was answered.
    pub(crate) fn proven(&self, sent: Instant) {
        self.proven.fetch_max(nanos(sent) + 1, Ordering::AcqRel);
    }

    fn proven_at(&self, now: Instant) -> bool {
        let proven = self.proven.load(Ordering::Acquire);
        proven != 0 && nanos(now).saturating_sub(proven - 1) <= PROOF_LASTS.as_nanos() as u64
    }

    /// Whether tracking is on now.
    #[cfg(test)]
    pub(crate) fn is_made(&self) -> bool {
        self.generation.load(Ordering::Acquire) % 2 == 1
    }

    /// The pledge a reply read now is kept under, if the promise holds:
    /// made, proven, seen by a connection that reached the same server
    /// (`identity`: that connection's `run_id`), and serving `slot`.
    pub(crate) fn pledge(
        self: &Arc<Self>,
        identity: Option<&str>,
        slot: Option<HashSlot>,
        now: Instant,
    ) -> Result<Pledge, Unpledged> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation % 2 == 0 || !self.proven_at(now) {
            return Err(Unpledged::NotTracked);
        }
        match (identity, self.identity.lock().as_deref()) {
            (Some(read), Some(tracked)) if read == tracked => {}
            (Some(read), Some(tracked)) if !read.is_empty() => {
                return Err(Unpledged::AnotherServer {
                    read: read.into(),
                    tracked: tracked.into(),
                })
            }
            _ => return Err(Unpledged::Unknown),
        }
        if let Some(slot) = slot {
            if !self.serves(slot) {
                return Err(Unpledged::SlotNotServed);
            }
        }
        Ok(Pledge {
            promise: self.clone(),
            generation,
            overseer: None,
        })
    }

    /// A slot master's pledge for its replica's reply: made, proven, and
    /// serving `slot` (its identity is the tracking connection's own).
    pub(crate) fn oversight(self: &Arc<Self>, slot: HashSlot, now: Instant) -> Option<Pledge> {
        let identity = self.identity.lock().clone();
        self.pledge(identity.as_deref(), Some(slot), now).ok()
    }

    /// True the first time only: a balanced location is said once.
    pub(crate) fn first_mismatch(&self) -> bool {
        !self.mismatch_said.swap(true, Ordering::Relaxed)
    }

    /// Whether it is a cluster node's (its slots are checked).
    pub(crate) fn is_cluster_node(&self) -> bool {
        self.slots.get().is_some()
    }

    /// Cluster: whether the node serves `slot`, stable (always true for
    /// a server that is no cluster node).
    pub(crate) fn serves(&self, slot: HashSlot) -> bool {
        let Some(bits) = self.slots.get() else {
            return true;
        };
        let slot = usize::from(slot);
        bits[slot / 64].load(Ordering::Acquire) & (1 << (slot % 64)) != 0
    }

    /// Cluster: the node now serves `slots` (stable ones), by its last
    /// heartbeat. Returns those it served before and no longer does.
    pub(crate) fn set_slots(&self, slots: &SlotSet) -> SlotSet {
        let mut lost = SlotSet::default();
        let Some(bits) = self.slots.get() else {
            return lost;
        };
        for (word, (cell, new)) in bits.iter().zip(slots.0.iter()).enumerate() {
            let old = cell.swap(*new, Ordering::AcqRel);
            lost.0[word] = old & !new;
        }
        lost
    }
}

/// A set of cluster slots.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SlotSet(pub(crate) Box<[u64]>);

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet(vec![0; SLOTS / 64].into_boxed_slice())
    }
}

impl SlotSet {
    pub(crate) fn insert(&mut self, slot: HashSlot) {
        let slot = usize::from(slot);
        if slot < SLOTS {
            self.0[slot / 64] |= 1 << (slot % 64);
        }
    }

    /// The slots `first..=last` (those past the last slot left out), a
    /// word at a time.
    pub(crate) fn insert_range(&mut self, first: HashSlot, last: HashSlot) {
        let (first, last) = (usize::from(first), usize::from(last).min(SLOTS - 1));
        if first > last {
            return;
        }
        for word in first / 64..=last / 64 {
            let low = if word == first / 64 { first % 64 } else { 0 };
            let high = if word == last / 64 { last % 64 } else { 63 };
            self.0[word] |= (u64::MAX >> (63 - high)) & (u64::MAX << low);
        }
    }

    pub(crate) fn remove(&mut self, slot: HashSlot) {
        let slot = usize::from(slot);
        if slot < SLOTS {
            self.0[slot / 64] &= !(1 << (slot % 64));
        }
    }

    pub(crate) fn contains(&self, slot: HashSlot) -> bool {
        let slot = usize::from(slot);
        slot < SLOTS && self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|&word| word == 0)
    }
}

#[cfg(test)]
impl Promise {
    /// A promise made, seen from `identity`, and proven for the next
    /// hour (a test that is not about heartbeats).
    pub(crate) fn vouching(identity: &str) -> Arc<Promise> {
        let promise = Arc::new(Promise::default());
        promise.vouch_for_an_hour(identity);
        promise
    }

    pub(crate) fn vouch_for_an_hour(&self, identity: &str) {
        self.made(Some(identity.into()), false);
        self.proven(Instant::now() + Duration::from_secs(3600));
    }

    /// Whether a heartbeat was answered lately.
    pub(crate) fn is_proven(&self) -> bool {
        self.proven_at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pledge_holds_while_made_unchanged_and_proven() {
        let promise = Arc::new(Promise::default());
        let now = Instant::now();
        assert!(promise.pledge(Some("a"), None, now).is_err(), "not made");
        promise.made(Some("a".into()), false);
        assert!(promise.pledge(Some("a"), None, now).is_err(), "not proven");
        promise.proven(now);
        assert_eq!(
            promise.pledge(Some("b"), None, now).err(),
            Some(Unpledged::AnotherServer {
                read: "b".into(),
                tracked: "a".into()
            })
        );
        assert!(promise.pledge(None, None, now).is_err(), "unknown server");
        let pledge = promise.pledge(Some("a"), None, now).expect("holds");
        assert!(pledge.holds(now));
        // Silent past the bound: not served, not void either.
        let later = now + PROOF_LASTS + Duration::from_millis(1);
        assert!(!pledge.holds(later) && !pledge.voided());
        promise.proven(later);
        assert!(pledge.holds(later));
        promise.renewed();
        assert!(pledge.voided() && !pledge.holds(later));
        let pledge = promise.pledge(Some("a"), None, later).expect("renewed");
        promise.broken();
        assert!(pledge.voided() && !promise.is_made());
        assert!(promise.pledge(Some("a"), None, later).is_err());
        promise.made(Some("a".into()), false);
        assert!(pledge.voided(), "made again is not the same promise");
    }

    /// A heartbeat answered late proves the promise from when it was
    /// sent, not from when it came, even the first of the process (the
    /// clock of the proofs starting then): a link that froze right after
    /// it stops the hits within the bound. Run alone to be the first.
    #[test]
    fn a_late_answer_proves_from_when_its_heartbeat_was_sent() {
        let promise = Arc::new(Promise::default());
        promise.made(Some("a".into()), false);
        let sent = Instant::now();
        std::thread::sleep(PROOF_LASTS + Duration::from_millis(50));
        promise.proven(sent);
        assert!(!promise.is_proven(), "proven past the bound");
    }

    /// A cluster replica's reply is served only while its slot's master
    /// vouches too: the master alone sees a migration of the slot begin.
    #[test]
    fn a_replicas_pledge_holds_while_its_master_vouches() {
        let now = Instant::now();
        let mut slots = SlotSet::default();
        slots.insert(7);
        let node = |id: &str| {
            let promise = Arc::new(Promise::for_cluster_node());
            promise.made(Some(id.into()), false);
            promise.proven(now);
            promise.set_slots(&slots);
            promise
        };
        let (master, replica) = (node("m"), node("r"));
        let pledge = replica
            .pledge(Some("r"), Some(7), now)
            .unwrap()
            .overseen_by(master.oversight(7, now).unwrap());
        assert!(pledge.holds(now));
        // The master silent past the bound: not served, not void.
        let later = now + PROOF_LASTS + Duration::from_millis(1);
        replica.proven(later);
        assert!(!pledge.holds(later) && !pledge.voided());
        master.proven(later);
        assert!(pledge.holds(later));
        // The master's promise voided: the replica's entry is dead too.
        master.renewed();
        assert!(pledge.voided());
        // A slot the master migrates: no oversight for it.
        let mut moving = slots.clone();
        moving.remove(7);
        master.set_slots(&moving);
        assert!(master.oversight(7, later).is_none());
    }

    #[test]
    fn a_cluster_node_serves_the_slots_its_heartbeat_gave() {
        let promise = Arc::new(Promise::for_cluster_node());
        let now = Instant::now();
        promise.made(Some("n".into()), false);
        promise.proven(now);
        assert!(promise.pledge(Some("n"), Some(7), now).is_err());
        let mut slots = SlotSet::default();
        slots.insert(7);
        slots.insert(8);
        assert!(promise.set_slots(&slots).is_empty());
        assert!(promise.pledge(Some("n"), Some(7), now).is_ok());
        slots.remove(7);
        let lost = promise.set_slots(&slots);
        assert!(lost.contains(7) && !lost.contains(8));
        assert!(promise.pledge(Some("n"), Some(7), now).is_err());
        assert!(promise.serves(8));
    }
}
