//! Scenario 10: a range of slots moved from m0 to m1 under load, the way
//! `redis-cli --cluster reshard` moves them.
use super::*;

/// Slots moved: m0's first ones.
pub(crate) const MOVED: std::ops::Range<u16> = 0..100;
/// Tags of the load in the moved range, on m0 outside it, on m1, on m2.
const TAGS: [usize; 4] = [6, 2, 2, 2];
/// Keys per `MIGRATE` (`redis-cli --cluster reshard`'s default pipeline).
const BATCH: &str = "10";
/// Load after the last slot moved.
const TAIL: f64 = 3.0;

/// The resharding: a connection to each master, what it moved.
pub(crate) struct Resharding<'a> {
    nodes: &'a Nodes,
    masters: Vec<(String, RedisConn)>,
    pub(crate) keys: usize,
    pub(crate) batches: usize,
}

impl<'a> Resharding<'a> {
    pub(crate) fn open(nodes: &'a Nodes) -> Res<Resharding<'a>> {
        let mut masters = Vec::new();
        for m in nodes.masters() {
            let conn = RedisConn::open(nodes.port(&m)).map_err(|e| format!("{m}: {e}"))?;
            masters.push((m, conn));
        }
        Ok(Resharding {
            nodes,
            masters,
            keys: 0,
            batches: 0,
        })
    }

    fn on(&mut self, master: &str) -> &mut RedisConn {
        let (_, conn) = self
            .masters
            .iter_mut()
            .find(|(m, _)| *m == master)
            .expect("a master");
        conn
    }

    /// Moves `slot` from master `from` to master `to`, as `redis-cli
    /// --cluster reshard` does: `IMPORTING` on `to`, `MIGRATING` on
    /// `from`, the keys in batches (`GETKEYSINSLOT`, `MIGRATE ... KEYS`)
    /// until none is left, then the slot given to `to` on `to`, on
    /// `from`, and on the other masters.
    pub(crate) fn move_slot(&mut self, slot: u16, from: &str, to: &str) -> Res<()> {
        let nodes = self.nodes;
        let slot = slot.to_string();
        let to_port = nodes.port(to).to_string();
        let (from_id, to_id) = (nodes.id(from), nodes.id(to));
        self.on(to)
            .ok(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", from_id])?;
        self.on(from)
            .ok(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", to_id])?;
        // Bounded: the load writes 2 keys per client in a slot.
        for _ in 0..100 {
            let keys = self
                .on(from)
                .cmd_array(&["CLUSTER", "GETKEYSINSLOT", &slot, BATCH])
                .map_err(|e| format!("GETKEYSINSLOT {slot}: {e}"))?;
            if keys.is_empty() {
                let others: Vec<String> = nodes
                    .masters()
                    .into_iter()
                    .filter(|m| m != to && m != from)
                    .collect();
                for m in [to, from]
                    .into_iter()
                    .chain(others.iter().map(String::as_str))
                {
                    self.on(m)
                        .ok(&["CLUSTER", "SETSLOT", &slot, "NODE", to_id])?;
                }
                return Ok(());
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            migrate.extend(keys.iter().map(String::as_str));
            self.on(from).ok(&migrate)?;
            self.keys += keys.len();
            self.batches += 1;
        }
        Err(format!(
            "slot {slot}: keys still on {from} after 100 batches"
        ))
    }
}

/// `calls` of `cmdstat_<command>` in a node's `INFO commandstats`.
fn calls(port: u16, command: &str) -> Res<u64> {
    let info = cluster::ask(port, &["INFO", "commandstats"])?;
    let prefix = format!("cmdstat_{command}:calls=");
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
        .unwrap_or(0))
}

pub(crate) fn s10_cluster_resharding(mode: Mode) -> Result<(), Failed> {
    let name = format!("s10-{}", mode.name());
    let (mut s, nodes, db) = cluster_trial::start(&name, mode, &[])?;
    let map = nodes.map_seen_by("m0")?;
    let [m0, m1, m2] = [nodes.port("m0"), nodes.port("m1"), nodes.port("m2")];
    if let Some(slot) = MOVED.clone().find(|&slot| map.owner(slot) != Some(m0)) {
        return Err(format!("slot {slot} is not m0's").into());
    }
    let mut tags = Vec::new();
    let moved_tags = pick_tags(TAGS[0], |slot| MOVED.contains(&slot), &mut tags);
    pick_tags(
        TAGS[1],
        |slot| !MOVED.contains(&slot) && map.owner(slot) == Some(m0),
        &mut tags,
    );
    pick_tags(TAGS[2], |slot| map.owner(slot) == Some(m1), &mut tags);
    pick_tags(TAGS[3], |slot| map.owner(slot) == Some(m2), &mut tags);
    check_tags(m0, &tags)?;
    let all_nodes = nodes.ports(&NODES);
    let clients = 20;
    let reshard_at = 2.0;
    let (load, before, started) = load_until(&s, clients, &tags, reshard_at, &all_nodes);
    let mut resharding = Resharding::open(&nodes)?;
    let moved = MOVED
        .clone()
        .try_for_each(|slot| resharding.move_slot(slot, "m0", "m1"));
    let ended = load.at();
    let (keys, batches) = (resharding.keys, resharding.batches);
    // Its connections are not the child's.
    drop(resharding);
    if moved.is_ok() {
        load.sleep_until(ended + TAIL);
    }
    load.stop.store(true, Ordering::Relaxed);
    let report = load.finish();
    moved?;
    s.say(format!(
        "{clients} clients, {:.1} s of SET / GET / EVAL on {} tags ({} in the moved slots); slots {}-{} moved from m0 to m1 from {started:.2} s to {ended:.2} s: {} keys in {} MIGRATE batches",
        report.secs,
        tags.len(),
        moved_tags.len(),
        MOVED.start,
        MOVED.end - 1,
        keys,
        batches,
    ));
    thread::sleep(Duration::from_millis(300));
    let after = settled_all(&s.varnish, &all_nodes);
    let counters = counters(s.varnish.port, "db")?;

    let all = report.all();
    let during = figures(&report.window(started, ended));
    let on_moved = figures(&on_tags(&report, &tags, &moved_tags));
    s.say(format!("all: {all}"));
    s.say(format!("during the resharding: {during}"));
    s.say(format!("keys in the moved slots: {on_moved}"));
    s.say_worst(&report, db.command_bound());
    s.say(format!("counters: {counters}"));
    s.say(format!("child before the resharding: {before}"));
    s.say(format!("child after: {after}"));

    // A resharding is invisible: every request replied, none too slow.
    check_answers(&all, &mut s.failures);
    s.check(all.fallback == 0, || {
        format!("{} requests fell back", all.fallback)
    });
    check_worst(&all, db.command_bound(), "", &mut s.failures);
    s.check(during.requests > 0, || {
        "no request during the resharding".into()
    });
    let (moved_replies, asks, discoveries) = (
        counters.get("cluster.replies.moved"),
        counters.get("cluster.replies.ask"),
        counters.get("cluster.discoveries.total"),
    );
    s.check(moved_replies > 0, || "no MOVED counted".into());
    s.check(asks > 0, || "no ASK counted".into());
    let asking = calls(m1, "asking")?;
    s.check(asks == asking, || {
        format!("{asks} ASK counted, m1 got {asking} ASKING")
    });
    // One discovery per slot change the load ran into, not one per MOVED:
    // the first, then at most two for each slot with keys of the load.
    let discovery_bound = 1 + 2 * moved_tags.len() as u64;
    s.say(format!(
        "MOVED {moved_replies}, ASK {asks}, discoveries {discoveries} (bound {discovery_bound}), ASKING on m1 {asking}"
    ));
    s.check(discoveries <= discovery_bound, || {
        format!("{discoveries} discoveries, bound {discovery_bound}")
    });
    check_cluster_counters(&mut s, &all, &counters, &all_nodes)?;
    s.check_leaks(&after, cluster_connection_bound(&db, NODES.len()));

    // Afterwards: every master gives the slots to m1, which holds the
    // load's keys there (each client's key and its `:n`), and serves them
    // straight away (no MOVED).
    for m in ["m0", "m1", "m2"] {
        let seen = nodes.map_seen_by(m)?;
        s.check(
            MOVED.clone().all(|slot| seen.owner(slot) == Some(m1)),
            || format!("{m} does not give slots {MOVED:?} to m1"),
        );
    }
    for t in &moved_tags {
        let slot = t.slot.to_string();
        let on = |port| cluster::ask(port, &["CLUSTER", "COUNTKEYSINSLOT", &slot]);
        let (left, there) = (on(m0)?, on(m1)?);
        s.check(left == ":0" && there == format!(":{}", 2 * clients), || {
            format!("slot {slot}: {left} keys left on m0, {there} on m1")
        });
    }
    let gets_before = calls(m1, "get")?;
    let mut served = 0;
    for t in &moved_tags {
        let resp = http_get(s.varnish.port, &format!("/db/get/{{{}}}c0", t.tag))
            .map_err(|e| format!("GET after the resharding: {e}"))?;
        served += u64::from(resp.headers.get("x-r").map(String::as_str) == Some("r1"));
    }
    let gets = calls(m1, "get")? - gets_before;
    let moved_after = http::counters(s.varnish.port, "db")?.get("cluster.replies.moved");
    s.say(format!(
        "after: {served} of {} GETs of moved keys replied, m1 served {gets} GETs, MOVED +{}",
        moved_tags.len(),
        moved_after - moved_replies
    ));
    s.check(
        served == moved_tags.len() as u64 && gets == served && moved_after == moved_replies,
        || "the moved keys are not served by m1 straight away".into(),
    );
    s.check_lone_client("db")?;
    let result = s.finish();
    drop(nodes);
    result
}
