//! The Redis side: one redis-server (with a TLS port too when S3 runs), or
//! with `--s2-cluster` a cluster of 3 masters x 1 replica
//! (tests/support/cluster.rs); and what a run cost it, from INFO.
use super::*;

/// A redis-server we started, with one persistent probe connection.
pub(crate) struct Node {
    child: Option<Child>,
    pub(crate) port: u16,
    /// Its TLS port, if its configuration has one.
    tls_port: Option<u16>,
    pub(crate) probe: Probe,
    /// connected_clients with no VMOD connected: the probe, and a
    /// replica's link to its master.
    idle_clients: u64,
}

/// INFO counters of a node at one moment.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    cpu_s: f64,
    cmds: u64,
    conns: u64,
    /// The probe's commands sent before this reading.
    sent: u64,
}

/// What a measured run cost Redis.
#[derive(Clone, Debug, Default)]
pub(crate) struct RedisUse {
    /// total_connections_received, every node.
    pub(crate) conns: u64,
    /// total_commands_processed, the masters, minus the probe's own.
    pub(crate) cmds: u64,
    /// used_cpu_sys + used_cpu_user, the masters.
    pub(crate) cpu_s: f64,
    /// Commands per master (a cluster's m0, m1, m2).
    pub(crate) per_master: Vec<u64>,
}

impl RedisUse {
    pub(crate) fn cpu_us_per_cmd(&self) -> f64 {
        ratio(self.cpu_s * 1e6, self.cmds as f64)
    }
}

impl Node {
    /// `config` on a free port (5 tried; its TLS port, if any, picked
    /// afresh each time too) with `args`: up once the probe connection
    /// gets PONG.
    fn start(
        dir: &Path,
        name: &str,
        mut config: RedisConfig,
        args: &[String],
        pin: bool,
    ) -> Res<Node> {
        let data = dir.join(name);
        make_dir(&data)?;
        let log = dir.join(format!("{name}.log"));
        config.dir = data;
        config.log = Some(log.clone());
        support::on_free_port(5, |port| {
            config.port = port;
            if let Some(tls) = &mut config.tls {
                tls.port = support::free_port()?;
            }
            let spawn = |cmd: &mut Process| {
                let mut pinned = on_load_cpu(pin, cmd);
                let cmd = pinned.as_mut().unwrap_or(cmd);
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                record("redis-server", cmd);
                spawn(cmd, "redis-server")
            };
            let mut probe = None;
            let (server, waited) = RedisServer::start(
                &config,
                args,
                spawn,
                Duration::from_secs(10),
                Duration::from_millis(50),
                || {
                    let Ok(mut p) = Probe::connect(port) else {
                        return false;
                    };
                    let pong = matches!(p.command(&["PING"]), Ok(Resp::Status(s)) if s == "PONG");
                    if pong {
                        probe = Some(p);
                    }
                    pong
                },
            )?;
            let child = server.into_child();
            if let (Waited::Ready, Some(probe)) = (waited, probe) {
                return Ok(support::OnPort::Up(Node {
                    child: Some(child),
                    port,
                    tls_port: config.tls.as_ref().map(|tls| tls.port),
                    probe,
                    idle_clients: 0,
                }));
            }
            stop_child(child, "redis-server", Duration::from_secs(5));
            Ok(support::OnPort::Retry(format!(
                "redis-server {name} did not start:\n{}",
                support::tail_file(&log, 40)
            )))
        })
    }

    fn counters(&mut self) -> Option<Counters> {
        let sent = self.probe.sent;
        let text = self.probe.info_text(&["stats", "cpu"])?;
        Some(Counters {
            cpu_s: info_field::<f64>(&text, "used_cpu_sys")?
                + info_field::<f64>(&text, "used_cpu_user")?,
            cmds: info_field(&text, "total_commands_processed")?,
            conns: info_field(&text, "total_connections_received")?,
            sent,
        })
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_child(child, "redis-server", Duration::from_secs(10));
        }
    }
}

/// The TLS port of the single server and the CA that signed its certificate.
pub(crate) struct BenchTls {
    pub(crate) port: u16,
    pub(crate) ca: PathBuf,
}

pub(crate) struct Redis {
    /// The single server, or the cluster's masters m0 m1 m2 then its
    /// replicas r0 r1 r2.
    pub(crate) nodes: Vec<Node>,
    pub(crate) cluster: bool,
    pub(crate) sock: PathBuf,
    pub(crate) tls: Option<BenchTls>,
}

/// The cluster's masters (tests/support/cluster.rs starts them first).
const MASTERS: usize = 3;

