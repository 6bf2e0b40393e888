//! Scenario 12: two masters behind the same three Sentinels, every server
//! announced by name (`localhost`), each failed over on its own
//! (`SENTINEL FAILOVER`) while the other keeps taking writes (issue #23
//! item 3).
use super::*;

const CLIENTS: usize = 8;
/// The master names, the databases of the VCL, their paths.
const MASTERS: [&str; 2] = ["m", "m2"];
const DBS: [&str; 2] = ["db", "db2"];
const KEY: &str = "fault:acked";
const SWITCH_BOUND: f64 = 8.0;
/// A write of the database not failed over waits no longer than this
/// (its p99 is a few ms; a busy 2-core machine adds tens).
const UNHELD_BOUND_MS: f64 = 300.0;

fn counter_at(port: u16) -> u64 {
    redis_cmd(port, None, &["GET", KEY])
        .ok()
        .and_then(|got| got.trim().trim_start_matches(['$', ':', '+']).parse().ok())
        .unwrap_or(0)
}

pub(crate) fn s12_sentinel_masters(mode: Mode) -> Result<(), Failed> {
    let name = format!("s12-{}", mode.name());
    let specs: Vec<DbSpec> = DBS
        .iter()
        .map(|&db| {
            let mut spec = DbSpec::new(db, mode);
            spec.command_timeout = 2000;
            spec
        })
        .collect();
    let so = support::vmod_so()?;
    let dir = support::trial_dir(&name)?;
    // Everyone announces `localhost`: Sentinel reports names.
    let announce = ["--replica-announce-ip".to_string(), "localhost".to_string()];
    let mut masters = Vec::new();
    let mut replicas = Vec::new();
    for (i, _) in MASTERS.iter().enumerate() {
        let sub = dir.join(format!("m{i}"));
        let master = Redis::start_with(&sub, &announce)?;
        let name = format!("r{i}");
        replicas.extend(start_replicas(
            &dir,
            &[&name],
            "localhost",
            master.port,
            &announce,
        )?);
        masters.push(master);
    }
    let watched: Vec<Watched> = MASTERS
        .iter()
        .zip(&masters)
        .enumerate()
        .map(|(i, (&name, master))| Watched {
            name,
            // The first from the Sentinels' configuration, by address.
            host: if i == 0 { "127.0.0.1" } else { "localhost" },
            port: master.port,
            replicas: 1,
        })
        .collect();
    let sentinels = start_sentinels(&dir, &watched, &[sentinel::BY_NAME.to_string()])?;
    let ports: Vec<u16> = masters
        .iter()
        .chain(replicas.iter())
        .map(|r| r.port)
        .collect();

    // Both databases by name, every server `type = auto`.
    let base = vcl(&so, masters[0].port, &specs, "s12 boot");
    let mut text = base.clone();
    for (i, db) in DBS.iter().enumerate() {
        let line = format!(
            "    new {db} = redis.db(location = \"127.0.0.1:{}\", type = master,",
            masters[0].port
        );
        if !text.contains(&line) {
            return Err("s12: the generated VCL changed shape".into());
        }
        let watch = if i == 0 {
            format!(
                "    redis.sentinels(locations = \"{}\");\n",
                sentinels.locations()
            )
        } else {
            String::new()
        };
        text = text.replacen(
            &line,
            &format!(
                "{watch}    new {db} = redis.db(location = \"localhost:{}\", type = auto,",
                masters[i].port
            ),
            1,
        );
    }
    let add: String = DBS
        .iter()
        .zip(&replicas)
        .map(|(db, r)| format!("    {db}.add_server(\"localhost:{}\", auto);\n", r.port))
        .collect();
    text = text.replacen("}\n\nsub vcl_recv", &format!("{add}}}\n\nsub vcl_recv"), 1);
    let master = masters.remove(0);
    let mut s = Setup::with_vcl(&name, &dir, master, &text, &ports)?;
    let first_ports = [s.redis.port, masters[0].port];

    let load = Load::start(LoadSpec {
        port: s.varnish.port,
        clients: CLIENTS,
        duration: Duration::from_secs(40),
        paths: DBS.iter().map(|db| format!("/{db}/incr/acked")).collect(),
        deadline: Duration::from_secs(5),
    });
    // Each master in turn, the other one writing meanwhile.
    let mut windows = Vec::new();
    let mut new_ports = Vec::new();
    load.sleep_until(1.5);
    for (i, master) in MASTERS.iter().enumerate() {
        let asked = load.at();
        let reply = redis_cmd(
            sentinels.ports()[0],
            None,
            &["SENTINEL", "FAILOVER", master],
        )
        .map_err(|e| format!("SENTINEL FAILOVER {master}: {e}"))?;
        let mut switched = None;
        while load.at() < asked + SWITCH_BOUND {
            if let Some(p) = sentinels
                .named_port(master)
                .filter(|&p| p != first_ports[i])
            {
                switched = Some((load.at(), p));
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let Some((at, port)) = switched else {
            load.stop.store(true, Ordering::Relaxed);
            let _ = load.finish();
            s.check(false, || {
                format!(
                    "{master}: no new master within {SWITCH_BOUND} s ({})",
                    reply.trim()
                )
            });
            return s.finish();
        };
        s.say(format!(
            "SENTINEL FAILOVER {master} at {asked:.2} s: localhost:{port} named at +{}",
            ms(at - asked)
        ));
        windows.push((asked, at));
        new_ports.push(port);
        load.sleep_until(at + 1.5);
    }
    load.stop.store(true, Ordering::Relaxed);
    let report = load.finish();
    thread::sleep(Duration::from_millis(500));

    s.say(format!("all: {}", report.all()));
    for (i, db) in DBS.iter().enumerate() {
        let mine = report.of_path(i);
        let acked = mine.iter().filter(|x| x.outcome == Outcome::Ok).count() as u64;
        let on_new = counter_at(new_ports[i]);
        let lost = acked.saturating_sub(on_new);
        let (own_from, own_to) = windows[i];
        let other = windows[1 - i];
        let during_own = figures(
            &mine
                .iter()
                .filter(|x| {
                    x.start_us as f64 / 1e6 >= own_from && x.start_us as f64 / 1e6 <= own_to
                })
                .cloned()
                .collect::<Vec<_>>(),
        );
        let during_other = figures(
            &mine
                .iter()
                .filter(|x| {
                    x.start_us as f64 / 1e6 >= other.0 && x.start_us as f64 / 1e6 <= other.1
                })
                .cloned()
                .collect::<Vec<_>>(),
        );
        s.say(format!(
            "{db}: acknowledged {acked}, on the new master {on_new}, lost {lost}; during its own failover: {during_own}; during the other's: {during_other}"
        ));
        s.check(lost == 0, || {
            format!("{db}: {lost} acknowledged writes lost")
        });
        s.check(mine.iter().all(|x| x.outcome == Outcome::Ok), || {
            format!("{db}: writes failed across graceful failovers")
        });
        s.check(during_other.worst_ms <= UNHELD_BOUND_MS, || {
            format!(
                "{db}: held while the other master failed over (worst {:.0} ms)",
                during_other.worst_ms
            )
        });
    }
    let counters = counters(s.varnish.port, "db")?;
    s.say(format!("db counters: {counters}"));
    s.say_worst(&report, specs[0].command_bound());
    check_status(&report.all(), &mut s.failures);
    check_worst(&report.all(), specs[0].command_bound(), "", &mut s.failures);
    let after = settled_all(&s.varnish, &ports);
    s.say(format!("child after: {after}"));
    s.check_leaks(&after, 2 * connection_bound(&specs[0]) * ports.len());
    let result = s.finish();
    drop(sentinels);
    drop(masters);
    drop(replicas);
    result
}
