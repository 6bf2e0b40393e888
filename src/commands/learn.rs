//! Reading a server's own command table, and sharing it.
//!
//! A model is the table one server gave in its `COMMAND` reply, and is
//! used only by the databases that read that table from their own
//! servers: two servers announcing one version (`redis 7.0.15`) may still
//! have different tables (a command renamed away, a module, a peer that
//! lies), so neither the version nor anything else a server says about
//! itself decides which table another database uses. Models are
//! process-wide and shared by content: a table equal to one already kept
//! (a cluster's nodes, the same server in several databases or VCLs)
//! takes no second cell. A server is known again by its address and its
//! `run_id` (`INFO server`, random per server process): the same process
//! at the same address has the same table, so another database or a VCL
//! reload uses its model without reading `COMMAND` again (about 90 KB on
//! Redis 7.0), while each other server is read once. A restarted server
//! has a new `run_id`, and is read again. Each database points at the
//! model of the server it last learnt; its servers are normally one
//! version, and during a rolling upgrade the commands both versions know
//! mean the same.
//!
//! A database starts on the built-in model (Redis 7.0's table, which
//! every later Redis and Valkey keeps, plus the rules no flag gives). It
//! reads a server's table only when a command is not in the model it
//! has (a newer server's command, a module's): `INFO server` says the
//! version and the `run_id`, one round trip on an ordinary connection of
//! that database, bounded as one request of that command; `COMMAND` is
//! read only from a server whose table is not known yet, and never from a
//! server before 7.0 (its table has no key specifications). So the
//! commands of Redis 7.0 never cost a request, and nothing is sent that a
//! VCL did not ask for until it asks for something the model does not
//! know. A server is asked once, and again after it failed (it may have
//! come back as another version). A server that refuses either request
//! (an ACL user without them) leaves the database on its model; a command
//! still unknown then takes an ordinary connection, never a multiplexed
//! one, and has no keys.
//!
//! The command path reads the database's model with one atomic load: the
//! models live in a fixed array of write-once cells ([`MAX_MODELS`]), so
//! no lock and no reference count is taken per command. Past
//! [`MAX_MODELS`] distinct tables in one process, a new table is not
//! kept and its database keeps the model it has (a peer that gives a new
//! table each time can fill the cells, never change a kept model).
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::model::{Found, Model};
use super::parse::parse_command_reply;
use crate::config::Location;
use crate::connection::{Connection, Failure};
use crate::protocol::Command;
use crate::protocol::Reply;
use crate::server::{run_id, Server, INFO_SERVER};

/// Distinct tables one process keeps a model of; cell 0 is the fallback.
pub(crate) const MAX_MODELS: usize = 16;

/// Servers (address and `run_id`) whose model is remembered; past it the
/// memory starts again (a server forgotten is only read again).
const MAX_SERVERS_REMEMBERED: usize = 1024;

static MODELS: [OnceLock<Model>; MAX_MODELS] = [const { OnceLock::new() }; MAX_MODELS];

/// How many cells after the fallback's are taken. Locked only to add one.
static TAKEN: Mutex<usize> = Mutex::new(0);

/// The cell of the table read from each server process, by its address
/// and `run_id`. Touched only when a database learns.
static SERVERS: Mutex<Option<HashMap<(Location, String), usize>>> = Mutex::new(None);

const COMMAND: &[u8] = b"*1\r\n$7\r\nCOMMAND\r\n";

fn model_at(index: usize) -> &'static Model {
    match MODELS.get(index).and_then(OnceLock::get) {
        Some(model) => model,
        None => MODELS[0].get_or_init(Model::fallback),
    }
}

/// The cell of a model equal to `model` (same source, same table), stored
/// now if none is; `None` when every cell is taken.
fn register(model: Model) -> Option<usize> {
    let mut taken = TAKEN.lock();
    if let Some(index) = (1..=*taken).find(|&i| MODELS[i].get() == Some(&model)) {
        return Some(index);
    }
    let index = *taken + 1;
    MODELS.get(index)?.set(model).ok()?;
    *taken = index;
    Some(index)
}

