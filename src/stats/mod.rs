//! Counters of one database object and their JSON / Prometheus renderings.
//!
//! Counters are bumped on the hot path of every command by every Varnish
//! worker, so they are plain relaxed atomics: no lock, and a reader may see
//! counters of one rendering a few increments apart, which monitoring
//! tolerates. The renderings keep the exact key names, metric names, label
//! order and punctuation of libvmod-redis 15.1 (captured output in the test
//! module below), so dashboards and scrapers built on it keep working.
//! Per-server data, which that VMOD does not show, is appended only when the
//! caller passes servers (see [`StatsContext::servers`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::Role;

/// One counter of a database object. The declaration order is the output
/// order of libvmod-redis, and `ALL[c as usize] == c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Servers added to the database.
    ServersTotal,
    /// Servers that could not be added (bad location, failed discovery).
    ServersFailed,
    /// Connections established.
    ConnectionsTotal,
    /// Connection attempts that failed (refused, timeout, AUTH / HELLO error).
    ConnectionsFailed,
    /// Connections closed after an I/O or protocol error.
    DroppedError,
    /// Connections found closed by the server.
    DroppedHungUp,
    /// Private connections evicted past `max_connections` (LRU).
    DroppedOverflow,
    /// Connections replaced after `connection_ttl`.
    DroppedTtl,
    /// Connections opened before a change of the servers or their roles
    /// (e.g. Sentinel events), closed when next used.
    DroppedVersion,
    /// Idle connections closed because their server was marked sick.
    DroppedSick,
    /// Workers that had to wait for a pooled (shared) connection.
    WorkersBlocked,
    /// Sends that got a reply, error replies included: a command redirected
    /// by `MOVED` or `ASK` counts once per node it went to, a retried
    /// `TRYAGAIN` or `LOADING` once more (libvmod-redis; an `EVAL` that
    /// fell back from `EVALSHA` counts once, `ASKING` not at all).
    CommandsTotal,
    /// Attempts that got no reply (no connection, I/O error, timeout),
    /// not counted in `commands.total`.
    CommandsFailed,
    /// Retries after a failed execution.
    CommandsRetried,
    /// Error replies.
    CommandsError,
    /// `NOSCRIPT` replies to `EVALSHA` (followed by an `EVAL`).
    CommandsNoscript,
    /// Cluster slot discoveries.
    ClusterDiscoveriesTotal,
    /// Cluster slot discoveries that failed.
    ClusterDiscoveriesFailed,
    /// `MOVED` redirections followed.
    ClusterRepliesMoved,
    /// `ASK` redirections followed.
    ClusterRepliesAsk,
    /// [ext] Connections closed when released because a command changed
    /// their state (`SELECT`, `CLIENT SETNAME`...) or the task ended with
    /// its `MULTI` / `WATCH` open.
    DroppedState,
    /// [ext] `pipelining=true`: writes of queued commands on a multiplexed
    /// connection.
    PipelineBatches,
    /// [ext] `pipelining=true`: commands written in those batches (their
    /// mean size is `commands / batches`).
    PipelineCommands,
    /// [ext] `pipelining=true`: batches of one command, then of 2-3, 4-7,
    /// 8-15, 16-31, 32-63 and 64 or more: the histogram of batch sizes
    /// (see [`Counter::batch_size`]).
    PipelineBatchSize1,
    PipelineBatchSize2,
    PipelineBatchSize4,
    PipelineBatchSize8,
    PipelineBatchSize16,
    PipelineBatchSize32,
    PipelineBatchSize64,
    /// [ext] `near_cache`: reads served from the near cache.
    NearCacheHits,
    /// [ext] `near_cache`: reads it may keep that it did not have.
    NearCacheMisses,
    /// [ext] `near_cache`: keys Redis said changed (or flushes).
    NearCacheInvalidations,
    /// [ext] `near_cache`: entries evicted for the byte budget.
    NearCacheEvictions,
    /// [ext] `near_cache`: refusals of what a fill needs (its `PTTL`),
    /// which turn the cache off.
    NearCacheRefused,
    /// [ext] `near_cache`: replies not kept for their size (past the
    /// share of the budget one entry may take).
    NearCacheTooLarge,
    /// [ext] `near_cache`: replies kept now (a gauge).
    NearCacheEntries,
    /// [ext] `near_cache`: bytes they take, about (a gauge).
    NearCacheBytes,
    /// [ext] TLS: servers whose certificate is not valid for their name
    /// (`tls_sni`, else the host), connected to as hiredis does; each one
    /// said once in the log (`tls_verify_name=true` refuses them instead).
    TlsNameMismatch,
    /// [ext] Sentinel: sessions of the VCL's Sentinel thread with one
    /// Sentinel that failed (connect, subscription, query, `PING`),
    /// counted on every database of the VCL.
    SentinelFailed,
}

