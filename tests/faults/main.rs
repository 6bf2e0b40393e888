//! Fault suite: real varnishd + real redis-server processes under load, with
//! faults injected (Redis killed, frozen, pool exhausted, VCL churn, soak).
//!
//! ```text
//! cargo test --test faults                 # short scenarios (~2-3 min)
//! cargo test --test faults -- --ignored    # long ones: churn x200, 10 min soaks
//! cargo test --test faults -- s2           # a subset (substring of the name)
//! cargo test --release --test faults       # figures from a release build
//! ```
//!
//! Every trial starts its own redis-server (loopback, free port) and its own
//! `varnishd -F` (loopback, free port, `-n <dir>`), loads a generated VCL,
//! drives HTTP/1.1 keep-alive GETs at it from a built-in load driver (std
//! threads, fixed duration, per-request latency and outcome recorded), injects
//! the fault, then checks:
//!
//! * `MGT.child_panic` and `MGT.child_died` are 0 and the child is the same
//!   process as at start;
//! * no request hung past its deadline, every response is a 200 (the VCL
//!   falls back when `replied()` is false and says so in `x-redis`);
//! * nothing leaked: the child's thread count, its file descriptors other than
//!   Redis sockets (`/proc/<child>/fd`), its Redis sockets against the bound
//!   the configuration promises, and Redis's own `connected_clients`.
//!
//! Each trial prints its figures (requests, fallbacks, worst / p99 latency,
//! counters, fds / threads / RSS before and after). Trials run one at a time
//! (the figures are latencies on a small machine) unless `--test-threads` is
//! given.
//!
//! # Scenarios (each in private and shared mode unless said otherwise)
//! * `s1.kill-restart.*`: Redis SIGKILLed under load (20 clients), restarted
//!   2 s later on its port: every request answered (fallback while down),
//!   no fallback from `sickness_ttl` + 1 s after the restart on, a reply
//!   within the reconnect spacing cap (1 s) + 1 s of Redis answering PING,
//!   failed connection attempts bounded by the spacing (no storm), the
//!   counters reconcile with what the clients saw.
//! * `s2.freeze.*.retries{0,1}`: Redis SIGSTOPped for 5 s (50 clients, both
//!   timeouts 200 ms, shared pool of 4): every request within
//!   `(connection_timeout + command_timeout) x (1 + retries) + 50 ms`,
//!   no fallback once that long (plus the 1 s reconnect spacing cap) after
//!   SIGCONT. `s2.freeze.*.resp3`: the same with `protocol = RESP3`
//!   (retries 0), every new connection's `HELLO 3` unanswered while frozen
//!   (bounded by the command timeout, not spaced: the server accepted).
//! * `s3.pool-exhaustion.*`: 200 clients, `max_connections=1`, fast commands
//!   then one in four a script holding Redis 10 ms: every request replied or timed
//!   out within the bound, `workers.blocked` counts (shared), replies in
//!   every 500 ms (shared; private mode has no admission control and is
//!   only reported in the slow phase).
//! * `s8.sentinel-failover.{private,shared}`: a master, two replicas
//!   (`REPLICAOF`), three `redis-server --sentinel` (500 ms
//!   `down-after-milliseconds`, 2 s `failover-timeout`), the VCL with
//!   `redis.sentinels(...)` before the database, every server
//!   `type = auto`; 20 clients of writes (SET, EVAL with
//!   `execute(master = true)`), `SENTINEL FAILOVER` at 2 s, the load
//!   stopped 5 s after every Sentinel names the new master:
//!   every Sentinel names a new master within 8 s, every request within
//!   `command_bound`, no fallback or error reply later than 3 s after
//!   that, every request of the last second replied, connections opened
//!   to the new master, no leak (sockets to all three servers against
//!   their clients other than Sentinels and replication links), counters
//!   reconcile, and the lone client's write is on the new master.
//! * `s11.failover-writes.{sentinel,command,kill}.{private,shared,pipelined}`:
//!   a master, replicas (`REPLICAOF`; two, one for `command`), three
//!   Sentinels (not for `command`), every server `type = auto`; 8 clients
//!   of `INCR fault:acked` with `execute(master = true)`,
//!   `command_timeout` 2000 ms; at 1.5 s `SENTINEL FAILOVER` to the
//!   last Sentinel, not the one the VCL's topology session uses, so that
//!   only the failover events of every Sentinel hold the writes
//!   (`sentinel`), Redis's own
//!   `FAILOVER` (`command`) or SIGKILL of the master (`kill`); the load
//!   stopped 2 s after the new master is named: the new master's counter
//!   is the number of acknowledged writes (0 lost) for `sentinel` and
//!   `command`, every write replied for `sentinel`; every request within
//!   `command_bound`, counters reconcile (a `READONLY` resent counted as
//!   a reply and a retry), no leak. Says the held window (the leader's
//!   log and the held requests), the leader, and for `kill` the
//!   replication gap sampled before the kill and when writes came back
//!   against the first `+switch-master`.
//! * `s12.sentinel-masters-by-name.shared`: two masters with a replica
//!   each, everything announced as `localhost`, three Sentinels
//!   monitoring both by name, two databases named by `localhost`; 8
//!   clients writing to both, `SENTINEL FAILOVER` of each in turn: 0
//!   lost and every write replied in both, the database not failed over
//!   never held (worst write 300 ms at most during the other's failover).
//! * `s9.cluster-failover.{private,shared,pipelined}`: a Redis Cluster of 3 masters
//!   x 1 replica (`tests/support/cluster.rs`, `cluster-node-timeout`
//!   1000 ms), the database `type = cluster` seeded with m0, both timeouts
//!   200 ms, 1 retry; 20 clients of SET / GET / EVAL on keys `{tag}c<n>`,
//!   3 tags per master; m0 SIGKILLed at 2 s, the load stopped 4 s after
//!   r0 is promoted and every live node says `cluster_state:ok`: r0
//!   promoted within 10 s, every request within `command_bound`, m0's
//!   slots fall back while it is down and every request for them is
//!   replied from 3 s after the promotion on (the figures say how soon
//!   they resume), m1's and m2's slots never fall back and get error
//!   replies only while the cluster is down (`CLUSTERDOWN`, give or take
//!   the test's 0.5 s polling), discoveries between 2 and one a second of
//!   failures, no socket left to m0, connections to r0, no leak against
//!   the five live nodes, and the counters reconcile with the clients
//!   and with the `CLUSTERDOWN` the nodes sent (`INFO errorstats`: each
//!   one retried or the reply).
//! * `s10.cluster-resharding.{private,shared,pipelined}`: the same cluster and load
//!   (6 tags in slots 0-99, 2 elsewhere on m0, 2 on m1, 2 on m2); slots
//!   0-99 moved from m0 to m1 at 2 s as `redis-cli --cluster reshard`
//!   does it (`SETSLOT IMPORTING` / `MIGRATING`, `GETKEYSINSLOT` and
//!   `MIGRATE ... KEYS` by 10, `SETSLOT NODE` on m1, m0, m2), the load
//!   stopped 3 s later: every request replied (no fallback, no error)
//!   within `command_bound`, MOVED and ASK counted (ASK as many as the
//!   `ASKING` m1 got), at most 1 + 2 discoveries per moved slot the load
//!   uses, no leak against the six nodes, counters reconcile; afterwards
//!   every master gives the slots to m1, which holds the load's keys
//!   there and serves a GET of them with no MOVED.
//! * `s13.near-cache-staleness.{private,shared,pipelined}` and
//!   `.restart.shared`: `near_cache` on; 4 writers give 40 keys a new
//!   version each about every second, one write in two directly in Redis
//!   and the other through Varnish, while 100 clients read them through
//!   Varnish, for 10 s; `FLUSHALL` at 3.5 s and the tracking connection
//!   killed (`CLIENT KILL`) at 6.5 s, or (`.restart`) Redis SIGKILLed at
//!   4 s and restarted empty at 5 s. Every read and write is logged with
//!   its times: no read returns a value overwritten (a later version
//!   acknowledged, or a reset begun after it was written) more than
//!   300 ms before the read began, nor a value never written; the
//!   staleness windows seen are reported (p50, p99, worst); at least a
//!   quarter of the reads are near-cache hits. On a failure the whole
//!   history goes to `staleness-history.txt` in the trial's directory.
//! * `s13.near-cache-staleness.{replica,sentinel-failover,resharding}.shared`
//!   (`staleness_topologies.rs`): the same load and checks, 10 s, across
//!   topologies. `.replica`: a master and its replica, every read with
//!   `execute(false)`, served by the replica (tracked there), the writes
//!   on the master; every read answered. `.sentinel-failover`: a master,
//!   a replica, three Sentinels, half the readers with `execute(false)`,
//!   half through the master; at 3 s the writes pause (the replica
//!   caught up: `WAIT`), `SENTINEL FAILOVER`, the old master made the new
//!   one's replica (as Sentinel does at its next `INFO`, up to 10 s
//!   later: a master of its own meanwhile, stale with or without a
//!   cache) and in sync, then the writes resume on the new master.
//!   `.resharding`: the cluster of s10, the keys on 10 tags (6 in slots
//!   0-99), direct writes following `MOVED`/`ASK`; slots 0-99 moved from
//!   m0 to m1 at 2 s as s10 moves them. Topology trials: skipped by
//!   `scripts/test --platform`.
//! * `s13.near-cache-staleness.{scale-out,slot-takeover}.shared`
//!   (`staleness_cluster.rs`): the cluster of s10 and the same load and
//!   checks. `.scale-out`: the 16 keys of 4 slots of m0 absent at first
//!   (their nil read and cached); at 2 s a new empty master m3 is met
//!   (`CLUSTER MEET`) and given those slots as s10 moves them, then their
//!   keys are written, directly only (following `MOVED`), on m3. `.slot-takeover`: at 2 s the writes
//!   pause, m1 takes two slots of m0 the load uses without migrating
//!   (`CLUSTER BUMPEPOCH`, `SETSLOT <slot> NODE <m1>`): m0 deletes their
//!   keys with no invalidation, a reset of those keys for the checker
//!   (until m0 holds none); the writes resume, on m1.
//! * `s13.near-cache-staleness.{frozen-link,balanced,replica-lag}.shared`
//!   (`staleness_links.rs`, the proxies of `proxy.rs`). `.frozen-link`:
//!   the location is a proxy to Redis that stops forwarding, at 3 s for
//!   3 s, only the tracking connection (found by `TRACKING` in what the
//!   client sends), without closing it; also no hit while frozen (from
//!   the bound + 100 ms on) and hits again 1 s after. `.balanced`: the one
//!   location is a proxy spreading connections in turn over a master
//!   and its replica, whose replication link goes through a proxy that
//!   delays it 400 ms; `.replica-lag`: the same master and replica listed
//!   as two servers. Both: 8 s, reads with `execute(false)`; a read of the
//!   replica being as stale as the replica with or without a cache, each
//!   write counts as acknowledged once a poll of the replica (every
//!   10 ms) saw it: the bound is on how much staler than the replica a
//!   read is.
//! * `s13.near-cache-expiry.{replica,paused}.{private,shared,pipelined}`
//!   and `s13.near-cache-staleness.expiring-{replica,paused}.shared`
//!   (`staleness_expiry.rs`): keys that expire where no invalidation
//!   follows, read through a proxy of `proxy.rs` that holds each `PTTL`.
//!   `.replica`: reads with `execute(false)` from a replica whose master
//!   has active expiry off (no `DEL` comes); `.paused`: a master under
//!   `CLIENT PAUSE WRITE`. `s13.near-cache-expiry.*`: a key with a 1 s TTL
//!   is read twice (the second read fills), its `PTTL` held 2 s, past the
//!   expiry (-2, checked on the server): the next read is the server's
//!   nil, not a hit, and one invalidation is counted. `.expiring-*`: the
//!   load and checks of s13, 10 s, every write (direct) with a TTL of
//!   50-500 ms, each `PTTL` held 30 ms, the paused master paused 1.5 s
//!   every 2.5 s from 1 s on; besides, no read that began more than 5 ms
//!   past the latest its value can have expired (its write's end plus
//!   its TTL; `FAULTS_EXPIRY_MS`) returns it.
//! * `s14.ask-storm.{private,shared}` (`ask_storm.rs`): a fake cluster
//!   node owns every slot and answers each `GET` with an `ASK` to a new
//!   address (200 fake nodes that answer as an empty Redis, tracking
//!   included); `near_cache` on, 200 `GET`s over about 4 s: the servers
//!   the database holds stay within the map's plus the 16 learnt ones,
//!   the child's threads and fds within that many (tracking connections)
//!   of before, every `ASK` counted, 2 to one a second of discoveries
//!   (an `ASK` to a node the map does not name asks for the map). Says
//!   the connects a second to the fake nodes, during the storm and after.
//! * `s15.dead-nodes.{private,shared}` (`dead_nodes.rs`, the fake nodes of
//!   `fake_nodes.rs`): a fake seed's map grows (a `MOVED`) to 300 dead
//!   masters that accept and close at once; `near_cache` on, a password;
//!   for 12 s a client reads keys of the seed and of 8 dead masters: the
//!   child's threads within 10 and fds within 20 of before, under 150
//!   connects a second to the dead nodes over the last 4 s, the seed's
//!   keys answered, no read past `command_bound`. Says the connects a
//!   second (each second, whole run, last 4 s, and by 5 s windows: all,
//!   tracking ones (`HELLO 3`), the database's `connections.*` and
//!   discoveries) and the `AUTH`s the dead nodes read.
//!   `FAULTS_DEAD_NODES_SECS=65` runs it longer: from 45 s on it also
//!   checks the last 20 s against the three back-offs' bounds (tracking
//!   at most 40/s, all at most 56/s).
//! * `s16.pipelining-deadlines.{plain,tls}` (`pipelining_deadlines.rs`,
//!   issue #40, items 2 and 3): `pipelining=true` on 2 connections,
//!   `connection_ttl` 1 s, `command_timeout` 2000 ms, 1 retry, Redis
//!   reached on its plain or its TLS port; for 30 s, 24 clients `INCR` a
//!   key of their own per request while 12 send PINGs with a `.timeout()`
//!   of 1, 2 or 3 ms: every `INCR` replied, every key at 1 on the server
//!   (no write ran twice) and one key per `INCR` sent, every request
//!   within the `command_bound` of its own timeout + 200 ms, connections
//!   opened again and again under load (every PING that times out makes
//!   the server sick, and its idle connection is dropped: more often than
//!   the TTL), some PINGs timed out, counters reconcile, no leak. Says
//!   the PINGs' outcomes per timeout and any `INCR` that failed or ran
//!   twice. Skipped by `scripts/test --varnish 8.0` (the multiplexer is
//!   plain Rust).
//! * `s6.vcl-churn.20` (and `.200`, ignored): vcl.load / vcl.use /
//!   vcl.discard cycles of a VCL with a private, a shared and a pipelined
//!   database while 16 clients run: threads, fds and Redis connections do not grow,
//!   and varnishstat lists the REDIS.* counters of the live VCL only.
//! * `s7.soak.*` (ignored): `FAULTS_SOAK_SECS` of SET + GET + EVAL per
//!   request (16 clients): VmRSS and fds flat within 5 % after the warm-up,
//!   the heap (RssAnon) flat over the second half, Redis connections within
//!   the promised bound.
//!
//! varnishd runs with one fixed pool of 300 worker threads (a thread count
//! that does not move is a leak detector), `vsl_space=16M` (else VmRSS
//! grows by the log's pages for a while) and the VCL's C compiled at `-O0`
//! (a churn cycle is mostly that compile).
//!
//! # The VCL
//! One database object per trial (two in the churn), driven by URL:
//! `/<db>/set/<key>`, `/<db>/get/<key>`, `/<db>/eval/<key>` run one command,
//! `/<db>/mix/<key>` runs SET, GET and EVAL, `/<db>/incr/<key>` an INCR,
//! `/<db>/ping-within/<ms>` a PING with `.timeout(<ms>)`; `/<db>/stats`
//! returns the counters as `x-c-<name>` headers (dots as dashes) and the
//! JSON as body; `/ping` does not touch Redis. `x-r` lists each command's
//! outcome: `1` reply, `e` error reply, `0` no reply (the fallback).
//!
//! # Environment
//! * `VMOD_REDIS_SO`: use this .so as is (no build); otherwise `cargo build
//!   --lib` is run once, as in `tests/vtc/`.
//! * `FAULTS_SOAK_SECS` (default 600): length of each soak trial.
//! * `FAULTS_CHURN_LONG` (default 200): cycles of the long churn trial.
//! * `FAULTS_STALENESS_MS` (default 300): the staleness bound of `s13`.
//! * `FAULTS_EXPIRY_MS` (default 5): how late past its expiry `s13` may
//!   read an expiring value.
//! * `FAULTS_KEEP=1`: keep the temporary directory (logs, VCL, redis logs).
//! * `PATH`: varnishd, varnishadm, varnishstat and varnishlog are the first
//!   found there, the module is built against the Varnish pkg-config finds:
//!   `bash scripts/varnish 8.0 cargo test --test faults` runs on Varnish 8.0.

