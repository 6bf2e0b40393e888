//! What Sentinel says, parsed: its Pub/Sub messages and its answers to
//! `SENTINEL masters` / `SENTINEL replicas <name>`. Addresses come out as
//! [`Location`]s, normalised as the VCL's are, so they compare with the
//! locations the VCL registered.
use std::time::Duration;

use crate::config::{Location, Role};
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
    /// The Sentinel leading a failover of `master` chose to go on with it
    /// (see [`FAILOVER_STARTED`]): its master commands are held.
    FailoverStarted { name: String, master: Location },
    /// `-failover-abort-*`: the old master stays. (The end of a failover
    /// needs no event of its own: `+switch-master` follows
    /// `+failover-end` one tick later, and names the new master.)
    FailoverAborted { name: String, master: Location },
    /// `+role-change`: a server reports the role Sentinel has for it.
    /// (`-role-change`, a role Sentinel does not agree with and will
    /// correct, is left out.)
    RoleReported { addr: Location, role: Role },
}

/// The events that start a hold, in the order the leading Sentinel sends
/// them, one timer tick (about 100 ms) apart; `SLAVEOF NO ONE` goes to the
/// replica a tick after `+failover-state-send-slaveof-noone`. The first
/// is the trigger: it comes once the Sentinel leads (elected, or
/// `SENTINEL FAILOVER`), so the failover goes on unless aborted, and one
/// or two ticks before the promotion, time for the writes already sent to
/// the old master to reach the replica. `+try-failover` would come
/// earlier but also from Sentinels that then lose the election (holding
/// up to the election timeout for nothing). The later ones start the hold
/// if the first was missed (a thread that just connected).
pub(crate) const FAILOVER_STARTED: [&str; 4] = [
    "+failover-state-select-slave",
    "+selected-slave",
    "+failover-state-send-slaveof-noone",
    "+failover-state-wait-promotion",
];

/// The patterns the topology session (one Sentinel at a time) subscribes
/// to: the C VMOD's, `+promoted-slave`, which Sentinel publishes as soon
/// as the replica it chose answers as a master, where `+switch-master`
/// waits for the end of the failover (the other replicas reconfigured, or
/// `failover-timeout`): writes sent in between would go to the old master
/// and be lost when it is turned into a replica; and `+role-change`.
#[cfg(not(test))] // As the thread (monitor.rs): left out of unit tests.
pub(crate) const TOPOLOGY_PATTERNS: [&str; 7] = [
    "+sdown",
    "-sdown",
    "+odown",
    "-odown",
    "+switch-master",
    "+promoted-slave",
    "+role-change",
];

