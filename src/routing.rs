//! The execution plan of one command on a standalone database: which of its
//! servers to try, in which order (the C VMOD's rules):
//! - `master=true` (or `ignore_slaves=true`) considers masters only, and
//!   servers whose role is not known yet (`type=auto` not answered yet:
//!   they may be masters); `master=false` considers every server.
//! - Healthy servers come before sick ones: a sick server is used only when
//!   nothing else can serve.
//! - Then the closest first, by weight (`redis.subnets()` or
//!   `redis.weights()`; a UNIX socket is always the closest, a server
//!   matching no mask or rule the farthest).
//! - Then by role: for `master=false`, replicas before masters (reads go
//!   to replicas while they can), servers of unknown role in between; for
//!   `master=true`, known masters before unknown ones.
//! - Servers equal on all of the above are taken in a rotated order, the
//!   rotation chosen by the caller, so that load spreads over equal
//!   replicas while one caller (a worker thread) keeps to the same one.
//!
//! Failed attempts retry on the next server of the plan.
use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use smallvec::SmallVec;

use crate::config::{Role, Subnets};

/// Inline room for this many servers: a plan (and the candidates it is made
/// from) costs no allocation per command up to there.
const INLINE: usize = 8;

/// The indexes of the servers to try, in order.
pub(crate) type Plan = SmallVec<[usize; INLINE]>;

/// The candidates of one plan, as [`plan`] takes them.
pub(crate) type Candidates = SmallVec<[Candidate; INLINE]>;

/// What the plan needs to know of one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Weight (`redis.subnets()` or `redis.weights()`): lower is closer.
    pub weight: u32,
    pub role: Role,
    pub sick: bool,
}

/// A rotation per worker thread, so that equal replicas share the load
/// while each thread keeps to one (and to its private connection). A
/// `Cell<usize>` needs no destructor, so this `thread_local!` does not pin
/// the module in memory after `vcl.discard`.
pub(crate) fn rotation() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ROTATION: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    ROTATION.with(|rotation| {
        if rotation.get() == usize::MAX {
            rotation.set(NEXT.fetch_add(1, Ordering::Relaxed) % (usize::MAX - 1));
        }
        rotation.get()
    })
}

/// The indexes of `servers` to try, in order; empty when none may serve.
pub(crate) fn plan(servers: &[Candidate], master_only: bool, rotation: usize) -> Plan {
    let mut order: SmallVec<[(Key, usize); INLINE]> = servers
        .iter()
        .enumerate()
        .filter_map(|(index, server)| {
            role_rank(server.role, master_only).map(|rank| {
                let key = Key {
                    sick: server.sick,
                    weight: server.weight,
                    rank,
                };
                (key, index)
            })
        })
        .collect();
    // Stable: equal servers keep their declaration order before rotation.
    order.sort_by_key(|(key, _)| *key);
    let mut plan = Plan::with_capacity(order.len());
    for group in order.chunk_by(|a, b| a.0 == b.0) {
        let start = rotation % group.len();
        plan.extend(
            group[start..]
                .iter()
                .chain(&group[..start])
                .map(|(_, i)| *i),
        );
    }
    plan
}

/// The `debug=true` line for a plan: the candidates in order with why they
/// rank there, and the servers left out. Locations and roles only: no
/// arguments, no credentials.
pub(crate) fn describe(
    name: &str,
    master_only: bool,
    locations: &[impl fmt::Display],
    candidates: &[Candidate],
    plan: &[usize],
) -> String {
    let describe = |index: usize| {
        let c = &candidates[index];
        let weight = if c.weight == Subnets::WORST {
            "no subnet".to_string()
        } else {
            format!("weight {}", c.weight)
        };
        let role = match c.role {
            Role::Auto => "role unknown",
            role => role.as_str(),
        };
        let health = if c.sick { "sick" } else { "healthy" };
        format!("{} ({role}, {weight}, {health})", locations[index])
    };
    let order: Vec<String> = plan.iter().map(|&i| describe(i)).collect();
    // Only replicas are ever left out (of a plan that needs a master).
    let left_out: Vec<String> = (0..candidates.len())
        .filter(|i| !plan.contains(i))
        .map(|i| format!("{} (replica, master needed)", locations[i]))
        .collect();
    let mut text = format!(
        "plan for {name} (master={master_only}): {}",
        if order.is_empty() {
            "no candidate".to_string()
        } else {
            order.join(", ")
        }
    );
    if !left_out.is_empty() {
        text.push_str("; left out: ");
        text.push_str(&left_out.join(", "));
    }
    text
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    sick: bool,
    weight: u32,
    rank: u8,
}

