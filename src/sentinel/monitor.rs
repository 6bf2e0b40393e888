//! The thread of [`super`]: started when a VCL turns warm, stopped when
//! it cools. Only the VCL layer starts it, so unit-test builds (which
//! leave that layer out) leave it out too.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::apply::{Knowledge, Master};
use super::event;
use crate::config::{Location, SentinelConfig};
use crate::connection::{Connection, Connector, Failure, Limit};
use crate::database::Database;
use crate::protocol::Command;
use crate::protocol::Reply;
use crate::stats::Stats;

/// How bad a message of the thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// A Sentinel failed (`VCL_Error`).
    Error,
    /// A change Sentinel caused (`Debug`).
    Info,
}

/// Where the thread's messages go (the VSL, outside any transaction).
pub(crate) type Logger = Arc<dyn Fn(Level, &str) + Send + Sync>;

/// How long one wait on the subscribed connection lasts: the stop flag is
/// seen at least this often.
const SLICE: Duration = Duration::from_millis(100);
/// A subscribed connection silent this long gets a `PING`, which must be
/// answered within the command timeout: a frozen Sentinel is noticed.
const PING_AFTER: Duration = Duration::from_secs(1);
/// The bound of a connect or a command when the VCL's timeout is 0
/// ("none"): the thread must not hang on a Sentinel that never answers.
const DEFAULT_WAIT: Duration = Duration::from_secs(2);
/// Pause after every Sentinel of the list failed in a row, doubled after
/// each such round up to [`MAX_ROUND_PAUSE`] (each failure is logged: a
/// list of dead Sentinels must not flood the log).
const ROUND_PAUSE: Duration = Duration::from_millis(500);
const MAX_ROUND_PAUSE: Duration = Duration::from_secs(5);

/// The running thread of one VCL; dropping it stops and joins it.
pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Starts the thread for `databases` (those of the VCL, all created
    /// by now: `vcl_init` is over when a VCL turns warm).
    pub(crate) fn start(
        config: SentinelConfig,
        databases: Vec<Arc<Database>>,
        log: Logger,
    ) -> std::io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        let runner = Runner {
            knowledge: Knowledge::new(config.discover),
            config,
            databases,
            stop: stop.clone(),
            log,
        };
        let log = runner.log.clone();
        let thread = std::thread::Builder::new()
            .name("redis-sentinel".into())
            .spawn(move || {
                // A bug must not go unnoticed: Sentinel's news would
                // silently stop while the VCL keeps serving.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run()));
                if run.is_err() {
                    log(
                        Level::Error,
                        "[REDIS] sentinel: the thread stopped on an internal error (please report)",
                    );
                }
            })?;
        Ok(Monitor {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // Within a slice: every wait of the thread (connect, TLS
            // handshake, name lookup, read, write, pause) ends within
            // `STOP_SLICE` of the flag. Joined, not left running: the
            // thread holds the VCL's databases and logs into the VSL, and
            // after `vcl.discard` it must do neither.
            let _ = thread.join();
        }
    }
}

struct Runner {
    config: SentinelConfig,
    databases: Vec<Arc<Database>>,
    knowledge: Knowledge,
    stop: Arc<AtomicBool>,
    log: Logger,
}

/// Why a session with one Sentinel ended.
enum End {
    Stopped,
    /// The Sentinel failed; `served`: it had served first (subscribed
    /// and answered `SENTINEL masters`).
    Failed {
        reason: String,
        served: bool,
    },
}

/// Whether `reply` acknowledges a pattern of `PSUBSCRIBE` (`psubscribe`,
/// the pattern, the count of subscriptions).
fn is_psubscribe_ack(reply: &Reply) -> bool {
    matches!(reply, Reply::Array(items)
        if items.len() == 3 && matches!(&items[0], Reply::String(kind) if kind == b"psubscribe"))
}

fn packed(args: &[&str]) -> Vec<u8> {
    let mut command = Command::new(args[0].as_bytes());
    for arg in &args[1..] {
        command.push(arg.as_bytes());
    }
    command.packed().to_vec()
}

impl Runner {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn connect_wait(&self) -> Duration {
        self.config.connection_timeout.unwrap_or(DEFAULT_WAIT)
    }

    fn command_wait(&self) -> Duration {
        self.config.command_timeout.unwrap_or(DEFAULT_WAIT)
    }

