//! The VCL-facing layer: one safe function per vmod.vcc entry, called by
//! the thin `extern "C"` shims in `ffi::exports`. Errors are logged to VSL
//! (`VCL_Error`, `[REDIS]` prefix) and leave the reply slot empty;
//! configuration errors fail `vcl.load`.
use std::cell::RefCell;
use std::ffi::CStr;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::{
    redact_credentials, DbArgs, DbConfig, Location, Preference, Role, SentinelArgs, SentinelConfig,
    Subnets, Weights,
};
use crate::connection::private::PrivateConnections;
use crate::database::{Database, Note, StatsFormat, TaskConnection};
use crate::error::Error;
use crate::ffi::ctx::Ctx;
use crate::ffi::log::outside_tasks;
use crate::ffi::vsc::counter_segment;
use crate::logger::Level;
use crate::near_cache::tracking::Trackers;
use crate::protocol::{Command, Reply};
use crate::sentinel::Monitor;
use crate::stats::{PrometheusOptions, Stats};

/// What one loaded VCL holds (PRIV_VCL): its databases by VCL name, for
/// the proxied functions and the events, and the servers' weights.
#[derive(Default)]
pub struct VclState {
    databases: RwLock<Vec<Arc<Database>>>,
    /// `redis.subnets()` or `redis.weights()`, set by the first of them or
    /// by the first `redis.db()` (then no subnets, no weights).
    preference: Mutex<Option<Preference>>,
    /// The private connections of every database of this VCL that uses
    /// them: one budget per worker thread, as in the C VMOD.
    private: Arc<PrivateConnections>,
    /// `redis.sentinels()`: what the VCL asked for.
    sentinel_config: Mutex<Option<SentinelConfig>>,
    /// The Sentinel thread, while the VCL is warm.
    sentinel: Mutex<Option<Monitor>>,
    /// [ext] The near caches' tracking threads, while the VCL is warm.
    trackers: Mutex<Option<Trackers>>,
}

impl VclState {
    /// The database of this VCL named `name` (case-sensitive, as VCL
    /// object names).
    fn database(&self, name: &[u8]) -> Option<Arc<Database>> {
        let databases = self.databases.read();
        databases
            .iter()
            .find(|db| db.name().as_bytes() == name)
            .cloned()
    }
}

/// Module-level task state (PRIV_TASK of the proxied functions): what
/// `redis.use()` picked.
#[derive(Default)]
pub struct TaskState {
    used: RefCell<Used>,
}

/// The database the proxied functions use when called without `db`.
#[derive(Default)]
enum Used {
    /// No `use()` in this task: none, as in the C VMOD (its task state
    /// holds no database until `use()`), so the proxied functions run
    /// nothing rather than pick one the VCL did not name.
    #[default]
    None,
    Database(Arc<Database>),
    /// `use()` of a name no `redis.db()` of the VCL has: as in the C
    /// VMOD, the proxied functions run nothing until a `use()` of a known
    /// name, rather than run on a database the VCL did not ask for.
    Unknown(String),
}

/// The per-task command and reply of one database object, and the
/// connection its open transaction holds (closed with the task).
#[derive(Default)]
pub struct ReplySlot {
    command: Option<Command>,
    reply: Option<Reply>,
    connection: TaskConnection,
}

type ReplySlotCell = RefCell<ReplySlot>;

/// Logs a request-time error, naming the database.
fn log_error(ctx: &Ctx, db: &Database, what: &str) {
    ctx.log(Level::Error, &format!("[REDIS] db {}: {what}", db.name()));
}

/// Logs what a database reports (`debug=true` lines, warnings), naming it.
fn log_note(ctx: &Ctx, db_name: &str, note: Note) {
    let (level, msg) = match note {
        Note::Debug(msg) => (Level::Info, msg),
        Note::Warning(msg) => (Level::Error, msg),
    };
    ctx.log(level, &format!("[REDIS] db {db_name}: {msg}"));
}

fn reply_slot<'a>(ctx: &Ctx<'a>, db: &Arc<Database>) -> Option<&'a ReplySlotCell> {
    let slot = ctx.task_slot::<ReplySlotCell, Database>(db);
    if slot.is_none() {
        log_error(
            ctx,
            db,
            "no task here (call it from a client or backend subroutine)",
        );
    }
    slot
}

