//! `#@ cluster NAME [ARG...]` of the varnishtest harness: a Redis Cluster
//! of 3 masters and 1 replica each on 127.0.0.1, for `vtc/clustered.*`.
//!
//! Built by hand rather than with `redis-cli --cluster create`, so that it
//! is quick and the same every time: replica `rI` follows master `mI`, and
//! the masters serve the slots `redis-cli` would give them (m0 0-5460, m1
//! 5461-10922, m2 10923-16383). Steps: start the six nodes
//! (`--cluster-enabled yes`, `nodes.conf` in each node's data directory,
//! `--cluster-node-timeout 2000`, then the ARGs), give each a distinct
//! config epoch, assign the slots, `CLUSTER MEET` every node from m0,
//! `CLUSTER REPLICATE` once a replica knows its master, then wait until
//! every node reports `cluster_state:ok`, knows the six nodes with none
//! flagged `fail`, `handshake` or `noaddr` and three of them replicas, its
//! `CLUSTER SLOTS` lists all six (by the name they announce, with ARGs
//! `--cluster-announce-hostname NAME --cluster-preferred-endpoint-type
//! hostname`), and every replica has
//! `master_link_status:up`. Polled every 50 ms, at most
//! [`FORM_DEADLINE`].
//!
//! Macros: `${NAME_seed}` (m0's address), and per node N in `m0 m1 m2 r0
//! r1 r2`: `${NAME_N_addr}`, `${NAME_N_port}`, `${NAME_N_id}` (the
//! cluster node id), `${NAME_N_pid}`, `${NAME_N_restart}` (as for
//! `#@ redis`; the node comes back with its `nodes.conf`).
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{cli_program, RedisConn};

/// How long the six nodes may take to form the cluster.
const FORM_DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

const MASTERS: usize = 3;
/// Slot ranges of the masters, as `redis-cli --cluster create` assigns
/// them for three.
const RANGES: [(u16, u16); MASTERS] = [(0, 5460), (5461, 10922), (10923, 16383)];

fn node_names(name: &str) -> Vec<String> {
    (0..MASTERS)
        .map(|i| format!("{name}_m{i}"))
        .chain((0..MASTERS).map(|i| format!("{name}_r{i}")))
        .collect()
}

/// One request to a node on 127.0.0.1; an error reply is an error.
pub fn ask(port: u16, args: &[&str]) -> Result<String, String> {
    RedisConn::open(port)
        .map_err(|e| format!("{}: {e}", args.join(" ")))?
        .ok(args)
}

/// Polls `ready` until it says yes or `deadline`; `what` names the wait in
/// the error, with the last thing `ready` said.
fn wait_for(
    deadline: Instant,
    what: &str,
    ready: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    crate::support::poll_until(deadline, POLL, ready).map_err(|last| {
        format!(
            "cluster: {what} not done after {} s: {last}",
            FORM_DEADLINE.as_secs()
        )
    })
}

/// Whether `CLUSTER NODES` as seen by the node on `port` is the whole
/// cluster, healthy.
fn sees_everything(port: u16) -> Result<(), String> {
    let info = ask(port, &["CLUSTER", "INFO"])?;
    if !info.contains("cluster_state:ok") {
        return Err(format!("port {port}: not cluster_state:ok"));
    }
    let nodes = ask(port, &["CLUSTER", "NODES"])?;
    let lines: Vec<&str> = nodes.lines().filter(|l| !l.trim().is_empty()).collect();
    let flags = |line: &str| line.split(' ').nth(2).unwrap_or("").to_string();
    let bad = lines.iter().any(|l| {
        let f = flags(l);
        f.contains("fail") || f.contains("handshake") || f.contains("noaddr")
    });
    let replicas = lines.iter().filter(|l| flags(l).contains("slave")).count();
    if lines.len() != 2 * MASTERS || bad || replicas != MASTERS {
        return Err(format!("port {port} sees:\n{nodes}"));
    }
    Ok(())
}