/// Prometheus families whose counters differ by one label: the
/// `connections.dropped.*` counters under `reason`, as libvmod-redis does,
/// and the [ext] batch-size histogram under `size`.
const LABELLED_FAMILIES: [(&str, &str); 2] = [
    ("connections.dropped.", "reason"),
    ("ext.pipelining.batch_size.", "size"),
];

/// The `# HELP` texts of the labelled families; an unlabelled family's is
/// its counter's varnishstat oneliner ([`Counter::help`]).
const LABELLED_FAMILIES_HELP: [&str; 2] = [
    "Connections closed, by reason: error, hung_up (closed by the server), overflow (past max_connections), ttl, version (servers or roles changed), sick",
    "[ext] Pipelined batches by their number of commands (size: the range)",
];

/// The batch-size histogram: its counters, each with the smallest size it
/// counts (the last one counts everything from there on).
const BATCH_SIZES: [(Counter, usize); 7] = [
    (Counter::PipelineBatchSize1, 1),
    (Counter::PipelineBatchSize2, 2),
    (Counter::PipelineBatchSize4, 4),
    (Counter::PipelineBatchSize8, 8),
    (Counter::PipelineBatchSize16, 16),
    (Counter::PipelineBatchSize32, 32),
    (Counter::PipelineBatchSize64, 64),
];

impl Counter {
    /// Number of counters.
    pub const COUNT: usize = 40;

    /// The first [`Counter::C_VMOD`] of [`Counter::ALL`] are libvmod-redis's;
    /// the others are [ext], shown only in the [ext] part of the output
    /// (their names start with `ext.`).
    pub const C_VMOD: usize = 20;

    /// Every counter, in output order.
    pub const ALL: [Counter; Counter::COUNT] = [
        Counter::ServersTotal,
        Counter::ServersFailed,
        Counter::ConnectionsTotal,
        Counter::ConnectionsFailed,
        Counter::DroppedError,
        Counter::DroppedHungUp,
        Counter::DroppedOverflow,
        Counter::DroppedTtl,
        Counter::DroppedVersion,
        Counter::DroppedSick,
        Counter::WorkersBlocked,
        Counter::CommandsTotal,
        Counter::CommandsFailed,
        Counter::CommandsRetried,
        Counter::CommandsError,
        Counter::CommandsNoscript,
        Counter::ClusterDiscoveriesTotal,
        Counter::ClusterDiscoveriesFailed,
        Counter::ClusterRepliesMoved,
        Counter::ClusterRepliesAsk,
        Counter::DroppedState,
        Counter::PipelineBatches,
        Counter::PipelineCommands,
        Counter::PipelineBatchSize1,
        Counter::PipelineBatchSize2,
        Counter::PipelineBatchSize4,
        Counter::PipelineBatchSize8,
        Counter::PipelineBatchSize16,
        Counter::PipelineBatchSize32,
        Counter::PipelineBatchSize64,
        Counter::NearCacheHits,
        Counter::NearCacheMisses,
        Counter::NearCacheInvalidations,
        Counter::NearCacheEvictions,
        Counter::NearCacheRefused,
        Counter::NearCacheTooLarge,
        Counter::NearCacheEntries,
        Counter::NearCacheBytes,
        Counter::TlsNameMismatch,
        Counter::SentinelFailed,
    ];

