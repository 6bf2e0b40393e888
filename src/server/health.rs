//! A server's health: when it last failed, the spacing of connection
//! attempts after failures, and Sentinel's verdict.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When a server last failed (connect or I/O error), as microseconds since
/// `epoch` (0: never). Atomics: every worker reads it on every command.
/// (Microseconds, not milliseconds: a connection opened right after a
/// failure, within the same millisecond, must not count as older.)
pub struct Health {
    epoch: Instant,
    sickness_ttl: Duration,
    failed_at_us: AtomicU64,
    /// No connection attempt before this (microseconds since `epoch`; 0:
    /// any time). Set after a failed connect or handshake, so that workers
    /// do not all hammer a server that refuses them (every attempt a new
    /// socket in TIME_WAIT), and moved by the one worker that tries again.
    connect_at_us: AtomicU64,
    /// The spacing after the last failed attempt (0: the last one worked).
    backoff_us: AtomicU64,
    /// Sick whatever `sickness_ttl` until this (microseconds since
    /// `epoch`; 0: not down). Sentinel's `+sdown` / `+odown` set it for
    /// good ([`DOWN_UNTIL_CLEARED`]) until it says otherwise; a cluster
    /// map that says a node is not online sets it for a while
    /// ([`Health::set_down_for`]).
    down_until_us: AtomicU64,
}

const DOWN_UNTIL_CLEARED: u64 = u64::MAX;

