//! One Redis server of a database: where it is, its role, its health.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Location, Role};
use crate::connection::shared::SharedPool;
use crate::connection::Connector;
use crate::protocol::Reply;

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
    /// Sentinel says the server is down (`+sdown` / `+odown`): sick until
    /// it says otherwise, whatever `sickness_ttl`.
    down: AtomicBool,
}

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
            down: AtomicBool::new(false),
        }
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
        self.down.store(down, Ordering::Relaxed);
    }

    /// Sick: failed less than `sickness_ttl` ago, or down for Sentinel.
    pub fn is_sick(&self, now: Instant) -> bool {
        if self.down.load(Ordering::Relaxed) {
            return true;
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

const ROLE_UNKNOWN: u8 = 0;
const ROLE_MASTER: u8 = 1;
const ROLE_SLAVE: u8 = 2;

/// A server of a database: where it is and how to reach it, its role, its
/// health and (shared mode) its pool. Its id is stable for the life of the
/// database, whatever else is added to or removed from the topology.
pub struct Server {
    pub(crate) id: u32,
    pub connector: Connector,
    pub health: Arc<Health>,
    /// Subnet weight (`redis.subnets()`): lower is closer.
    pub(crate) weight: u32,
    /// The type the VCL gave: only `auto` servers have their role asked
    /// (and asked again when it may have changed).
    declared: Role,
    /// Master or slave once known; unknown while a `type=auto` server has
    /// not answered `ROLE` yet (or its answer may be stale), hence the
    /// atomic.
    role: AtomicU8,
    /// What Sentinel last said this server is (unknown until it speaks).
    /// Sentinel decides failovers: a server it calls a replica that still
    /// answers `ROLE` as a master (an old master restarted, or not yet
    /// reconfigured) is about to be demoted, and writes sent to it would
    /// be discarded then. See [`Server::role_answered`].
    sentinel_role: AtomicU8,
    /// `ROLE` was refused (an ACL user without it): logged once.
    role_refused: AtomicBool,
    /// Shared mode: the pool of connections to this server.
    pub(crate) pool: Option<Arc<SharedPool>>,
}

impl Server {
    pub(crate) fn new(
        id: u32,
        connector: Connector,
        declared: Role,
        health: Arc<Health>,
        weight: u32,
        pool: Option<Arc<SharedPool>>,
    ) -> Self {
        let server = Server {
            id,
            connector,
            health,
            weight,
            declared,
            role: AtomicU8::new(ROLE_UNKNOWN),
            sentinel_role: AtomicU8::new(ROLE_UNKNOWN),
            role_refused: AtomicBool::new(false),
            pool,
        };
        server.set_role(declared);
        server
    }

    /// Master or Slave once known; `Auto` while still unknown.
    pub fn role(&self) -> Role {
        match self.role.load(Ordering::Relaxed) {
            ROLE_MASTER => Role::Master,
            ROLE_SLAVE => Role::Slave,
            _ => Role::Auto,
        }
    }

    /// The type the VCL declared (`master`, `slave` or `auto`).
    pub(crate) fn declared(&self) -> Role {
        self.declared
    }

    /// Should `ROLE` be asked on this connection? For `type=auto` servers,
    /// on every new connection (a reconnect may follow a failover) and on
    /// any connection while the role is unknown.
    pub(crate) fn wants_role(&self, conn_asked: bool) -> bool {
        self.declared == Role::Auto
            && !self.role_refused.load(Ordering::Relaxed)
            && (!conn_asked || self.role() == Role::Auto)
    }

    /// The role may have changed (a `READONLY` reply from a supposed
    /// master, a `MASTERDOWN` from a replica): a `type=auto` server is asked
    /// again before its next command. Declared roles stay as the VCL says.
    pub(crate) fn forget_role(&self) {
        if self.declared == Role::Auto && !self.role_refused.load(Ordering::Relaxed) {
            self.role.store(ROLE_UNKNOWN, Ordering::Relaxed);
        }
    }

    /// `ROLE` was refused: the server is taken as a master from now on.
    /// True the first time only, for a log line.
    pub(crate) fn role_refused(&self) -> bool {
        self.set_role(Role::Master);
        !self.role_refused.swap(true, Ordering::Relaxed)
    }

    pub fn set_role(&self, role: Role) {
        self.role.store(role_code(role), Ordering::Relaxed);
    }

    /// Sentinel's verdict on this server's role: it becomes the role, and
    /// later `ROLE` answers may demote the server but not promote it
    /// against this verdict (see [`role_answered`](Self::role_answered)).
    pub(crate) fn set_role_by_sentinel(&self, role: Role) {
        self.sentinel_role.store(role_code(role), Ordering::Relaxed);
        self.set_role(role);
    }

    /// Records what the server answered to `ROLE` and returns the role it
    /// is given: the answer, except that a server Sentinel calls a replica
    /// stays one whatever it says of itself. An old master that restarts
    /// answers `master` until Sentinel reconfigures it (about a second),
    /// and the writes it took meanwhile would vanish when it turns replica;
    /// a promotion counts once Sentinel announces it.
    pub(crate) fn role_answered(&self, answered: Role) -> Role {
        let role = if answered == Role::Master
            && self.sentinel_role.load(Ordering::Relaxed) == ROLE_SLAVE
        {
            Role::Slave
        } else {
            answered
        };
        self.set_role(role);
        role
    }

    /// Where the server is (its `Display` is what logs and stats show).
    pub(crate) fn location(&self) -> &Location {
        self.connector.location()
    }

    /// Open and idle connections of its pool (zeros in private mode, where
    /// they live in the worker threads).
    pub(crate) fn pool_state(&self) -> (u32, u32) {
        self.pool.as_ref().map_or((0, 0), |pool| pool.state())
    }

    /// [ext] Commands in flight on the pool's multiplexed connections.
    pub(crate) fn commands_in_flight(&self) -> usize {
        self.pool
            .as_ref()
            .map_or(0, |pool| pool.commands_in_flight())
    }
}

fn role_code(role: Role) -> u8 {
    match role {
        Role::Master => ROLE_MASTER,
        Role::Slave => ROLE_SLAVE,
        Role::Auto | Role::Cluster => ROLE_UNKNOWN,
    }
}

/// Reads the role out of a `ROLE` reply (`["master", ...]`, `["slave", ...]`).
pub fn role_from_reply(reply: &Reply) -> Option<Role> {
    let Reply::Array(items) = reply else {
        return None;
    };
    let name: &[u8] = match items.first()? {
        Reply::String(bytes) => bytes,
        Reply::Status(text) => text.as_bytes(),
        _ => return None,
    };
    match name {
        b"master" => Some(Role::Master),
        b"slave" | b"replica" => Some(Role::Slave),
        _ => None,
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
    fn zero_sickness_ttl_never_sick() {
        let health = Health::new(Duration::ZERO);
        health.mark_failed();
        assert!(!health.is_sick(Instant::now()));
    }

    #[test]
    fn role_reply_parsing() {
        let master = Reply::Array(vec![Reply::String(b"master".to_vec()), Reply::Integer(0)]);
        let slave = Reply::Array(vec![Reply::String(b"slave".to_vec())]);
        assert_eq!(role_from_reply(&master), Some(Role::Master));
        assert_eq!(role_from_reply(&slave), Some(Role::Slave));
        assert_eq!(role_from_reply(&Reply::Nil), None);
        assert_eq!(
            role_from_reply(&Reply::Array(vec![Reply::String(b"sentinel".to_vec())])),
            None
        );
    }
}
