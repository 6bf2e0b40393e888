//! A multiplexed connection being opened, on a thread of its own
//! (`detached.rs`), within the connection's own bounds: the connect
//! within `connection_timeout`, the handshake and preparation within the
//! database's command timeout (`ManageConnection::checkout`). No worker's
//! deadline cuts an opening short, so a 2 ms request that finds the
//! connection closed cannot fail the TLS handshake, and with it the
//! 2000 ms requests queued behind it. The worker driving waits for the
//! opening within its own deadline, then hands the driving, and the
//! opening, to the next worker still waiting.
use std::any::Any;
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Duration;

use parking_lot::Mutex;

use super::super::{detached, Connection, ManageConnection};

/// One opening in progress, or its result until a driver takes it.
pub(super) struct Opening<E> {
    progress: Mutex<Progress<E>>,
}

struct Progress<E> {
    /// `None` while opening.
    result: Option<Landed<E>>,
    /// The worker to wake when it ends: the one driving now (none: the
    /// last one left at its deadline, and nobody waits).
    driver: Option<Thread>,
}

/// How an opening ended, and whether a driver was waiting for it then.
pub(super) struct Landed<E> {
    pub(super) opened: Opened<E>,
    /// Nobody was: a connection may have aged since, a failure is of
    /// another time than the request that finds it.
    pub(super) orphan: bool,
}

/// How an opening ended.
pub(super) enum Opened<E> {
    Connected(Connection),
    Failed(E),
    /// Its thread panicked, or could not be started.
    Lost,
}

/// The opening as the shared state keeps it: typed by the manager's
/// error, the one type of the multiplexer's requests.
pub(super) type Pending = Arc<dyn Any + Send + Sync>;

impl<E: Send + 'static> Opening<E> {
    /// Starts opening a connection with `manager`, its handshake and
    /// preparation within `timeout`; the caller (`driver`) is woken when
    /// it ends.
    pub(super) fn start<M>(manager: &Arc<M>, timeout: Option<Duration>) -> Arc<Opening<E>>
    where
        M: ManageConnection<Error = E> + Send + Sync + 'static,
    {
        let opening = Arc::new(Opening {
            progress: Mutex::new(Progress {
                result: None,
                driver: Some(thread::current()),
            }),
        });
        let landing = Landing {
            opening: opening.clone(),
            landed: false,
        };
        let manager = manager.clone();
        let started = detached::spawn("vredis-open", move || {
            let opened = match manager.checkout(&mut std::iter::empty(), None, timeout) {
                Ok(conn) => Opened::Connected(conn),
                Err(err) => Opened::Failed(err),
            };
            landing.land(opened);
        });
        // On failure the closure, and so the landing, was dropped: the
        // opening ended, `Lost`.
        drop(started);
        opening
    }

    /// The opening as kept in the shared state, if it is one of `E`.
    pub(super) fn of(pending: &Pending) -> Option<Arc<Opening<E>>> {
        pending.clone().downcast().ok()
    }

    /// How it ended, if it has; else the calling worker, now driving, is
    /// woken when it ends.
    pub(super) fn poll(&self) -> Option<Landed<E>> {
        let mut progress = self.progress.lock();
        let result = progress.result.take();
        if result.is_none() {
            progress.driver = Some(thread::current());
        }
        result
    }

    /// The worker driving leaves (its deadline passed): none is woken
    /// until another polls.
    pub(super) fn leave(&self) {
        self.progress.lock().driver = None;
    }
}

/// The thread's side: what it puts in place, and the driver it wakes.
/// Dropped without landing (a panic, no thread): `Lost`.
struct Landing<E> {
    opening: Arc<Opening<E>>,
    landed: bool,
}

impl<E> Landing<E> {
    fn land(mut self, opened: Opened<E>) {
        self.end(opened);
        self.landed = true;
    }

    fn end(&self, opened: Opened<E>) {
        let driver = {
            let mut progress = self.opening.progress.lock();
            let driver = progress.driver.take();
            progress.result = Some(Landed {
                opened,
                orphan: driver.is_none(),
            });
            driver
        };
        if let Some(driver) = driver {
            driver.unpark();
        }
    }
}

impl<E> Drop for Landing<E> {
    fn drop(&mut self) {
        if !self.landed {
            self.end(Opened::Lost);
        }
    }
}