/// Order of roles within one weight; `None`: not a candidate.
fn role_rank(role: Role, master_only: bool) -> Option<u8> {
    match (role, master_only) {
        (Role::Master, true) => Some(0),
        (Role::Auto, true) => Some(1),
        (Role::Slave, false) => Some(0),
        (Role::Auto, false) => Some(1),
        (Role::Master, false) => Some(2),
        // Cluster nodes are routed by slot, not by this plan.
        (Role::Slave, true) | (Role::Cluster, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(weight: u32, role: Role, sick: bool) -> Candidate {
        Candidate { weight, role, sick }
    }

    const M: Role = Role::Master;
    const S: Role = Role::Slave;
    const A: Role = Role::Auto;

    #[test]
    fn masters_only_for_master_true() {
        let servers = [
            c(0, S, false),
            c(1, M, false),
            c(0, A, false),
            c(0, M, false),
        ];
        assert_eq!(plan(&servers, true, 0).to_vec(), vec![3, 2, 1]);
    }

    #[test]
    fn replicas_first_for_master_false_then_unknown_then_masters() {
        let servers = [
            c(0, M, false),
            c(0, A, false),
            c(0, S, false),
            c(0, S, false),
        ];
        assert_eq!(plan(&servers, false, 0).to_vec(), vec![2, 3, 1, 0]);
    }

    #[test]
    fn the_closest_subnet_wins_over_role() {
        // A master in the local subnet beats a replica two subnets away.
        let servers = [c(2, S, false), c(0, M, false), c(1, S, false)];
        assert_eq!(plan(&servers, false, 0).to_vec(), vec![1, 2, 0]);
    }

    #[test]
    fn sick_servers_come_last_whatever_their_weight() {
        let servers = [c(0, S, true), c(5, S, false), c(0, M, true), c(9, M, false)];
        assert_eq!(plan(&servers, false, 0).to_vec(), vec![1, 3, 0, 2]);
        assert_eq!(plan(&servers, true, 0).to_vec(), vec![3, 2]);
    }

    #[test]
    fn a_plan_of_only_sick_servers_still_serves() {
        let servers = [c(0, M, true)];
        assert_eq!(plan(&servers, true, 0).to_vec(), vec![0]);
    }

    #[test]
    fn nothing_may_serve_a_write_on_replicas_only() {
        assert!(plan(&[c(0, S, false), c(0, S, true)], true, 0).is_empty());
        assert!(plan(&[], false, 3).is_empty());
    }

    #[test]
    fn rotation_spreads_over_equal_servers_only() {
        let servers = [
            c(0, S, false),
            c(0, S, false),
            c(0, S, false),
            c(1, S, false),
        ];
        assert_eq!(plan(&servers, false, 0).to_vec(), vec![0, 1, 2, 3]);
        assert_eq!(plan(&servers, false, 1).to_vec(), vec![1, 2, 0, 3]);
        assert_eq!(plan(&servers, false, 2).to_vec(), vec![2, 0, 1, 3]);
        assert_eq!(plan(&servers, false, 3).to_vec(), vec![0, 1, 2, 3]);
        // Over many rotations, each equal replica leads as often.
        let mut first = [0; 3];
        for r in 0..300 {
            first[plan(&servers, false, r)[0]] += 1;
        }
        assert_eq!(first, [100, 100, 100]);
    }

    #[test]
    fn every_candidate_appears_once() {
        let roles = [M, S, A];
        for n in 0..7usize {
            let servers: Vec<Candidate> = (0..n)
                .map(|i| c((i % 3) as u32, roles[i % 3], i % 2 == 0))
                .collect();
            for master_only in [false, true] {
                for rotation in 0..5 {
                    let mut p = plan(&servers, master_only, rotation);
                    p.sort_unstable();
                    let want: Vec<usize> = (0..n)
                        .filter(|&i| !master_only || servers[i].role != S)
                        .collect();
                    assert_eq!(
                        p.to_vec(),
                        want,
                        "n={n} master_only={master_only} rotation={rotation}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_debug_line_says_why_each_server_is_where_it_is() {
        let servers = [c(0, S, false), c(Subnets::WORST, M, true), c(1, S, false)];
        let locations = ["10.0.0.1:6379", "/run/redis.sock", "10.0.0.2:6379"];
        let write = plan(&servers, true, 0);
        assert_eq!(
            describe("SET", true, &locations, &servers, &write),
            "plan for SET (master=true): /run/redis.sock (master, no subnet, sick); \
             left out: 10.0.0.1:6379 (replica, master needed), 10.0.0.2:6379 (replica, master needed)"
        );
        let read = plan(&servers, false, 0);
        assert_eq!(
            describe("GET", false, &locations, &servers, &read),
            "plan for GET (master=false): 10.0.0.1:6379 (slave, weight 0, healthy), \
             10.0.0.2:6379 (slave, weight 1, healthy), /run/redis.sock (master, no subnet, sick)"
        );
        let nowhere: [&str; 0] = [];
        assert_eq!(
            describe("GET", false, &nowhere, &[], &[]),
            "plan for GET (master=false): no candidate"
        );
    }
}
