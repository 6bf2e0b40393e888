//! Private mode: every Varnish worker thread keeps its own idle connections
//! in a `ThreadLocal` list. A command takes the connection out of its
//! thread's list and puts it back afterwards, so nothing is borrowed across
//! I/O and no other thread ever waits on it. (`AtomicRefCell` only makes
//! the lists visible to `close_idle` on VCL cold, when no task runs the
//! VCL; a worker never blocks on it.)
//!
//! As in the C VMOD, `max_connections` is what one worker thread keeps *in
//! total* for every database of the VCL that uses private connections (at
//! most one per database and server): one [`PrivateConnections`] per VCL,
//! shared by those databases, and when a thread would keep more, its least
//! recently used connection is closed and counted in
//! `connections.dropped.overflow` of the database it belonged to.
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use atomic_refcell::AtomicRefCell;
use parking_lot::Mutex;
use thread_local::ThreadLocal;

use super::{Connection, Leased, ManageConnection};
use crate::stats::{Counter, Stats};

/// Which database object and which of its servers a connection goes to.
/// (Public for the micro benchmark.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Unique per database object of the process.
    pub db: u64,
    /// Stable id of the server in that database.
    pub server: u32,
}

struct Idle {
    owner: Owner,
    /// The owner's counters; weak so that an idle connection in some
    /// worker thread does not keep a discarded database's counters.
    stats: Weak<Stats>,
    conn: Connection,
}

/// The idle private connections of the databases of one VCL, per worker
/// thread, least recently used first.
///
/// A server removed from its database for good (Sentinel discovery no
/// longer reports it) is retired here: each worker closes its idle
/// connection to it at its next lease, rather than keep it until VCL
/// cold or the budget evicts it. A worker sees a retirement by one
/// atomic load per lease ([`Retired::generation`]); only when it moved
/// does it lock the list of retired servers, once, to copy it.
#[derive(Default)]
pub struct PrivateConnections {
    per_thread: ThreadLocal<AtomicRefCell<ThreadList>>,
    retired: Retired,
}

/// Retired servers remembered at most ([`PrivateConnections::retire`]).
pub(crate) const MAX_RETIRED: usize = 256;

/// The servers retired, and a generation moved at each change.
#[derive(Default)]
struct Retired {
    owners: Mutex<Vec<Owner>>,
    /// Moved (under the lock) whenever `owners` changes.
    generation: AtomicU64,
}

/// One worker's idle connections, and the retired servers as of the
/// generation it last saw.
#[derive(Default)]
struct ThreadList {
    idle: Vec<Idle>,
    seen: u64,
    retired: Vec<Owner>,
}

impl ThreadList {
    /// Catches up with the retirements since the generation it saw:
    /// closes its idle connections to retired servers.
    fn catch_up(&mut self, retired: &Retired) {
        if retired.generation.load(Ordering::Acquire) == self.seen {
            return;
        }
        let owners = retired.owners.lock();
        self.seen = retired.generation.load(Ordering::Acquire);
        self.retired.clone_from(&owners);
        drop(owners);
        let retired = &self.retired;
        self.idle.retain(|idle| !retired.contains(&idle.owner));
    }
}

