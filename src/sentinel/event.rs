//! What Sentinel says, parsed: its Pub/Sub messages and its answers to
//! `SENTINEL masters` / `SENTINEL replicas <name>`. Addresses come out as
//! [`Location`]s, normalised as the VCL's are, so they compare with the
//! locations the VCL registered.
use crate::config::Location;
use crate::protocol::Reply;

/// Subjective (`sdown`: this Sentinel) or objective (`odown`: a quorum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Down {
    Subjective,
    Objective,
}

/// One Pub/Sub message that changes what we know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// `+sdown` / `-sdown` / `+odown` / `-odown` about a master or replica.
    Down {
        addr: Location,
        kind: Down,
        down: bool,
    },
    /// `+switch-master <name> <old ip> <old port> <new ip> <new port>`.
    SwitchMaster {
        name: String,
        old: Location,
        new: Location,
    },
}

/// The patterns the thread subscribes to: the C VMOD's, and
/// `+promoted-slave`, which Sentinel publishes as soon as the replica it
/// chose answers as a master, where `+switch-master` waits for the end of
/// the failover (the other replicas reconfigured, or `failover-timeout`):
/// writes sent in between would go to the old master and be lost when it
/// is turned into a replica.
#[cfg(not(test))] // As the thread (monitor.rs): left out of unit tests.
pub(crate) const PATTERNS: [&str; 6] = [
    "+sdown",
    "-sdown",
    "+odown",
    "-odown",
    "+switch-master",
    "+promoted-slave",
];

/// `ip` and `port` as a location, or None when they are not an address
/// (or host name) and a port.
pub(crate) fn address(ip: &str, port: &str) -> Option<Location> {
    let port: u16 = port.parse().ok()?;
    Location::tcp(ip, port).ok()
}

fn text(reply: &Reply) -> Option<&str> {
    match reply {
        Reply::String(bytes) => std::str::from_utf8(bytes).ok(),
        Reply::Status(text) => Some(text),
        _ => None,
    }
}

/// The channel and payload of a `pmessage` (`[pmessage, pattern,
/// channel, payload]`, RESP2 array or RESP3 push); None for anything else
/// (subscription acknowledgements, `PONG`).
pub(crate) fn pmessage(reply: &Reply) -> Option<(&str, &str)> {
    let Reply::Array(items) = reply else {
        return None;
    };
    let [kind, _pattern, channel, payload] = items.as_slice() else {
        return None;
    };
    if text(kind)? != "pmessage" {
        return None;
    }
    Some((text(channel)?, text(payload)?))
}

/// A `pmessage` as an [`Event`]; None for anything else (see
/// [`pmessage`]), and for events about Sentinels themselves.
pub(crate) fn parse_message(reply: &Reply) -> Option<Event> {
    let (channel, payload) = pmessage(reply)?;
    let words: Vec<&str> = payload.split_whitespace().collect();
    match channel {
        "+switch-master" => match words.as_slice() {
            [name, old_ip, old_port, new_ip, new_port] => Some(Event::SwitchMaster {
                name: name.to_string(),
                old: address(old_ip, old_port)?,
                new: address(new_ip, new_port)?,
            }),
            _ => None,
        },
        // `slave <ip:port> <ip> <port> @ <master name> <ip> <port>`
        "+promoted-slave" => match words.as_slice() {
            [_, _, ip, port, "@", name, old_ip, old_port] => Some(Event::SwitchMaster {
                name: name.to_string(),
                old: address(old_ip, old_port)?,
                new: address(ip, port)?,
            }),
            _ => None,
        },
        channel => {
            let (down, kind) = match channel {
                "+sdown" => (true, Down::Subjective),
                "-sdown" => (false, Down::Subjective),
                "+odown" => (true, Down::Objective),
                "-odown" => (false, Down::Objective),
                _ => return None,
            };
            // `<type> <name> <ip> <port> [@ <master name> <ip> <port>]`
            match words.as_slice() {
                ["master" | "slave" | "replica", _name, ip, port, ..] => Some(Event::Down {
                    addr: address(ip, port)?,
                    kind,
                    down,
                }),
                _ => None,
            }
        }
    }
}

/// One master or replica in an answer to `SENTINEL masters` / `SENTINEL
/// replicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reported {
    /// The master's name (`SENTINEL masters`); empty for a replica.
    pub name: String,
    pub addr: Location,
    pub sdown: bool,
    pub odown: bool,
}

