//! The threads of [`super`]: started when a VCL turns warm, stopped when
//! it cools. Only the VCL layer starts them, so unit-test builds (which
//! leave that layer out) leave them out too.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::apply::{Knowledge, Master};
use super::backoff::Backoff;
use super::event;
use crate::config::{Location, SentinelConfig};
use crate::connection::{Connection, Connector, Failure, Limit};
use crate::database::Database;
use crate::logger::Log;
use crate::protocol::Command;
use crate::protocol::Reply;
use crate::stats::{Counter, Stats};

/// How long one wait on the subscribed connection lasts: the stop flag is
/// seen at least this often.
const SLICE: Duration = Duration::from_millis(100);
/// A subscribed connection silent this long gets a `PING`, which must be
/// answered within the command timeout: a frozen Sentinel is noticed.
const PING_AFTER: Duration = Duration::from_secs(1);
/// The bound of a connect or a command when the VCL's timeout is 0
/// ("none"): the thread must not hang on a Sentinel that never answers.
const DEFAULT_WAIT: Duration = Duration::from_secs(2);

/// The running threads of one VCL; dropping them stops and joins them.
///
/// One thread keeps the topology (a session with one Sentinel at a time),
/// and one per Sentinel of the list listens to its failover events, which
/// only the Sentinel leading a failover publishes: whichever leads, its
/// steps hold the master commands. A thread per Sentinel, not one polling
/// them all: a connect, name lookup or TLS handshake to one Sentinel that
/// is down or frozen waits (up to the connection timeout) without
/// delaying the leader's events. They are bounded by the VCL's own list,
/// one connection each (as one polling thread would need), and live as
/// long as the VCL is warm.
pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Monitor {
    /// Starts the threads for `databases` (those of the VCL, all created
    /// by now: `vcl_init` is over when a VCL turns warm).
    pub(crate) fn start(
        config: SentinelConfig,
        databases: Vec<Arc<Database>>,
        log: Log,
    ) -> std::io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(tls) = &config.tls {
            // The configuration is the VCL's (its clones share what was
            // said): a Sentinel's mismatch is said once per VCL.
            let log = log.clone();
            tls.report_name_mismatches_to(Log::to(move |level, text| {
                log.line(level, &format!("[REDIS] sentinels: {text}"));
            }));
        }
        let shared = Arc::new(Shared {
            knowledge: Mutex::new(Knowledge::new(config.discover)),
            config,
            databases,
            stop: stop.clone(),
            log,
        });
        let mut monitor = Monitor {
            stop,
            threads: Vec::new(),
        };
        // Dropping `monitor` on an error stops the threads already started.
        monitor.spawn("redis-sentinel", &shared, |shared| shared.run())?;
        for index in 0..shared.config.locations.len() {
            monitor.spawn("redis-failover", &shared, move |shared| {
                shared.listen_failovers(index)
            })?;
        }
        Ok(monitor)
    }

    fn spawn(
        &mut self,
        name: &str,
        shared: &Arc<Shared>,
        body: impl FnOnce(&Shared) + Send + 'static,
    ) -> std::io::Result<()> {
        let shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // A bug must not go unnoticed: Sentinel's news would
                // silently stop while the VCL keeps serving.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&shared)));
                if run.is_err() {
                    shared.log.error(
                        "[REDIS] sentinel: a thread stopped on an internal error (please report)",
                    );
                }
            })?;
        self.threads.push(thread);
        Ok(())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Each within a slice, all at once (they all see the flag): every
        // wait of a thread (connect, TLS handshake, name lookup, read,
        // write, pause) ends within `STOP_SLICE` of the flag. Joined, not
        // left running: the threads hold the VCL's databases and log into
        // the VSL, and after `vcl.discard` they must do neither. The last
        // one out drops the knowledge, which lifts any hold.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What the threads of one VCL share.
struct Shared {
    config: SentinelConfig,
    databases: Vec<Arc<Database>>,
    /// Locked for the handling of one message or refresh (never across a
    /// wait on a Sentinel).
    knowledge: Mutex<Knowledge>,
    stop: Arc<AtomicBool>,
    log: Log,
}

