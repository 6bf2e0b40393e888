//! The VCL of each workload.
use super::*;

// VCL

/// `redis.db()` of the workloads.
pub(crate) struct DbSpec {
    pub(crate) location: String,
    /// `type=cluster` (and redirections followed), else `type=master`.
    pub(crate) cluster: bool,
    pub(crate) ttl: u32,
    pub(crate) shared: bool,
    pub(crate) max: u32,
    /// Arguments only ours gets (`pipelining=true`, TLS).
    pub(crate) extra: Vec<String>,
}

impl DbSpec {
    pub(crate) fn master(location: &str, ttl: u32, shared: bool, max: u32) -> DbSpec {
        DbSpec {
            location: location.to_owned(),
            cluster: false,
            ttl,
            shared,
            max,
            extra: Vec::new(),
        }
    }

    pub(crate) fn vcl(&self) -> String {
        let DbSpec {
            location,
            ttl,
            shared,
            max,
            ..
        } = self;
        let (kind, hops) = if self.cluster {
            ("cluster", 16)
        } else {
            ("master", 0)
        };
        let extra: String = self
            .extra
            .iter()
            .map(|a| format!(",\n        {a}"))
            .collect();
        format!(
            "    new db = redis.db(
        location=\"{location}\",
        type={kind},
        connection_timeout=500,
        connection_ttl={ttl},
        command_timeout=0,
        max_command_retries=0,
        shared_connections={shared},
        max_connections={max},
        password=\"\",
        sickness_ttl=0,
        max_cluster_hops={hops}{extra});
"
        )
    }
}

/// Seed 001's blocks (no reply checks), one command each.
pub(crate) fn s1_block(cmd: &str) -> String {
    match cmd {
        "SET" => "        db.command(\"SET\");
        db.push(\"foo\");
        db.push(\"Hello world!\");
        db.execute(true);
        db.free();
"
        .to_owned(),
        "GET" => "        db.command(\"GET\");
        db.push(\"foo\");
        db.execute(true);
        db.free();
"
        .to_owned(),
        _ => format!(
            "        db.command(\"EVAL\");
        db.push({{\"{SCRIPT}\"}});
        db.push(\"1\");
        db.push(\"foo\");
        db.push(req.xid);
        db.push(\"1\");
        db.execute(true);
        db.free();
"
        ),
    }
}

pub(crate) fn s1_url(cmd: &str, n: u32) -> String {
    if n == 0 {
        "/s1/0".to_owned()
    } else {
        format!("/s1/{cmd}/{n}")
    }
}

/// The VCL both workloads share, up to the end of the `/stats` branch of
/// `vcl_synth`: `imports`, a dummy backend, `db` in `vcl_init`, every
/// request a synth.
pub(crate) fn vcl_head(imports: &str, db: &str) -> String {
    format!(
        "vcl 4.0;

{imports}

backend default {{
    .host = \"127.0.0.1\";
    .port = \"80\";
}}

sub vcl_init {{
{db}}}

sub vcl_recv {{
    return (synth(200, \"OK\"));
}}

sub vcl_synth {{
    if (req.url == \"/stats\") {{
        synthetic(db.stats());
    }}"
    )
}

/// Seed 001's VCL with every cell in it, selected by URL.
pub(crate) fn s1_vcl(import: &str, location: &str) -> String {
    let mut v = vcl_head(import, &DbSpec::master(location, 0, false, 1).vcl());
    v.push_str(
        " elsif (req.url == \"/s1/0\") {
        synthetic(\"\");
",
    );
    for cmd in S1_CMDS {
        for n in S1_NS.into_iter().filter(|n| *n > 0) {
            let _ = writeln!(v, "    }} elsif (req.url == \"{}\") {{", s1_url(cmd, n));
            for _ in 0..n {
                v.push_str(&s1_block(cmd));
                v.push('\n');
            }
            v.push_str("        synthetic(\"\");\n");
        }
    }
    v.push_str(
        "    } else {
        set resp.status = 404;
        synthetic(\"\");
    }

    return (deliver);
}
",
    );
    v
}

/// What the S2 VCL appends to the seed's keys "foo" and "bar" on a
/// cluster: a key per request, spread over the masters' slots.
pub(crate) const PER_REQUEST_KEYS: &str = " + req.xid";

/// Seed 000's VCL: SET + GET + EVAL with the reply checks, the keys
/// followed by `keys` (`""`: the seed's), or no command (`None`).
pub(crate) fn s2_vcl(import: &str, db: &str, keys: Option<&str>) -> String {
    let body = if let Some(keys) = keys {
        format!(
            "        db.command(\"SET\");
        db.push(\"foo\"{keys});
        db.push(\"Hello world!\");
        db.execute(true);
        if (!db.reply_is_status()) {{
            std.syslog(6, \"500\");
            set resp.status = 500;
        }}
        db.free();

        db.command(\"GET\");
        db.push(\"foo\"{keys});
        db.execute(true);
        if (!db.reply_is_string()) {{
            std.syslog(6, \"501\");
            set resp.status = 501;
        }}
        db.free();

        db.command(\"EVAL\");
        db.push({{\"{SCRIPT}\"}});
        db.push(\"1\");
        db.push(\"bar\"{keys});
        db.push(req.xid);
        db.push(\"1\");
        db.execute(true);
        if (!db.reply_is_nil()) {{
            std.syslog(6, \"502\");
            set resp.status = 502;
        }}
        db.free();

"
        )
    } else {
        "        # No Redis command: the baseline.\n".to_owned()
    };
    format!(
        "{} else {{
{body}        synthetic(\"\");
    }}

    return (deliver);
}}
",
        vcl_head(&format!("import std;\n{import}"), db)
    )
}
