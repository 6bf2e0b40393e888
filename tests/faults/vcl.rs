//! The VCL of a trial: its database objects and URLs.
use super::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Private,
    Shared,
    /// Shared, with [ext] `pipelining=true`.
    Pipelined,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Private => "private",
            Mode::Shared => "shared",
            Mode::Pipelined => "pipelined",
        }
    }

    pub(crate) fn shared(self) -> bool {
        self != Mode::Private
    }
}

#[derive(Clone)]
pub(crate) struct DbSpec {
    pub(crate) name: &'static str,
    pub(crate) mode: Mode,
    pub(crate) max_connections: u32,
    pub(crate) connection_timeout: u32,
    pub(crate) command_timeout: u32,
    pub(crate) retries: u32,
    pub(crate) sickness_ttl: u32,
    /// `type = cluster`, the trial's Redis as the seed.
    pub(crate) cluster: bool,
    /// [ext] `near_cache` bytes (0: off).
    pub(crate) near_cache: u64,
    /// `password` (empty: none).
    pub(crate) password: &'static str,
    /// `protocol` (empty: the default, no `HELLO`).
    pub(crate) protocol: &'static str,
    /// `connection_ttl` s (0: none).
    pub(crate) connection_ttl: u32,
    /// `tls = true` with this `tls_cafile` (the port given to [`vcl`] is
    /// then Redis's TLS port): see [`Setup::start_tls`].
    pub(crate) tls_cafile: Option<PathBuf>,
}

impl DbSpec {
    pub(crate) fn new(name: &'static str, mode: Mode) -> DbSpec {
        DbSpec {
            name,
            mode,
            max_connections: if mode.shared() { 8 } else { 1 },
            connection_timeout: 500,
            command_timeout: 500,
            retries: 0,
            sickness_ttl: 1,
            cluster: false,
            near_cache: 0,
            password: "",
            protocol: "",
            connection_ttl: 0,
            tls_cafile: None,
        }
    }

    /// The bound on one command: `(connection_timeout + command_timeout)
    /// x (1 + retries) + 50 ms`.
    pub(crate) fn command_bound(&self) -> Duration {
        Duration::from_millis(
            u64::from(self.connection_timeout + self.command_timeout) * u64::from(1 + self.retries)
                + 50,
        )
    }
}

pub(crate) fn vcl(so: &Path, redis_port: u16, dbs: &[DbSpec], comment: &str) -> String {
    let mut v = format!(
        "vcl 4.1;\n# {comment}\nimport redis from \"{}\";\nimport std;\nbackend default none;\n\nsub vcl_init {{\n",
        so.display()
    );
    for db in dbs {
        v.push_str(&format!(
            "    new {} = redis.db(location = \"127.0.0.1:{redis_port}\", type = {},\n        shared_connections = {}, max_connections = {},\n        connection_timeout = {}, command_timeout = {},\n        max_command_retries = {}, sickness_ttl = {}{}{}{}{}{}{});\n",
            db.name,
            if db.cluster { "cluster" } else { "master" },
            db.mode.shared(),
            db.max_connections,
            db.connection_timeout,
            db.command_timeout,
            db.retries,
            db.sickness_ttl,
            if db.mode == Mode::Pipelined {
                ", pipelining = true"
            } else {
                ""
            },
            if db.near_cache > 0 {
                format!(", near_cache = {}", db.near_cache)
            } else {
                String::new()
            },
            if db.password.is_empty() {
                String::new()
            } else {
                format!(", password = \"{}\"", db.password)
            },
            if db.protocol.is_empty() {
                String::new()
            } else {
                format!(", protocol = {}", db.protocol)
            },
            if db.connection_ttl > 0 {
                format!(", connection_ttl = {}", db.connection_ttl)
            } else {
                String::new()
            },
            match &db.tls_cafile {
                Some(ca) => format!(", tls = true, tls_cafile = \"{}\"", ca.display()),
                None => String::new(),
            }
        ));
    }
    v.push_str(
        r#"}

sub vcl_recv {
    return (synth(200));
}

sub vcl_synth {
    set resp.http.Content-Type = "text/plain";
    set resp.http.x-r = "r";
    if (req.url == "/ping") {
        synthetic("pong");
        return (deliver);
    }
    set req.http.x-key = "fault:" + regsub(req.url, "^/[^/]*/[^/]*/?", "");
"#,
    );
    for db in dbs {
        let n = db.name;
        let record = format!(
            r#"            if ({n}.replied() && !{n}.reply_is_error()) {{
                set resp.http.x-r = resp.http.x-r + "1";
            }} elsif ({n}.replied()) {{
                set resp.http.x-r = resp.http.x-r + "e";
            }} else {{
                set resp.http.x-r = resp.http.x-r + "0";
            }}
"#
        );
        // `server_list` (extended stats): the servers the database holds.
        v.push_str(&format!(
            "    if (req.url == \"/{n}/server-list\") {{\n        synthetic({n}.stats(extended = true));\n        return (deliver);\n    }}\n"
        ));
        v.push_str(&format!("    if (req.url ~ \"^/{n}/stats\") {{\n"));
        for c in COUNTERS {
            v.push_str(&format!(
                "        set resp.http.x-c-{} = {n}.counter(\"{c}\");\n",
                c.replace('.', "-")
            ));
        }
        v.push_str(&format!(
            "        synthetic({n}.stats());\n        return (deliver);\n    }}\n"
        ));
        if db.near_cache > 0 {
            v.push_str(&format!("    if (req.url ~ \"^/{n}/near-cache\") {{\n"));
            for c in NEAR_CACHE_COUNTERS {
                v.push_str(&format!(
                    "        set resp.http.x-nc-{c} = {n}.counter(\"ext.near_cache.{c}\");\n"
                ));
            }
            v.push_str("        synthetic(\"\");\n        return (deliver);\n    }\n");
        }
        v.push_str(&format!("    if (req.url ~ \"^/{n}/\") {{\n"));
        v.push_str(&format!(
            "        if (req.url ~ \"^/{n}/(set|mix)/\") {{\n            {n}.command(\"SET\");\n            {n}.push(req.http.x-key);\n            {n}.push(req.url);\n            {n}.execute();\n{record}        }}\n"
        ));
        // `x-v`: the value read (the staleness trials check it).
        let get = |paths: &str, execute: &str| {
            format!(
                "        if (req.url ~ \"^/{n}/{paths}/\") {{\n            {n}.command(\"GET\");\n            {n}.push(req.http.x-key);\n            {n}.execute({execute});\n            if ({n}.reply_is_nil()) {{\n                set resp.http.x-v = \"(nil)\";\n            }} else {{\n                set resp.http.x-v = {n}.get_reply();\n            }}\n{record}        }}\n"
            )
        };
        v.push_str(&get("(get|mix)", ""));
        // `/<db>/rget/<key>`: a read a replica may serve.
        v.push_str(&get("rget", "false"));
        v.push_str(&format!(
            // `/<db>/put/<key>/<value>`: SET of a given value.
            "        if (req.url ~ \"^/{n}/put/\") {{\n            {n}.command(\"SET\");\n            {n}.push(\"fault:\" + regsub(req.url, \"^/[^/]*/put/([^/]*)/.*$\", \"\\1\"));\n            {n}.push(regsub(req.url, \"^.*/\", \"\"));\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            // 10 ms of Redis's time in a script: a command that may share
            // a pipelined connection (DEBUG, an admin command, never does).
            "        if (req.url ~ \"^/{n}/slow/\") {{\n            {n}.command(\"EVAL\");\n            {n}.push({{\"{SLOW_SCRIPT}\"}});\n            {n}.push(\"0\");\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            // `/<db>/ping-within/<ms>`: a PING with a deadline of its own
            // (`.timeout()`), beside commands on the database's.
            "        if (req.url ~ \"^/{n}/ping-within/\") {{\n            {n}.command(\"PING\");\n            {n}.timeout(std.integer(regsub(req.url, \"^.*/\", \"\"), 0));\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            // The failover trials count the acknowledged writes.
            "        if (req.url ~ \"^/{n}/incr/\") {{\n            {n}.command(\"INCR\");\n            {n}.push(req.http.x-key);\n            {n}.execute();\n{record}        }}\n"
        ));
        v.push_str(&format!(
            "        if (req.url ~ \"^/{n}/(eval|mix)/\") {{\n            {n}.command(\"EVAL\");\n            {n}.push({{\"return redis.call('INCR', KEYS[1])\"}});\n            {n}.push(\"1\");\n            {n}.push(req.http.x-key + \":n\");\n            {n}.execute();\n{record}        }}\n    }}\n"
        ));
    }
    v.push_str(
        r#"    if (resp.http.x-r ~ "0") {
        # Redis did not answer: fall back, still a 200.
        set resp.http.x-redis = "fallback";
        synthetic("fallback");
    } else {
        set resp.http.x-redis = "yes";
        synthetic("ok");
    }
    return (deliver);
}
"#,
    );
    v
}