/// The instances of a `SENTINEL masters` / `SENTINEL replicas` answer: an
/// array of field lists (`name`, value, ...; a RESP3 map arrives
/// flattened the same way). Entries without a usable address are skipped.
pub(crate) fn parse_instances(reply: &Reply) -> Option<Vec<Reported>> {
    let Reply::Array(entries) = reply else {
        return None;
    };
    let mut out = Vec::new();
    for entry in entries {
        let Reply::Array(fields) = entry else {
            continue;
        };
        let field = |key: &str| {
            fields
                .chunks(2)
                .find(|pair| pair.first().and_then(text) == Some(key))
                .and_then(|pair| pair.get(1))
                .and_then(text)
        };
        let (Some(ip), Some(port)) = (field("ip"), field("port")) else {
            continue;
        };
        let Some(addr) = address(ip, port) else {
            continue;
        };
        let flags: Vec<&str> = field("flags").unwrap_or_default().split(',').collect();
        out.push(Reported {
            name: field("name").unwrap_or_default().to_string(),
            addr,
            sdown: flags.contains(&"s_down"),
            odown: flags.contains(&"o_down"),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Location {
        text.parse().unwrap()
    }

    fn s(text: &str) -> Reply {
        Reply::String(text.as_bytes().to_vec())
    }

    fn pmessage(channel: &str, payload: &str) -> Reply {
        Reply::Array(vec![s("pmessage"), s(channel), s(channel), s(payload)])
    }

    #[test]
    fn down_events_of_masters_and_replicas() {
        assert_eq!(
            parse_message(&pmessage("+sdown", "master main 127.0.0.1 6379")),
            Some(Event::Down {
                addr: at("127.0.0.1:6379"),
                kind: Down::Subjective,
                down: true
            })
        );
        assert_eq!(
            parse_message(&pmessage(
                "-odown",
                "master main 127.0.0.1 6379 #quorum 1/2"
            )),
            Some(Event::Down {
                addr: at("127.0.0.1:6379"),
                kind: Down::Objective,
                down: false
            })
        );
        assert_eq!(
            parse_message(&pmessage(
                "+sdown",
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ main 127.0.0.1 6379"
            )),
            Some(Event::Down {
                addr: at("127.0.0.1:6380"),
                kind: Down::Subjective,
                down: true
            })
        );
        assert_eq!(
            parse_message(&pmessage("+sdown", "slave r ::1 6380 @ main ::1 6379")),
            Some(Event::Down {
                addr: at("[::1]:6380"),
                kind: Down::Subjective,
                down: true
            })
        );
        // Normalised as the VCL's locations are; no location, no event.
        assert_eq!(
            parse_message(&pmessage("+odown", "master main 0:0:0:0:0:0:0:1 6379")),
            Some(Event::Down {
                addr: at("[::1]:6379"),
                kind: Down::Objective,
                down: true
            })
        );
        assert_eq!(
            parse_message(&pmessage("+sdown", "master main Redis-A 6379")),
            Some(Event::Down {
                addr: at("redis-a:6379"),
                kind: Down::Subjective,
                down: true
            })
        );
        assert_eq!(
            parse_message(&pmessage("+sdown", "master main a/b 6379")),
            None
        );
        // A Sentinel going down is no server of ours.
        assert_eq!(
            parse_message(&pmessage(
                "+sdown",
                "sentinel 5f3a 127.0.0.1 26379 @ main 127.0.0.1 6379"
            )),
            None
        );
    }

    #[test]
    fn switch_master() {
        assert_eq!(
            parse_message(&pmessage(
                "+switch-master",
                "main 127.0.0.1 6379 127.0.0.1 6380"
            )),
            Some(Event::SwitchMaster {
                name: "main".into(),
                old: at("127.0.0.1:6379"),
                new: at("127.0.0.1:6380")
            })
        );
        assert_eq!(
            parse_message(&pmessage("+switch-master", "main 127.0.0.1 6379")),
            None
        );
        assert_eq!(
            parse_message(&pmessage("+switch-master", "main 127.0.0.1 0 127.0.0.1 x")),
            None
        );
    }

    #[test]
    fn promoted_replica_is_a_switch() {
        assert_eq!(
            parse_message(&pmessage(
                "+promoted-slave",
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ main 127.0.0.1 6379"
            )),
            Some(Event::SwitchMaster {
                name: "main".into(),
                old: at("127.0.0.1:6379"),
                new: at("127.0.0.1:6380")
            })
        );
        assert_eq!(
            parse_message(&pmessage(
                "+promoted-slave",
                "slave 127.0.0.1:6380 127.0.0.1 6380"
            )),
            None
        );
    }

    #[test]
    fn other_messages_are_ignored() {
        let ack = Reply::Array(vec![s("psubscribe"), s("+sdown"), Reply::Integer(1)]);
        assert_eq!(parse_message(&ack), None);
        let pong = Reply::Array(vec![s("pong"), s("")]);
        assert_eq!(parse_message(&pong), None);
        assert_eq!(parse_message(&Reply::Status("PONG".into())), None);
        assert_eq!(
            parse_message(&pmessage("+tilt", "#tilt mode entered")),
            None
        );
        assert_eq!(parse_message(&pmessage("+sdown", "master main")), None);
    }

    #[test]
    fn instances_with_flags() {
        let entry = |name: &str, ip: &str, port: &str, flags: &str| {
            Reply::Array(vec![
                s("name"),
                s(name),
                s("ip"),
                s(ip),
                s("port"),
                s(port),
                s("runid"),
                s("x"),
                s("flags"),
                s(flags),
            ])
        };
        let reply = Reply::Array(vec![
            entry("main", "127.0.0.1", "6379", "master"),
            entry("other", "127.0.0.1", "6390", "master,s_down,o_down"),
            entry("broken", "127.0.0.1", "nope", "master"),
            Reply::Integer(3),
        ]);
        assert_eq!(
            parse_instances(&reply),
            Some(vec![
                Reported {
                    name: "main".into(),
                    addr: at("127.0.0.1:6379"),
                    sdown: false,
                    odown: false
                },
                Reported {
                    name: "other".into(),
                    addr: at("127.0.0.1:6390"),
                    sdown: true,
                    odown: true
                },
            ])
        );
        assert_eq!(parse_instances(&Reply::Error("ERR".into())), None);
    }
}
