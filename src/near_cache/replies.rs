//! What a tracking connection reads (`tracking.rs`), parsed: the
//! invalidation pushes, `INFO replication` (what tells that a server's
//! data may have been replaced), `INFO server` (hash-field expiry) and a
//! cluster node's own line of `CLUSTER NODES` (the slots it serves). All
//! of it comes from a server: bounded, and never a panic.
use super::promise::SlotSet;
use crate::protocol::Reply;

/// What of `INFO replication` says the data may have been replaced: the
/// role, the master, the link, a sync in progress, the replication id.
/// `None`: not such a reply.
pub(super) fn replication_state(reply: &Reply) -> Option<String> {
    let Reply::String(text) = reply else {
        return None;
    };
    let text = std::str::from_utf8(text).ok()?;
    const FIELDS: &[&str] = &[
        "role",
        "master_host",
        "master_port",
        "master_link_status",
        "master_sync_in_progress",
        "master_replid",
    ];
    let state: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.split_once(':')
                .is_some_and(|(key, _)| FIELDS.contains(&key))
        })
        .collect();
    state
        .iter()
        .any(|line| line.starts_with("role:"))
        .then(|| state.join(","))
}

/// Whether the server of an `INFO server` reply may expire hash fields
/// on their own (`HEXPIRE`: Redis 7.4, Valkey 9.0). A version it cannot
/// read is taken as one that may.
pub(super) fn has_field_expiry(info: &Reply) -> bool {
    let Reply::String(text) = info else {
        return true;
    };
    let text = String::from_utf8_lossy(text);
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let (version, since) = match field("server_name") {
        Some("valkey") => (field("valkey_version"), (9, 0)),
        _ => (field("redis_version"), (7, 4)),
    };
    let mut numbers = version
        .unwrap_or("")
        .split('.')
        .map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= since,
        _ => true,
    }
}

/// A cluster node's own view of its slots.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct OwnSlots {
    /// Served by it (a replica: by its master), less those migrating.
    pub(super) serves: SlotSet,
    /// Being migrated from or imported to it.
    pub(super) migrating: SlotSet,
}

/// The node's slots by its own `CLUSTER NODES` line (`myself`), or its
/// master's for a replica; `None`: no such line.
pub(super) fn own_slots(reply: &Reply) -> Option<OwnSlots> {
    let Reply::String(text) = reply else {
        return None;
    };
    let text = std::str::from_utf8(text).ok()?;
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|line| line.split_whitespace().collect())
        .filter(|fields: &Vec<&str>| fields.len() >= 8)
        .collect();
    let own = lines
        .iter()
        .find(|fields| fields[2].split(',').any(|flag| flag == "myself"))?;
    let mut view = OwnSlots::default();
    let is_replica = own[2]
        .split(',')
        .any(|flag| flag == "slave" || flag == "replica");
    let served = if is_replica {
        lines.iter().find(|fields| fields[0] == own[3])
    } else {
        Some(own)
    };
    let fields = served.map_or(&[][..], |fields| &fields[8..]);
    // A node names each slot once (and its own migrations): more is no
    // node's line, and each field costs a pass.
    if fields.len() > crate::cluster::SLOTS || own.len() - 8 > 2 * crate::cluster::SLOTS {
        return None;
    }
    for field in fields {
        if field.starts_with('[') {
            continue;
        }
        let (first, last) = field.split_once('-').unwrap_or((field, field));
        let (Ok(first), Ok(last)) = (first.parse::<u16>(), last.parse::<u16>()) else {
            continue;
        };
        view.serves.insert_range(first, last);
    }
    // `[slot->-id]` (migrating) and `[slot-<-id]` (importing): only in
    // the node's own line, for a master.
    for field in &own[8..] {
        let Some(inner) = field.strip_prefix('[') else {
            continue;
        };
        let slot = inner
            .split(['-', '>', '<'])
            .next()
            .and_then(|s| s.parse().ok());
        if let Some(slot) = slot {
            view.migrating.insert(slot);
            view.serves.remove(slot);
        }
    }
    Some(view)
}

/// What an invalidation push names.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Invalidated<'r> {
    Keys(Vec<&'r [u8]>),
    /// `FLUSHALL` / `FLUSHDB`, or keys Redis no longer tracks.
    All,
}

