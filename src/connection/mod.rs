//! Connections to one Redis server, and the two ways workers hold them:
//! [`private`] (per worker thread, no lock) and [`shared`] (r2d2 pool).
pub mod private;
pub mod shared;

use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, ProtocolVersion, RedisConnectionInfo};

use crate::config::{Location, Protocol};
use crate::error::{Error, Result};
use crate::stats::{Counter, Stats};

/// How to open a connection to one server: address, credentials, protocol
/// and connect timeout, fixed when the database object is created.
#[derive(Clone, Debug)]
pub struct Connector {
    client: redis::Client,
    location: String,
    connect_timeout: Option<Duration>,
    protocol: Protocol,
}

impl Connector {
    pub fn new(
        location: &Location,
        user: Option<&str>,
        password: Option<&str>,
        protocol: Protocol,
        connect_timeout: Option<Duration>,
    ) -> Result<Self> {
        let addr = match location {
            Location::Tcp { host, port } => ConnectionAddr::Tcp(host.clone(), *port),
            Location::Unix(path) => ConnectionAddr::Unix(path.clone()),
        };
        let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(user) = user {
            settings = settings.set_username(user);
        }
        if let Some(password) = password {
            settings = settings.set_password(password);
        }
        if protocol == Protocol::Resp3 {
            settings = settings.set_protocol(ProtocolVersion::RESP3);
        }
        let info = redis::IntoConnectionInfo::into_connection_info(addr)
            .map(|info: ConnectionInfo| info.set_redis_settings(settings));
        let client = info
            .and_then(redis::Client::open)
            .map_err(|source| Error::Connect {
                server: location.to_string(),
                source,
            })?;
        Ok(Connector {
            client,
            location: location.to_string(),
            connect_timeout,
            protocol,
        })
    }

    /// The server's location as logs and stats show it.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Opens a connection (AUTH / HELLO included), counting the outcome.
    pub fn connect(&self, stats: &Stats) -> Result<Connection> {
        let opened = match self.connect_timeout {
            Some(timeout) => self.client.get_connection_with_timeout(timeout),
            None => self.client.get_connection(),
        }
        .and_then(|mut conn| {
            // RESP3 is negotiated by the client (HELLO 3); RESP2 is asked for
            // explicitly so a server configured otherwise still speaks it.
            if self.protocol == Protocol::Resp2 {
                conn.req_command(redis::cmd("HELLO").arg(2))?;
            }
            Ok(conn)
        });
        match opened {
            Ok(inner) => {
                stats.inc(Counter::ConnectionsTotal);
                Ok(Connection {
                    inner,
                    created: Instant::now(),
                    timeout: None,
                    broken: false,
                })
            }
            Err(source) => {
                stats.inc(Counter::ConnectionsFailed);
                Err(Error::Connect {
                    server: self.location.clone(),
                    source,
                })
            }
        }
    }
}

/// One open connection. `broken` is set after an I/O error or timeout so
/// the pool drops it instead of handing it out again.
pub struct Connection {
    inner: redis::Connection,
    created: Instant,
    /// The read/write timeout currently set on the socket, to skip the
    /// setsockopt calls when consecutive commands use the same timeout.
    timeout: Option<Duration>,
    broken: bool,
}

/// How a request on a connection failed at the transport level.
#[derive(Debug)]
pub enum Failure {
    /// The server closed the connection (`connections.dropped.hung_up`).
    HungUp(redis::RedisError),
    /// A timeout expired (`connections.dropped.error`).
    Timeout,
    /// Any other I/O or protocol error (`connections.dropped.error`).
    Io(redis::RedisError),
}

impl Connection {
    pub fn created(&self) -> Instant {
        self.created
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// True once the connection has lived `ttl`.
    pub fn expired(&self, ttl: Option<Duration>, now: Instant) -> bool {
        ttl.is_some_and(|ttl| now.duration_since(self.created) >= ttl)
    }

    /// Sends one packed request and reads its reply (error replies are
    /// values, not failures). A failure marks the connection broken.
    pub fn request(
        &mut self,
        packed: &[u8],
        timeout: Option<Duration>,
    ) -> std::result::Result<redis::Value, Failure> {
        let result = self
            .set_timeout(timeout)
            .and_then(|()| self.inner.req_packed_command(packed));
        result.map_err(|err| {
            self.broken = true;
            if err.is_timeout() {
                Failure::Timeout
            } else if err.is_connection_dropped() {
                Failure::HungUp(err)
            } else {
                Failure::Io(err)
            }
        })
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) -> redis::RedisResult<()> {
        if self.timeout != timeout {
            self.inner.set_read_timeout(timeout)?;
            self.inner.set_write_timeout(timeout)?;
            self.timeout = timeout;
        }
        Ok(())
    }
}