/// Why a session with one Sentinel ended.
enum End {
    Stopped,
    /// The Sentinel failed.
    Failed {
        reason: String,
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

impl Shared {
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

    /// Sleeps `pause`, or less when stopped meanwhile.
    fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        while !self.stopped() && Instant::now() < until {
            std::thread::sleep(SLICE.min(until.saturating_duration_since(Instant::now())));
        }
    }

    fn log_all(&self, lines: Vec<String>) {
        for line in lines {
            self.log.info(&format!("[REDIS] sentinel: {line}"));
        }
    }

    /// `debug=true`: what the thread hears from the Sentinel at `location`
    /// and what it makes of it, besides the changes [`Self::log_all`]
    /// always logs. `line` is only built when it is logged.
    fn debug(&self, location: &Location, line: impl FnOnce() -> String) {
        if self.config.debug {
            self.log
                .info(&format!("[REDIS] sentinel {location}: {}", line()));
        }
    }

    /// The topology thread: Sentinels in turn until stopped; a pause
    /// ([`Backoff`]) after a whole round of failures (a loop bounded in
    /// time by the stop flag). A session counts as a failure unless it was
    /// steady ([`Backoff::is_steady`]): Sentinels that close each session
    /// soon after it served would otherwise get a new one after another,
    /// without a pause (each ended session is logged: a list of dead or
    /// hostile Sentinels must not flood the log either).
    fn run(&self) {
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
        let mut backoff = Backoff::new();
        while !self.stopped() {
            let location = self.config.locations[next].clone();
            let (end, served) = self.session(&location, next);
            // A wait the flag ended fails as a timeout: not the
            // Sentinel's failure, and not logged.
            let reason = match end {
                _ if self.stopped() => return,
                End::Stopped => return,
                End::Failed { reason } => reason,
            };
            self.log.error(&format!(
                "[REDIS] sentinel {location}: {reason}; trying the next one"
            ));
            // The Sentinels serve the whole VCL: each database counts the
            // failure, so that its own series shows it.
            for db in &self.databases {
                db.stats().inc(Counter::SentinelFailed);
            }
            if Backoff::is_steady(served) {
                // The first failure of a new round, with the pauses over.
                failed_in_row = 1;
                backoff = Backoff::new();
            } else {
                failed_in_row += 1;
            }
            next = (next + 1) % count;
            if failed_in_row >= count {
                failed_in_row = 0;
                self.pause(backoff.after(None));
            }
        }
    }

    /// A thread listening to the failover events of the Sentinel at
    /// `index` of the list, until stopped; a pause ([`Backoff`]) between
    /// two connections.
    fn listen_failovers(&self, index: usize) {
        let location = &self.config.locations[index];
        let mut backoff = Backoff::new();
        while !self.stopped() {
            let (end, served) = self.failover_session(location, index);
            if self.stopped() {
                return;
            }
            let pause = backoff.after(served);
            if let End::Failed { reason } = end {
                self.log.error(&format!(
                    "[REDIS] sentinel {location}: failover events: {reason}; again in {} ms",
                    pause.as_millis()
                ));
            }
            self.pause(pause);
        }
    }

    fn connector(&self, location: &Location) -> Connector {
        Connector::new(
            location,
            None,
            self.config.password.as_deref(),
            self.config.protocol,
            Some(self.connect_wait()),
            self.config.tls.clone(),
        )
    }

    fn connect(&self, connector: &Connector) -> Result<Connection, String> {
        connector
            .connect_by(&Stats::default(), self.limit(self.connect_wait()))
            .map_err(|err| err.to_string())
    }

    /// Listens to the failover events of one Sentinel until it fails or
    /// the thread is stopped; with how long it was subscribed, if it was.
    fn failover_session(&self, location: &Location, index: usize) -> (End, Option<Duration>) {
        let mut pubsub = match self.connect(&self.connector(location)) {
            _ if self.stopped() => return (End::Stopped, None),
            Ok(conn) => conn,
            Err(reason) => return (End::Failed { reason }, None),
        };
        if let Err(end) = self.subscribe(location, index, &mut pubsub, &event::FAILOVER_PATTERNS) {
            return (end, None);
        }
        self.debug(location, || {
            format!(
                "failover events: subscribed to {}",
                event::FAILOVER_PATTERNS.join(" ")
            )
        });
        let since = Instant::now();
        let end = self.serve(location, index, &mut pubsub, || Ok(()));
        (end, Some(since.elapsed()))
    }

    /// The topology session: listens to one Sentinel until it fails or
    /// the thread is stopped; with how long it served (from its first
    /// `SENTINEL masters` on), if it did.
    fn session(&self, location: &Location, index: usize) -> (End, Option<Duration>) {
        let failed = |reason: String| (End::Failed { reason }, None);
        let connector = self.connector(location);
        // Each step checks the flag first: a wait that ended on it fails
        // as a timeout, which is no failure of the Sentinel to log.
        let mut commands = match self.connect(&connector) {
            _ if self.stopped() => return (End::Stopped, None),
            Ok(conn) => conn,
            Err(reason) => return failed(reason),
        };
        let mut pubsub = match self.connect(&connector) {
            _ if self.stopped() => return (End::Stopped, None),
            Ok(conn) => conn,
            Err(reason) => return failed(reason),
        };
        if let Err(end) = self.subscribe(location, index, &mut pubsub, &event::TOPOLOGY_PATTERNS) {
            return (end, None);
        }
        self.debug(location, || {
            format!(
                "connected, subscribed to {}",
                event::TOPOLOGY_PATTERNS.join(" ")
            )
        });
        // Asked once subscribed, so that no event falls in between.
        match self.refresh(location, &mut commands) {
            _ if self.stopped() => return (End::Stopped, None),
            Ok(()) => {}
            Err(reason) => return failed(reason),
        }
        let since = Instant::now();
        let mut refreshed = since;
        let end = self.serve(location, index, &mut pubsub, || {
            if self
                .config
                .period
                .is_some_and(|period| refreshed.elapsed() >= period)
            {
                self.refresh(location, &mut commands)?;
                refreshed = Instant::now();
            }
            Ok(())
        });
        (end, Some(since.elapsed()))
    }

    /// Reads the subscribed connection to the Sentinel at `index`
    /// (`location`) until it fails or the thread is stopped; `PING`s it
    /// when silent, and calls `each_slice` after every wait (the
    /// topology's periodic refresh), whose error ends the session.
    fn serve(
        &self,
        location: &Location,
        index: usize,
        pubsub: &mut Connection,
        mut each_slice: impl FnMut() -> Result<(), String>,
    ) -> End {
        let failed = |reason: String| End::Failed { reason };
        let ping = packed(&["PING"]);
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
                        return failed(format!("error on the subscribed connection: {text}"));
                    }
                    self.on_message(location, index, &reply);
                }
                Err(Failure::Timeout) => {}
                Err(err) => return failed(format!("subscribed connection: {err}")),
            }
            let now = Instant::now();
            match ping_sent {
                Some(sent) if now.duration_since(sent) > self.command_wait() => {
                    return failed(format!(
                        "no answer to PING within {:?}",
                        self.command_wait()
                    ));
                }
                Some(_) => {}
                None if now.duration_since(heard) >= PING_AFTER => {
                    match pubsub.send_by(&ping, self.limit(self.command_wait())) {
                        _ if self.stopped() => return End::Stopped,
                        Ok(()) => {}
                        Err(err) => return failed(format!("PING: {err}")),
                    }
                    ping_sent = Some(now);
                }
                None => {}
            }
            match each_slice() {
                _ if self.stopped() => return End::Stopped,
                Ok(()) => {}
                Err(reason) => return failed(reason),
            }
        }
    }

    /// Subscribes `pubsub` to `patterns` and waits for every pattern's
    /// acknowledgement. A Sentinel that refuses (an ACL without channel
    /// access) fails the session before it counts as served, so that a
    /// list of such Sentinels gets the pause between rounds rather than a
    /// new session at once, and another, without end.
    fn subscribe(
        &self,
        location: &Location,
        index: usize,
        pubsub: &mut Connection,
        patterns: &[&str],
    ) -> Result<(), End> {
        let failed = |reason: String| End::Failed {
            reason: format!("PSUBSCRIBE: {reason}"),
        };
        let mut subscribe = vec!["PSUBSCRIBE"];
        subscribe.extend(patterns);
        match pubsub.send_by(&packed(&subscribe), self.limit(self.command_wait())) {
            _ if self.stopped() => return Err(End::Stopped),
            Ok(()) => {}
            Err(err) => return Err(failed(err.to_string())),
        }
        let until = Instant::now() + self.command_wait();
        let mut acknowledged = 0;
        while acknowledged < patterns.len() {
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
                Ok(reply) => self.on_message(location, index, &reply),
                Err(Failure::Timeout) => {}
                Err(err) => return Err(failed(err.to_string())),
            }
        }
        Ok(())
    }

    /// A message on a subscribed connection to the Sentinel at `index`:
    /// an event changes what it says; anything else (`PONG`,
    /// acknowledgements) is dropped.
    fn on_message(&self, location: &Location, index: usize, reply: &Reply) {
        let Some((channel, payload)) = event::pmessage(reply) else {
            return;
        };
        self.debug(location, || format!("event {channel} {payload}"));
        let lines = match event::parse_message(reply) {
            Some(event) => self
                .knowledge
                .lock()
                .on_event(&event, index, &self.databases),
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
    fn refresh(&self, location: &Location, conn: &mut Connection) -> Result<(), String> {
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
        let lines = self.knowledge.lock().on_refresh(&full, &self.databases);
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
