//! The suite's modes, as the C VMOD's runner.sh has them (`TLS=true`,
//! `PROTOCOL=RESP3`): one switch of the harness, the vtc files unchanged.
//!
//! * `VTC_TLS=1`: every server, replica, cluster node and Sentinel the
//!   harness starts listens on a TLS port too (`--tls-replication yes`,
//!   `--tls-cluster yes`), and its `${NAME_addr}` / `${NAME_port}` (a
//!   cluster's `${NAME_seed}`, `${NAME_<node>_addr}`...) are that port's:
//!   replicas, Sentinels and cluster nodes reach and announce each other
//!   over TLS as well. The plain port stays for the harness's own checks
//!   and is `${NAME_tcp_port}` (what `INFO`'s `tcp_port` says).
//!   `${redis_cli}` speaks TLS (`--tls --cacert ${tls_ca}`) unless given
//!   `-s` (UNIX sockets have no TLS in Redis).
//! * `VTC_PROTOCOL=RESP3` (or `RESP2`; default: the server's default).
//!
//! The vtc files follow through macros, empty in plain mode:
//! `${db_mode}`, appended to the arguments of `redis.db()` and
//! `redis.sentinels()` (`, tls = true, tls_cafile = "..."` and/or
//! `, protocol = RESP3`), and `${db_protocol}`, the protocol part only,
//! for UNIX sockets. `${redis_tls}` (`true`/`false`) and
//! `${redis_protocol}` (`default`, `RESP2`, `RESP3`) let a test expect
//! what differs by mode.
//!
//! A file that cannot run in a mode says why:
//! `#@ not-in tls: unix sockets carry no TLS` (modes: `tls`, `resp3`,
//! comma-separated); the trial is then reported ignored with that reason.

use std::path::Path;

/// The mode of this run, from the environment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mode {
    pub(crate) tls: bool,
    /// `VTC_PROTOCOL`: `RESP2`, `RESP3` or none.
    pub(crate) protocol: Option<&'static str>,
}

/// The modes a `#@ not-in` directive may name.
pub(crate) const MODE_NAMES: [&str; 2] = ["tls", "resp3"];

impl Mode {
    pub(crate) fn from_env() -> Result<Mode, String> {
        let var = |name: &str| std::env::var(name).unwrap_or_default();
        let tls = match var("VTC_TLS").as_str() {
            "" | "0" | "false" => false,
            "1" | "true" => true,
            other => return Err(format!("VTC_TLS={other:?}: 1/true or 0/false")),
        };
        let protocol = match var("VTC_PROTOCOL").to_ascii_uppercase().as_str() {
            "" | "DEFAULT" => None,
            "RESP2" => Some("RESP2"),
            "RESP3" => Some("RESP3"),
            other => return Err(format!("VTC_PROTOCOL={other:?}: RESP2, RESP3 or default")),
        };
        Ok(Mode { tls, protocol })
    }

    /// Whether the run is in the mode `name` (one of [`MODE_NAMES`]).
    pub(crate) fn is(&self, name: &str) -> bool {
        match name {
            "tls" => self.tls,
            "resp3" => self.protocol == Some("RESP3"),
            _ => false,
        }
    }

    /// `plain`, `tls`, `resp3`, `tls+resp3`... for messages.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.tls {
            parts.push("tls".to_string());
        }
        if let Some(p) = self.protocol {
            parts.push(p.to_ascii_lowercase());
        }
        if parts.is_empty() {
            "plain".into()
        } else {
            parts.join("+")
        }
    }

    /// The mode's macros; `ca`: the test CA (TLS mode).
    pub(crate) fn macros(&self, ca: Option<&str>) -> Vec<(String, String)> {
        let protocol = match self.protocol {
            Some(p) => format!(", protocol = {p}"),
            None => String::new(),
        };
        let tls = match (self.tls, ca) {
            (true, Some(ca)) => format!(", tls = true, tls_cafile = \"{ca}\""),
            _ => String::new(),
        };
        vec![
            ("db_mode".into(), format!("{tls}{protocol}")),
            ("db_tls".into(), tls.clone()),
            ("db_protocol".into(), protocol),
            ("redis_tls".into(), self.tls.to_string()),
            (
                "redis_protocol".into(),
                self.protocol.unwrap_or("default").into(),
            ),
        ]
    }
}

/// redis-server options of the TLS port of TLS mode: those of
/// `#@ redis-tls` (the test material in `macros`), and replication (so
/// Sentinel's links to the servers too) and the cluster bus over TLS.
pub(crate) fn server_tls_args(
    port: u16,
    macros: &[(String, String)],
) -> Result<Vec<String>, String> {
    let mut args = crate::sentinel::tls_args(port, macros)?;
    for option in ["--tls-replication", "--tls-cluster"] {
        args.extend([option.to_string(), "yes".to_string()]);
    }
    Ok(args)
}

/// A free loopback port for a cluster node's TLS port: Redis refuses one
/// above 55535, as its cluster bus is the port + 10000.
pub(crate) fn cluster_tls_port() -> Result<u16, String> {
    for _ in 0..100 {
        let port = crate::support::free_port()?;
        if port <= 55535 {
            return Ok(port);
        }
    }
    Err("no free loopback port up to 55535 in 100 tries".into())
}

/// `<dir>/redis-cli`: `cli` with `--tls --cacert <ca>`, but for `-s`
/// (a UNIX socket: Redis has no TLS there). Returns its path.
pub(crate) fn write_tls_cli(dir: &Path, cli: &str, ca: &str) -> Result<String, String> {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let script = format!(
        "#!/bin/sh\n\
         # The harness's TLS mode (tests/vtc/modes.rs).\n\
         for arg; do [ \"$arg\" = -s ] && exec {cli} \"$@\"; done\n\
         exec {cli} --tls --cacert {ca} \"$@\"\n",
        cli = quote(cli),
        ca = quote(ca),
    );
    let path = dir.join("redis-cli");
    crate::support::write_script(&path, &script)?;
    Ok(path.display().to_string())
}