    /// `timeout` from now, or less: every wait within it ends soon after
    /// the thread is asked to stop.
    fn limit(&self, timeout: Duration) -> Limit<'_> {
        Limit::within(Some(timeout)).or_stop(&self.stop)
    }

    fn log_all(&self, lines: Vec<String>) {
        for line in lines {
            (self.log)(Level::Info, &format!("[REDIS] sentinel: {line}"));
        }
    }

    /// `debug=true`: what the thread hears from the Sentinel at `location`
    /// and what it makes of it, besides the changes [`Self::log_all`]
    /// always logs. `line` is only built when it is logged.
    fn debug(&self, location: &Location, line: impl FnOnce() -> String) {
        if self.config.debug {
            (self.log)(
                Level::Info,
                &format!("[REDIS] sentinel {location}: {}", line()),
            );
        }
    }

    /// Sentinels in turn until stopped; a pause after a whole round of
    /// failures (a loop bounded in time by the stop flag).
    fn run(mut self) {
        // What an earlier warm period learnt may be stale: only what
        // Sentinel says from now on counts.
        for db in &self.databases {
            for server in &db.topology().servers {
                server.health.set_down(false);
            }
        }
        let count = self.config.locations.len();
        let mut next = 0;
        let mut failed_in_row = 0;
        let mut pause = ROUND_PAUSE;
        while !self.stopped() {
            let location = self.config.locations[next].clone();
            match self.session(&location) {
                // A wait the flag ended fails as a timeout: not the
                // Sentinel's failure, and not logged.
                End::Stopped | End::Failed { .. } if self.stopped() => return,
                End::Stopped => return,
                End::Failed { reason, served } => {
                    (self.log)(
                        Level::Error,
                        &format!("[REDIS] sentinel {location}: {reason}; trying the next one"),
                    );
                    if served {
                        failed_in_row = 1;
                        pause = ROUND_PAUSE;
                    } else {
                        failed_in_row += 1;
                    }
                }
            }
            next = (next + 1) % count;
            if failed_in_row >= count {
                failed_in_row = 0;
                let until = Instant::now() + pause;
                while !self.stopped() && Instant::now() < until {
                    std::thread::sleep(SLICE);
                }
                pause = (pause * 2).min(MAX_ROUND_PAUSE);
            }
        }
    }

    fn connect(&self, connector: &Connector) -> Result<Connection, String> {
        connector
            .connect_by(&Stats::default(), self.limit(self.connect_wait()))
            .map_err(|err| err.to_string())
    }

    /// Listens to one Sentinel until it fails or the thread is stopped.
    fn session(&mut self, location: &Location) -> End {
        let failed = |reason: String, served| End::Failed { reason, served };
        let connector = Connector::new(
            location,
            None,
            self.config.password.as_deref(),
            self.config.protocol,
            Some(self.connect_wait()),
            self.config.tls.clone(),
        );
        // Each step checks the flag first: a wait that ended on it fails
        // as a timeout, which is no failure of the Sentinel to log.
        let mut commands = match self.connect(&connector) {
            _ if self.stopped() => return End::Stopped,
            Ok(conn) => conn,
            Err(reason) => return failed(reason, false),
        };
        let mut pubsub = match self.connect(&connector) {
            _ if self.stopped() => return End::Stopped,
            Ok(conn) => conn,
            Err(reason) => return failed(reason, false),
        };
        if let Err(end) = self.subscribe(location, &mut pubsub) {
            return end;
        }
        self.debug(location, || {
            format!("connected, subscribed to {}", event::PATTERNS.join(" "))
        });
        // Asked once subscribed, so that no event falls in between.
        match self.refresh(location, &mut commands) {
            _ if self.stopped() => return End::Stopped,
            Ok(()) => {}
            Err(reason) => return failed(reason, false),
        }
        let ping = packed(&["PING"]);
        let mut refreshed = Instant::now();
        let mut heard = Instant::now();
        let mut ping_sent: Option<Instant> = None;
        loop {
            if self.stopped() {
                return End::Stopped;
            }
            match pubsub.receive(SLICE) {
                Ok(reply) => {
                    heard = Instant::now();
                    ping_sent = None;
                    if let Reply::Error(text) = &reply {
                        let text = crate::connection::loggable_error(text);
                        return failed(format!("error on the subscribed connection: {text}"), true);
                    }
                    self.on_message(location, &reply);
                }
                Err(Failure::Timeout) => {}
                Err(err) => return failed(format!("subscribed connection: {err}"), true),
            }
            let now = Instant::now();
            match ping_sent {
                Some(sent) if now.duration_since(sent) > self.command_wait() => {
                    return failed(
                        format!("no answer to PING within {:?}", self.command_wait()),
                        true,
                    );
                }
                Some(_) => {}
                None if now.duration_since(heard) >= PING_AFTER => {
                    match pubsub.send_by(&ping, self.limit(self.command_wait())) {
                        _ if self.stopped() => return End::Stopped,
                        Ok(()) => {}
                        Err(err) => return failed(format!("PING: {err}"), true),
                    }
                    ping_sent = Some(now);
                }
                None => {}
            }
            if self
                .config
                .period
                .is_some_and(|period| now.duration_since(refreshed) >= period)
            {
                match self.refresh(location, &mut commands) {
                    _ if self.stopped() => return End::Stopped,
                    Ok(()) => {}
                    Err(reason) => return failed(reason, true),
                }
                refreshed = Instant::now();
            }
        }
    }

    /// Subscribes `pubsub` to Sentinel's events and waits for every
    /// pattern's acknowledgement. A Sentinel that refuses (an ACL without
    /// channel access) fails the session before it counts as served, so
    /// that a list of such Sentinels gets the pause between rounds rather
    /// than a new session at once, and another, without end.
    fn subscribe(&mut self, location: &Location, pubsub: &mut Connection) -> Result<(), End> {
        let failed = |reason: String| End::Failed {
            reason: format!("PSUBSCRIBE: {reason}"),
            served: false,
        };
        let mut subscribe = vec!["PSUBSCRIBE"];
        subscribe.extend(event::PATTERNS);
        match pubsub.send_by(&packed(&subscribe), self.limit(self.command_wait())) {
            _ if self.stopped() => return Err(End::Stopped),
            Ok(()) => {}
            Err(err) => return Err(failed(err.to_string())),
        }
        let until = Instant::now() + self.command_wait();
        let mut acknowledged = 0;
        while acknowledged < event::PATTERNS.len() {
            if self.stopped() {
                return Err(End::Stopped);
            }
            if Instant::now() >= until {
                return Err(failed(format!(
                    "not acknowledged within {:?}",
                    self.command_wait()
                )));
            }
            match pubsub.receive(SLICE) {
                Ok(Reply::Error(text)) => {
                    return Err(failed(crate::connection::loggable_error(&text).to_string()))
                }
                Ok(reply) if is_psubscribe_ack(&reply) => acknowledged += 1,
                // An event of a pattern already acknowledged.
                Ok(reply) => self.on_message(location, &reply),
                Err(Failure::Timeout) => {}
                Err(err) => return Err(failed(err.to_string())),
            }
        }
        Ok(())
    }

    /// A message on the subscribed connection: an event changes what it
    /// says; anything else (`PONG`, acknowledgements) is dropped.
    fn on_message(&mut self, location: &Location, reply: &Reply) {
        let Some((channel, payload)) = event::pmessage(reply) else {
            return;
        };
        self.debug(location, || format!("event {channel} {payload}"));
        let lines = match event::parse_message(reply) {
            Some(event) => self.knowledge.on_event(&event, &self.databases),
            None => Vec::new(),
        };
        if lines.is_empty() {
            self.debug(location, || format!("{channel}: no change"));
        }
        self.log_all(lines);
    }

    /// One command on the command connection; an error reply is a failure
    /// of this Sentinel.
    fn ask(&self, conn: &mut Connection, args: &[&str]) -> Result<Reply, String> {
        match conn.request_by(&packed(args), self.limit(self.command_wait())) {
            Ok(Reply::Error(text)) => Err(format!(
                "{}: {}",
                args.join(" "),
                crate::connection::loggable_error(&text)
            )),
            Ok(reply) => Ok(reply),
            Err(err) => Err(format!("{}: {err}", args.join(" "))),
        }
    }

    /// `SENTINEL masters`, then `SENTINEL replicas` of each: the whole
    /// picture, applied at once.
    fn refresh(&mut self, location: &Location, conn: &mut Connection) -> Result<(), String> {
        let reply = self.ask(conn, &["SENTINEL", "masters"])?;
        let masters = event::parse_instances(&reply)
            .ok_or_else(|| "SENTINEL masters: unexpected reply".to_string())?;
        let mut full = Vec::with_capacity(masters.len());
        for master in masters {
            if self.stopped() {
                return Ok(());
            }
            let reply = self.ask(conn, &["SENTINEL", "replicas", &master.name])?;
            let replicas = event::parse_instances(&reply)
                .ok_or_else(|| "SENTINEL replicas: unexpected reply".to_string())?;
            full.push(Master { master, replicas });
        }
        for master in &full {
            self.debug(location, || describe(master));
        }
        let lines = self.knowledge.on_refresh(&full, &self.databases);
        if lines.is_empty() {
            self.debug(location, || {
                format!("SENTINEL masters: {} master(s), no change", full.len())
            });
        }
        self.log_all(lines);
        Ok(())
    }
}

/// One master of a refresh as `debug=true` logs it: its name, address and
/// replicas, each with Sentinel's verdicts.
fn describe(master: &Master) -> String {
    let instance = |reported: &event::Reported| {
        let mut text = reported.addr.to_string();
        if reported.sdown {
            text.push_str(" (sdown)");
        }
        if reported.odown {
            text.push_str(" (odown)");
        }
        text
    };
    let replicas: Vec<String> = master.replicas.iter().map(instance).collect();
    let replicas = if replicas.is_empty() {
        "none".to_string()
    } else {
        replicas.join(", ")
    };
    format!(
        "master {} at {}, replicas: {replicas}",
        master.master.name,
        instance(&master.master)
    )
}