mod ask_storm;
#[path = "../support/cluster.rs"]
mod cluster;
mod cluster_failover;
mod cluster_resharding;
mod cluster_trial;
mod dead_nodes;
mod failover_writes;
mod fake_nodes;
mod freeze;
mod http;
mod kill_restart;
mod load;
mod pipelining_deadlines;
mod pool_exhaustion;
mod procs;
mod proxy;
mod redis;
mod replicated;
#[allow(
    dead_code,
    reason = "shared with the vtc harness, which uses more of it"
)]
#[path = "../support/sentinel.rs"]
mod sentinel;
mod sentinel_failover;
mod sentinel_masters;
mod servers;
mod setup;
mod soak;
mod staleness;
mod staleness_cluster;
mod staleness_expiry;
mod staleness_history;
mod staleness_links;
mod staleness_topologies;
#[path = "../support/mod.rs"]
mod support;
#[allow(
    dead_code,
    reason = "the suite uses the CA and the server certificate only"
)]
#[path = "../support/tls_material.rs"]
mod tls_material;
mod varnish;
mod vcl;
mod vcl_churn;

use ask_storm::*;
use cluster_failover::*;
use cluster_resharding::*;
use cluster_trial::*;
use dead_nodes::*;
use failover_writes::*;
use fake_nodes::*;
use freeze::*;
use http::*;
use kill_restart::*;
use libtest_mimic::{Arguments, Failed, Trial};
use load::*;
use pipelining_deadlines::*;
use pool_exhaustion::*;
use procs::*;
use redis::*;
use replicated::*;
use sentinel_failover::*;
use sentinel_masters::*;
use servers::*;
use setup::*;
use soak::*;
use staleness::*;
use staleness_cluster::*;
use staleness_expiry::*;
use staleness_links::*;
use staleness_topologies::*;
use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use support::{
    cleanup_all, find_cache_child, info_field, make_dir, proc_status, redis_cmd, register_pid,
    signal, stop_child, tail_file, unregister_pid, write_public, RedisConfig, RedisConn,
    RedisServer, Res, TlsPort, Varnishd, Waited,
};
use varnish::*;
use vcl::*;
use vcl_churn::*;
/// Worker threads of the varnishd child: one pool, fixed size, so that the
/// thread count is a clean leak detector and 200 clients never queue.
const WORKER_THREADS: u32 = 300;