pub(crate) fn one_command_paths(db: &str) -> Vec<String> {
    ["set", "get", "eval"]
        .iter()
        .map(|op| format!("/{db}/{op}/c{{c}}"))
        .collect()
}

/// Holds Redis for 10 ms, as `DEBUG SLEEP 0.01` does, but as a script:
/// the slow command of `s3.pool-exhaustion`, which must reach the
/// pipelined connection too. Redis 7.2+ and Valkey freeze `TIME` for the
/// length of a script (a loop on it never ends: Redis hangs) and offer
/// `os.clock()` (CPU time; a busy loop spends it as wall time); Redis 7.0
/// has no `os` but a `TIME` that moves. The iteration cap bounds the
/// `TIME` loop should a server have neither.
const SLOW_SCRIPT: &str = "local ok, clock = pcall(function() return os.clock end) if ok and clock then local e = clock() + 0.01 repeat until clock() >= e return 1 end local t = redis.call('TIME') local e = t[1] * 1000000 + t[2] + 10000 local n = 0 repeat n = n + 1 t = redis.call('TIME') until t[1] * 1000000 + t[2] >= e or n > 200000 return 1";

/// `base` (from [`vcl`], its one database `db` on `master`) with the
/// Sentinels at `sentinels` (if any) watched before the database, every
/// server `type = auto`, and `replicas` added to it.
pub(crate) fn vcl_with_servers(
    base: &str,
    master: u16,
    sentinels: &[u16],
    replicas: &[u16],
) -> Res<String> {
    let new_db = format!("    new db = redis.db(location = \"127.0.0.1:{master}\", type = master,");
    if !base.contains(&new_db) || !base.contains("}\n\nsub vcl_recv") {
        return Err("the generated VCL changed shape".into());
    }
    let watch = if sentinels.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = sentinels.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("    redis.sentinels(locations = \"{}\");\n", list.join(","))
    };
    let add: String = replicas
        .iter()
        .map(|port| format!("    db.add_server(\"127.0.0.1:{port}\", auto);\n"))
        .collect();
    Ok(base
        .replacen(
            &new_db,
            &format!("{watch}{}", new_db.replace("type = master", "type = auto")),
            1,
        )
        .replacen("}\n\nsub vcl_recv", &format!("{add}}}\n\nsub vcl_recv"), 1))
}
