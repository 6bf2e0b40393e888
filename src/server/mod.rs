//! One Redis server of a database: where it is, its role, its health
//! (`health.rs`), its connections, how the pools open and check them
//! (`manage.rs`), and every request that prepares one for its commands
//! (`prepare.rs`: the one place of `ROLE`, `READONLY`, `INFO server`).
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Location, Role};
use crate::connection::{Connections, Connector};
use crate::near_cache::Promise;
use crate::protocol::Reply;
use crate::stats::Stats;

mod health;
mod manage;
mod prepare;

pub use health::{Health, MAX_BACKOFF};
pub(crate) use prepare::{run_id, RoleCheck, INFO_SERVER, ROLE};

/// What a database sets for the connections of each of its servers.
#[derive(Clone)]
pub(crate) struct ConnectionPolicy {
    /// The database's counters (connections opened, dropped, failed).
    pub(crate) stats: Arc<Stats>,
    /// `connection_timeout` (`None`: no bound of its own).
    pub(crate) connect_timeout: Option<Duration>,
    /// `connection_ttl`.
    pub(crate) ttl: Option<Duration>,
    /// A cluster database: connections to a replica get `READONLY` first.
    pub(crate) readonly_replicas: bool,
    /// [ext] `near_cache`: each connection is asked which server it
    /// reached (`run_id`), compared with the tracking connection's.
    pub(crate) identify: bool,
}

const ROLE_UNKNOWN: u8 = 0;
const ROLE_MASTER: u8 = 1;
const ROLE_SLAVE: u8 = 2;

/// A server of a database: where it is and how to reach it, its role, its
/// health and its connections. Its id is stable for the life of the
/// database, whatever else is added to or removed from the topology.
pub struct Server {
    pub(crate) id: u32,
    pub connector: Connector,
    pub health: Arc<Health>,
    /// Weight (`redis.subnets()` or `redis.weights()`): lower is closer.
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
    policy: ConnectionPolicy,
    /// Private, pooled or pipelined; shared with the same server of an
    /// older topology (a role changed by a cluster map).
    pub(crate) connections: Arc<Connections>,
    /// [ext] `near_cache`: the server's promise to report changes, kept
    /// by its tracking connection (`near_cache/promise.rs`); shared the
    /// same way.
    pub(crate) promise: Arc<Promise>,
}

impl Server {
    /// A server reached by `connector` with the database's `policy`
    /// (`Database::new_server` makes them).
    pub(crate) fn new(
        id: u32,
        connector: Connector,
        declared: Role,
        health: Arc<Health>,
        weight: u32,
        policy: ConnectionPolicy,
        connections: Arc<Connections>,
    ) -> Self {
        // A cluster database's servers are cluster nodes: their
        // promises cover the slots they serve.
        let policy_cluster = policy.readonly_replicas;
        let server = Server {
            id,
            connector,
            health,
            weight,
            declared,
            role: AtomicU8::new(ROLE_UNKNOWN),
            sentinel_role: AtomicU8::new(ROLE_UNKNOWN),
            role_refused: AtomicBool::new(false),
            policy,
            connections,
            promise: Arc::new(if policy_cluster {
                Promise::for_cluster_node()
            } else {
                Promise::default()
            }),
        };
        server.set_role(declared);
        server
    }

    /// The same server (id, health, connections) declared `role`, as a new
    /// cluster map says it is now.
    pub(crate) fn redeclared(&self, role: Role) -> Self {
        let mut server = Server::new(
            self.id,
            self.connector.clone(),
            role,
            self.health.clone(),
            self.weight,
            self.policy.clone(),
            self.connections.clone(),
        );
        server.promise = self.promise.clone();
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

    /// Sentinel called this server a replica (its last verdict).
    pub(crate) fn is_replica_for_sentinel(&self) -> bool {
        self.sentinel_role.load(Ordering::Relaxed) == ROLE_SLAVE
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
        self.connections.state()
    }

    /// [ext] Commands in flight on the pool's multiplexed connections.
    pub(crate) fn commands_in_flight(&self) -> usize {
        self.connections.commands_in_flight()
    }
}

fn role_code(role: Role) -> u8 {
    match role {
        Role::Master => ROLE_MASTER,
        Role::Slave => ROLE_SLAVE,
        Role::Auto | Role::Cluster => ROLE_UNKNOWN,
    }
}

#[cfg(test)]
impl Server {
    /// A server of no database (private connections, its own counters),
    /// for tests of routing and topology.
    pub(crate) fn for_test(id: u32, location: &str, role: Role) -> Self {
        use crate::connection::private::{Owner, PrivateAccess, PrivateConnections};
        let location: crate::config::Location = location.parse().expect("a location");
        let connector = Connector::new(
            &location,
            None,
            None,
            crate::config::Protocol::Default,
            None,
            None,
        );
        let stats = Arc::new(Stats::default());
        let access = PrivateAccess::new(
            Arc::new(PrivateConnections::default()),
            Owner { db: 0, server: id },
            1,
            Arc::downgrade(&stats),
        );
        let policy = ConnectionPolicy {
            stats,
            connect_timeout: None,
            ttl: None,
            readonly_replicas: false,
            identify: false,
        };
        let health = Arc::new(Health::new(Duration::from_secs(60)));
        let connections = Arc::new(Connections::Private(access));
        Server::new(id, connector, role, health, 0, policy, connections)
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