// ---- vcl_init: configuration ------------------------------------------

/// `new db = redis.db(...)`.
pub fn db_new(ctx: &Ctx, vcl: &VclState, name: &str, args: &DbArgs) -> Option<Arc<Database>> {
    // Later subnets() and weights() calls are ignored once a database exists.
    let preference = vcl
        .preference
        .lock()
        .get_or_insert_with(Preference::default)
        .clone();
    let created = DbConfig::from_args(args)
        .map_err(Error::from)
        .and_then(|config| {
            for adjusted in &config.adjusted {
                ctx.log(Level::Error, &format!("[REDIS] db {name}: {adjusted}"));
            }
            let stats = counter_segment(ctx, name).map_or_else(Stats::default, Stats::in_memory);
            let mut note = |note: Note| log_note(ctx, name, note);
            Database::with_stats(
                name,
                config,
                stats,
                preference,
                &vcl.private,
                &mut note,
                &outside_tasks(),
            )
        });
    match created {
        Ok(db) => {
            let db = Arc::new(db);
            vcl.databases.write().push(db.clone());
            Some(db)
        }
        Err(err) => {
            ctx.fail(&format!("[REDIS] db {name}: {err}"));
            None
        }
    }
}

/// `.add_server()`: one more server (`vcl_init` only, like the C VMOD);
/// a bad location or type fails `vcl.load`.
pub fn add_server(ctx: &Ctx, db: &Database, location: &str, role: &str) {
    if !ctx.in_init() {
        log_error(ctx, db, "add_server(): only in vcl_init");
        return;
    }
    let added = location
        .parse::<Location>()
        .and_then(|location| Ok((location, role.parse::<Role>()?)))
        .map_err(Error::from)
        .and_then(|(location, role)| {
            db.add_server(&location, role, &mut |note| log_note(ctx, db.name(), note))
        });
    if let Err(err) = added {
        ctx.fail(&format!(
            "[REDIS] db {}: add_server({}): {err}",
            db.name(),
            redact_credentials(location)
        ));
    }
}

/// `redis.subnets()`: parsed now so a typo fails `vcl.load`.
pub fn subnets(ctx: &Ctx, vcl: &VclState, masks: &str) {
    set_preference(ctx, vcl, "subnets", masks, "VMOD_REDIS_SUBNETS", |masks| {
        Subnets::parse(masks).map(Preference::Subnets)
    });
}

/// `redis.weights()`: parsed now so a typo fails `vcl.load`.
pub fn weights(ctx: &Ctx, vcl: &VclState, rules: &str) {
    set_preference(ctx, vcl, "weights", rules, "VMOD_REDIS_WEIGHTS", |rules| {
        Weights::parse(rules).map(Preference::Weights)
    });
}

/// What `redis.subnets()` and `redis.weights()` share: an empty `text`
/// takes the environment variable `env`; the first call of either (before
/// any `redis.db()`) sets the VCL's preference, and any later call of
/// either is refused with a `VCL_Error` (the VCL keeps loading).
fn set_preference(
    ctx: &Ctx,
    vcl: &VclState,
    function: &str,
    text: &str,
    env: &str,
    parse: impl FnOnce(&str) -> Result<Preference, crate::config::ConfigError>,
) {
    let text = if text.is_empty() {
        std::env::var(env).unwrap_or_default()
    } else {
        text.to_string()
    };
    let mut current = vcl.preference.lock();
    if let Some(preference) = current.as_ref() {
        let why = if vcl.databases.read().is_empty() {
            format!("{} was called before in this VCL", preference.function())
        } else {
            "call it before the first redis.db()".to_string()
        };
        ctx.log(
            Level::Error,
            &format!("[REDIS] {function}() ignored: {why}"),
        );
        return;
    }
    match parse(&text) {
        Ok(parsed) => *current = Some(parsed),
        Err(err) => ctx.fail(&format!("[REDIS] {function}(\"{text}\"): {err}")),
    }
}

