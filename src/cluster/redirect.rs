//! The redirection error replies of Redis Cluster: `MOVED <slot>
//! <host:port>` (the slot lives there now) and `ASK <slot> <host:port>`
//! (this key is being migrated there: ask once with `ASKING`).
use super::map::{node_at, Node};
use super::slot::HashSlot;

/// A redirection read from an error reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redirection {
    Moved { slot: HashSlot, to: Node },
    Ask { slot: HashSlot, to: Node },
}

/// The redirection in the error text `text`, if it is one. `from_host` is
/// the host of the node that replied: Redis leaves the host out (`MOVED
/// 3999 :6381`) when that node does not know its own address, meaning the
/// same host.
pub(crate) fn redirection(text: &str, from_host: &str) -> Option<Redirection> {
    let (kind, rest) = text.split_once(' ')?;
    if kind != "MOVED" && kind != "ASK" {
        return None;
    }
    let (slot, endpoint) = rest.trim().split_once(' ')?;
    let slot: HashSlot = slot
        .parse()
        .ok()
        .filter(|&s| usize::from(s) < super::slot::SLOTS)?;
    let (host, port) = endpoint.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = if host.is_empty() || host == "?" {
        from_host
    } else {
        host
    };
    let to = node_at(host, port);
    Some(match kind {
        "MOVED" => Redirection::Moved { slot, to },
        _ => Redirection::Ask { slot, to },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Node {
        Ok(text.parse().unwrap())
    }

    #[test]
    fn moved_and_ask() {
        assert_eq!(
            redirection("MOVED 3999 127.0.0.1:6381", "10.0.0.1"),
            Some(Redirection::Moved {
                slot: 3999,
                to: at("127.0.0.1:6381")
            })
        );
        assert_eq!(
            redirection("ASK 16383 127.0.0.2:7000", "10.0.0.1"),
            Some(Redirection::Ask {
                slot: 16383,
                to: at("127.0.0.2:7000")
            })
        );
    }

    #[test]
    fn missing_host_means_the_node_that_replied() {
        assert_eq!(
            redirection("MOVED 1 :6381", "127.0.0.3"),
            Some(Redirection::Moved {
                slot: 1,
                to: at("127.0.0.3:6381")
            })
        );
    }

    #[test]
    fn ipv6_endpoints_keep_their_brackets() {
        assert_eq!(
            redirection("MOVED 2 ::1:7000", "127.0.0.1"),
            Some(Redirection::Moved {
                slot: 2,
                to: at("[::1]:7000")
            })
        );
    }

    #[test]
    fn targets_are_named_as_locations() {
        assert_eq!(
            redirection("MOVED 2 0:0:0:0:0:0:0:1:7000", "127.0.0.1"),
            redirection("MOVED 2 ::1:7000", "127.0.0.1"),
        );
        assert_eq!(
            redirection("ASK 2 Redis-B:7000", "127.0.0.1"),
            Some(Redirection::Ask {
                slot: 2,
                to: at("redis-b:7000")
            })
        );
        // Still a redirection, to a node no server can be made for.
        assert_eq!(
            redirection("MOVED 2 a/b:7000", "127.0.0.1"),
            Some(Redirection::Moved {
                slot: 2,
                to: Err("a/b:7000".into())
            })
        );
    }

    #[test]
    fn other_errors_are_not_redirections() {
        for text in [
            "ERR unknown command",
            "MOVED",
            "MOVED 3999",
            "MOVED x 127.0.0.1:1",
            "MOVED 16384 127.0.0.1:1",
            "MOVED 1 127.0.0.1:99999",
            "MOVEDX 1 127.0.0.1:1",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert_eq!(redirection(text, "h"), None, "{text}");
        }
    }
}
