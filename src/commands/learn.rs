//! Reading a server's own command table, and sharing it.
//!
//! Models are process-wide, one per server version (`redis 7.0.15`,
//! `valkey 8.1.1`): the table is the same for every server of one version,
//! so a cluster's nodes, the servers of several databases and every VCL
//! reload share one read of `COMMAND` (about 90 KB on Redis 7.0). Each
//! database points at the model of the server it last learnt; its
//! servers are normally one version, and during a rolling upgrade the
//! commands both versions know mean the same. (Modules: a server's module
//! commands reach the model of its version; a server of that version
//! without the module gets "unknown command" for them anyway.)
//!
//! A database starts on the built-in model (Redis 7.0's table, which
//! every later Redis and Valkey keeps, plus the rules no flag gives). It
//! reads a server's table only when a command is not in the model it
//! has (a newer server's command, a module's): `INFO server` says the
//! version, one round trip on an ordinary connection of that database,
//! bounded as one request of that command; `COMMAND` is read only for a
//! version no model has yet, and never from a server before 7.0 (its
//! table has no key specifications). So the commands of Redis 7.0 never cost a
//! request, and nothing is sent that a VCL did not ask for until it asks
//! for something the model does not know. A server is asked once, and
//! again after it failed (it may have come back as another version). A
//! server that refuses either request (an ACL user without them) leaves
//! the database on its model; a command still unknown then takes an
//! ordinary connection, never a multiplexed one, and has no keys.
//!
//! The command path reads the database's model with one atomic load: the
//! models live in a fixed array of write-once cells ([`MAX_MODELS`]), so
//! no lock and no reference count is taken per command. Past
//! [`MAX_MODELS`] versions in one process, a new version keeps the model
//! its database has.
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::model::{Found, Model};
use super::parse::parse_command_reply;
use crate::connection::{Connection, Failure};
use crate::protocol::Command;
use crate::protocol::Reply;
use crate::server::Server;

/// Distinct server versions one process keeps a model of; cell 0 is the
/// fallback.
pub(crate) const MAX_MODELS: usize = 16;

static MODELS: [OnceLock<Model>; MAX_MODELS] = [const { OnceLock::new() }; MAX_MODELS];

/// The version of the model in cell `i + 1`. Locked only to add one.
static VERSIONS: Mutex<Vec<String>> = Mutex::new(Vec::new());

const INFO_SERVER: &[u8] = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
const COMMAND: &[u8] = b"*1\r\n$7\r\nCOMMAND\r\n";

fn model_at(index: usize) -> &'static Model {
    match MODELS.get(index).and_then(OnceLock::get) {
        Some(model) => model,
        None => MODELS[0].get_or_init(Model::fallback),
    }
}

/// The cell of `version`'s model, if one was read.
fn registered(version: &str) -> Option<usize> {
    let versions = VERSIONS.lock().unwrap_or_else(|e| e.into_inner());
    versions.iter().position(|v| v == version).map(|i| i + 1)
}

/// Stores `model` for `version` (unless another database just did), and
/// returns its cell; `None` when every cell is taken.
fn register(version: &str, model: Model) -> Option<usize> {
    let mut versions = VERSIONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = versions.iter().position(|v| v == version) {
        return Some(i + 1);
    }
    let index = versions.len() + 1;
    MODELS.get(index)?.set(model).ok()?;
    versions.push(version.to_string());
    Some(index)
}

