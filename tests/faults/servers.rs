//! The varnishd child against several Redis servers (the Sentinel and
//! cluster trials): its sockets to them all, and their clients.
use super::*;

/// Clients of a Redis server other than Sentinels, replication links, the
/// connection a `MIGRATE` to it keeps (its commands are `RESTORE-ASKING`)
/// and this probe (`CLIENT LIST`).
pub(crate) fn plain_clients(port: u16) -> Option<u64> {
    let list = redis_cmd(port, None, &["CLIENT", "LIST"]).ok()?;
    Some(
        list.lines()
            .filter(|l| l.contains("id="))
            .filter(|l| {
                !l.contains("name=sentinel-")
                    && !l.contains("cmd=client|list")
                    && !l.contains("cmd=restore-asking")
            })
            .filter(|l| {
                let flags = l
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("flags="))
                    .unwrap_or("");
                !flags.contains('S') && !flags.contains('M')
            })
            .count() as u64,
    )
}

/// The child against every Redis server: sockets to them all, and their
/// plain clients.
pub(crate) fn snapshot_all(varnish: &Varnish, ports: &[u16]) -> Snapshot {
    let mut snap = Snapshot::take(varnish.varnishd.child_pid, ports[0]);
    snap.redis_fds = 0;
    let mut clients = Some(0);
    for &port in ports {
        snap.redis_fds += tcp_inodes_count(varnish.varnishd.child_pid, port);
        clients = clients.zip(plain_clients(port)).map(|(a, b)| a + b);
    }
    snap.redis_clients = clients;
    snap
}

/// Sockets of the child connected to `port`.
pub(crate) fn tcp_inodes_count(pid: i32, port: u16) -> usize {
    let inodes = tcp_inodes_to(pid, port);
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let target = fs::read_link(e.path()).unwrap_or_default();
            target
                .to_string_lossy()
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|i| i.parse::<u64>().ok())
                .is_some_and(|i| inodes.contains(&i))
        })
        .count()
}

/// Waits (3 s at most) for the child's sockets and the servers' clients to
/// agree.
pub(crate) fn settled_all(varnish: &Varnish, ports: &[u16]) -> Snapshot {
    settled(|| snapshot_all(varnish, ports))
}

/// The snapshot `take` gives once the child's Redis sockets and Redis's
/// clients agree (asked every 50 ms), or the last one after 3 s.
pub(crate) fn settled(mut take: impl FnMut() -> Snapshot) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let snap = take();
        if snap.redis_clients == Some(snap.redis_fds as u64) || Instant::now() >= deadline {
            return snap;
        }
        thread::sleep(Duration::from_millis(50));
    }
}