impl PrivateConnections {
    /// This thread's list, caught up with the retirements.
    fn list(&self) -> Option<atomic_refcell::AtomicRefMut<'_, ThreadList>> {
        let mut list = self
            .per_thread
            .get_or(|| AtomicRefCell::new(ThreadList::default()))
            .try_borrow_mut()
            .ok()?;
        list.catch_up(&self.retired);
        Some(list)
    }

    /// This thread's idle connection to `owner`, if it has one.
    pub fn take(&self, owner: Owner) -> Option<Connection> {
        let mut list = self.list()?;
        let pos = list.idle.iter().rposition(|idle| idle.owner == owner)?;
        Some(list.idle.remove(pos).conn)
    }

    /// Keeps `conn` for this thread's next command; closes the least
    /// recently used ones while the thread would hold more than `budget`
    /// (the `max_connections` of the database giving it back). A
    /// connection to a retired server (leased before its retirement) is
    /// closed instead.
    pub fn give_back(&self, owner: Owner, stats: Weak<Stats>, conn: Connection, budget: u32) {
        let Some(mut list) = self.list() else {
            return;
        };
        if list.retired.contains(&owner) {
            return;
        }
        let budget = budget.max(1) as usize;
        while list.idle.len() >= budget {
            let evicted = list.idle.remove(0);
            if let Some(stats) = evicted.stats.upgrade() {
                stats.inc(Counter::DroppedOverflow);
            }
        }
        list.idle.push(Idle { owner, stats, conn });
    }

    /// Retires `owner` (its server left its database for good): every
    /// worker closes its idle connection to it at its next lease. The
    /// list keeps the last [`MAX_RETIRED`]: a cluster's servers get a new
    /// id each time they come (redirection targets, nodes that come and
    /// go), and each worker copies the list. One forgotten is only kept
    /// until the thread's budget or VCL cold closes it.
    pub(crate) fn retire(&self, owner: Owner) {
        let mut owners = self.retired.owners.lock();
        if !owners.contains(&owner) {
            if owners.len() >= MAX_RETIRED {
                owners.remove(0);
            }
            owners.push(owner);
            self.retired.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// `owner` serves again (a server added back under its former id):
    /// the connections workers still keep to it are used again.
    pub(crate) fn reinstate(&self, owner: Owner) {
        let mut owners = self.retired.owners.lock();
        if let Some(pos) = owners.iter().position(|o| *o == owner) {
            owners.swap_remove(pos);
            self.retired.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Closes every idle connection of database `db` in every thread (VCL
    /// cold), also to servers it no longer has. Lists in use at that
    /// moment, which Varnish rules out, are skipped.
    pub(crate) fn close_idle(&self, db: u64) -> usize {
        self.per_thread
            .iter()
            .filter_map(|list| list.try_borrow_mut().ok())
            .map(|mut list| {
                let before = list.idle.len();
                list.idle.retain(|idle| idle.owner.db != db);
                before - list.idle.len()
            })
            .sum()
    }
}

/// One server's place in the per-thread lists of its VCL: what a worker
/// needs to take its connection there and give it back.
#[derive(Clone)]
pub struct PrivateAccess {
    lists: Arc<PrivateConnections>,
    owner: Owner,
    /// The owner's `max_connections`: what a thread keeps in total.
    budget: u32,
    /// The owner's counters (`connections.dropped.overflow`).
    stats: Weak<Stats>,
}

/// A private connection held for one command, borrowing its server's
/// access (nothing shared between threads is touched), or by a task across
/// VCL calls ([`PrivateLease::into_owned`]). Dropping it gives the
/// connection back to its thread's list, unless it broke or was retired.
pub struct PrivateLease<'a> {
    access: Cow<'a, PrivateAccess>,
    conn: Leased,
}

impl PrivateAccess {
    pub fn new(
        lists: Arc<PrivateConnections>,
        owner: Owner,
        budget: u32,
        stats: Weak<Stats>,
    ) -> Self {
        PrivateAccess {
            lists,
            owner,
            budget,
            stats,
        }
    }

    /// This thread's connection to the server, checked out by `manager`:
    /// its first idle one still usable (the others are dropped), else a
    /// new one opened by `deadline`; prepared with `timeout`.
    pub fn get<M: ManageConnection + ?Sized>(
        &self,
        manager: &M,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<PrivateLease<'_>, M::Error> {
        let mut idle = std::iter::from_fn(|| self.lists.take(self.owner));
        let conn = manager.checkout(&mut idle, deadline, timeout)?;
        Ok(PrivateLease {
            access: Cow::Borrowed(self),
            conn: Leased(Some(conn)),
        })
    }
}

impl PrivateLease<'_> {
    pub fn conn(&mut self) -> &mut Connection {
        self.conn.conn()
    }

    pub fn is_broken(&self) -> bool {
        self.conn.is_broken()
    }

    /// The lease with its own copy of the access, for a task to keep.
    pub fn into_owned(mut self) -> PrivateLease<'static> {
        PrivateLease {
            access: Cow::Owned(self.access.as_ref().clone()),
            conn: Leased(self.conn.0.take()),
        }
    }
}

impl Drop for PrivateLease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take_unbroken() {
            let access = &self.access;
            access
                .lists
                .give_back(access.owner, access.stats.clone(), conn, access.budget);
        }
    }
}