/// Whether `CLUSTER SLOTS` of the node on `port` lists the six nodes by
/// `endpoint` (what the VMOD reads; replicas, and names the nodes
/// announce, appear there later than in `CLUSTER NODES`). Asked with
/// redis-cli, which prints one field per line.
fn slots_list_everything(port: u16, endpoint: &str) -> Result<(), String> {
    let output = Command::new(cli_program())
        .args(["-p", &port.to_string(), "CLUSTER", "SLOTS"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", cli_program()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let nodes = text.lines().filter(|l| l.trim() == endpoint).count();
    if nodes == 2 * MASTERS {
        Ok(())
    } else {
        Err(format!("port {port}: CLUSTER SLOTS lists {nodes} nodes"))
    }
}

/// The endpoint `CLUSTER SLOTS` gives for every node: the name the nodes
/// announce (`--cluster-announce-hostname`) when ARGs prefer it
/// (`--cluster-preferred-endpoint-type hostname`), else their address.
fn endpoint(args: &[String]) -> &str {
    let value = |option: &str| {
        let at = args.iter().rposition(|arg| arg == option)?;
        args.get(at + 1).map(String::as_str)
    };
    match (
        value("--cluster-preferred-endpoint-type"),
        value("--cluster-announce-hostname"),
    ) {
        (Some("hostname"), Some(name)) => name,
        _ => "127.0.0.1",
    }
}

/// A node [`StartNode`] started.
pub struct Node {
    /// Its plain port, which the harness forms the cluster through.
    pub port: u16,
    /// The port clients (and the other nodes) reach it on: `port`, or
    /// its TLS port with `--tls-cluster yes` (the vtc harness's TLS mode).
    pub client_port: u16,
    pub pid: u32,
}

impl Node {
    /// A node with no TLS port.
    pub fn plain(port: u16, pid: u32) -> Node {
        Node {
            port,
            client_port: port,
            pid,
        }
    }
}

/// Starts a node: its name and its arguments in, its ports and PID out.
/// The caller owns the process (and stops it by PID).
pub type StartNode<'a> = dyn FnMut(&str, &[String]) -> Result<Node, String> + 'a;

/// The options of every node of the cluster, `extra` last (a node added
/// later gets the same).
pub fn node_args(extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
        // CLUSTER SLOTS lists a replica only once its replication offset
        // is not 0: with no write, that is the master's first PING to its
        // replicas, every 10 s by default.
        "--repl-ping-replica-period",
        "1",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().cloned());
    args
}

/// Starts and forms the cluster `name` on 127.0.0.1, each node started by
/// `start_node`; returns its macros (see the module's documentation).
pub fn start(
    dir: &Path,
    name: &str,
    extra: &[String],
    start_node: &mut StartNode<'_>,
) -> Result<Vec<(String, String)>, String> {
    let args = node_args(extra);
    let names = node_names(name);
    let mut ports = Vec::new();
    let mut client_ports = Vec::new();
    let mut pids = Vec::new();
    let mut ids = Vec::new();
    for (epoch, node) in names.iter().enumerate() {
        let Node {
            port,
            client_port,
            pid,
        } = start_node(node, &args)?;
        pids.push(pid);
        client_ports.push(client_port);
        // Distinct epochs before the nodes meet, as redis-cli does, so
        // that no collision has to be resolved first.
        ask(
            port,
            &["CLUSTER", "SET-CONFIG-EPOCH", &(epoch + 1).to_string()],
        )?;
        ids.push(ask(port, &["CLUSTER", "MYID"])?);
        ports.push(port);
    }
    for (port, (first, last)) in ports.iter().zip(RANGES) {
        let slots: Vec<String> = (first..=last).map(|s| s.to_string()).collect();
        let mut request = vec!["CLUSTER", "ADDSLOTS"];
        request.extend(slots.iter().map(String::as_str));
        ask(*port, &request)?;
    }
    // The port a node is met on gives its bus port (+ 10000): the TLS
    // port's with --tls-cluster.
    for port in &client_ports[1..] {
        ask(
            ports[0],
            &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()],
        )?;
    }
    let endpoint = endpoint(extra);
    let deadline = Instant::now() + FORM_DEADLINE;
    for i in 0..MASTERS {
        let (replica, master_id) = (ports[MASTERS + i], &ids[i]);
        wait_for(deadline, "CLUSTER REPLICATE", || {
            ask(replica, &["CLUSTER", "REPLICATE", master_id]).map(|_| ())
        })?;
    }
    for &port in &ports {
        wait_for(deadline, "cluster formation", || sees_everything(port))?;
    }
    for &port in &ports {
        wait_for(deadline, "CLUSTER SLOTS listing every node", || {
            slots_list_everything(port, endpoint)
        })?;
    }
    for &replica in &ports[MASTERS..] {
        wait_for(deadline, "replica sync", || {
            let info = ask(replica, &["INFO", "replication"])?;
            if info.contains("master_link_status:up") {
                Ok(())
            } else {
                Err(format!("port {replica}: master link not up"))
            }
        })?;
    }
    let mut macros = vec![(
        format!("{name}_seed"),
        format!("127.0.0.1:{}", client_ports[0]),
    )];
    for ((node, port), (id, pid)) in names.iter().zip(&client_ports).zip(ids.iter().zip(&pids)) {
        macros.push((format!("{node}_addr"), format!("127.0.0.1:{port}")));
        macros.push((format!("{node}_port"), port.to_string()));
        macros.push((format!("{node}_id"), id.clone()));
        macros.push((format!("{node}_pid"), pid.to_string()));
        macros.push((
            format!("{node}_restart"),
            dir.join(format!("{node}.restart")).display().to_string(),
        ));
    }
    Ok(macros)
}