/// `redis.sentinels()`: checked now so a typo fails `vcl.load`; the
/// thread starts when the VCL turns warm.
pub fn sentinels(ctx: &Ctx, vcl: &VclState, args: &SentinelArgs) {
    let from_env;
    let mut args = *args;
    if args.locations.is_empty() {
        from_env = std::env::var("VMOD_REDIS_SENTINELS").unwrap_or_default();
        args.locations = &from_env;
    }
    if !ctx.in_init() {
        ctx.log(Level::Error, "[REDIS] sentinels(): only in vcl_init");
        return;
    }
    let mut current = vcl.sentinel_config.lock();
    if current.is_some() {
        ctx.log(
            Level::Error,
            "[REDIS] sentinels() ignored: it was called before in this VCL",
        );
        return;
    }
    match SentinelConfig::from_args(&args) {
        Ok(config) => *current = config,
        Err(err) => ctx.fail(&format!(
            "[REDIS] sentinels(\"{}\"): {err}",
            redact_credentials(args.locations)
        )),
    }
}

// ---- building and running a command ---------------------------------

pub fn command(ctx: &Ctx, db: &Arc<Database>, name: &[u8]) {
    let Some(slot) = reply_slot(ctx, db) else {
        return;
    };
    let mut slot = slot.borrow_mut();
    slot.reply = None;
    if name.is_empty() {
        slot.command = None;
        log_error(ctx, db, "command(): empty command name");
    } else {
        slot.command = Some(Command::new(name));
    }
}

/// Applies `edit` to the pending command, or logs that there is none.
fn with_command(ctx: &Ctx, db: &Arc<Database>, what: &str, edit: impl FnOnce(&mut Command)) {
    let Some(slot) = reply_slot(ctx, db) else {
        return;
    };
    match slot.borrow_mut().command.as_mut() {
        Some(command) => edit(command),
        None => log_no_command(ctx, db, what),
    }
}

/// Logs that `what` (`push()`, `execute()`...) found no pending command.
fn log_no_command(ctx: &Ctx, db: &Database, what: &str) {
    log_error(
        ctx,
        db,
        &format!("{what}: no command (call .command() first)"),
    );
}

pub fn push(ctx: &Ctx, db: &Arc<Database>, arg: &[u8]) {
    with_command(ctx, db, "push()", |command| command.push(arg));
}

pub fn timeout(ctx: &Ctx, db: &Arc<Database>, ms: i64) {
    match u64::try_from(ms) {
        Ok(ms) => with_command(ctx, db, "timeout()", |command| {
            command.timeout = Some(std::time::Duration::from_millis(ms));
        }),
        Err(_) => log_error(ctx, db, &format!("timeout({ms}): must be >= 0")),
    }
}

pub fn retries(ctx: &Ctx, db: &Arc<Database>, retries: i64) {
    match u32::try_from(retries) {
        Ok(retries) => with_command(ctx, db, "retries()", |command| {
            command.retries = Some(retries);
        }),
        Err(_) if retries < 0 => log_error(ctx, db, &format!("retries({retries}): must be >= 0")),
        Err(_) => log_error(
            ctx,
            db,
            &format!("retries({retries}): must be at most {}", u32::MAX),
        ),
    }
}

pub fn execute(ctx: &Ctx, db: &Arc<Database>, master: bool) {
    let Some(slot) = reply_slot(ctx, db) else {
        return;
    };
    let mut slot = slot.borrow_mut();
    let ReplySlot {
        command,
        reply: slot_reply,
        connection,
    } = &mut *slot;
    *slot_reply = None;
    let Some(command) = command.as_mut() else {
        log_no_command(ctx, db, "execute()");
        return;
    };
    let mut debug = |note: Note| log_note(ctx, db.name(), note);
    match db.execute(command, master, connection, &mut debug) {
        Ok(reply) => {
            // An error reply is kept as the reply, and logged (as the C VMOD).
            if let Reply::Error(text) = &reply {
                let name = command.logged_name();
                let text = crate::connection::loggable_error(text);
                log_error(ctx, db, &format!("{name}: error reply: {text}"));
            }
            *slot_reply = Some(reply);
        }
        Err(err) => {
            let name = command.logged_name();
            log_error(ctx, db, &format!("{name}: {err}"));
        }
    }
}

