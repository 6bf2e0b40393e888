//! Name lookups within a deadline. `getaddrinfo` takes no timeout, so a
//! bounded lookup runs on a thread of its own that may outlive the worker
//! waiting for it. Two rules keep such threads harmless:
//! - at most one lookup per host name is in flight: a worker that finds one
//!   running waits for it (within its own deadline) instead of starting
//!   another, so a dead DNS server cannot pile up a thread per attempt;
//! - the thread is a detached one (`detached.rs`): a lookup outliving its
//!   VCL never returns into unmapped code.
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, OnceLock};

use super::{detached, Limit};

/// A lookup's outcome, shared by every worker waiting for it.
type Outcome = Result<Vec<SocketAddr>, (io::ErrorKind, String)>;

/// One lookup in flight: its outcome once known.
#[derive(Default)]
struct Flight {
    outcome: Mutex<Option<Outcome>>,
    done: Condvar,
}

/// The lookups in flight, by host name. An entry lives as long as its
/// lookup: results are not cached.
fn in_flight() -> &'static Mutex<HashMap<String, Arc<Flight>>> {
    static FLIGHTS: OnceLock<Mutex<HashMap<String, Arc<Flight>>>> = OnceLock::new();
    FLIGHTS.get_or_init(Default::default)
}

/// The addresses of host name `host` (port 0: the caller sets its own),
/// looked up within `limit`.
pub(super) fn lookup(host: &str, limit: Limit) -> io::Result<Vec<SocketAddr>> {
    lookup_with(host, limit, |host| {
        (host, 0).to_socket_addrs().map(Iterator::collect)
    })
}

/// [`lookup`] with the blocking call given (`work`, run at most once at a
/// time per `host`).
pub(super) fn lookup_with(
    host: &str,
    limit: Limit,
    work: impl FnOnce(&str) -> io::Result<Vec<SocketAddr>> + Send + 'static,
) -> io::Result<Vec<SocketAddr>> {
    let (flight, leader) = {
        let mut flights = in_flight().lock();
        match flights.get(host) {
            Some(flight) => (flight.clone(), false),
            None => {
                let flight = Arc::new(Flight::default());
                flights.insert(host.to_owned(), flight.clone());
                (flight, true)
            }
        }
    };
    if leader {
        let landing = Landing {
            host: host.to_owned(),
            flight: flight.clone(),
        };
        if limit.deadline.is_none() {
            // No bound: the worker may block as long as the lookup does.
            landing.land(work(host));
        } else {
            let spawned = detached::spawn("vredis-lookup", move || {
                let outcome = work(&landing.host);
                landing.land(outcome);
            });
            // On failure the closure, and so the landing, is dropped: the
            // flight ends with an error.
            spawned?;
        }
    }
    flight.wait(limit)
}

impl Flight {
    /// The outcome, waited for until `limit`.
    fn wait(&self, limit: Limit) -> io::Result<Vec<SocketAddr>> {
        let mut outcome = self.outcome.lock();
        loop {
            if let Some(outcome) = &*outcome {
                return outcome
                    .clone()
                    .map_err(|(kind, text)| io::Error::new(kind, text));
            }
            // The time left, or a slice of it when a stop flag may end it.
            let wait = limit
                .wait()
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "timeout"))?;
            match wait {
                None => self.done.wait(&mut outcome),
                Some(left) => {
                    self.done.wait_for(&mut outcome, left);
                }
            }
        }
    }
}

/// Ends a flight: records the outcome, wakes its waiters and removes it
/// from [`in_flight`] (the next lookup of the name starts afresh). Dropped
/// without an outcome (the thread could not start, or panicked), it ends
/// the flight with an error, so no one waits for a lookup that never ends.
struct Landing {
    host: String,
    flight: Arc<Flight>,
}

impl Landing {
    fn land(self, outcome: io::Result<Vec<SocketAddr>>) {
        self.end(outcome.map_err(|err| (err.kind(), err.to_string())));
    }

    fn end(&self, outcome: Outcome) {
        {
            let mut flights = in_flight().lock();
            if flights
                .get(&self.host)
                .is_some_and(|flight| Arc::ptr_eq(flight, &self.flight))
            {
                flights.remove(&self.host);
            }
        }
        let mut slot = self.flight.outcome.lock();
        if slot.is_none() {
            *slot = Some(outcome);
            self.flight.done.notify_all();
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        self.end(Err((
            io::ErrorKind::Other,
            "the lookup thread stopped".into(),
        )));
    }
}
