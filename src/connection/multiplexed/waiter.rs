//! One worker's request on the multiplexed connection: where the driver
//! puts its reply, and how the worker is woken.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::connection::{Failure, RequestError};
use crate::protocol::Reply;

/// What one waiting request gets.
pub(super) struct Waiter {
    thread: Thread,
    /// When its worker stops waiting (none: never).
    pub(super) deadline: Option<Instant>,
    /// Written by the driver; taken by the worker once `ready`.
    result: Mutex<Option<Result<Reply, Failure>>>,
    /// The server that gave the reply (its connection's identity).
    pub(super) identity: Mutex<Option<Arc<str>>>,
    /// The result may be taken: released after its fence, or a failure.
    ready: AtomicBool,
    /// The worker is to drive next (set under the state lock).
    drive: AtomicBool,
    /// The worker stopped waiting (set under the state lock): its reply
    /// is dropped, and the driving is never handed to it.
    abandoned: AtomicBool,
    /// How many replies the connection had given when it was written
    /// (`NOT_WRITTEN`: not yet; set under the state lock).
    written_at: AtomicU64,
    /// When it was written (`written_at` set): µs since [`epoch`].
    written_us: AtomicU64,
}

const NOT_WRITTEN: u64 = u64::MAX;

/// How long a connection that owes a request its reply must have been
/// silent since it was written before that request's timeout says the
/// server stalled (and marks it sick). Redis answers in microseconds: a
/// 1-3 ms `.timeout()` that passes on a busy connection is the request's,
/// and once marked the server every time, closing the shared connection
/// at its next idle moment (reopened more than 100 times a second).
const STALL: Duration = Duration::from_millis(100);

/// The instant written times count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn us_since_epoch(at: Instant) -> u64 {
    at.saturating_duration_since(epoch()).as_micros() as u64
}

impl Waiter {
    pub(super) fn new(deadline: Option<Instant>) -> Arc<Waiter> {
        Arc::new(Waiter {
            thread: thread::current(),
            deadline,
            result: Mutex::new(None),
            identity: Mutex::new(None),
            ready: AtomicBool::new(false),
            drive: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            written_at: AtomicU64::new(NOT_WRITTEN),
            written_us: AtomicU64::new(0),
        })
    }

    pub(super) fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Whether its deadline passing says nothing of the server, with
    /// `replies` read on the connection so far (under the state lock): it
    /// was not written, replies came after it was, or it was written less
    /// than [`STALL`] ago.
    pub(super) fn late_only(&self, replies: u64) -> bool {
        let at = self.written_at.load(Ordering::Relaxed);
        if at == NOT_WRITTEN || replies > at {
            return true;
        }
        let written = self.written_us.load(Ordering::Relaxed);
        us_since_epoch(Instant::now()).saturating_sub(written) < STALL.as_micros() as u64
    }

    /// It goes on the connection at `now`, which has given `replies` so
    /// far (under the state lock).
    pub(super) fn set_written(&self, replies: u64, now: Instant) {
        self.written_us
            .store(us_since_epoch(now), Ordering::Relaxed);
        self.written_at.store(replies, Ordering::Relaxed);
    }

    /// Its worker stops waiting (under the state lock).
    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    /// Parks its worker until it is woken or its deadline comes (none:
    /// until woken); true, without parking, once the deadline has passed.
    pub(super) fn park(&self) -> bool {
        match self.deadline {
            None => thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return true;
                }
                thread::park_timeout(deadline - now);
            }
        }
        false
    }

    /// The error of this request, abandoned at its deadline, with
    /// `replies` read on the connection so far (under the state lock):
    /// [`RequestError::Late`] when that says nothing of the server.
    pub(super) fn timed_out<E>(&self, replies: u64) -> RequestError<E> {
        match self.late_only(replies) {
            true => RequestError::Late(Failure::Timeout),
            false => RequestError::Collateral(Failure::Timeout),
        }
    }

    /// Whether its deadline has passed.
    pub(super) fn due(&self) -> bool {
        self.deadline.is_some_and(|due| due <= Instant::now())
    }

    /// Whether it still waits for its reply at `now`: not abandoned, its
    /// deadline not passed.
    pub(super) fn live_at(&self, now: Instant) -> bool {
        !self.abandoned() && !self.deadline.is_some_and(|due| due <= now)
    }

    /// Keeps a reply, not visible to the worker until released.
    pub(super) fn hold(&self, reply: Reply, identity: Option<&Arc<str>>) {
        if !self.abandoned() {
            *self.identity.lock() = identity.cloned();
            *self.result.lock() = Some(Ok(reply));
        }
    }

    pub(super) fn release(&self) {
        self.set_ready();
        self.wake();
    }

    /// Its result may be taken (under the state lock).
    pub(super) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Wakes its worker (a system call: after the state lock).
    pub(super) fn wake(&self) {
        self.thread.unpark();
    }

    /// A failure, visible at once (it replaces a held reply).
    pub(super) fn fail(&self, failure: Failure) {
        if !self.abandoned() {
            *self.result.lock() = Some(Err(failure));
            self.release();
        }
    }

    pub(super) fn take(&self) -> Option<Result<Reply, Failure>> {
        if self.ready.load(Ordering::Acquire) {
            self.result.lock().take()
        } else {
            None
        }
    }

    /// Hands it the driving (under the state lock), and wakes it.
    pub(super) fn drive_next(&self) {
        self.drive.store(true, Ordering::Release);
        self.thread.unpark();
    }

    /// Whether it was handed the driving.
    pub(super) fn drives(&self) -> bool {
        self.drive.load(Ordering::Acquire)
    }

    /// It takes up the driving it was handed.
    pub(super) fn start_driving(&self) {
        self.drive.store(false, Ordering::Relaxed);
    }
}