/// First spacing of connection attempts after a failure, doubled after each
/// failed attempt up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(25);
/// Longest spacing: a server that comes back is used again within it.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Health {
    pub fn new(sickness_ttl: Duration) -> Self {
        Health {
            epoch: Instant::now(),
            sickness_ttl,
            failed_at_us: AtomicU64::new(0),
            connect_at_us: AtomicU64::new(0),
            backoff_us: AtomicU64::new(0),
            down_until_us: AtomicU64::new(0),
        }
    }

    /// How long until the next connection attempt may be made, if one must
    /// wait; unlike [`Health::may_connect`], claims nothing.
    pub(crate) fn connect_wait(&self) -> Option<Duration> {
        let at = self.connect_at_us.load(Ordering::Relaxed);
        let now = self.us_since_epoch(Instant::now());
        (at != 0 && now < at).then(|| Duration::from_micros(at - now))
    }

    /// May this worker open a connection now? After a failed attempt only
    /// one worker per spacing may (it claims the next slot); the others get
    /// how long until the next attempt.
    pub(crate) fn may_connect(&self) -> Result<(), Duration> {
        let at = self.connect_at_us.load(Ordering::Relaxed);
        if at == 0 {
            return Ok(());
        }
        let now = self.us_since_epoch(Instant::now());
        if now < at {
            return Err(Duration::from_micros(at - now));
        }
        // Claim this attempt: until it ends (and moves the time again),
        // others wait one more spacing.
        let next = now + self.backoff_us.load(Ordering::Relaxed).max(1);
        match self
            .connect_at_us
            .compare_exchange(at, next, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(0) => Ok(()),
            Err(other) => Err(Duration::from_micros(other.saturating_sub(now))),
        }
    }

    /// A connect or handshake failed: space the next attempts more.
    pub(crate) fn connect_failed(&self) {
        let min = MIN_BACKOFF.as_micros() as u64;
        let max = MAX_BACKOFF.as_micros() as u64;
        let backoff = (self.backoff_us.load(Ordering::Relaxed) * 2).clamp(min, max);
        self.backoff_us.store(backoff, Ordering::Relaxed);
        let now = self.us_since_epoch(Instant::now());
        self.connect_at_us.store(now + backoff, Ordering::Relaxed);
    }

    /// A connection was opened: no more spacing.
    pub(crate) fn connect_succeeded(&self) {
        // Read first: on the hot path nothing is written.
        if self.connect_at_us.load(Ordering::Relaxed) != 0 {
            self.backoff_us.store(0, Ordering::Relaxed);
            self.connect_at_us.store(0, Ordering::Relaxed);
        }
    }

    fn us_since_epoch(&self, at: Instant) -> u64 {
        // +1 so that a failure in the first microsecond is not "never".
        at.saturating_duration_since(self.epoch).as_micros() as u64 + 1
    }

    /// Records a failure now: the server is sick for `sickness_ttl`, and
    /// connections opened before now are not reused.
    pub fn mark_failed(&self) {
        self.failed_at_us
            .store(self.us_since_epoch(Instant::now()), Ordering::Relaxed);
    }

    /// Sentinel's verdict: down (sick until cleared) or not.
    pub(crate) fn set_down(&self, down: bool) {
        let until = if down { DOWN_UNTIL_CLEARED } else { 0 };
        self.down_until_us.store(until, Ordering::Relaxed);
    }

    /// Down for `how_long` from now, then as its failures say: a cluster
    /// map's verdict, which only a later map would clear, and maps are
    /// read again only on redirections and errors.
    pub(crate) fn set_down_for(&self, how_long: Duration) {
        let until = self.us_since_epoch(Instant::now() + how_long);
        self.down_until_us.store(until, Ordering::Relaxed);
    }

    /// Sick: failed less than `sickness_ttl` ago, or down.
    pub fn is_sick(&self, now: Instant) -> bool {
        match self.down_until_us.load(Ordering::Relaxed) {
            0 => {}
            DOWN_UNTIL_CLEARED => return true,
            until if self.us_since_epoch(now) < until => return true,
            _ => {}
        }
        match self.failed_at_us.load(Ordering::Relaxed) {
            0 => false,
            failed => {
                let ttl = u64::try_from(self.sickness_ttl.as_micros()).unwrap_or(u64::MAX);
                self.us_since_epoch(now) < failed.saturating_add(ttl)
            }
        }
    }

    /// True when a connection opened at `created` predates the last
    /// failure: after a Redis restart every such connection is dead.
    pub fn outdates(&self, created: Instant) -> bool {
        match self.failed_at_us.load(Ordering::Relaxed) {
            0 => false,
            failed => self.us_since_epoch(created) <= failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_turns_sick_then_recovers() {
        let health = Health::new(Duration::from_millis(50));
        let start = Instant::now();
        assert!(!health.is_sick(start));
        assert!(!health.outdates(start));
        health.mark_failed();
        assert!(health.is_sick(Instant::now()));
        assert!(health.outdates(start));
        assert!(!health.is_sick(Instant::now() + Duration::from_millis(100)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!health.outdates(Instant::now()));
    }

    #[test]
    fn connect_attempts_are_spaced_after_failures() {
        let health = Health::new(Duration::from_secs(1));
        assert_eq!(health.may_connect(), Ok(()));
        health.connect_failed();
        let wait = health.may_connect().unwrap_err();
        assert!(wait <= MIN_BACKOFF, "{wait:?}");
        std::thread::sleep(MIN_BACKOFF);
        // One worker gets to try; the others wait for its outcome.
        assert_eq!(health.may_connect(), Ok(()));
        assert!(health.may_connect().is_err());
        health.connect_failed();
        let wait = health.may_connect().unwrap_err();
        assert!(wait > MIN_BACKOFF && wait <= 2 * MIN_BACKOFF, "{wait:?}");
        for _ in 0..20 {
            health.connect_failed();
        }
        let wait = health.may_connect().unwrap_err();
        assert!(wait > MAX_BACKOFF / 2 && wait <= MAX_BACKOFF, "{wait:?}");
        health.connect_succeeded();
        assert_eq!(health.may_connect(), Ok(()));
        assert_eq!(health.may_connect(), Ok(()));
    }

    #[test]
    fn down_for_sentinel_is_sick_until_cleared() {
        let health = Health::new(Duration::ZERO);
        health.set_down(true);
        // Not a failure of ours: sick whatever sickness_ttl says.
        assert!(health.is_sick(Instant::now() + Duration::from_secs(3600)));
        health.set_down(false);
        assert!(!health.is_sick(Instant::now()));
    }

    #[test]
    fn down_for_a_while_then_as_failures_say() {
        let health = Health::new(Duration::ZERO);
        health.set_down_for(Duration::from_secs(2));
        let now = Instant::now();
        assert!(health.is_sick(now));
        assert!(health.is_sick(now + Duration::from_secs(1)));
        assert!(!health.is_sick(now + Duration::from_secs(3)));
        health.set_down_for(Duration::from_secs(2));
        health.set_down(false);
        assert!(!health.is_sick(Instant::now()));
    }

    #[test]
    fn zero_sickness_ttl_never_sick() {
        let health = Health::new(Duration::ZERO);
        health.mark_failed();
        assert!(!health.is_sick(Instant::now()));
    }
}
