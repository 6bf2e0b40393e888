//! Private mode: every Varnish worker thread keeps its own idle connections
//! for one database object, in a per-object `ThreadLocal`. A command takes
//! the connection out of its thread's list and puts it back afterwards, so
//! nothing is borrowed across I/O and no other thread ever waits on it.
//! (`AtomicRefCell` only makes the lists visible to `close_idle` on VCL
//! cold, when no task runs the VCL; a worker never blocks on it.)
use atomic_refcell::AtomicRefCell;
use thread_local::ThreadLocal;

use super::Connection;
use crate::stats::{Counter, Stats};

struct Idle {
    server: usize,
    conn: Connection,
}

/// The idle connections of one database object, per worker thread, least
/// recently used first.
pub struct PrivateConnections {
    per_thread: ThreadLocal<AtomicRefCell<Vec<Idle>>>,
    max_per_thread: usize,
}

impl PrivateConnections {
    pub fn new(max_per_thread: u32) -> Self {
        PrivateConnections {
            per_thread: ThreadLocal::new(),
            max_per_thread: max_per_thread.max(1) as usize,
        }
    }

    fn list(&self) -> &AtomicRefCell<Vec<Idle>> {
        self.per_thread
            .get_or(|| AtomicRefCell::new(Vec::with_capacity(self.max_per_thread.min(8))))
    }

    /// This thread's idle connection to `server`, if it has one.
    pub fn take(&self, server: usize) -> Option<Connection> {
        let mut list = self.list().try_borrow_mut().ok()?;
        let pos = list.iter().rposition(|idle| idle.server == server)?;
        Some(list.remove(pos).conn)
    }

    /// Keeps `conn` for this thread's next command; drops the least recently
    /// used one when the thread would hold more than `max_connections`.
    pub fn give_back(&self, server: usize, conn: Connection, stats: &Stats) {
        let Ok(mut list) = self.list().try_borrow_mut() else {
            return;
        };
        if list.len() >= self.max_per_thread {
            list.remove(0);
            stats.inc(Counter::DroppedOverflow);
        }
        list.push(Idle { server, conn });
    }

    /// Closes every idle connection of every thread (VCL cold). Lists in
    /// use at that moment, which Varnish rules out, are skipped.
    pub fn close_idle(&self) -> usize {
        self.per_thread
            .iter()
            .filter_map(|list| list.try_borrow_mut().ok())
            .map(|mut list| list.drain(..).count())
            .sum()
    }
}