    /// The dotted path of the counter in the JSON output, also the name
    /// `.counter()` takes, e.g. `connections.dropped.hung_up`.
    pub fn json_name(self) -> &'static str {
        match self {
            Counter::ServersTotal => "servers.total",
            Counter::ServersFailed => "servers.failed",
            Counter::ConnectionsTotal => "connections.total",
            Counter::ConnectionsFailed => "connections.failed",
            Counter::DroppedError => "connections.dropped.error",
            Counter::DroppedHungUp => "connections.dropped.hung_up",
            Counter::DroppedOverflow => "connections.dropped.overflow",
            Counter::DroppedTtl => "connections.dropped.ttl",
            Counter::DroppedVersion => "connections.dropped.version",
            Counter::DroppedSick => "connections.dropped.sick",
            Counter::WorkersBlocked => "workers.blocked",
            Counter::CommandsTotal => "commands.total",
            Counter::CommandsFailed => "commands.failed",
            Counter::CommandsRetried => "commands.retried",
            Counter::CommandsError => "commands.error",
            Counter::CommandsNoscript => "commands.noscript",
            Counter::ClusterDiscoveriesTotal => "cluster.discoveries.total",
            Counter::ClusterDiscoveriesFailed => "cluster.discoveries.failed",
            Counter::ClusterRepliesMoved => "cluster.replies.moved",
            Counter::ClusterRepliesAsk => "cluster.replies.ask",
            Counter::DroppedState => "ext.connections.dropped.state",
            Counter::PipelineBatches => "ext.pipelining.batches",
            Counter::PipelineCommands => "ext.pipelining.commands",
            Counter::PipelineBatchSize1 => "ext.pipelining.batch_size.1",
            Counter::PipelineBatchSize2 => "ext.pipelining.batch_size.2_3",
            Counter::PipelineBatchSize4 => "ext.pipelining.batch_size.4_7",
            Counter::PipelineBatchSize8 => "ext.pipelining.batch_size.8_15",
            Counter::PipelineBatchSize16 => "ext.pipelining.batch_size.16_31",
            Counter::PipelineBatchSize32 => "ext.pipelining.batch_size.32_63",
            Counter::PipelineBatchSize64 => "ext.pipelining.batch_size.64_up",
            Counter::NearCacheHits => "ext.near_cache.hits",
            Counter::NearCacheMisses => "ext.near_cache.misses",
            Counter::NearCacheInvalidations => "ext.near_cache.invalidations",
            Counter::NearCacheEvictions => "ext.near_cache.evictions",
            Counter::NearCacheRefused => "ext.near_cache.refused",
            Counter::NearCacheTooLarge => "ext.near_cache.too_large",
            Counter::NearCacheEntries => "ext.near_cache.entries",
            Counter::NearCacheBytes => "ext.near_cache.bytes",
            Counter::TlsNameMismatch => "ext.tls.name_mismatch",
            Counter::SentinelFailed => "ext.sentinel.failed",
        }
    }

    /// A level (it goes down too), not a count of events.
    pub fn is_gauge(self) -> bool {
        matches!(self, Counter::NearCacheEntries | Counter::NearCacheBytes)
    }

    /// The histogram counter of a batch of `commands` (at least 1).
    pub fn batch_size(commands: usize) -> Counter {
        BATCH_SIZES
            .iter()
            .rev()
            .find(|(_, smallest)| commands >= *smallest)
            .map_or(Counter::PipelineBatchSize1, |(counter, _)| *counter)
    }

    /// The counter whose [`json_name`](Self::json_name) is `name` (exact,
    /// case-sensitive, as in libvmod-redis).
    pub fn from_name(name: &str) -> Option<Counter> {
        Counter::ALL.into_iter().find(|c| c.json_name() == name)
    }

    /// The one-line description of the counter: its varnishstat oneliner
    /// (vmod_redis.vsc, whose order a unit test keeps that of [`Counter::ALL`]).
    pub fn help(self) -> &'static str {
        VSC_ONELINERS[self as usize]
    }

    /// The `# HELP` text of the counter's Prometheus family.
    fn family_help(self) -> &'static str {
        let name = self.json_name();
        LABELLED_FAMILIES
            .iter()
            .zip(LABELLED_FAMILIES_HELP)
            .find_map(|(&(prefix, _), help)| name.starts_with(prefix).then_some(help))
            .unwrap_or_else(|| self.help())
    }

    /// Prometheus family (dots become `_`) and, for a labelled family,
    /// its label and value. The family is returned as the dotted path to
    /// avoid an allocation.
    fn prometheus_parts(self) -> (&'static str, Option<(&'static str, &'static str)>) {
        let name = self.json_name();
        LABELLED_FAMILIES
            .iter()
            .find_map(|&(prefix, label)| {
                let value = name.strip_prefix(prefix)?;
                Some((&prefix[..prefix.len() - 1], Some((label, value))))
            })
            .unwrap_or((name, None))
    }
}