fn main() {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let _ = ctrlc::set_handler(|| {
        cleanup_all();
        std::process::exit(130);
    });
    let soak_secs = env_u64("FAULTS_SOAK_SECS", 600);
    let churn_long = env_u64("FAULTS_CHURN_LONG", 200) as usize;
    let mut trials = Vec::new();
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(Trial::test(
            format!("s1.kill-restart.{}", mode.name()),
            move || s1_kill_restart(mode),
        ));
    }
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        for retries in [0, 1] {
            trials.push(Trial::test(
                format!("s2.freeze.{}.retries{retries}", mode.name()),
                move || s2_freeze(mode, retries, ""),
            ));
        }
        trials.push(Trial::test(
            format!("s2.freeze.{}.resp3", mode.name()),
            move || s2_freeze(mode, 0, "RESP3"),
        ));
    }
    trials.push(Trial::test("s3.pool-exhaustion.shared", || {
        s3_pool_exhaustion(Mode::Shared)
    }));
    trials.push(Trial::test("s3.pool-exhaustion.private", || {
        s3_pool_exhaustion(Mode::Private)
    }));
    trials.push(Trial::test("s3.pool-exhaustion.pipelined", || {
        s3_pool_exhaustion(Mode::Pipelined)
    }));
    for mode in [Mode::Private, Mode::Shared] {
        trials.push(Trial::test(
            format!("s8.sentinel-failover.{}", mode.name()),
            move || s8_sentinel_failover(mode),
        ));
    }
    for failover in [Failover::Sentinel, Failover::Command, Failover::Kill] {
        for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
            trials.push(Trial::test(
                format!("s11.failover-writes.{}.{}", failover.name(), mode.name()),
                move || s11_failover_writes(failover, mode),
            ));
        }
    }
    trials.push(Trial::test("s12.sentinel-masters-by-name.shared", || {
        s12_sentinel_masters(Mode::Shared)
    }));
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(Trial::test(
            format!("s9.cluster-failover.{}", mode.name()),
            move || s9_cluster_failover(mode),
        ));
    }
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(Trial::test(
            format!("s10.cluster-resharding.{}", mode.name()),
            move || s10_cluster_resharding(mode),
        ));
    }
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(Trial::test(
            format!("s13.near-cache-staleness.{}", mode.name()),
            move || s13_near_cache_staleness(mode, StaleEvent::FlushAndKillTracking),
        ));
    }
    trials.push(Trial::test(
        "s13.near-cache-staleness.restart.shared",
        || s13_near_cache_staleness(Mode::Shared, StaleEvent::Restart),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.replica.shared",
        || s13_near_cache_staleness_replica(Mode::Shared),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.sentinel-failover.shared",
        || s13_near_cache_staleness_failover(Mode::Shared),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.resharding.shared",
        || s13_near_cache_staleness_resharding(Mode::Shared),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.scale-out.shared",
        || s13_near_cache_staleness_scale_out(Mode::Shared),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.slot-takeover.shared",
        || s13_near_cache_staleness_slot_takeover(Mode::Shared),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.balanced.shared",
        || s13_near_cache_staleness_lagging(Mode::Shared, Lagging::Balanced),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.frozen-link.shared",
        || s13_near_cache_staleness_frozen_link(Mode::Shared),
    ));
    trials.push(Trial::test(
        "s13.near-cache-staleness.replica-lag.shared",
        || s13_near_cache_staleness_lagging(Mode::Shared, Lagging::Listed),
    ));
    for undeleted in [Undeleted::Replica, Undeleted::PausedMaster] {
        for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
            trials.push(Trial::test(
                format!("s13.near-cache-expiry.{}.{}", undeleted.name(), mode.name()),
                move || s13_near_cache_expiry(mode, undeleted),
            ));
        }
        trials.push(Trial::test(
            format!(
                "s13.near-cache-staleness.expiring-{}.shared",
                undeleted.name()
            ),
            move || s13_near_cache_staleness_expiring(Mode::Shared, undeleted),
        ));
    }
    for mode in [Mode::Private, Mode::Shared] {
        trials.push(Trial::test(
            format!("s14.ask-storm.{}", mode.name()),
            move || s14_ask_storm(mode),
        ));
    }
    for mode in [Mode::Private, Mode::Shared] {
        trials.push(Trial::test(
            format!("s15.dead-nodes.{}", mode.name()),
            move || s15_dead_nodes(mode),
        ));
    }
    for tls in [false, true] {
        trials.push(Trial::test(
            format!(
                "s16.pipelining-deadlines.{}",
                if tls { "tls" } else { "plain" }
            ),
            move || s16_pipelining_deadlines(tls),
        ));
    }
    trials.push(Trial::test("s6.vcl-churn.20", || s6_vcl_churn(20)));
    trials.push(
        Trial::test(format!("s6.vcl-churn.{churn_long}"), move || {
            s6_vcl_churn(churn_long)
        })
        .with_ignored_flag(true),
    );
    for mode in [Mode::Private, Mode::Shared, Mode::Pipelined] {
        trials.push(
            Trial::test(format!("s7.soak.{}", mode.name()), move || {
                s7_soak(mode, Duration::from_secs(soak_secs))
            })
            .with_ignored_flag(true),
        );
    }
    let conclusion = libtest_mimic::run(&args, trials);
    cleanup_all();
    if let Some(base) = support::created_base_dir() {
        if keep() {
            eprintln!("faults: kept {}", base.display());
        } else {
            let _ = fs::remove_dir_all(base);
        }
    }
    conclusion.exit();
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn keep() -> bool {
    std::env::var_os("FAULTS_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}
