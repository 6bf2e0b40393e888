//! The retry decision as a table: one row per rule of the executors
//! before it was one function (`execute_standalone`, `execute_routed`,
//! `execute_pinned`), with the counters, flags and debug line each gave.
use super::*;

const SERVER: &str = "127.0.0.1:6379";
const TIMEOUT: &str = "timeout after 100 ms waiting for 127.0.0.1:6379";

/// The mode of a row.
#[derive(Clone, Copy)]
enum M {
    Pinned,
    Standalone {
        master_only: bool,
    },
    Cluster {
        multi: bool,
        hops: u32,
        refreshed: bool,
        /// What `map_agrees` says of any redirection.
        agrees: bool,
    },
}

const PINNED: M = M::Pinned;
const ANY: M = M::Standalone { master_only: false };
const MASTER: M = M::Standalone { master_only: true };
const MAX_HOPS: u32 = 3;

/// A cluster command: `multi` (a MULTI held), redirections followed,
/// the map read again already, what the map says of a redirection.
const fn cluster(multi: bool, hops: u32, refreshed: bool, agrees: bool) -> M {
    M::Cluster {
        multi,
        hops,
        refreshed,
        agrees,
    }
}
const CLUSTER: M = cluster(false, 0, false, true);
const IN_MULTI: M = cluster(true, 0, false, true);
const REFRESHED: M = cluster(false, 0, true, true);
const DISAGREES: M = cluster(false, 0, false, false);