/// What one server of a database looks like right now; filled by the
/// database layer when `.stats()` runs. These are [ext] data: libvmod-redis
/// shows no per-server data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSnapshot {
    /// Canonical location text (`Location`'s Display).
    pub location: String,
    /// Current role; `Auto` while the server has not told it yet.
    pub role: Role,
    /// Marked sick (connection or I/O failure less than `sickness_ttl` ago).
    pub sick: bool,
    /// Connections currently open to the server (all workers, or the pool).
    pub connections_open: u64,
    /// Of those, connections idle right now.
    pub connections_idle: u64,
    /// [ext] `pipelining=true`: commands written or queued on the server's
    /// multiplexed connections and not answered yet.
    pub commands_in_flight: u64,
}

/// What the renderings need besides the counters.
#[derive(Clone, Copy, Debug)]
pub struct StatsContext<'a> {
    /// VCL name of the database object (`name` label).
    pub db_name: &'a str,
    /// Per-server state. Empty: the output is byte for byte that of
    /// libvmod-redis; non-empty: the [ext] counters, a `server_list` JSON
    /// array and `server_*` gauge families are appended.
    pub servers: &'a [ServerSnapshot],
}

impl StatsContext<'_> {
    /// The counters to show: libvmod-redis's, then [ext] ones with the
    /// rest of the [ext] part.
    fn counters(&self) -> &'static [Counter] {
        if self.servers.is_empty() {
            &Counter::ALL[..Counter::C_VMOD]
        } else {
            &Counter::ALL
        }
    }
}

/// The name prefix libvmod-redis uses by default, and also when the VCL
/// passes an empty one.
pub const DEFAULT_PROMETHEUS_PREFIX: &str = "vmod_redis_";

/// The Prometheus arguments of `.stats()`.
#[derive(Clone, Copy, Debug)]
pub struct PrometheusOptions<'a> {
    /// Prepended to every metric name; "" means [`DEFAULT_PROMETHEUS_PREFIX`]
    /// (what libvmod-redis does).
    pub name_prefix: &'a str,
    /// Add `name="<db>"` (and `server="<location>"` on per-server metrics).
    pub default_labels: bool,
    /// Raw label text such as `env="prod",dc="x"`, placed first as
    /// libvmod-redis does. Leading and trailing blanks and commas are
    /// trimmed (libvmod-redis would print `,,` and break the scrape).
    pub extra_labels: &'a str,
}

impl Default for PrometheusOptions<'_> {
    /// The VCL defaults of `.stats()`.
    fn default() -> Self {
        PrometheusOptions {
            name_prefix: DEFAULT_PROMETHEUS_PREFIX,
            default_labels: true,
            extra_labels: "",
        }
    }
}

/// Where the counters of one database object live: in the object's own
/// memory, or in the varnishstat segment that the FFI layer allocates
/// (`REDIS.<vcl>.<object>`), so that varnishstat reads the very counters
/// the commands bump: no copy, no lock, no second increment.
pub trait CounterMemory: Send + Sync {
    /// The counters, indexed like [`Counter::ALL`].
    fn cells(&self) -> &[AtomicU64; Counter::COUNT];

    /// Shows or hides the counters from varnishstat (the VCL's temperature).
    fn set_visible(&self, _visible: bool) {}
}

/// Counters in the object's own memory (unit tests, or when no
/// varnishstat segment could be made).
struct OwnCounters([AtomicU64; Counter::COUNT]);

impl Default for OwnCounters {
    fn default() -> Self {
        OwnCounters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl CounterMemory for OwnCounters {
    fn cells(&self) -> &[AtomicU64; Counter::COUNT] {
        &self.0
    }
}

/// The counters of one database object.
pub struct Stats {
    memory: Box<dyn CounterMemory>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::in_memory(Box::<OwnCounters>::default())
    }
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("counters", &self.snapshot())
            .finish()
    }
}

impl Stats {
    /// Counters kept in `memory` (which should start at zero).
    pub fn in_memory(memory: Box<dyn CounterMemory>) -> Self {
        Stats { memory }
    }

    /// Shows or hides the counters from varnishstat.
    pub fn set_visible(&self, visible: bool) {
        self.memory.set_visible(visible);
    }