/// The arguments of `.easy_execute()` as VCL gave them.
pub struct EasyExecute<'a> {
    pub command: &'a [u8],
    /// `cmd_arg1` to `cmd_arg16`, each pushed if given.
    pub pushed: [Option<&'a [u8]>; 16],
    pub timeout_ms: Option<i64>,
    pub max_retries: Option<i64>,
    pub master: bool,
}

/// `.easy_execute()`: command, pushes, overrides and execute in one call.
pub fn easy_execute(ctx: &Ctx, db: &Arc<Database>, call: &EasyExecute) {
    command(ctx, db, call.command);
    for arg in call.pushed.iter().flatten() {
        push(ctx, db, arg);
    }
    if let Some(ms) = call.timeout_ms {
        timeout(ctx, db, ms);
    }
    if let Some(count) = call.max_retries {
        retries(ctx, db, count);
    }
    execute(ctx, db, call.master);
}

/// `.free()`: the command and reply; a transaction in progress keeps its
/// connection until it ends or the task does.
pub fn free(ctx: &Ctx, db: &Arc<Database>) {
    if let Some(slot) = reply_slot(ctx, db) {
        let mut slot = slot.borrow_mut();
        slot.command = None;
        slot.reply = None;
    }
}

/// Runs a reply reader on the slot's reply (None before any reply).
pub fn with_reply<R>(ctx: &Ctx, db: &Arc<Database>, read: impl FnOnce(Option<&Reply>) -> R) -> R {
    match reply_slot(ctx, db) {
        Some(slot) => read(slot.borrow().reply.as_ref()),
        None => read(None),
    }
}

// ---- introspection ----------------------------------------------------

