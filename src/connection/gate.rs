//! Admission to a shared pool in arrival order.
//!
//! A pool that wakes one waiter when a connection comes back (as r2d2
//! does) lets any worker that asks at that moment take it first. Under heavy contention (hundreds
//! of workers, a handful of connections) that lets a few unlucky workers
//! wait past their bound while others get through at once. The gate holds
//! as many permits as the pool has connections and hands a released permit
//! straight to the longest-waiting worker, so a wait is bounded by the
//! queue ahead of it rather than by luck.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

use parking_lot::Mutex;

/// A counting semaphore that grants permits first come, first served.
pub struct FairGate {
    state: Mutex<GateState>,
}

struct GateState {
    /// Permits nobody holds. Non-zero only while nobody waits.
    free: u32,
    waiters: VecDeque<Arc<Waiter>>,
}

struct Waiter {
    granted: AtomicBool,
    thread: Thread,
}

/// One permit; given back (to the next waiter, if any) when dropped. It
/// owns a reference to its gate: a task may keep a pooled connection (and
/// so its permit) across VCL calls, e.g. from a `MULTI` to its `EXEC`.
pub struct Permit {
    gate: Arc<FairGate>,
}

/// How a permit was obtained.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// A permit was free.
    Immediate,
    /// The worker queued behind others.
    Waited,
}

impl FairGate {
    pub fn new(permits: u32) -> Self {
        FairGate {
            state: Mutex::new(GateState {
                free: permits,
                waiters: VecDeque::new(),
            }),
        }
    }

    /// A permit, waiting in line until `deadline` at most (`None`: as long
    /// as it takes).
    pub fn acquire(self: &Arc<Self>, deadline: Option<Instant>) -> Option<(Permit, Admission)> {
        let waiter = {
            let mut state = self.state.lock();
            if state.free > 0 {
                state.free -= 1;
                return Some((
                    Permit {
                        gate: Arc::clone(self),
                    },
                    Admission::Immediate,
                ));
            }
            let waiter = Arc::new(Waiter {
                granted: AtomicBool::new(false),
                thread: thread::current(),
            });
            state.waiters.push_back(waiter.clone());
            waiter
        };
        if !Self::wait_for_grant(&waiter, deadline) {
            let mut state = self.state.lock();
            // The permit may have been handed over after the last look.
            if !waiter.granted.load(Ordering::Acquire) {
                state.waiters.retain(|w| !Arc::ptr_eq(w, &waiter));
                return None;
            }
        }
        Some((
            Permit {
                gate: Arc::clone(self),
            },
            Admission::Waited,
        ))
    }

    /// Parks until the permit is handed over (true) or `deadline` passes.
    fn wait_for_grant(waiter: &Waiter, deadline: Option<Instant>) -> bool {
        loop {
            if waiter.granted.load(Ordering::Acquire) {
                return true;
            }
            // Spurious returns and stale unpark tokens only cost a loop.
            match deadline {
                None => thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    thread::park_timeout(deadline - now);
                }
            }
        }
    }

    fn release(&self) {
        let mut state = self.state.lock();
        match state.waiters.pop_front() {
            Some(next) => {
                next.granted.store(true, Ordering::Release);
                drop(state);
                next.thread.unpark();
            }
            None => state.free += 1,
        }
    }

    /// Workers waiting in line.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state.lock().waiters.len()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    fn soon(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn permits_are_free_until_exhausted_then_time_out() {
        let gate = Arc::new(FairGate::new(2));
        let (a, how_a) = gate.acquire(soon(10)).unwrap();
        let (_b, how_b) = gate.acquire(soon(10)).unwrap();
        assert_eq!((how_a, how_b), (Admission::Immediate, Admission::Immediate));
        let started = Instant::now();
        assert!(gate.acquire(soon(30)).is_none());
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(gate.waiting(), 0, "a timed-out waiter leaves the line");
        drop(a);
        let (_c, how_c) = gate.acquire(soon(10)).unwrap();
        assert_eq!(how_c, Admission::Immediate);
    }

    #[test]
    fn a_released_permit_goes_to_the_longest_waiter() {
        let gate = Arc::new(FairGate::new(1));
        let held = gate.acquire(soon(10)).unwrap().0;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for id in 0..4 {
            let (waiter_gate, order) = (gate.clone(), order.clone());
            threads.push(thread::spawn(move || {
                let (permit, how) = waiter_gate.acquire(soon(5_000)).unwrap();
                assert_eq!(how, Admission::Waited);
                order.lock().push(id);
                drop(permit);
            }));
            // Queue them in a known order.
            while gate.waiting() < id + 1 {
                thread::sleep(Duration::from_millis(1));
            }
        }
        // A newcomer while others wait queues behind them.
        assert!(gate.acquire(soon(5)).is_none());
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock(), vec![0, 1, 2, 3]);
        assert_eq!(gate.acquire(soon(10)).unwrap().1, Admission::Immediate);
    }

    #[test]
    fn never_more_holders_than_permits() {
        let gate = Arc::new(FairGate::new(3));
        let holders = Arc::new(AtomicU32::new(0));
        let most = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (gate, holders, most) = (gate.clone(), holders.clone(), most.clone());
                thread::spawn(move || {
                    for _ in 0..200 {
                        let _permit = gate.acquire(soon(10_000)).expect("permit");
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        thread::yield_now();
                        holders.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 3);
        assert_eq!(gate.waiting(), 0);
    }
}
