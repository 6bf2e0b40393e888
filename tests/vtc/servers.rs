//! The servers a vtc file declares: redis-server (plain, TLS, replicas, restartable), Sentinels, and the TLS material.
use super::*;

/// `#@ sentinel` / `#@ sentinel-tls`: starts the Sentinel (see
/// tests/support/sentinel.rs), adds its macros (`${NAME_addr}`, `_host`,
/// `_port`, `_pid`; `_tls_addr`, `_tls_port`) and hands it to the fixture.
pub(crate) fn start_sentinel(
    directive: &Directive,
    directives: &[Directive],
    dir: &Path,
    mode: modes::Mode,
    ports: &mut HashMap<String, (Ipv4Addr, u16)>,
    macros: &mut Vec<(String, String)>,
    fx: &mut Fixture,
) -> Result<sentinel::Expected, String> {
    let Directive::Sentinel {
        name,
        master,
        args,
        tls,
    } = directive
    else {
        return Err("not a sentinel directive".into());
    };
    if !valid_name(name) || ports.contains_key(name) {
        return Err(format!("sentinel name {name:?}: [a-zA-Z0-9_], unique"));
    }
    let at = *ports
        .get(master)
        .ok_or_else(|| format!("sentinel {name}: unknown master {master:?}"))?;
    // `#@ sentinel-tls`: a TLS port besides the plain one, which its
    // macros keep; TLS mode: its macros are the TLS port's, and it
    // reaches the servers over TLS.
    if *tls && !macros.iter().any(|(k, _)| k == "tls_ca") {
        macros.extend(make_tls_material(dir)?);
    }
    let mut expanded = Vec::new();
    for arg in args {
        expanded.push(expand(arg, macros)?);
    }
    let password = password_of(&expanded);
    // Ports picked afresh on each attempt (as start_redis does): one taken
    // between the pick and the bind fails only that attempt.
    let (mut tls_port, mut tls_mode_port) = (None, None);
    let options = || {
        (tls_port, tls_mode_port) = match (*tls, mode.tls) {
            (true, _) => (Some(support::free_port()?), None),
            (false, true) => (None, Some(support::free_port()?)),
            (false, false) => (None, None),
        };
        let mut options = match (tls_port, tls_mode_port) {
            (Some(port), _) => sentinel::tls_args(port, macros)?,
            (_, Some(port)) => modes::server_tls_args(port, macros)?,
            _ => Vec::new(),
        };
        options.extend(expanded.iter().cloned());
        Ok(options)
    };
    let started = sentinel::start(dir, name, master, at, password.as_deref(), options)
        .map_err(|e| format!("{e}{}", fx.logs()))?;
    let (host, port, pid) = (Ipv4Addr::LOCALHOST, started.port, started.child.id());
    let client_port = tls_mode_port.unwrap_or(port);
    ports.insert(name.clone(), (host, client_port));
    macros.push((format!("{name}_addr"), format!("{host}:{client_port}")));
    macros.push((format!("{name}_host"), host.to_string()));
    macros.push((format!("{name}_port"), client_port.to_string()));
    macros.push((format!("{name}_tcp_port"), port.to_string()));
    macros.push((format!("{name}_pid"), pid.to_string()));
    if let Some(tls_port) = tls_port {
        macros.push((format!("{name}_tls_addr"), format!("{host}:{tls_port}")));
        macros.push((format!("{name}_tls_port"), tls_port.to_string()));
    }
    fx.servers.push(Server {
        name: name.clone(),
        port,
        child: started.child,
        log: started.log,
        out: started.out,
    });
    Ok(sentinel::Expected {
        name: name.clone(),
        port,
        master: master.clone(),
        replicas: replicas_of(directives, master),
        sentinels: 0,
        password,
    })
}

/// How many `#@ replica` of `master` the file declares.
pub(crate) fn replicas_of(directives: &[Directive], master: &str) -> usize {
    directives
        .iter()
        .filter(|d| matches!(d, Directive::Replica { master: m, .. } if m == master))
        .count()
}

/// How many `#@ sentinel` monitor `master`.
pub(crate) fn sentinels_of(directives: &[Directive], master: &str) -> usize {
    directives
        .iter()
        .filter(|d| matches!(d, Directive::Sentinel { master: m, .. } if m == master))
        .count()
}

pub(crate) fn which(prog: &str, fallback: &str) -> String {
    std::env::split_paths(&path_with_sbin())
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| fallback.to_string())
}

/// The VMOD directory of the Varnish under test (`pkg-config --variable=vmoddir
/// varnishapi`: Debian's, or a build's from scripts/varnish), for `import std;`.
pub(crate) fn varnish_vmod_dir() -> String {
    const DEBIAN: &str = "/usr/lib/x86_64-linux-gnu/varnish/vmods";
    static DIR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        Command::new("pkg-config")
            .args(["--variable=vmoddir", "varnishapi"])
            .stdin(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|dir| !dir.is_empty())
            .unwrap_or_else(|| DEBIAN.to_string())
    })
    .clone()
}