    /// Adds one. Relaxed: counters order nothing else.
    #[inline]
    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        self.memory.cells()[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Current value.
    #[inline]
    pub fn get(&self, c: Counter) -> u64 {
        self.memory.cells()[c as usize].load(Ordering::Relaxed)
    }

    /// Takes `n` off a gauge ([`Counter::is_gauge`]).
    #[inline]
    pub fn sub(&self, c: Counter, n: u64) {
        self.memory.cells()[c as usize].fetch_sub(n, Ordering::Relaxed);
    }

    /// Current value of the counter named by its dotted JSON name, for
    /// `.counter()`; `None` for an unknown name.
    pub fn counter(&self, name: &str) -> Option<u64> {
        Counter::from_name(name).map(|c| self.get(c))
    }

    /// Every value, read once each, indexed like [`Counter::ALL`].
    pub fn snapshot(&self) -> [u64; Counter::COUNT] {
        Counter::ALL.map(|c| self.get(c))
    }

    /// Appends the JSON object: nested objects in [`Counter::ALL`] order,
    /// with libvmod-redis's spacing (`"key": value`, `,` without a blank)
    /// and no trailing newline.
    pub fn write_json(&self, out: &mut String, ctx: &StatsContext) {
        let values = self.snapshot();
        out.push('{');
        // Path of the objects currently open below the root.
        let mut open: Vec<&str> = Vec::with_capacity(2);
        // Whether the innermost open object has a member yet.
        let mut has_member = false;
        for &c in ctx.counters() {
            let path: Vec<&str> = c.json_name().split('.').collect();
            let (leaf, groups) = path.split_last().expect("json names are not empty");
            let common = open.iter().zip(groups).take_while(|(a, b)| a == b).count();
            while open.len() > common {
                open.pop();
                out.push('}');
                has_member = true;
            }
            for group in &groups[common..] {
                if has_member {
                    out.push(',');
                }
                let _ = write!(out, "\"{group}\": {{");
                open.push(group);
                has_member = false;
            }
            if has_member {
                out.push(',');
            }
            let _ = write!(out, "\"{leaf}\": {}", values[c as usize]);
            has_member = true;
        }
        for _ in open {
            out.push('}');
        }
        if !ctx.servers.is_empty() {
            out.push_str(",\"server_list\": [");
            for (i, s) in ctx.servers.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"location\": ");
                json_string(out, &s.location);
                let _ = write!(
                    out,
                    ",\"role\": \"{}\",\"sick\": {},\"connections\": {{\"open\": {},\"idle\": {}}},\"commands\": {{\"in_flight\": {}}}}}",
                    s.role.as_str(),
                    s.sick,
                    s.connections_open,
                    s.connections_idle,
                    s.commands_in_flight
                );
            }
            out.push(']');
        }
        out.push('}');
    }

    /// Appends the Prometheus text exposition: per counter a `# TYPE ...
    /// counter` line and its sample(s), every line ending in `\n`, labels
    /// ordered extra, `name`, then `reason` / `server` (libvmod-redis's
    /// order; `{}` when there are none, as it prints too).
    pub fn write_prometheus(&self, out: &mut String, ctx: &StatsContext, opts: &PrometheusOptions) {
        for family in self.prometheus_families(ctx, opts, Document::OneDatabase) {
            out.push_str(&family.header);
            out.push_str(&family.samples);
        }
    }

    /// The families of [`write_prometheus`](Self::write_prometheus), in
    /// output order, kept apart so that the families of several databases
    /// can be merged ([`every_database`]).
    fn prometheus_families(
        &self,
        ctx: &StatsContext,
        opts: &PrometheusOptions,
        document: Document,
    ) -> Vec<PrometheusFamily> {
        // One database: the `name` label as `opts` says; every database:
        // always, it tells their series apart. The per-server gauges
        // always have their `server` label.
        let (name_label, help) = match document {
            Document::OneDatabase => (opts.default_labels, false),
            Document::EveryDatabase => (true, true),
        };
        let values = self.snapshot();
        let prefix = if opts.name_prefix.is_empty() {
            DEFAULT_PROMETHEUS_PREFIX
        } else {
            opts.name_prefix
        };
        let extra = opts
            .extra_labels
            .trim_matches(|ch: char| ch == ',' || ch.is_whitespace());
        let mut base = String::from(extra);
        if name_label {
            if !base.is_empty() {
                base.push(',');
            }
            base.push_str("name=\"");
            label_value(&mut base, ctx.db_name);
            base.push('"');
        }

        let mut families: Vec<PrometheusFamily> = Vec::new();
        let mut family_done: Option<&str> = None;
        for &c in ctx.counters() {
            let (family, reason) = c.prometheus_parts();
            if family_done != Some(family) {
                let mut header = String::new();
                if help {
                    header.push_str("# HELP ");
                    metric_name(&mut header, prefix, family);
                    header.push(' ');
                    help_text(&mut header, c.family_help());
                    header.push('\n');
                }
                header.push_str("# TYPE ");
                metric_name(&mut header, prefix, family);
                header.push_str(if c.is_gauge() {
                    " gauge\n"
                } else {
                    " counter\n"
                });
                families.push(PrometheusFamily::new(header));
                family_done = Some(family);
            }
            let out = &mut families.last_mut().expect("pushed above").samples;
            metric_name(out, prefix, family);
            match reason {
                Some(label) => labels(out, &base, &[label]),
                None => labels(out, &base, &[]),
            }
            let _ = writeln!(out, " {}", values[c as usize]);
        }

        server_gauge_families(ctx, prefix, &base, help, &mut families);
        families
    }
}

