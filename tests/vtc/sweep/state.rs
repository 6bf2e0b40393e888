//! The connection state the sweep looks for: `CLIENT LIST` of a server,
//! read directly (not through varnish), against what the VMOD's
//! connections showed before the sweep.
use crate::support::RedisConn;
use std::collections::BTreeMap;
use std::io;

/// The fields of `CLIENT LIST` that a command can change on its
/// connection (the ones a server does not have are absent).
const STATE_FIELDS: &[&str] = &[
    "db", "sub", "psub", "ssub", "multi", "watch", "name", "resp", "redir", "lib-name", "lib-ver",
    "user",
];

/// Flags of a client in a state a task must not leave (`CLIENT LIST`
/// documentation): b blocked, d watched keys modified, e no-evict, O
/// monitor, P Pub/Sub, r read-only (cluster), R, t, B tracking, T
/// no-touch, x in MULTI, c close after reply. (`r` on a cluster
/// replica's connections is the VMOD's own doing, not a task's: every
/// connection to one gets `READONLY` when it is checked out.)
const STATE_FLAGS: &str = "bdeOPrRtBTxc";

/// One server's clients, read by a connection of the checker's own.
pub(crate) struct ClientList {
    pub(crate) port: u16,
    /// The checker's connection and its client id.
    conn: Option<(RedisConn, i64)>,
    /// Field values of the VMOD's connections before the sweep.
    baseline: BTreeMap<String, Vec<String>>,
}

impl ClientList {
    pub(crate) fn new(port: u16) -> ClientList {
        ClientList {
            port,
            conn: None,
            baseline: BTreeMap::new(),
        }
    }

    /// The VMOD's connections: every client but the checker and the
    /// replication links (flags M, S), as `field -> value` maps.
    fn clients(&mut self) -> io::Result<Vec<BTreeMap<String, String>>> {
        if self.conn.is_none() {
            let mut conn = RedisConn::open(self.port)?;
            let id = conn.cmd(&["CLIENT", "ID"])?;
            let id = id.trim_start_matches(':').parse().unwrap_or(-1);
            self.conn = Some((conn, id));
        }
        let (conn, me) = self.conn.as_mut().expect("connected");
        // Asked each time: a role may change during a sweep.
        let role = conn.cmd(&["INFO", "replication"]);
        let replica = role.as_ref().is_ok_and(|info| info.contains("role:slave"));
        let text = match role.and_then(|_| conn.cmd(&["CLIENT", "LIST"])) {
            Ok(text) => text,
            Err(e) => {
                self.conn = None;
                return Err(e);
            }
        };
        let me = me.to_string();
        Ok(text
            .lines()
            .map(|line| {
                line.split(' ')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            })
            .filter(|c| c.get("id") != Some(&me))
            .filter(|c| {
                let flags = c.get("flags").map(String::as_str).unwrap_or("");
                !flags.contains('M') && !flags.contains('S')
            })
            .map(|mut c| {
                if replica {
                    if let Some(flags) = c.get_mut("flags") {
                        flags.retain(|f| f != 'r');
                    }
                }
                c
            })
            .collect())
    }

    /// Records the state fields of the VMOD's connections now (idle, after
    /// plain commands) as the default.
    pub(crate) fn take_baseline(&mut self) -> io::Result<()> {
        for c in self.clients()? {
            for f in STATE_FIELDS {
                if let Some(v) = c.get(*f) {
                    let seen = self.baseline.entry(f.to_string()).or_default();
                    if !seen.contains(v) {
                        seen.push(v.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// The VMOD's connections not in their default state, one line each.
    pub(crate) fn dirty(&mut self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for c in self.clients()? {
            let mut why = Vec::new();
            for f in STATE_FIELDS {
                let Some(v) = c.get(*f) else { continue };
                let default = match self.baseline.get(*f) {
                    Some(seen) => seen.contains(v),
                    None => true,
                };
                if !default {
                    why.push(format!("{f}={v}"));
                }
            }
            let flags = c.get("flags").map(String::as_str).unwrap_or("");
            if flags.chars().any(|f| STATE_FLAGS.contains(f)) {
                why.push(format!("flags={flags}"));
            }
            if !why.is_empty() {
                out.push(format!(
                    "port {}: client {} ({}, cmd={}): {}",
                    self.port,
                    c.get("id").map(String::as_str).unwrap_or("?"),
                    c.get("addr").map(String::as_str).unwrap_or("?"),
                    c.get("cmd").map(String::as_str).unwrap_or("?"),
                    why.join(" ")
                ));
            }
        }
        Ok(out)
    }
}
