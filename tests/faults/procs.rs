//! /proc readings of the varnishd child.
use super::*;

// ---------------------------------------------------------------------------
// /proc readings of the varnishd child

/// Socket inodes of the TCP connections whose remote port is `port`.
pub(crate) fn tcp_inodes_to(pid: i32, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let remote_port = f[2]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port) {
                if let Ok(inode) = f[9].parse::<u64>() {
                    if inode != 0 {
                        inodes.push(inode);
                    }
                }
            }
        }
    }
    inodes
}

/// What a process holds right now.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Snapshot {
    /// Open file descriptors.
    pub(crate) fds: usize,
    /// Of which TCP sockets connected to the Redis port.
    pub(crate) redis_fds: usize,
    pub(crate) threads: u64,
    pub(crate) rss_kb: u64,
    /// Anonymous memory (the heap): VmRSS also counts the pages of the
    /// shared-memory log (VSL) as they get written to.
    pub(crate) anon_kb: u64,
    /// Redis `connected_clients` minus the probe's own connection.
    pub(crate) redis_clients: Option<u64>,
}

impl Snapshot {
    pub(crate) fn take(pid: i32, redis_port: u16) -> Snapshot {
        let inodes = tcp_inodes_to(pid, redis_port);
        let mut fds = 0;
        let mut redis_fds = 0;
        if let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) {
            for entry in dir.flatten() {
                fds += 1;
                let target = fs::read_link(entry.path()).unwrap_or_default();
                let target = target.to_string_lossy();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|i| i.parse::<u64>().ok())
                {
                    if inodes.contains(&inode) {
                        redis_fds += 1;
                    }
                }
            }
        }
        Snapshot {
            fds,
            redis_fds,
            threads: proc_status(pid, "Threads").unwrap_or(0),
            rss_kb: proc_status(pid, "VmRSS").unwrap_or(0),
            anon_kb: proc_status(pid, "RssAnon").unwrap_or(0),
            redis_clients: redis_info(redis_port, "clients", "connected_clients")
                .map(|n| n.saturating_sub(1)),
        }
    }

    /// File descriptors other than Redis sockets.
    pub(crate) fn other_fds(&self) -> usize {
        self.fds - self.redis_fds
    }
}

impl std::fmt::Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fds {} (redis {}), threads {}, rss {} kB (anon {} kB), redis connected_clients {}",
            self.fds,
            self.redis_fds,
            self.threads,
            self.rss_kb,
            self.anon_kb,
            self.redis_clients
                .map_or("?".to_string(), |n| n.to_string())
        )
    }
}