/// Reads an invalidation push (RESP3 pushes arrive as arrays).
pub(super) fn invalidated(reply: &Reply) -> Option<Invalidated<'_>> {
    let Reply::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [Reply::String(kind), keys] if kind.eq_ignore_ascii_case(b"invalidate") => match keys {
            Reply::Nil => Some(Invalidated::All),
            // A key that is no string cannot be named: everything goes.
            Reply::Array(keys) => Some(
                keys.iter()
                    .map(|key| match key {
                        Reply::String(key) => Some(key.as_slice()),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .map_or(Invalidated::All, Invalidated::Keys),
            ),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn hash_field_expiry_comes_with_redis_7_4_and_valkey_9() {
        let info = |text: &str| Reply::String(text.as_bytes().to_vec());
        assert!(!has_field_expiry(&info("redis_version:7.0.15\r\n")));
        assert!(has_field_expiry(&info("redis_version:7.4.0\r\n")));
        assert!(has_field_expiry(&info("redis_version:8.0.2\r\n")));
        let valkey = "server_name:valkey\r\nredis_version:7.2.4\r\nvalkey_version:";
        assert!(!has_field_expiry(&info(&format!("{valkey}8.1.1\r\n"))));
        assert!(has_field_expiry(&info(&format!("{valkey}9.0.0\r\n"))));
        assert!(has_field_expiry(&info("no version here")));
    }

    fn nodes(text: &str) -> Reply {
        Reply::String(text.as_bytes().to_vec())
    }

    #[test]
    fn a_masters_own_slots_less_those_it_migrates() {
        let reply = nodes(
            "aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-2 5 [2->-bbb] [9-<-bbb]\n\
             bbb 127.0.0.1:7001@17001 master - 0 0 2 connected 3-4 6-100\n",
        );
        let view = own_slots(&reply).unwrap();
        let served: Vec<u16> = (0..200).filter(|&s| view.serves.contains(s)).collect();
        assert_eq!(served, [0, 1, 5]);
        let moving: Vec<u16> = (0..200).filter(|&s| view.migrating.contains(s)).collect();
        assert_eq!(moving, [2, 9]);
    }

    /// A hostile node's line, with thousands of ranges of every slot (a
    /// real node names each slot once), is read in one pass per range
    /// word, not per slot: its listener keeps up with its heartbeats and
    /// stops when asked. More ranges than slots is no node's own line.
    #[test]
    fn a_line_of_many_whole_ranges_costs_little() {
        let line = |ranges: usize| {
            let mut text = "aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected".to_string();
            text.push_str(&" 0-65535".repeat(ranges));
            nodes(&text)
        };
        let started = Instant::now();
        let view = own_slots(&line(16_000)).expect("its own line");
        assert!((0..crate::cluster::SLOTS as u16).all(|slot| view.serves.contains(slot)));
        assert!(
            own_slots(&line(100_000)).is_none(),
            "more ranges than slots"
        );
        let edges = own_slots(&nodes(
            "aaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 63-64 127-128 16383 9-8",
        ))
        .unwrap();
        let served: Vec<u16> = (0..crate::cluster::SLOTS as u16)
            .filter(|&s| edges.serves.contains(s))
            .collect();
        assert_eq!(served, [63, 64, 127, 128, 16383]);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "read in {:?}",
            started.elapsed()
        );
    }

    /// A master that serves no slot yet (a cluster database now follows
    /// it, `CLUSTER SHARDS` naming it) and its replica: nothing of theirs
    /// is kept; a slot it is importing is migrating.
    #[test]
    fn a_master_without_slots_and_its_replica_serve_nothing() {
        let served = |text: &str| {
            let view = own_slots(&nodes(text)).expect("its own line");
            let all = 0..crate::cluster::SLOTS as u16;
            let serves: Vec<u16> = all.clone().filter(|&s| view.serves.contains(s)).collect();
            let migrating: Vec<u16> = all.filter(|&s| view.migrating.contains(s)).collect();
            (serves, migrating)
        };
        let master = "ddd 127.0.0.1:7003@17003 myself,master - 0 0 4 connected
                      aaa 127.0.0.1:7000@17000 master - 0 0 1 connected 0-16383
";
        assert_eq!(served(master), (vec![], vec![]));
        let importing = "ddd 127.0.0.1:7003@17003 myself,master - 0 0 4 connected [2853-<-aaa]
";
        assert_eq!(served(importing), (vec![], vec![2853]));
        let replica = "eee 127.0.0.1:7004@17004 myself,slave ddd 0 0 4 connected
                       ddd 127.0.0.1:7003@17003 master - 0 0 4 connected
";
        assert_eq!(served(replica), (vec![], vec![]));
    }

    #[test]
    fn a_replica_serves_its_masters_slots() {
        let reply = nodes(
            "ccc 127.0.0.1:7002@17002 myself,slave bbb 0 0 2 connected\n\
             bbb 127.0.0.1:7001@17001 master - 0 0 2 connected 3-4\n",
        );
        let view = own_slots(&reply).unwrap();
        let served: Vec<u16> = (0..200).filter(|&s| view.serves.contains(s)).collect();
        assert_eq!(served, [3, 4]);
        assert!(own_slots(&nodes(
            "bbb 127.0.0.1:7001@17001 master - 0 0 2 connected 3-4\n"
        ))
        .is_none());
    }
}