/// `$PATH` plus the usual system dirs (varnishtest runs `varnishd` from PATH).
pub(crate) fn path_with_sbin() -> OsString {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !dirs.iter().any(|x| x == Path::new(d)) {
            dirs.push(d.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

pub(crate) fn password_of(args: &[String]) -> Option<String> {
    args.iter()
        .position(|a| a == "--requirepass")
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// Writes the test TLS material into `<dir>/tls` and returns its macros
/// (`tls_ca`, `tls_other_ca`, `tls_server_cert`, ...).
pub(crate) fn make_tls_material(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let tls_dir = dir.join("tls");
    make_dir(&tls_dir)?;
    let m = tls_material::write_material(&tls_dir)?;
    let files = [
        ("tls_dir", &tls_dir),
        ("tls_ca", &m.ca),
        ("tls_other_ca", &m.other_ca),
        ("tls_server_cert", &m.server_cert),
        ("tls_server_key", &m.server_key),
        ("tls_expired_cert", &m.expired_cert),
        ("tls_expired_key", &m.expired_key),
        ("tls_client_cert", &m.client_cert),
        ("tls_client_key", &m.client_key),
        ("tls_v1_ca", &m.v1_ca),
        ("tls_v1_server_cert", &m.v1_server_cert),
        ("tls_v1_server_key", &m.v1_server_key),
        ("tls_v1_expired_cert", &m.v1_expired_cert),
        ("tls_v1_expired_key", &m.v1_expired_key),
        ("tls_v1_client_cert", &m.v1_client_cert),
        ("tls_v1_client_key", &m.v1_client_key),
    ];
    for (_, path) in &files[1..] {
        // varnishd's workers (and redis) read them under their own users.
        fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    }
    Ok(files
        .iter()
        .map(|(name, path)| (name.to_string(), path.display().to_string()))
        .collect())
}

/// A TLS port a redis-server opens beside its plain one.
pub(crate) struct TlsPort<'a> {
    /// Picks a free port (a cluster node's leaves room for its bus port).
    pub(crate) pick: fn() -> Result<u16, String>,
    /// The server's options for that port (before the caller's `extra`,
    /// which may override them).
    pub(crate) args: &'a dyn Fn(u16) -> Result<Vec<String>, String>,
}

/// Starts a redis-server, waits for PING and adds it to `servers`; returns
/// the TLS port it opened if `tls` asked for one. Each attempt picks its
/// ports afresh: a port taken between the pick and the bind (the TLS one,
/// or a cluster bus port, + 10000) fails only that attempt. A server that
/// started but did not come up is added too, so that its log is shown and
/// it is stopped.
pub(crate) fn start_redis(
    dir: &Path,
    name: &str,
    host: Ipv4Addr,
    replicaof: Option<(Ipv4Addr, u16)>,
    extra: &[String],
    tls: Option<&TlsPort<'_>>,
    servers: &mut Vec<Server>,
) -> Result<Option<u16>, String> {
    let sock = dir.join(format!("{name}.sock"));
    if sock.as_os_str().len() > 100 {
        return Err(format!("unix socket path too long: {}", sock.display()));
    }
    let log = dir.join(format!("{name}.log"));
    let out = dir.join(format!("{name}.out"));
    // Own data dir: replicas write the RDB they receive (and cluster nodes
    // their nodes.conf) there, which another server must not load.
    let data = dir.join(format!("{name}.data"));
    make_dir(&data)?;
    support::on_free_port(PORT_ATTEMPTS, |port| {
        let _ = fs::remove_file(&log);
        let out_file =
            fs::File::create(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
        let err_file = out_file.try_clone().map_err(|e| format!("dup: {e}"))?;
        let mut config = RedisConfig::new(&data);
        config.port = port;
        config.socket = Some(sock.clone());
        config.log = Some(log.clone());
        let mut args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
        let tls_port = match tls {
            Some(tls) => {
                let tls_port = (tls.pick)()?;
                args.extend((tls.args)(tls_port)?);
                Some(tls_port)
            }
            None => None,
        };
        if let Some((master_host, master_port)) = replicaof {
            args.extend([
                "--replicaof".into(),
                master_host.to_string(),
                master_port.to_string(),
            ]);
        }
        args.extend(extra.iter().cloned());
        let spawn = |cmd: &mut Command| {
            cmd.current_dir(dir)
                .stdin(Stdio::null())
                .stdout(out_file)
                .stderr(err_file);
            write_restart_script(dir, name, host, port, cmd)?;
            cmd.spawn()
                .map_err(|e| format!("start redis-server (installed? see scripts/deps): {e}"))
        };
        let mut last_ping = String::new();
        let (server, waited) = RedisServer::start(
            &config,
            &args,
            spawn,
            PING_DEADLINE,
            Duration::from_millis(50),
            || {
                let up = support::pings(host, port, None);
                if let Err(e) = &up {
                    last_ping.clone_from(e);
                }
                up.is_ok()
            },
        )?;
        let mut srv = Server {
            name: name.to_string(),
            port,
            child: server.into_child(),
            log: log.clone(),
            out: out.clone(),
        };
        match up_on_ping(waited, port, &last_ping) {
            Ok(()) => {
                servers.push(srv);
                Ok(support::OnPort::Up(tls_port))
            }
            Err(e) => {
                let exited = !matches!(srv.child.try_wait(), Ok(None));
                let logs =
                    tail_file(&log, LOG_TAIL_LINES) + "\n" + &tail_file(&out, LOG_TAIL_LINES);
                if exited && logs.contains("Address already in use") {
                    let ports = match tls_port {
                        Some(tls_port) => format!("ports {port} and {tls_port}"),
                        None => format!("port {port}"),
                    };
                    let why = format!(
                        "redis {name}: {ports} (or their bus ports) in use ({PORT_ATTEMPTS} attempts)"
                    );
                    return Ok(support::OnPort::Retry(why));
                }
                servers.push(srv);
                Err(format!("redis {name}: {e}"))
            }
        }
    })
}

pub(crate) fn restarted_pidfile(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.restarted.pid"))
}

/// `<dir>/NAME.restart`: starts the server again with the same command line
/// (after a vtc killed it), daemonized with a pid file that the harness
/// stops it by, and returns once it answers PING (10 s at most).
pub(crate) fn write_restart_script(
    dir: &Path,
    name: &str,
    host: Ipv4Addr,
    port: u16,
    cmd: &Command,
) -> Result<(), String> {
    let quote = |path: &Path| support::shell_quote(&path.to_string_lossy());
    let line = support::command_line(cmd);
    let pidfile = restarted_pidfile(dir, name);
    let script = format!(
        "#!/bin/bash\ncd {dir} || exit 1\n\
         # Close what varnishtest leaves open (its output pipe among them): the\n\
         # daemon would keep it, and the harness would wait for its EOF.\n\
         for fd in $(ls /proc/$$/fd); do [ \"$fd\" -gt 2 ] && eval \"exec $fd>&-\"; done 2>/dev/null\n\
         {line} --daemonize yes --pidfile {pidfile} || exit 1\n\
         for i in $(seq 100); do {cli} -h {host} -p {port} PING >/dev/null 2>&1 && exit 0; sleep 0.1; done\n\
         echo 'redis {name} not up after restart' >&2; exit 1\n",
        dir = quote(dir),
        pidfile = quote(&pidfile),
        cli = support::cli_program(),
    );
    let path = dir.join(format!("{name}.restart"));
    support::write_script(&path, &script)
}

/// How the wait for PING ended, as an error when it did not answer.
pub(crate) fn up_on_ping(waited: Waited, port: u16, last: &str) -> Result<(), String> {
    match waited {
        Waited::Ready => Ok(()),
        Waited::Exited(status) => Err(format!("redis-server {}", describe(status))),
        Waited::TimedOut => Err(format!(
            "not up after {} s on port {port} ({last})",
            PING_DEADLINE.as_secs()
        )),
    }
}

/// The loopback address a server's ARGs bind it to (the last `--bind`,
/// first address), 127.0.0.1 by default.
pub(crate) fn bind_of(args: &[String]) -> Result<Ipv4Addr, String> {
    let Some(at) = args.iter().rposition(|a| a == "--bind") else {
        return Ok(Ipv4Addr::LOCALHOST);
    };
    let first = args
        .get(at + 1)
        .and_then(|value| value.split_whitespace().next())
        .unwrap_or_default();
    match first.parse::<Ipv4Addr>() {
        Ok(ip) if ip.is_loopback() => Ok(ip),
        _ => Err(format!("--bind {first:?}: only IPv4 loopback addresses")),
    }
}

pub(crate) fn wait_replica_up(
    host: Ipv4Addr,
    port: u16,
    password: Option<String>,
) -> Result<(), String> {
    let deadline = Instant::now() + REPLICA_DEADLINE;
    let linked = || support::replica_linked(host, port, password.as_deref());
    support::poll_until(deadline, Duration::from_millis(100), linked).map_err(|last| {
        format!(
            "master_link_status not up after {} s; last INFO replication:\n{last}",
            REPLICA_DEADLINE.as_secs()
        )
    })
}