/// [ext] The per-server gauges of `extended=true`, a family each: one
/// sample per server, with its `server` label (always: without it two
/// servers of one database would write the same series; no C VMOD output
/// decides this label) and `base`'s labels.
fn server_gauge_families(
    ctx: &StatsContext,
    prefix: &str,
    base: &str,
    help: bool,
    families: &mut Vec<PrometheusFamily>,
) {
    if ctx.servers.is_empty() {
        return;
    }
    type Gauge = fn(&ServerSnapshot) -> u64;
    let gauges: [(&str, &str, Gauge); 5] = [
        (
            "server_info",
            "[ext] A server of the database, with its role (always 1)",
            |_| 1,
        ),
        (
            "server_sick",
            "[ext] 1 while the server is marked sick",
            |s| u64::from(s.sick),
        ),
        (
            "server_connections_open",
            "[ext] Connections open to the server",
            |s| s.connections_open,
        ),
        (
            "server_connections_idle",
            "[ext] Of those, connections idle now",
            |s| s.connections_idle,
        ),
        (
            "server_commands_in_flight",
            "[ext] pipelining: commands sent or queued, not answered yet",
            |s| s.commands_in_flight,
        ),
    ];
    for (family, description, value) in gauges {
        let mut header = String::new();
        if help {
            let _ = writeln!(header, "# HELP {prefix}{family} {description}");
        }
        let _ = writeln!(header, "# TYPE {prefix}{family} gauge");
        let mut gauge = PrometheusFamily::new(header);
        let out = &mut gauge.samples;
        for s in ctx.servers {
            let _ = write!(out, "{prefix}{family}");
            let mut own = vec![("server", s.location.as_str())];
            if family == "server_info" {
                own.push(("role", s.role.as_str()));
            }
            labels(out, base, &own);
            let _ = writeln!(out, " {}", value(s));
        }
        families.push(gauge);
    }
}

/// Which document the families go into.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Document {
    /// `db.stats()`: byte for byte libvmod-redis's text, which has no
    /// `# HELP` lines.
    OneDatabase,
    /// [ext] `redis.stats(db="*")`: a `# HELP` line per family too.
    EveryDatabase,
}

/// One family of a Prometheus exposition: its header (the `# HELP` line
/// if any, the `# TYPE` line) and its sample lines, each ending in `\n`.
struct PrometheusFamily {
    header: String,
    samples: String,
}

impl PrometheusFamily {
    fn new(header: String) -> Self {
        PrometheusFamily {
            header,
            samples: String::new(),
        }
    }
}

/// Escapes a `# HELP` text (`\` and newline, per the text format).
fn help_text(out: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
}

/// Writes `<prefix><family>` with the family's dots turned into `_`.
fn metric_name(out: &mut String, prefix: &str, dotted: &str) {
    out.push_str(prefix);
    out.extend(dotted.chars().map(|ch| if ch == '.' { '_' } else { ch }));
}

/// Writes `{base,k="v",...}`; `base` is already-rendered label text.
fn labels(out: &mut String, base: &str, own: &[(&str, &str)]) {
    out.push('{');
    out.push_str(base);
    let mut first = base.is_empty();
    for (key, value) in own {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(key);
        out.push_str("=\"");
        label_value(out, value);
        out.push('"');
    }
    out.push('}');
}

/// Escapes a Prometheus label value (`\`, `"` and newline, per the text
/// format) so a location or name can never break the exposition.
fn label_value(out: &mut String, value: &str) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
}

/// Writes a quoted JSON string, escaping quotes, backslashes and control
/// characters (a UNIX socket path may contain anything but NUL).
fn json_string(out: &mut String, value: &str) {
    out.push('"');
    for ch in value.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

include!(concat!(env!("OUT_DIR"), "/vsc_names.rs"));

pub(crate) mod every_database;
#[cfg(test)]
mod test_every_database;
#[cfg(test)]
mod test_json;
#[cfg(test)]
mod tests;