/// The answer of a row.
#[derive(Clone, Copy)]
enum A {
    Ok,
    /// An error reply, its text.
    Err(&'static str),
    NotAMaster,
    /// No reply: a timeout.
    Failed,
    /// A reply that broke the protocol (out of step on a pipelined
    /// connection, malformed).
    Broken,
    MultiRefused,
}

const OK: A = A::Ok;
const LOADING: A = A::Err("LOADING Redis is loading the dataset in memory");
const TRYAGAIN: A = A::Err("TRYAGAIN Multiple keys request during rehashing of slot");
const CLUSTERDOWN: A = A::Err("CLUSTERDOWN The cluster is down");
const READONLY: A = A::Err("READONLY You can't write against a read only replica.");
const MASTERDOWN: A = A::Err("MASTERDOWN Link with MASTER is down");
const MOVED_TEXT: &str = "MOVED 3999 127.0.0.1:6381";
const MOVED_TO: A = A::Err(MOVED_TEXT);
const ASK_TO: A = A::Err("ASK 3999 127.0.0.1:6381");
const NO_REPLY: A = A::Failed;
const BROKEN: A = A::Broken;

/// Retries used and allowed.
const FRESH: (u32, u32) = (0, 2);
const SPENT: (u32, u32) = (2, 2);
const NONE: (u32, u32) = (0, 0);

fn to(next: Next, counts: &'static [Counter]) -> Verdict {
    Verdict::to(next, counts)
}
fn done() -> Verdict {
    to(Next::Done, &[])
}
fn give_up() -> Verdict {
    to(Next::GiveUp, FAILED)
}
fn roles(v: Verdict) -> Verdict {
    Verdict {
        ask_roles: true,
        ..v
    }
}
fn refresh(v: Verdict) -> Verdict {
    Verdict { refresh: true, ..v }
}
fn retire(v: Verdict) -> Verdict {
    Verdict { retire: true, ..v }
}
fn note(v: Verdict, text: &str) -> Verdict {
    Verdict {
        note: Some(text.to_string()),
        ..v
    }
}
fn at(location: &str) -> crate::cluster::Node {
    Ok(location.parse().unwrap())
}

/// `(what, mode, answer, (retries used, allowed), runs a script, verdict)`.
type Row = (&'static str, M, A, (u32, u32), bool, Verdict);

/// The text of an error answer.
fn text(answer: A) -> &'static str {
    match answer {
        A::Err(text) => text,
        _ => "",
    }
}
/// The debug line of a retried failure.
fn attempt_failed(n: u32, then: &str) -> String {
    format!("attempt {n} failed ({TIMEOUT}); retrying{then}")
}
const ON_NEXT: &str = " on the next candidate";
/// The debug line of a reply retried elsewhere (`then`: ` on the next
/// candidate`) or on the same node (``).
fn replied(answer: A, then: &str) -> String {
    format!("{SERVER} replied {}; retrying{then}", text(answer))
}
fn moved() -> Next {
    Next::Follow(Redirection::Moved {
        slot: 3999,
        to: at("127.0.0.1:6381"),
    })
}
fn ask_to() -> Next {
    Next::Follow(Redirection::Ask {
        slot: 3999,
        to: at("127.0.0.1:6381"),
    })
}
fn too_many() -> Next {
    Next::TooManyRedirections {
        last: MOVED_TEXT.into(),
    }
}

#[rustfmt::skip]
fn table() -> Vec<Row> {
    use Next::{PassOver, Reroute, SameServer};
    let readonly_next = format!("{SERVER} replied READONLY; sending to the master found next");
    let skipping = format!("skipping {SERVER}: ROLE says it is a replica, a master is needed");
    vec![
        // what                                     mode    answer   retries script verdict
        // A connection the task keeps: never retried.
        ("pinned: reply",                           PINNED, OK,      FRESH, false, done()),
        ("pinned: LOADING is the reply",            PINNED, LOADING, FRESH, false, done()),
        ("pinned: READONLY asks no role",           PINNED, READONLY, FRESH, false, done()),
        ("pinned: a failure closes it",             PINNED, NO_REPLY, FRESH, false, retire(give_up())),
        // Standalone.
        ("reply",                                   ANY, OK,         FRESH, false, done()),
        ("an error reply",                          ANY, A::Err("ERR syntax error"), FRESH, false, done()),
        ("BUSY is the reply",                       ANY, A::Err("BUSY Redis is busy"), FRESH, false, done()),
        ("NOSCRIPT (after EVAL) is the reply",      ANY, A::Err("NOSCRIPT No matching script"), FRESH, false, done()),
        ("NOPERM is the reply",                     ANY, A::Err("NOPERM no permissions"), FRESH, false, done()),
        ("MOVED is the reply",                      ANY, MOVED_TO,   FRESH, false, done()),
        ("a failure: the next candidate",           ANY, NO_REPLY,    FRESH, false, note(to(Reroute, FAILED_RETRIED), &attempt_failed(1, ON_NEXT))),
        ("a failure: numbered by retries used",     ANY, NO_REPLY,    (1, 2), false, note(to(Reroute, FAILED_RETRIED), &attempt_failed(2, ON_NEXT))),
        ("a failure, no retry left",                ANY, NO_REPLY,    SPENT, false, give_up()),
        ("a failure, no retries",                   ANY, NO_REPLY,    NONE,  false, give_up()),
        ("a reply that broke the protocol ran: not retried",
                                                    ANY, BROKEN,      FRESH, false, give_up()),
        ("LOADING: the next candidate",             ANY, LOADING,    FRESH, false, note(to(Reroute, REPLIED_RETRIED), &replied(LOADING, ON_NEXT))),
        ("TRYAGAIN: the next candidate",            ANY, TRYAGAIN,   FRESH, false, note(to(Reroute, REPLIED_RETRIED), &replied(TRYAGAIN, ON_NEXT))),
        ("CLUSTERDOWN: the next candidate",         ANY, CLUSTERDOWN, FRESH, false, note(to(Reroute, REPLIED_RETRIED), &replied(CLUSTERDOWN, ON_NEXT))),
        ("LOADING, no retry left",                  ANY, LOADING,    SPENT, false, done()),
        ("LOADING to a script may be its own",      ANY, LOADING,    FRESH, true,  done()),
        ("TRYAGAIN to a script may be its own",     ANY, TRYAGAIN,   FRESH, true,  done()),
        ("CLUSTERDOWN to a script may be its own",  ANY, CLUSTERDOWN, FRESH, true, done()),
        ("a script's failure: the next candidate",  ANY, NO_REPLY,   FRESH, true,  note(to(Reroute, FAILED_RETRIED), &attempt_failed(1, ON_NEXT))),
        ("READONLY to a master command: the master found next",
                                                    MASTER, READONLY, FRESH, false, roles(note(to(PassOver, REPLIED_RETRIED), &readonly_next))),
        ("READONLY to a read: the reply",           ANY, READONLY,   FRESH, false, roles(done())),
        ("READONLY, no retry left",                 MASTER, READONLY, SPENT, false, roles(done())),
        ("READONLY to a script may be its own",     MASTER, READONLY, FRESH, true,  roles(done())),
        ("MASTERDOWN is the reply",                 MASTER, MASTERDOWN, FRESH, false, roles(done())),
        ("ROLE says replica: passed over, no retry used",
                                                    MASTER, A::NotAMaster, SPENT, false, note(to(PassOver, &[]), &skipping)),
        // Cluster.
        ("cluster: reply",                          CLUSTER, OK,      FRESH, false, done()),
        ("cluster: a failure: routed again on a map read again",
                                                    CLUSTER, NO_REPLY, FRESH, false, refresh(note(to(Reroute, FAILED_RETRIED), &attempt_failed(1, "")))),
        ("cluster: a failure, the map read already", REFRESHED, NO_REPLY, FRESH, false, note(to(Reroute, FAILED_RETRIED), &attempt_failed(1, ""))),
        ("cluster: a failure, no retry left: the map read for the next commands",
                                                    CLUSTER, NO_REPLY, SPENT, false, refresh(give_up())),
        ("cluster: the same, the map read already", REFRESHED, NO_REPLY, SPENT, false, give_up()),
        ("cluster: a refused MULTI",                CLUSTER, A::MultiRefused, FRESH, false, give_up()),
        ("cluster: a reply that broke the protocol: not retried, the map read",
                                                    CLUSTER, BROKEN,  FRESH, false, refresh(give_up())),
        ("cluster: MOVED where the map says",       CLUSTER, MOVED_TO, FRESH, false, to(moved(), MOVED)),
        ("cluster: MOVED the map does not agree with", DISAGREES, MOVED_TO, FRESH, false, refresh(to(moved(), MOVED))),
        ("cluster: MOVED, the map read already",    cluster(false, 0, true, false), MOVED_TO, FRESH, false, to(moved(), MOVED)),
        ("cluster: MOVED uses no retry",            CLUSTER, MOVED_TO, NONE,  false, to(moved(), MOVED)),
        ("cluster: MOVED without a host: the replier's",
                                                    CLUSTER, A::Err("MOVED 3999 :6381"), FRESH, false, to(moved(), MOVED)),
        ("cluster: ASK",                            CLUSTER, ASK_TO,   FRESH, false, to(ask_to(), ASK)),
        ("cluster: MOVED, a hop left",              cluster(false, MAX_HOPS - 1, false, true), MOVED_TO, FRESH, false, to(moved(), MOVED)),
        ("cluster: MOVED past the hop limit: counted, no map read",
                                                    cluster(false, MAX_HOPS, false, false), MOVED_TO, FRESH, false, to(too_many(), MOVED)),
        ("cluster: MOVED in a transaction closes its connection",
                                                    IN_MULTI, MOVED_TO, FRESH, false, retire(to(moved(), MOVED))),
        ("cluster: past the hop limit in a transaction",
                                                    cluster(true, MAX_HOPS, false, true), MOVED_TO, FRESH, false, retire(to(too_many(), MOVED))),
        ("cluster: a MOVED not understood is the reply", CLUSTER, A::Err("MOVED x"), FRESH, false, done()),
        ("cluster: TRYAGAIN: the same node",        CLUSTER, TRYAGAIN, FRESH, false, note(to(SameServer, REPLIED_RETRIED), &replied(TRYAGAIN, ""))),
        ("cluster: CLUSTERDOWN: the same node",     CLUSTER, CLUSTERDOWN, FRESH, false, note(to(SameServer, REPLIED_RETRIED), &replied(CLUSTERDOWN, ""))),
        ("cluster: TRYAGAIN in a transaction closes its connection",
                                                    IN_MULTI, TRYAGAIN, FRESH, false, retire(note(to(SameServer, REPLIED_RETRIED), &replied(TRYAGAIN, "")))),
        ("cluster: TRYAGAIN, no retry left",        CLUSTER, TRYAGAIN, SPENT, false, done()),
        ("cluster: the same in a transaction: its connection kept",
                                                    IN_MULTI, TRYAGAIN, SPENT, false, done()),
        ("cluster: LOADING to a script may be its own",
                                                    CLUSTER, LOADING,  FRESH, true,  done()),
        ("cluster: TRYAGAIN to a script may be its own",
                                                    CLUSTER, TRYAGAIN, FRESH, true,  done()),
        ("cluster: CLUSTERDOWN to a script may be its own",
                                                    CLUSTER, CLUSTERDOWN, FRESH, true, done()),
        ("cluster: MOVED to a script is followed",  CLUSTER, MOVED_TO, FRESH, true,  to(moved(), MOVED)),
        ("cluster: ASK to a script is followed",    CLUSTER, ASK_TO,   FRESH, true,  to(ask_to(), ASK)),
        ("cluster: the same in a transaction: the reply, its connection closed",
                                                    IN_MULTI, LOADING, FRESH, true,  retire(done())),
        ("cluster: READONLY is the reply, no role asked",
                                                    CLUSTER, READONLY, FRESH, false, done()),
        ("cluster: MASTERDOWN is the reply",        CLUSTER, MASTERDOWN, FRESH, false, done()),
    ]
}

fn judge(
    mode: M,
    answer: A,
    (failed, retries): (u32, u32),
    runs_script: bool,
    debug: bool,
) -> Verdict {
    let timeout = Error::Timeout {
        server: SERVER.into(),
        timeout_ms: 100,
    };
    let broken = Error::Unsettled {
        server: SERVER.into(),
        source: crate::connection::Failure::Protocol(
            crate::protocol::resp::ProtocolError::Malformed("replies out of step"),
        ),
    };
    let refused = Error::MultiRefused {
        server: SERVER.into(),
        reply: "ERR".into(),
    };
    let agrees_true = |_: &Redirection| true;
    let agrees_false = |_: &Redirection| false;
    let mode = match mode {
        M::Pinned => Mode::Pinned,
        M::Standalone { master_only } => Mode::Standalone { master_only },
        M::Cluster {
            multi,
            hops,
            refreshed,
            agrees,
        } => Mode::Cluster(Hops {
            multi,
            hops,
            max_hops: MAX_HOPS,
            refreshed,
            map_agrees: if agrees { &agrees_true } else { &agrees_false },
        }),
    };
    let reply;
    let answer = match answer {
        A::Ok => {
            reply = Reply::Status("OK".into());
            Answer::Reply(&reply)
        }
        A::Err(text) => {
            reply = Reply::Error(text.into());
            Answer::Reply(&reply)
        }
        A::NotAMaster => Answer::NotAMaster,
        A::Failed => Answer::Failed(&timeout),
        A::Broken => Answer::Failed(&broken),
        A::MultiRefused => Answer::Failed(&refused),
    };
    let server: Location = SERVER.parse().unwrap();
    decide(
        &answer,
        &Attempt {
            mode,
            server: &server,
            failed,
            retries,
            runs_script,
            debug,
        },
    )
}

#[test]
fn each_rule_gives_its_verdict() {
    for (what, mode, answer, left, script, want) in table() {
        assert_eq!(judge(mode, answer, left, script, true), want, "{what}");
    }
}

#[test]
fn without_debug_the_same_verdict_with_no_line() {
    for (what, mode, answer, left, script, want) in table() {
        let want = Verdict { note: None, ..want };
        assert_eq!(judge(mode, answer, left, script, false), want, "{what}");
    }
}

/// The executors return the reply on `Done` and the error on `GiveUp`:
/// neither comes for the other kind of answer, and a retry is counted
/// as one exactly when it uses one.
#[test]
fn a_verdict_fits_its_answer() {
    for (what, mode, answer, left, script, _) in table() {
        let verdict = judge(mode, answer, left, script, false);
        let failed = matches!(answer, A::Failed | A::Broken | A::MultiRefused);
        match verdict.next {
            Next::Done => assert!(matches!(answer, A::Ok | A::Err(_)), "{what}"),
            Next::GiveUp => assert!(failed, "{what}"),
            Next::Follow(_) | Next::TooManyRedirections { .. } => {
                assert!(matches!(mode, M::Cluster { .. }), "{what}")
            }
            Next::SameServer => assert!(matches!(mode, M::Cluster { .. }), "{what}"),
            Next::Reroute | Next::PassOver => {}
        }
        // A retry counted is a retry taken: the command goes on.
        if verdict.uses_retry() {
            let goes_on = matches!(
                verdict.next,
                Next::Reroute | Next::SameServer | Next::PassOver
            );
            assert!(goes_on, "{what}: a retry counted, but {:?}", verdict.next);
            assert!(left.0 < left.1, "{what}: a retry within the count");
        }
    }
}
