//! The failover hold: while Sentinel fails over a master of the
//! database, `execute(master = true)` commands wait instead of going to
//! the old master, whose writes are discarded once it is turned into a
//! replica of the promoted one. The Sentinel thread starts and lifts the
//! hold (`src/sentinel/apply.rs`); workers only read an atomic flag
//! unless a hold is on.
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config::Location;

/// A failover under way: the master being replaced, and when the hold
/// lifts by itself should Sentinel go silent.
#[derive(Clone, Debug)]
struct Held {
    master: Location,
    until: Instant,
}

/// How a wait on the hold ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Nothing held: the command goes on at once.
    Free,
    /// Held this long, then lifted (promotion, abort, or the hold's own
    /// bound): the command goes on.
    Lifted(Duration),
    /// The command's deadline came first: it fails, never sent.
    Expired { master: Location, held: Duration },
}

#[derive(Default)]
pub(crate) struct FailoverHold {
    /// The hot path: one relaxed-enough load per master command.
    on: AtomicBool,
    held: Mutex<Option<Held>>,
    lifted: Condvar,
}

impl FailoverHold {
    fn state(&self) -> MutexGuard<'_, Option<Held>> {
        self.held.lock()
    }

    /// Holds from now until [`lift`](Self::lift) of `master`, at most
    /// until `until`. True when no hold was on already.
    pub(crate) fn start(&self, master: &Location, until: Instant) -> bool {
        let mut held = self.state();
        let (new, until) = match held.as_ref() {
            // The same failover seen again: its first bound stands. A
            // hold past its bound is over even if no `wait` lifted it (no
            // master command came meanwhile): the failover it held ended
            // unheard, and this one is the next, with a bound of its own.
            Some(h) if &h.master == master && Instant::now() < h.until => (false, h.until),
            _ => (true, until),
        };
        *held = Some(Held {
            master: master.clone(),
            until,
        });
        self.on.store(true, Ordering::Release);
        new
    }

    /// Lifts the hold on `master` (promoted, or the failover aborted).
    /// True when there was one.
    pub(crate) fn lift(&self, master: &Location) -> bool {
        let mut held = self.state();
        if held.as_ref().is_some_and(|h| &h.master == master) {
            *held = None;
            self.on.store(false, Ordering::Release);
            self.lifted.notify_all();
            return true;
        }
        false
    }

    /// Lifts whatever hold is on (the Sentinel thread stops).
    pub(crate) fn lift_any(&self) -> bool {
        let mut held = self.state();
        let was = held.take().is_some();
        self.on.store(false, Ordering::Release);
        self.lifted.notify_all();
        was
    }

    /// Whether a hold is on for `master` (and within its bound).
    pub(crate) fn holds(&self, master: &Location) -> bool {
        self.is_on()
            && self
                .state()
                .as_ref()
                .is_some_and(|h| &h.master == master && Instant::now() < h.until)
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Waits while a hold is on, until it lifts (or passes its own bound)
    /// or `deadline` comes, whichever is first.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Waited {
        if !self.is_on() {
            return Waited::Free;
        }
        let start = Instant::now();
        let mut held = self.state();
        loop {
            let Some(h) = held.clone() else {
                return match start.elapsed() {
                    elapsed if elapsed.is_zero() => Waited::Free,
                    elapsed => Waited::Lifted(elapsed),
                };
            };
            let now = Instant::now();
            if now >= h.until {
                // Sentinel said nothing more within the bound: lifted.
                *held = None;
                self.on.store(false, Ordering::Release);
                self.lifted.notify_all();
                return Waited::Lifted(now - start);
            }
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Waited::Expired {
                    master: h.master,
                    held: now - start,
                };
            }
            let until = deadline.map_or(h.until, |deadline| deadline.min(h.until));
            self.lifted.wait_for(&mut held, until - now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn at(text: &str) -> Location {
        text.parse().unwrap()
    }

    #[test]
    fn nothing_held_costs_nothing() {
        let hold = FailoverHold::default();
        assert!(!hold.is_on());
        assert_eq!(hold.wait(None), Waited::Free);
    }

    #[test]
    fn a_lift_releases_every_waiter() {
        let hold = Arc::new(FailoverHold::default());
        let far = Instant::now() + Duration::from_secs(30);
        assert!(hold.start(&at("127.0.0.1:7001"), far));
        assert!(!hold.start(&at("127.0.0.1:7001"), far));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let hold = hold.clone();
                std::thread::spawn(move || hold.wait(Some(far)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        // Another master's news lifts nothing.
        assert!(!hold.lift(&at("127.0.0.1:7009")));
        assert!(hold.lift(&at("127.0.0.1:7001")));
        for waiter in waiters {
            match waiter.join().unwrap() {
                Waited::Lifted(held) => assert!(held >= Duration::from_millis(40), "{held:?}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(!hold.is_on());
    }

    #[test]
    fn the_deadline_of_a_command_ends_its_wait() {
        let hold = FailoverHold::default();
        hold.start(
            &at("127.0.0.1:7001"),
            Instant::now() + Duration::from_secs(30),
        );
        let start = Instant::now();
        let waited = hold.wait(Some(start + Duration::from_millis(60)));
        let elapsed = start.elapsed();
        assert!(
            matches!(waited, Waited::Expired { ref master, .. } if *master == at("127.0.0.1:7001")),
            "{waited:?}"
        );
        assert!(elapsed >= Duration::from_millis(60), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        // Still on for the others.
        assert!(hold.is_on());
    }

    #[test]
    fn the_hold_lifts_by_itself_at_its_bound() {
        let hold = FailoverHold::default();
        hold.start(
            &at("127.0.0.1:7001"),
            Instant::now() + Duration::from_millis(60),
        );
        // No deadline of its own: the hold's bound ends the wait.
        assert!(matches!(hold.wait(None), Waited::Lifted(_)));
        assert!(!hold.is_on());
        hold.start(&at("127.0.0.1:7001"), Instant::now());
        assert!(hold.lift_any());
        assert!(!hold.lift_any());
    }
}
