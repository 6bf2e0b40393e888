//! The retry decision as a table: one row per rule of the executors
//! before it was one function (`execute_standalone`, `execute_routed`,
//! `execute_pinned`), with the counters, flags and debug line each gave.
use super::*;

const SERVER: &str = "127.0.0.1:6379";
const TIMEOUT: &str = "timeout after 100 ms waiting for 127.0.0.1:6379";
const TOTAL_RETRIED: &[Counter] = REPLIED_RETRIED;

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

const ANY: M = M::Standalone { master_only: false };
const MASTER: M = M::Standalone { master_only: true };
const CLUSTER: M = M::Cluster {
    multi: false,
    hops: 0,
    refreshed: false,
    agrees: true,
};
const MAX_HOPS: u32 = 3;

fn cluster(change: impl FnOnce(&mut bool, &mut u32, &mut bool, &mut bool)) -> M {
    let (mut multi, mut hops, mut refreshed, mut agrees) = (false, 0, false, true);
    change(&mut multi, &mut hops, &mut refreshed, &mut agrees);
    M::Cluster {
        multi,
        hops,
        refreshed,
        agrees,
    }
}

/// The answer of a row.
#[derive(Clone, Copy)]
enum A {
    Ok,
    /// An error reply, its text.
    Err(&'static str),
    NotAMaster,
    /// No reply: a timeout.
    Failed,
    MultiRefused,
}

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
fn moved(to: &str) -> Next {
    Next::Follow(Redirection::Moved {
        slot: 3999,
        to: at(to),
    })
}

/// `(what, mode, answer, (retries used, allowed), runs a script, verdict)`.
type Row = (&'static str, M, A, (u32, u32), bool, Verdict);

fn table() -> Vec<Row> {
    let loading = "LOADING Redis is loading the dataset in memory";
    let tryagain = "TRYAGAIN Multiple keys request during rehashing of slot";
    let clusterdown = "CLUSTERDOWN The cluster is down";
    let readonly = "READONLY You can't write against a read only replica.";
    let masterdown = "MASTERDOWN Link with MASTER is down";
    let moved_text = "MOVED 3999 127.0.0.1:6381";
    let next_candidate =
        |text: &str| format!("{SERVER} replied {text}; retrying on the next candidate");
    vec![
        // A connection the task keeps: never retried.
        ("pinned: reply", M::Pinned, A::Ok, FRESH, false, done()),
        (
            "pinned: LOADING is the reply",
            M::Pinned,
            A::Err(loading),
            FRESH,
            false,
            done(),
        ),
        (
            "pinned: READONLY asks no role",
            M::Pinned,
            A::Err(readonly),
            FRESH,
            false,
            done(),
        ),
        (
            "pinned: a failure closes it",
            M::Pinned,
            A::Failed,
            FRESH,
            false,
            retire(give_up()),
        ),
        // Standalone.
        ("reply", ANY, A::Ok, FRESH, false, done()),
        (
            "an error reply",
            ANY,
            A::Err("ERR syntax error"),
            FRESH,
            false,
            done(),
        ),
        (
            "BUSY is the reply",
            ANY,
            A::Err("BUSY Redis is busy"),
            FRESH,
            false,
            done(),
        ),
        (
            "NOSCRIPT (after EVAL) is the reply",
            ANY,
            A::Err("NOSCRIPT No matching script"),
            FRESH,
            false,
            done(),
        ),
        (
            "NOPERM is the reply",
            ANY,
            A::Err("NOPERM no permissions"),
            FRESH,
            false,
            done(),
        ),
        (
            "MOVED is the reply",
            ANY,
            A::Err(moved_text),
            FRESH,
            false,
            done(),
        ),
        (
            "a failure: the next candidate",
            ANY,
            A::Failed,
            FRESH,
            false,
            note(
                to(Next::Reroute, FAILED_RETRIED),
                &format!("attempt 1 failed ({TIMEOUT}); retrying on the next candidate"),
            ),
        ),
        (
            "a failure: numbered by the retries used",
            ANY,
            A::Failed,
            (1, 2),
            false,
            note(
                to(Next::Reroute, FAILED_RETRIED),
                &format!("attempt 2 failed ({TIMEOUT}); retrying on the next candidate"),
            ),
        ),
        (
            "a failure, no retry left",
            ANY,
            A::Failed,
            SPENT,
            false,
            give_up(),
        ),
        (
            "a failure, no retries",
            ANY,
            A::Failed,
            NONE,
            false,
            give_up(),
        ),
        (
            "LOADING: the next candidate",
            ANY,
            A::Err(loading),
            FRESH,
            false,
            note(to(Next::Reroute, TOTAL_RETRIED), &next_candidate(loading)),
        ),
        (
            "TRYAGAIN: the next candidate",
            ANY,
            A::Err(tryagain),
            FRESH,
            false,
            note(to(Next::Reroute, TOTAL_RETRIED), &next_candidate(tryagain)),
        ),
        (
            "CLUSTERDOWN: the next candidate",
            ANY,
            A::Err(clusterdown),
            FRESH,
            false,
            note(
                to(Next::Reroute, TOTAL_RETRIED),
                &next_candidate(clusterdown),
            ),
        ),
        (
            "LOADING, no retry left",
            ANY,
            A::Err(loading),
            SPENT,
            false,
            done(),
        ),
        (
            "LOADING to a script may be its own",
            ANY,
            A::Err(loading),
            FRESH,
            true,
            done(),
        ),
        (
            "TRYAGAIN to a script is the server's",
            ANY,
            A::Err(tryagain),
            FRESH,
            true,
            note(to(Next::Reroute, TOTAL_RETRIED), &next_candidate(tryagain)),
        ),
        (
            "READONLY to a master command: the master found next",
            MASTER,
            A::Err(readonly),
            FRESH,
            false,
            roles(note(
                to(Next::PassOver, TOTAL_RETRIED),
                &format!("{SERVER} replied READONLY; sending to the master found next"),
            )),
        ),
        (
            "READONLY to a read: the reply",
            ANY,
            A::Err(readonly),
            FRESH,
            false,
            roles(done()),
        ),
        (
            "READONLY, no retry left",
            MASTER,
            A::Err(readonly),
            SPENT,
            false,
            roles(done()),
        ),
        (
            "READONLY to a script may be its own",
            MASTER,
            A::Err(readonly),
            FRESH,
            true,
            roles(done()),
        ),
        (
            "MASTERDOWN is the reply",
            MASTER,
            A::Err(masterdown),
            FRESH,
            false,
            roles(done()),
        ),
        (
            "ROLE says replica: passed over, no retry used",
            MASTER,
            A::NotAMaster,
            SPENT,
            false,
            note(
                to(Next::PassOver, &[]),
                &format!("skipping {SERVER}: ROLE says it is a replica, a master is needed"),
            ),
        ),
        // Cluster.
        ("cluster: reply", CLUSTER, A::Ok, FRESH, false, done()),
        (
            "cluster: a failure, routed again on a map read again",
            CLUSTER,
            A::Failed,
            FRESH,
            false,
            refresh(note(
                to(Next::Reroute, FAILED_RETRIED),
                &format!("attempt 1 failed ({TIMEOUT}); retrying"),
            )),
        ),
        (
            "cluster: a failure, the map read already",
            cluster(|_, _, refreshed, _| *refreshed = true),
            A::Failed,
            FRESH,
            false,
            note(
                to(Next::Reroute, FAILED_RETRIED),
                &format!("attempt 1 failed ({TIMEOUT}); retrying"),
            ),
        ),
        (
            "cluster: a failure, no retry left: the map for the next commands",
            CLUSTER,
            A::Failed,
            SPENT,
            false,
            refresh(give_up()),
        ),
        (
            "cluster: a failure, no retry left, the map read already",
            cluster(|_, _, r, _| *r = true),
            A::Failed,
            SPENT,
            false,
            give_up(),
        ),
        (
            "cluster: a refused MULTI",
            CLUSTER,
            A::MultiRefused,
            FRESH,
            false,
            give_up(),
        ),
        (
            "cluster: MOVED where the map says",
            CLUSTER,
            A::Err(moved_text),
            FRESH,
            false,
            to(moved("127.0.0.1:6381"), MOVED),
        ),
        (
            "cluster: MOVED the map does not agree with",
            cluster(|_, _, _, agrees| *agrees = false),
            A::Err(moved_text),
            FRESH,
            false,
            refresh(to(moved("127.0.0.1:6381"), MOVED)),
        ),
        (
            "cluster: MOVED, the map read already",
            cluster(|_, _, refreshed, agrees| (*refreshed, *agrees) = (true, false)),
            A::Err(moved_text),
            FRESH,
            false,
            to(moved("127.0.0.1:6381"), MOVED),
        ),
        (
            "cluster: MOVED uses no retry",
            CLUSTER,
            A::Err(moved_text),
            NONE,
            false,
            to(moved("127.0.0.1:6381"), MOVED),
        ),
        (
            "cluster: MOVED without a host: the replier's",
            CLUSTER,
            A::Err("MOVED 3999 :6381"),
            FRESH,
            false,
            to(moved("127.0.0.1:6381"), MOVED),
        ),
        (
            "cluster: ASK",
            CLUSTER,
            A::Err("ASK 3999 127.0.0.1:6381"),
            FRESH,
            false,
            to(
                Next::Follow(Redirection::Ask {
                    slot: 3999,
                    to: at("127.0.0.1:6381"),
                }),
                ASK,
            ),
        ),
        (
            "cluster: MOVED, a hop left",
            cluster(|_, hops, _, _| *hops = MAX_HOPS - 1),
            A::Err(moved_text),
            FRESH,
            false,
            to(moved("127.0.0.1:6381"), MOVED),
        ),
        (
            "cluster: MOVED past the hop limit: counted, no map read",
            cluster(|_, hops, _, agrees| (*hops, *agrees) = (MAX_HOPS, false)),
            A::Err(moved_text),
            FRESH,
            false,
            to(
                Next::TooManyRedirections {
                    last: moved_text.into(),
                },
                MOVED,
            ),
        ),
        (
            "cluster: MOVED in a transaction closes its connection",
            cluster(|multi, _, _, _| *multi = true),
            A::Err(moved_text),
            FRESH,
            false,
            retire(to(moved("127.0.0.1:6381"), MOVED)),
        ),
        (
            "cluster: past the hop limit in a transaction",
            cluster(|multi, hops, _, _| (*multi, *hops) = (true, MAX_HOPS)),
            A::Err(moved_text),
            FRESH,
            false,
            retire(to(
                Next::TooManyRedirections {
                    last: moved_text.into(),
                },
                MOVED,
            )),
        ),
        (
            "cluster: a MOVED not understood is the reply",
            CLUSTER,
            A::Err("MOVED x"),
            FRESH,
            false,
            done(),
        ),
        (
            "cluster: TRYAGAIN: the same node",
            CLUSTER,
            A::Err(tryagain),
            FRESH,
            false,
            note(
                to(Next::SameServer, TOTAL_RETRIED),
                &format!("{SERVER} replied {tryagain}; retrying"),
            ),
        ),
        (
            "cluster: CLUSTERDOWN: the same node",
            CLUSTER,
            A::Err(clusterdown),
            FRESH,
            false,
            note(
                to(Next::SameServer, TOTAL_RETRIED),
                &format!("{SERVER} replied {clusterdown}; retrying"),
            ),
        ),
        (
            "cluster: TRYAGAIN in a transaction closes its connection",
            cluster(|multi, _, _, _| *multi = true),
            A::Err(tryagain),
            FRESH,
            false,
            retire(note(
                to(Next::SameServer, TOTAL_RETRIED),
                &format!("{SERVER} replied {tryagain}; retrying"),
            )),
        ),
        (
            "cluster: TRYAGAIN, no retry left",
            CLUSTER,
            A::Err(tryagain),
            SPENT,
            false,
            done(),
        ),
        (
            "cluster: TRYAGAIN, no retry left, in a transaction: kept",
            cluster(|multi, _, _, _| *multi = true),
            A::Err(tryagain),
            SPENT,
            false,
            done(),
        ),
        (
            "cluster: LOADING to a script may be its own",
            CLUSTER,
            A::Err(loading),
            FRESH,
            true,
            done(),
        ),
        (
            "cluster: LOADING to a script in a transaction: the reply, its connection closed",
            cluster(|multi, _, _, _| *multi = true),
            A::Err(loading),
            FRESH,
            true,
            retire(done()),
        ),
        (
            "cluster: READONLY is the reply, no role asked",
            CLUSTER,
            A::Err(readonly),
            FRESH,
            false,
            done(),
        ),
        (
            "cluster: MASTERDOWN is the reply",
            CLUSTER,
            A::Err(masterdown),
            FRESH,
            false,
            done(),
        ),
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
        let failed = matches!(answer, A::Failed | A::MultiRefused);
        match verdict.next {
            Next::Done => assert!(matches!(answer, A::Ok | A::Err(_)), "{what}"),
            Next::GiveUp => assert!(failed, "{what}"),
            Next::Follow(_) | Next::TooManyRedirections { .. } => {
                assert!(matches!(mode, M::Cluster { .. }), "{what}")
            }
            Next::SameServer => assert!(matches!(mode, M::Cluster { .. }), "{what}"),
            Next::Reroute | Next::PassOver => {}
        }
        let retried = verdict.counts.contains(&Counter::CommandsRetried);
        assert_eq!(verdict.uses_retry(), retried, "{what}");
        if retried {
            assert!(left.0 < left.1, "{what}: a retry within the count");
        }
    }
}