/// The cell of the table read from the server process `key`, if any.
fn remembered(key: &(Location, String)) -> Option<usize> {
    let servers = SERVERS.lock();
    servers.as_ref()?.get(key).copied()
}

fn remember(key: (Location, String), index: usize) {
    let mut servers = SERVERS.lock();
    let servers = servers.get_or_insert_with(HashMap::new);
    if servers.len() >= MAX_SERVERS_REMEMBERED {
        servers.clear();
    }
    servers.insert(key, index);
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
        let checked = self.checked.lock();
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
            let mut checked = self.checked.lock();
            if checked
                .get(&server.id)
                .is_some_and(|at| !server.health.outdates(*at))
            {
                return Ok(());
            }
            checked.insert(server.id, Instant::now());
        }
        let learnt = self.read(server, conn, until);
        if learnt.is_err() {
            let mut checked = self.checked.lock();
            checked.remove(&server.id);
        }
        learnt
    }

    fn read(
        &self,
        server: &Server,
        conn: &mut Connection,
        until: Option<Instant>,
    ) -> Result<(), Failure> {
        // The time left, checked before each request: the two share one
        // bound, and none starts once it is spent.
        let left = || match until {
            None => Ok(None),
            Some(until) => match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Ok(Some(left)),
                _ => Err(Failure::Timeout),
            },
        };
        let info = conn.request(INFO_SERVER, left()?)?;
        let Some(version) = version_of(&info) else {
            return Ok(());
        };
        // Before 7.0 the table has no key specifications (and fewer
        // commands): the built-in one says more of every command it has.
        if !describes_keys(&version) {
            return Ok(());
        }
        // Without a `run_id` the server cannot be known again: read.
        let process = run_id(&info).map(|id| (server.location().clone(), id));
        let index = match process.as_ref().and_then(remembered) {
            Some(index) => Some(index),
            None => match parse_command_reply(&conn.request(COMMAND, left()?)?) {
                Ok(described) => register(Model::build(version, described)),
                // Refused (`NOPERM`, renamed): keep what is in use.
                Err(_) => None,
            },
        };
        if let Some(index) = index {
            if let Some(process) = process {
                remember(process, index);
            }
            self.current.store(index, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The built-in table less `names` (upper case), as `source`'s.
#[cfg(test)]
fn model_without(source: String, names: &[&str]) -> Model {
    let described = super::builtin::fallback()
        .into_iter()
        .filter(|d| !names.iter().any(|name| *d.name == *name.as_bytes()))
        .collect();
    Model::build(source, described)
}

#[cfg(test)]
impl Commands {
    /// A database's view starting on the built-in model less `names`
    /// (upper case), as if they were a newer server's commands: for tests
    /// of learning.
    pub(crate) fn fallback_without(names: &[&str]) -> Commands {
        let model = model_without(format!("built-in less {names:?}"), names);
        let index = register(model).expect("a free model cell");
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
    fn run_ids_of_info_server() {
        let info = |text: &str| Reply::String(text.as_bytes().to_vec());
        assert_eq!(
            run_id(&info(
                "# Server\r\nredis_version:7.0.15\r\nrun_id:b91d98ed\r\n"
            )),
            Some("b91d98ed".into())
        );
        assert_eq!(run_id(&info("redis_version:7.0.15\r\nrun_id:\r\n")), None);
        assert_eq!(run_id(&info("redis_version:7.0.15\r\n")), None);
    }

    #[test]
    fn equal_tables_share_a_cell_and_different_ones_do_not() {
        let without = |names: &[&str]| model_without("redis 7.0.15".into(), names);
        let full = register(without(&[])).expect("a free cell");
        let renamed = register(without(&["GET"])).expect("a free cell");
        assert_ne!(full, renamed, "one version, two tables");
        assert_eq!(register(without(&[])), Some(full));
        assert!(model_at(renamed).find(&Command::new(b"get")).unknown());
        assert!(!model_at(full).find(&Command::new(b"get")).unknown());
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
