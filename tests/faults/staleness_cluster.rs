//! Scenario 13 in a cluster whose map changes under the near cache
//! without a write it tracks: a new master given slots whose keys are
//! absent on the old one (a cached nil), and a slot taken over without
//! migrating its keys (the old owner deletes them, no invalidation).
use super::staleness_history::{checker_self_test, key_set};
use super::*;

/// Load before the map changes, and after at least.
const CHANGE_AT: f64 = 2.0;
const AFTER_CHANGE: f64 = 3.0;

/// Key `k` of a cluster trial: in the slot of `tags[k % tags.len()]`.
fn tagged_keys(tags: &[Tag]) -> Vec<String> {
    (0..KEYS)
        .map(|key| format!("{{{}}}st{key}", tags[key % tags.len()].tag))
        .collect()
}

/// `.scale-out`: a new empty master m3 met mid-run (`CLUSTER MEET`) and
/// given four slots of m0 the load uses as `redis-cli --cluster reshard`
/// gives them. Their keys do not exist until m3 has the slots (their nil
/// is read and cached), then are written directly on m3 (following
/// `MOVED`): nothing migrates, so m0 sends no invalidation, and no
/// request through Varnish meets a `MOVED` (a key of those slots whose
/// entry went would: the map found again, m3 tracked).
pub(crate) fn s13_near_cache_staleness_scale_out(mode: Mode) -> Result<(), Failed> {
    checker_self_test()?;
    let name = format!("s13-scale-out-{}", mode.name());
    let (mut s, mut nodes, _db) = cluster_trial::start_with(&name, stale_db(mode), &[])?;
    let map = nodes.map_seen_by("m0")?;
    let [m0, m1, m2] = [nodes.port("m0"), nodes.port("m1"), nodes.port("m2")];
    // Tags 0-3 in the slots that move, 4-5 elsewhere on m0, 6-7 on m1,
    // 8-9 on m2.
    let mut tags = Vec::new();
    let moving = pick_tags(4, |slot| MOVED.contains(&slot), &mut tags);
    pick_tags(
        2,
        |slot| !MOVED.contains(&slot) && map.owner(slot) == Some(m0),
        &mut tags,
    );
    pick_tags(2, |slot| map.owner(slot) == Some(m1), &mut tags);
    pick_tags(2, |slot| map.owner(slot) == Some(m2), &mut tags);
    check_tags(m0, &tags)?;
    let absent: Vec<usize> = (0..KEYS).filter(|k| k % tags.len() < 4).collect();
    let mut load = StaleLoad::start(StaleTarget {
        port: s.varnish.port,
        keys: tagged_keys(&tags),
        read_path: |_| "/db/get/",
        direct: cluster_direct(m0),
        absent: absent.clone(),
        expiring: false,
    })?;
    load.sleep_until(CHANGE_AT);
    let meeting = load.at();
    let added = nodes.add_master("m3");
    let met = load.at();
    let mut moved = added.clone();
    let (mut keys, mut batches) = (0, 0);
    if added.is_ok() {
        let mut resharding = Resharding::open(&nodes)?;
        moved = moving
            .iter()
            .try_for_each(|t| resharding.move_slot(t.slot, "m0", "m3"));
        (keys, batches) = (resharding.keys, resharding.batches);
    }
    let ended = load.at();
    load.write_absent();
    load.events.push(format!(
        "{} absent keys; m3 started and met from {meeting:.2} s to {met:.2} s ({added:?}); slots {:?} moved from m0 to m3 until {ended:.2} s: {keys} keys in {batches} MIGRATE batches ({moved:?}); the absent keys written (directly) from then on",
        absent.len(),
        moving.iter().map(|t| t.slot).collect::<Vec<_>>(),
    ));
    load.sleep_until(ended + AFTER_CHANGE);
    load.finish(&mut s, false)?;
    moved?;
    s.finish()
}

/// `.slot-takeover`: at 2 s the writes pause, m1 takes two slots of m0
/// the load uses without their keys (`CLUSTER BUMPEPOCH`, `CLUSTER
/// SETSLOT <slot> NODE <m1>` on m1, as a forced takeover does): m0 learns
/// it from m1's higher epoch and deletes the slots' keys, which sends no
/// invalidation. For the checker those keys are reset, from the first
/// command until m0 has none left in the slots; then the writes resume,
/// on m1.
pub(crate) fn s13_near_cache_staleness_slot_takeover(mode: Mode) -> Result<(), Failed> {
    checker_self_test()?;
    let name = format!("s13-slot-takeover-{}", mode.name());
    let (mut s, nodes, _db) = cluster_trial::start_with(&name, stale_db(mode), &[])?;
    let map = nodes.map_seen_by("m0")?;
    let [m0, m1, m2] = [nodes.port("m0"), nodes.port("m1"), nodes.port("m2")];
    // Tags 0-1 on the slots taken over, 2-3 elsewhere on m0, 4-5 on m1,
    // 6-7 on m2.
    let mut tags = Vec::new();
    let taken = pick_tags(2, |slot| map.owner(slot) == Some(m0), &mut tags);
    pick_tags(2, |slot| map.owner(slot) == Some(m0), &mut tags);
    pick_tags(2, |slot| map.owner(slot) == Some(m1), &mut tags);
    pick_tags(2, |slot| map.owner(slot) == Some(m2), &mut tags);
    check_tags(m0, &tags)?;
    let emptied: Vec<usize> = (0..KEYS).filter(|k| k % tags.len() < 2).collect();
    let mut load = StaleLoad::start(StaleTarget {
        port: s.varnish.port,
        keys: tagged_keys(&tags),
        read_path: |_| "/db/get/",
        direct: cluster_direct(m0),
        absent: Vec::new(),
        expiring: false,
    })?;
    load.sleep_until(CHANGE_AT);
    load.pause_writes();
    let start = load.clock.now();
    let m1_id = nodes.id("m1");
    let mut took = cluster::ask(m1, &["CLUSTER", "BUMPEPOCH"]).map(|_| ());
    for t in &taken {
        let slot = t.slot.to_string();
        took = took.and_then(|()| {
            cluster::ask(m1, &["CLUSTER", "SETSLOT", &slot, "NODE", m1_id]).map(|_| ())
        });
    }
    // Gone once m0 gives the slots to m1 and holds none of their keys.
    let gone = || -> Res<bool> {
        let seen = nodes.map_seen_by("m0")?;
        for t in &taken {
            let slot = t.slot.to_string();
            let left = cluster::ask(m0, &["CLUSTER", "COUNTKEYSINSLOT", &slot])?;
            if seen.owner(t.slot) != Some(m1) || left != ":0" {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let until = Instant::now() + Duration::from_secs(5);
    let mut done = Ok(false);
    while took.is_ok() && Instant::now() < until {
        done = gone();
        if !matches!(done, Ok(false)) {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let end = load.clock.now();
    load.reset_keys(start, end, key_set(&emptied));
    load.resume_writes();
    load.events.push(format!(
        "writes paused; m1 took slots {:?} of m0 from {:.2} s ({took:?}); m0 gave them up, their keys deleted, by {:.2} s ({done:?}); writes resumed",
        taken.iter().map(|t| t.slot).collect::<Vec<_>>(),
        start as f64 / 1e6,
        end as f64 / 1e6
    ));
    load.sleep_until(load.at() + AFTER_CHANGE);
    load.finish(&mut s, false)?;
    took?;
    s.check(matches!(done, Ok(true)), || {
        format!("m0 did not give the slots up within 5 s: {done:?}")
    });
    s.finish()
}