/// The patterns every Sentinel of the list is subscribed to: the steps of
/// a failover, which only the Sentinel leading it publishes. They hold
/// master commands from the choice of a replica ([`FAILOVER_STARTED`])
/// to its promotion (`+promoted-slave`) or the failover's abort.
#[cfg(not(test))]
pub(crate) const FAILOVER_PATTERNS: [&str; 6] = [
    FAILOVER_STARTED[0],
    FAILOVER_STARTED[1],
    FAILOVER_STARTED[2],
    FAILOVER_STARTED[3],
    "+promoted-slave",
    "-failover-abort-*",
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

/// The master an event is about: `master <name> <ip> <port> ...`, or
/// `slave <ip:port> <ip> <port> @ <name> <ip> <port> ...` (a replica of it).
fn master_of(words: &[&str]) -> Option<(String, Location)> {
    match words {
        ["master", name, ip, port, ..] => Some((name.to_string(), address(ip, port)?)),
        ["slave" | "replica", _, _, _, "@", name, ip, port, ..] => {
            Some((name.to_string(), address(ip, port)?))
        }
        _ => None,
    }
}

/// A `pmessage` as an [`Event`]; None for anything else (see
/// [`pmessage`]), and for events about Sentinels themselves.
pub(crate) fn parse_message(reply: &Reply) -> Option<Event> {
    let (channel, payload) = pmessage(reply)?;
    let words: Vec<&str> = payload.split_whitespace().collect();
    if FAILOVER_STARTED.contains(&channel) {
        let (name, master) = master_of(&words)?;
        return Some(Event::FailoverStarted { name, master });
    }
    if channel.starts_with("-failover-abort-") {
        let (name, master) = master_of(&words)?;
        return Some(Event::FailoverAborted { name, master });
    }
    match channel {
        // `<type> <name> <ip> <port> [@ <master> <ip> <port>] new reported
        // role is <role>`
        "+role-change" => {
            let ["master" | "slave" | "replica", _, ip, port, ..] = words.as_slice() else {
                return None;
            };
            let role = match words.as_slice() {
                [.., "new", "reported", "role", "is", "master"] => Role::Master,
                [.., "new", "reported", "role", "is", "slave" | "replica"] => Role::Slave,
                _ => return None,
            };
            Some(Event::RoleReported {
                addr: address(ip, port)?,
                role,
            })
        }
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
    /// Its `failover-timeout` (masters only): how long Sentinel gives a
    /// promotion before it aborts.
    pub failover_timeout: Option<Duration>,
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
            failover_timeout: field("failover-timeout")
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis),
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

    /// Payloads as Redis 7.0's sentinel.c formats them (`%@`: the
    /// instance, then its master for a replica).
    #[test]
    fn failover_steps_name_the_master_failed_over() {
        let started = |master: &str| {
            Some(Event::FailoverStarted {
                name: "main".into(),
                master: at(master),
            })
        };
        assert_eq!(
            parse_message(&pmessage(
                "+failover-state-select-slave",
                "master main 127.0.0.1 6379"
            )),
            started("127.0.0.1:6379")
        );
        for channel in [
            "+selected-slave",
            "+failover-state-send-slaveof-noone",
            "+failover-state-wait-promotion",
        ] {
            assert_eq!(
                parse_message(&pmessage(
                    channel,
                    "slave 127.0.0.1:6380 127.0.0.1 6380 @ main 127.0.0.1 6379"
                )),
                started("127.0.0.1:6379"),
                "{channel}"
            );
        }
        // Names (announce-hostnames), normalised as the VCL's are.
        assert_eq!(
            parse_message(&pmessage(
                "+selected-slave",
                "slave LocalHost:6380 LocalHost 6380 @ main LocalHost 6379"
            )),
            started("localhost:6379")
        );
        for channel in [
            "-failover-abort-no-good-slave",
            "-failover-abort-slave-timeout",
            "-failover-abort-not-elected",
        ] {
            assert_eq!(
                parse_message(&pmessage(channel, "master main 127.0.0.1 6379")),
                Some(Event::FailoverAborted {
                    name: "main".into(),
                    master: at("127.0.0.1:6379"),
                }),
                "{channel}"
            );
        }
        // The end is followed by +switch-master, which lifts the hold.
        assert_eq!(
            parse_message(&pmessage("+failover-end", "master main 127.0.0.1 6379")),
            None
        );
        assert_eq!(
            parse_message(&pmessage("+failover-state-select-slave", "master main")),
            None
        );
        assert_eq!(
            parse_message(&pmessage(
                "+selected-slave",
                "slave 127.0.0.1:6380 127.0.0.1 6380"
            )),
            None
        );
    }

    #[test]
    fn role_changes_reported() {
        assert_eq!(
            parse_message(&pmessage(
                "+role-change",
                "slave 127.0.0.1:6379 127.0.0.1 6379 @ main 127.0.0.1 6380 new reported role is slave"
            )),
            Some(Event::RoleReported {
                addr: at("127.0.0.1:6379"),
                role: Role::Slave
            })
        );
        assert_eq!(
            parse_message(&pmessage(
                "+role-change",
                "master main localhost 6380 new reported role is master"
            )),
            Some(Event::RoleReported {
                addr: at("localhost:6380"),
                role: Role::Master
            })
        );
        // Sentinel disagrees and will correct it: not followed.
        assert_eq!(
            parse_message(&pmessage(
                "-role-change",
                "slave 127.0.0.1:6379 127.0.0.1 6379 @ main 127.0.0.1 6380 new reported role is master"
            )),
            None
        );
        assert_eq!(
            parse_message(&pmessage(
                "+role-change",
                "slave 127.0.0.1:6379 127.0.0.1 6379 @ main 127.0.0.1 6380 new reported role is sentinel"
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
                s("failover-timeout"),
                s("2000"),
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
                    odown: false,
                    failover_timeout: Some(Duration::from_secs(2))
                },
                Reported {
                    name: "other".into(),
                    addr: at("127.0.0.1:6390"),
                    sdown: true,
                    odown: true,
                    failover_timeout: Some(Duration::from_secs(2))
                },
            ])
        );
        assert_eq!(parse_instances(&Reply::Error("ERR".into())), None);
    }
}
