//! The three ways a database's workers reach one server, as one type:
//! private connections per worker thread, one bounded shared pool, or
//! [ext] pipelined connections that many workers' commands share (with a
//! pool beside them for the commands that cannot share one).
use std::sync::Arc;

use super::multiplexed::Multiplexed;
use super::private::PrivateAccess;
use super::shared::SharedPool;

/// How one server's connections are held: chosen by the database's
/// `shared_connections` and [ext] `pipelining`, the same for all its
/// servers.
pub(crate) enum Connections {
    /// `shared_connections=false`: in the VCL's per-thread lists.
    Private(PrivateAccess),
    /// A bounded pool shared by all workers.
    Pooled(Arc<SharedPool>),
    /// [ext] `pipelining=true`.
    Pipelined(Pipelined),
}

/// [ext] `pipelining=true`: `max_connections` connections that many
/// workers' commands share at once, and a pool of as many for the commands
/// that cannot share one (transactions, state, blocking commands).
pub(crate) struct Pipelined {
    multiplexed: Box<[Multiplexed]>,
    pub(crate) pool: Arc<SharedPool>,
}

impl Pipelined {
    pub(crate) fn new(pool: SharedPool) -> Self {
        Pipelined {
            multiplexed: (0..pool.max_size())
                .map(|_| Multiplexed::default())
                .collect(),
            pool: Arc::new(pool),
        }
    }

    /// The multiplexed connection for a worker of this `rotation`: each
    /// worker thread keeps to one, and the threads spread evenly over
    /// them.
    pub(crate) fn multiplexed(&self, rotation: usize) -> &Multiplexed {
        &self.multiplexed[rotation % self.multiplexed.len()]
    }
}

impl Connections {
    /// Closes the idle connections of a pool (VCL cold); connections in
    /// use close when they come back. Private ones are closed by their
    /// database, which keys them (`PrivateConnections::close_idle`).
    pub(crate) fn close_idle(&self) -> usize {
        match self {
            Connections::Private(_) => 0,
            Connections::Pooled(pool) => pool.close_idle(),
            Connections::Pipelined(pipelined) => {
                let multiplexed: usize = pipelined
                    .multiplexed
                    .iter()
                    .map(Multiplexed::close_idle)
                    .sum();
                pipelined.pool.close_idle() + multiplexed
            }
        }
    }

    /// Connections open to the server, and idle among them, for stats
    /// (zeros in private mode, where they live in the worker threads).
    pub(crate) fn state(&self) -> (u32, u32) {
        match self {
            Connections::Private(_) => (0, 0),
            Connections::Pooled(pool) => pool.state(),
            Connections::Pipelined(pipelined) => {
                let (open, idle) = pipelined.pool.state();
                let (mut mux_open, mut mux_idle) = (0, 0);
                for mux in pipelined.multiplexed.iter().filter(|mux| mux.is_open()) {
                    mux_open += 1;
                    mux_idle += u32::from(mux.in_flight() == 0);
                }
                (open + mux_open, idle + mux_idle)
            }
        }
    }

    /// [ext] Commands in flight on the multiplexed connections.
    pub(crate) fn commands_in_flight(&self) -> usize {
        match self {
            Connections::Pipelined(pipelined) => pipelined
                .multiplexed
                .iter()
                .map(Multiplexed::in_flight)
                .sum(),
            _ => 0,
        }
    }
}
