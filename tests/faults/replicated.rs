//! What the Sentinel trials (s8, s11, s12) start before Varnish: masters
//! with replicas, and three Sentinels watching them.
use super::*;

/// The Sentinels of a trial, stopped by PID on drop.
pub(crate) struct Sentinels(pub(crate) Vec<(sentinel::Started, u16)>);

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (s, _) in self.0.drain(..) {
            stop_child(s.child, "redis-sentinel", Duration::from_secs(5));
        }
    }
}

/// The Sentinels' name for the master of s8 and s11.
pub(crate) const MASTER: &str = "m";

impl Sentinels {
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.0.iter().map(|(_, p)| *p).collect()
    }

    /// `host:port` of each, as `redis.sentinels(locations)` takes them.
    pub(crate) fn locations(&self) -> String {
        let list: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        list.join(",")
    }

    /// The port of the trials' one master ([`MASTER`]) every Sentinel
    /// names, if they agree.
    pub(crate) fn master_port(&self) -> Option<u16> {
        self.named_port(MASTER)
    }

    /// The port every Sentinel names for the master `name`, if they agree
    /// (`INFO sentinel`: `masterN:name=m,status=ok,address=HOST:PORT,...`;
    /// the harness's client renders arrays as their length only).
    pub(crate) fn named_port(&self, name: &str) -> Option<u16> {
        let mut agreed = None;
        for port in self.ports() {
            let info = redis_cmd(port, None, &["INFO", "sentinel"]).ok()?;
            let line = info
                .lines()
                .find(|l| l.contains(&format!("name={name},")))?;
            let named: u16 = line
                .split(',')
                .find_map(|f| f.strip_prefix("address="))?
                .rsplit_once(':')?
                .1
                .trim()
                .parse()
                .ok()?;
            match agreed {
                None => agreed = Some(named),
                Some(p) if p == named => {}
                Some(_) => return None,
            }
        }
        agreed
    }
}

/// Replicas of the master at `host`:`master_port`, one per name, each in
/// `dir/<name>` with `args` (and `--replicaof`); returned once every one
/// has its link up. Within 20 s: Redis 7 delays a diskless sync 5 s to
/// gather replicas, and one that comes just after the transfer began
/// waits for the next, on a loaded machine over 10 s (seen once).
pub(crate) fn start_replicas(
    dir: &Path,
    names: &[&str],
    host: &str,
    master_port: u16,
    args: &[String],
) -> Result<Vec<Redis>, Failed> {
    let mut replicas = Vec::new();
    for name in names {
        let sub = dir.join(name);
        let mut args = args.to_vec();
        args.extend(["--replicaof".into(), host.into(), master_port.to_string()]);
        replicas.push(Redis::start_with(&sub, &args)?);
    }
    let linked = Instant::now() + Duration::from_secs(20);
    for r in &replicas {
        let up = || support::replica_linked(Ipv4Addr::LOCALHOST, r.port, None);
        support::poll_until(linked, Duration::from_millis(50), up).map_err(|_| {
            format!(
                "replica on port {} not linked within 20 s:\n{}",
                r.port,
                tail_file(&r.log(), 20)
            )
        })?;
    }
    Ok(replicas)
}

/// A master three Sentinels watch: its name, where they are told it is
/// (`host`:`port`), and the replicas it has.
pub(crate) struct Watched<'a> {
    pub(crate) name: &'a str,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) replicas: usize,
}

/// Three Sentinels, `s1` to `s3` (in `dir`, with the options `extra`),
/// watching `masters`: the first from their configuration (which takes an
/// address), the others by `SENTINEL MONITOR` with the first one's
/// settings. Returned once each Sentinel sees every master's replicas and
/// the two other Sentinels.
pub(crate) fn start_sentinels(
    dir: &Path,
    masters: &[Watched],
    extra: &[String],
) -> Result<Sentinels, Failed> {
    let first = &masters[0];
    let first_ip: Ipv4Addr = first
        .host
        .parse()
        .map_err(|_| format!("the first master is given by address, not {}", first.host))?;
    let mut sentinels = Sentinels(Vec::new());
    for s in ["s1", "s2", "s3"] {
        let at = (first_ip, first.port);
        let one = sentinel::start(dir, s, first.name, at, None, || Ok(extra.to_vec()))?;
        register_pid(one.child.id() as i32, "redis-sentinel");
        let port = one.port;
        sentinels.0.push((one, port));
        let set = |args: &[&str]| {
            redis_cmd(port, None, args)
                .map_err(|e| format!("{s}: {}: {e}", args.join(" ")))
                .and_then(|r| match r.starts_with('-') {
                    true => Err(format!("{s}: {}: {r}", args.join(" "))),
                    false => Ok(()),
                })
        };
        for other in &masters[1..] {
            let port = other.port.to_string();
            set(&["SENTINEL", "MONITOR", other.name, other.host, &port, "2"])?;
            set(&[
                "SENTINEL",
                "SET",
                other.name,
                "down-after-milliseconds",
                &sentinel::DOWN_AFTER_MS.to_string(),
                "failover-timeout",
                "2000",
                "parallel-syncs",
                "2",
            ])?;
        }
    }
    let expected: Vec<sentinel::Expected> = masters
        .iter()
        .flat_map(|master| {
            sentinels
                .ports()
                .into_iter()
                .enumerate()
                .map(move |(i, port)| sentinel::Expected {
                    name: format!("s{}", i + 1),
                    port,
                    master: master.name.to_string(),
                    replicas: master.replicas,
                    sentinels: 2,
                    password: None,
                })
        })
        .collect();
    sentinel::wait_ready(&expected)?;
    Ok(sentinels)
}
