//! The servers of a database as a snapshot: a worker takes the current one
//! (an `Arc` clone under a read lock held for nanoseconds) and routes its
//! command on it while a writer (`add_server` in `vcl_init`, later Sentinel
//! or a cluster map) builds the next one and swaps it in. A server is an
//! `Arc`: its pool, health and role carry over from one snapshot to the
//! next, and a worker still holding an old snapshot keeps what it leased.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::cluster::SlotMap;
use crate::config::Location;
use crate::server::Server;

/// One version of a database's servers, in the order they were added.
#[derive(Default)]
pub(crate) struct Topology {
    pub servers: Vec<Arc<Server>>,
    /// Cluster mode, once a discovery read it: each slot's shard, as
    /// indexes of `servers`. Swapped with them, so the two always agree.
    pub slots: Option<Arc<SlotMap<usize>>>,
}

impl Topology {
    /// The server at `location`, if the database has one.
    pub(crate) fn by_location(&self, location: &Location) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.location() == location)
    }
}

/// The current topology of a database, and the ids of its servers.
#[derive(Default)]
pub(crate) struct Servers {
    current: RwLock<Arc<Topology>>,
    /// Writers one at a time: a change is read, copy, swap.
    write: Mutex<()>,
    next_id: AtomicU32,
}

impl Servers {
    /// The topology as it is now.
    pub(crate) fn snapshot(&self) -> Arc<Topology> {
        self.current.read().clone()
    }

    /// An id no server of this database had before.
    pub(crate) fn new_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Replaces the topology with `change(current)`; workers routing on the
    /// old one finish on it.
    pub(crate) fn update(&self, change: impl FnOnce(&Topology) -> Option<Topology>) {
        let _writer = self.write.lock();
        let current = self.snapshot();
        if let Some(next) = change(&current) {
            *self.current.write() = Arc::new(next);
        }
    }
}
