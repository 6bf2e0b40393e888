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
use std::sync::Weak;

use atomic_refcell::AtomicRefCell;
use thread_local::ThreadLocal;

use super::Connection;
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
#[derive(Default)]
pub struct PrivateConnections {
    per_thread: ThreadLocal<AtomicRefCell<Vec<Idle>>>,
}

impl PrivateConnections {
    fn list(&self) -> &AtomicRefCell<Vec<Idle>> {
        self.per_thread.get_or(|| AtomicRefCell::new(Vec::new()))
    }

    /// This thread's idle connection to `owner`, if it has one.
    pub fn take(&self, owner: Owner) -> Option<Connection> {
        let mut list = self.list().try_borrow_mut().ok()?;
        let pos = list.iter().rposition(|idle| idle.owner == owner)?;
        Some(list.remove(pos).conn)
    }

    /// Keeps `conn` for this thread's next command; closes the least
    /// recently used ones while the thread would hold more than `budget`
    /// (the `max_connections` of the database giving it back).
    pub fn give_back(&self, owner: Owner, stats: Weak<Stats>, conn: Connection, budget: u32) {
        let Ok(mut list) = self.list().try_borrow_mut() else {
            return;
        };
        let budget = budget.max(1) as usize;
        while list.len() >= budget {
            let evicted = list.remove(0);
            if let Some(stats) = evicted.stats.upgrade() {
                stats.inc(Counter::DroppedOverflow);
            }
        }
        list.push(Idle { owner, stats, conn });
    }

    /// Closes every idle connection of database `db` in every thread (VCL
    /// cold). Lists in use at that moment, which Varnish rules out, are
    /// skipped.
    pub(crate) fn close_idle(&self, db: u64) -> usize {
        self.per_thread
            .iter()
            .filter_map(|list| list.try_borrow_mut().ok())
            .map(|mut list| {
                let before = list.len();
                list.retain(|idle| idle.owner.db != db);
                before - list.len()
            })
            .sum()
    }
}