/// Whose counters `.stats()` shows.
pub enum StatsOf<'a> {
    /// `db.stats()`, or `redis.stats(db=...)` of one database.
    One(&'a Database),
    /// [ext] `redis.stats(db="*")`: every database of the VCL.
    Every(&'a VclState),
}

/// The `db` argument of `redis.stats()` that means every database: a VCL
/// object name is never `*`, so it cannot shadow one.
pub const EVERY_DATABASE: &[u8] = b"*";

/// `.stats()`: the text, or None when it was streamed into the body.
pub fn stats(
    ctx: &Ctx,
    of: StatsOf,
    format: &str,
    stream: bool,
    prometheus: &PrometheusOptions,
    extended: bool,
) -> Option<String> {
    let format = if format == "prometheus" {
        StatsFormat::Prometheus(prometheus)
    } else {
        StatsFormat::Json
    };
    let mut text = String::with_capacity(1024);
    match of {
        StatsOf::One(db) => db.write_stats(&mut text, &format, extended),
        StatsOf::Every(vcl) => {
            let databases = vcl.databases.read().clone();
            Database::write_stats_of_every(&databases, &mut text, &format, extended);
        }
    }
    if stream && ctx.in_synth() {
        ctx.synth_write(&text);
        None
    } else {
        Some(text)
    }
}

pub fn counter(ctx: &Ctx, db: &Database, name: &str) -> i64 {
    match db.stats().counter(name) {
        Some(value) => i64::try_from(value).unwrap_or(i64::MAX),
        None => {
            log_error(ctx, db, &format!("counter(\"{name}\"): no such counter"));
            0
        }
    }
}

// ---- proxied functions and events -----------------------------------

/// The database a proxied function works on: `db` by VCL name, else the
/// one picked by `use()` in this task. None, and a `VCL_Error` with the C
/// VMOD's words, when that names no database or the task has no `use()`;
/// `function` (`command`, `get_reply`...) says which call ran nothing.
pub fn resolve(
    ctx: &Ctx,
    vcl: &VclState,
    task: Option<&TaskState>,
    function: &str,
    name: &[u8],
) -> Option<Arc<Database>> {
    let found = if name.is_empty() {
        task.and_then(|task| match &*task.used.borrow() {
            Used::Database(db) => Some(db.clone()),
            Used::None | Used::Unknown(_) => None,
        })
    } else {
        vcl.database(name)
    };
    if found.is_none() {
        // Built only here: a call that finds its database formats nothing.
        let why = if name.is_empty() {
            match task.map(|task| task.used.borrow()).as_deref() {
                Some(Used::Unknown(name)) => format!("db={name}"),
                _ => "no redis.use() in this task".to_owned(),
            }
        } else {
            format!("db={}", String::from_utf8_lossy(name))
        };
        ctx.log(
            Level::Error,
            &format!("[REDIS] {function}(): Database instance not available ({why})"),
        );
    }
    found
}

/// `redis.use(db)`: a name no database has (`""` included) leaves the
/// task with none, as in the C VMOD.
pub fn use_db(ctx: &Ctx, vcl: &VclState, task: Option<&TaskState>, name: &[u8]) {
    let used = match vcl.database(name) {
        Some(db) => Used::Database(db),
        None => {
            let name = String::from_utf8_lossy(name).into_owned();
            ctx.log(
                Level::Error,
                &format!(
                    "[REDIS] use(): Failed to use database (db={name}): no redis.db() of this VCL \
                     has that name; the proxied functions called without db run nothing in this \
                     task until a use() of a known name"
                ),
            );
            Used::Unknown(name)
        }
    };
    if let Some(task) = task {
        *task.used.borrow_mut() = used;
    }
}

/// [ext] `redis.version()`: "vmod-redis <Cargo.toml's version>", the same
/// text the `vcl.load` log line gives.
pub const VERSION: &CStr = match CStr::from_bytes_with_nul(
    concat!("vmod-redis ", env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
) {
    Ok(version) => version,
    Err(_) => panic!("the version holds a NUL byte"),
};

/// The VCL events the module acts on.
pub enum Event {
    Load,
    Warm,
    Cold,
    Discard,
}

pub fn event(ctx: &Ctx, vcl: &VclState, event: Event) {
    match event {
        Event::Load => loaded(ctx),
        Event::Warm => warm(vcl),
        Event::Cold => cold(vcl),
        Event::Discard => discard(vcl),
    }
}

/// `vcl.load`: which module (and release) the VCL got, for an operator
/// who reads the log after switching from the C VMOD or back.
fn loaded(ctx: &Ctx) {
    let vcl_name = ctx.vcl_name().unwrap_or_default();
    let version = VERSION.to_string_lossy();
    ctx.log(
        Level::Info,
        &format!("[REDIS] {version} loaded by VCL {vcl_name}"),
    );
}

/// VCL warm: show the databases' counters in varnishstat.
fn warm(vcl: &VclState) {
    for db in vcl.databases.read().iter() {
        db.stats().set_visible(true);
    }
    start_sentinel(vcl);
    start_trackers(vcl);
}

/// Starts the tracking threads of the databases with a near cache.
fn start_trackers(vcl: &VclState) {
    let mut running = vcl.trackers.lock();
    if running.is_some() {
        return;
    }
    match Trackers::start(vcl.databases.read().clone(), outside_tasks()) {
        Ok(trackers) => *running = trackers,
        Err(err) => outside_tasks().error(&format!(
            "[REDIS] near cache: cannot start the tracking thread: {err}"
        )),
    }
}

/// Starts the VCL's Sentinel thread, if it has Sentinels and no thread.
fn start_sentinel(vcl: &VclState) {
    let Some(config) = vcl.sentinel_config.lock().clone() else {
        return;
    };
    let mut running = vcl.sentinel.lock();
    if running.is_some() {
        return;
    }
    let databases = vcl.databases.read().clone();
    match Monitor::start(config, databases, outside_tasks()) {
        Ok(monitor) => *running = Some(monitor),
        Err(err) => outside_tasks().error(&format!(
            "[REDIS] sentinels: cannot start the thread: {err}"
        )),
    }
}

/// Stops and joins the Sentinel thread (it closes its connections).
fn stop_sentinel(vcl: &VclState) {
    let monitor = vcl.sentinel.lock().take();
    drop(monitor);
}

/// VCL cold: hide the counters, close idle connections. Discard: forget
/// the databases (the objects' own `__fini` drops the rest, counters
/// included).
fn cold(vcl: &VclState) {
    stop_sentinel(vcl);
    drop(vcl.trackers.lock().take());
    for db in vcl.databases.read().iter() {
        db.stats().set_visible(false);
        db.close_idle();
    }
}

fn discard(vcl: &VclState) {
    stop_sentinel(vcl);
    drop(vcl.trackers.lock().take());
    vcl.databases.write().clear();
}