/// `redis 7.0.15`, `valkey 8.1.1`... from an `INFO server` reply.
pub(crate) fn version_of(info: &Reply) -> Option<String> {
    let text = match info {
        Reply::String(bytes) => std::str::from_utf8(bytes).ok()?,
        Reply::Status(text) => text,
        _ => return None,
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let server = field("server_name").unwrap_or("redis");
    let version = field(&format!("{server}_version")).or(field("redis_version"))?;
    Some(format!("{server} {version}"))
}

/// Whether `version` (`redis 7.0.15`) gives key specifications in its
/// `COMMAND` reply: Redis and Valkey 7.0 and later.
fn describes_keys(version: &str) -> bool {
    version
        .rsplit(' ')
        .next()
        .and_then(|number| number.split('.').next()?.parse::<u32>().ok())
        .is_some_and(|major| major >= 7)
}

/// A database's view of the model: which one it uses, and when each of
/// its servers was last asked its version.
#[derive(Default)]
pub(crate) struct Commands {
    current: AtomicUsize,
    /// By server id. Touched on new connections only.
    checked: Mutex<HashMap<u32, Instant>>,
}

impl Commands {
    /// The model in use: one atomic load.
    pub(crate) fn model(&self) -> &'static Model {
        model_at(self.current.load(Ordering::Relaxed))
    }

    /// `command` looked up in the model in use.
    pub(crate) fn find(&self, command: &Command) -> Found<'static> {
        self.model().find(command)
    }

    /// Whether `server`'s version is still to be asked: never asked, or
    /// asked before its last failure.
    pub(crate) fn should_ask(&self, server: &Server) -> bool {
        let checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        checked
            .get(&server.id)
            .map_or(true, |at| server.health.outdates(*at))
    }

    /// Learns `server`'s model on `conn` unless its version was checked
    /// since its last failure (see the module documentation). Every
    /// request ends by `until` (none: no bound). A failure leaves `conn`
    /// broken, and the next unknown command asks again.
    pub(crate) fn learn(
        &self,
        server: &Server,
        conn: &mut Connection,
        until: Option<Instant>,
    ) -> Result<(), Failure> {
        {
            let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            if checked
                .get(&server.id)
                .is_some_and(|at| !server.health.outdates(*at))
            {
                return Ok(());
            }
            checked.insert(server.id, Instant::now());
        }
        let learnt = self.read(conn, until);
        if learnt.is_err() {
            let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            checked.remove(&server.id);
        }
        learnt
    }

    fn read(&self, conn: &mut Connection, until: Option<Instant>) -> Result<(), Failure> {
        // The time left, checked before each request: the two share one
        // bound, and none starts once it is spent.
        let left = || match until {
            None => Ok(None),
            Some(until) => match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Ok(Some(left)),
                _ => Err(Failure::Timeout),
            },
        };
        let Some(version) = version_of(&conn.request(INFO_SERVER, left()?)?) else {
            return Ok(());
        };
        // Before 7.0 the table has no key specifications (and fewer
        // commands): the built-in one says more of every command it has.
        if self.model().source == version || !describes_keys(&version) {
            return Ok(());
        }
        let index = match registered(&version) {
            Some(index) => Some(index),
            None => match parse_command_reply(&conn.request(COMMAND, left()?)?) {
                Ok(described) => register(&version, Model::build(version.clone(), described)),
                // Refused (`NOPERM`, renamed): keep what is in use.
                Err(_) => None,
            },
        };
        if let Some(index) = index {
            self.current.store(index, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
impl Commands {
    /// A database's view starting on the built-in model less `names`
    /// (upper case), as if they were a newer server's commands: for tests
    /// of learning.
    pub(crate) fn fallback_without(names: &[&str]) -> Commands {
        let described = super::builtin::fallback()
            .into_iter()
            .filter(|d| !names.iter().any(|name| *d.name == *name.as_bytes()))
            .collect();
        let model = Model::build(format!("built-in less {names:?}"), described);
        let index = register(&model.source.clone(), model).expect("a free model cell");
        Commands {
            current: AtomicUsize::new(index),
            ..Commands::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_redis_and_valkey() {
        let info = |text: &str| Reply::String(text.as_bytes().to_vec());
        assert_eq!(
            version_of(&info(
                "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
            )),
            Some("redis 7.0.15".into())
        );
        assert_eq!(
            version_of(&info(
                "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n"
            )),
            Some("valkey 8.1.1".into())
        );
        assert_eq!(version_of(&info("# Server\r\n")), None);
        assert_eq!(version_of(&Reply::Error("NOPERM".into())), None);
    }

    #[test]
    fn only_servers_with_key_specifications_are_learnt() {
        assert!(describes_keys("redis 7.0.15"));
        assert!(describes_keys("valkey 8.1.1"));
        assert!(!describes_keys("redis 6.2.14"));
        assert!(!describes_keys("redis x"));
    }

    #[test]
    fn before_any_connection_the_fallback_is_used() {
        let commands = Commands::default();
        assert!(commands.model().source.starts_with("built-in"));
        assert!(commands.find(&Command::new(b"get")).entry.is_some());
    }
}