impl Redis {
    /// One server on a loopback port and a UNIX socket; with `tls`, also a
    /// TLS port (certificate for 127.0.0.1, material in `dir`).
    pub(crate) fn start(dir: &Path, tls: bool, pin: bool) -> Res<Redis> {
        let sock = dir.join("redis.sock");
        let mut config = RedisConfig::new(dir);
        config.socket = Some(sock.clone());
        let ca = if tls {
            let m = tls_material::write_material(dir)?;
            config.tls = Some(TlsPort {
                port: 0,
                cert: m.server_cert,
                key: m.server_key,
                ca: m.ca.clone(),
                auth_clients: "no",
            });
            Some(m.ca)
        } else {
            None
        };
        let node = Node::start(dir, "redis", config, &[], pin)?;
        let tls = ca
            .zip(node.tls_port)
            .map(|(ca, port)| BenchTls { port, ca });
        Redis {
            nodes: vec![node],
            cluster: false,
            sock,
            tls,
        }
        .idle()
    }

    /// A cluster of 3 masters x 1 replica, formed by tests/support/cluster.rs.
    pub(crate) fn start_cluster(dir: &Path, pin: bool) -> Res<Redis> {
        let mut nodes = Vec::new();
        let formed = cluster::start(dir, "bench", &[], &mut |name, args| {
            let node = Node::start(dir, name, RedisConfig::new(dir), args, pin)?;
            let started = cluster::Node::plain(node.port, node.child.as_ref().map_or(0, Child::id));
            nodes.push(node);
            Ok(started)
        });
        let mut redis = Redis {
            nodes,
            cluster: true,
            sock: PathBuf::new(),
            tls: None,
        };
        match formed {
            Ok(_) => redis.idle(),
            Err(e) => {
                redis.stop();
                Err(e)
            }
        }
    }

    /// Records each node's connected_clients with no VMOD connected.
    fn idle(mut self) -> Res<Redis> {
        for n in &mut self.nodes {
            n.idle_clients = n
                .probe
                .info("clients", "connected_clients")
                .ok_or_else(|| format!("redis on port {}: no INFO clients", n.port))?;
        }
        Ok(self)
    }

    /// The single server's (or the seed's) port and probe.
    pub(crate) fn port(&self) -> u16 {
        self.nodes[0].port
    }

    pub(crate) fn probe(&mut self) -> &mut Probe {
        &mut self.nodes[0].probe
    }

    fn masters(&self) -> usize {
        if self.cluster {
            MASTERS
        } else {
            1
        }
    }

    /// `redis.db()` location and ours' extra arguments for `transport`.
    pub(crate) fn location(&self, transport: Transport) -> Res<(String, Vec<String>)> {
        Ok(match transport {
            Transport::Tcp => (format!("127.0.0.1:{}", self.port()), Vec::new()),
            Transport::Unix => (self.sock.display().to_string(), Vec::new()),
            Transport::Tls => {
                let tls = self.tls.as_ref().ok_or("redis-server has no TLS port")?;
                (
                    format!("127.0.0.1:{}", tls.port),
                    vec![
                        "tls=true".into(),
                        format!("tls_cafile=\"{}\"", tls.ca.display()),
                    ],
                )
            }
        })
    }

    /// Every node's counters (None if one does not answer).
    pub(crate) fn counters(&mut self) -> Option<Vec<Counters>> {
        self.nodes.iter_mut().map(Node::counters).collect()
    }

    /// What Redis did since `before`.
    pub(crate) fn usage(&mut self, before: &[Counters]) -> Option<RedisUse> {
        let after = self.counters()?;
        let masters = self.masters();
        let mut u = RedisUse::default();
        for (i, (a, b)) in after.iter().zip(before).enumerate() {
            u.conns += a.conns.saturating_sub(b.conns);
            if i < masters {
                let cmds = (a.cmds - b.cmds).saturating_sub(a.sent - b.sent);
                u.cmds += cmds;
                u.cpu_s += a.cpu_s - b.cpu_s;
                u.per_master.push(cmds);
            }
        }
        if !self.cluster {
            u.per_master.clear();
        }
        Some(u)
    }

    /// connected_clients now, every node, minus the idle ones.
    pub(crate) fn clients(&mut self) -> Option<u64> {
        let mut total = 0;
        for n in &mut self.nodes {
            let c = n.probe.info("clients", "connected_clients")?;
            total += c.saturating_sub(n.idle_clients);
        }
        Some(total)
    }

    /// FLUSHALL on the masters: per-request keys would pile up run after run.
    pub(crate) fn flush(&mut self) -> Res<()> {
        let masters = self.masters();
        for n in &mut self.nodes[..masters] {
            if let Resp::Error(e) = n.probe.command(&["FLUSHALL"])? {
                return Err(format!("FLUSHALL on port {}: {e}", n.port));
            }
        }
        Ok(())
    }

    pub(crate) fn stop(&mut self) {
        for n in &mut self.nodes {
            n.stop();
        }
    }
}
