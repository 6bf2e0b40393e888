//! [ext] `redis.stats(db="*")`: every database of a VCL in one document.
//!
//! Concatenating the databases' own documents is not a document: two JSON
//! objects in a row do not parse, and two Prometheus expositions repeat
//! each family's `# TYPE` line, which a scraper rejects. So the JSON is one
//! object keyed by database name, each value what `db.stats()` gives, and
//! the Prometheus text has each family once, with the samples of every
//! database under it. Each database's samples are the ones `db.stats()`
//! writes with the same arguments, except that the `name` label is always
//! there: it is what tells the databases' series apart.

use super::{json_string, Document, PrometheusFamily, PrometheusOptions, Stats, StatsContext};

/// One database of the document: its counters and what else it shows.
pub type Part<'a> = (&'a Stats, StatsContext<'a>);

/// Appends `{"<name>": <db.stats()>,...}` in the order of `parts` (the
/// VCL's order of creation), with the spacing of the C VMOD's JSON.
pub fn write_json(out: &mut String, parts: &[Part]) {
    out.push('{');
    for (i, (stats, ctx)) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(out, ctx.db_name);
        out.push_str(": ");
        stats.write_json(out, ctx);
    }
    out.push('}');
}

/// Appends one exposition: the families in the order they first appear,
/// each with its `# HELP` and `# TYPE` lines once (the HELP lines are
/// [ext]: `promtool check metrics` lints a family without one), then the
/// samples of every database in the order of `parts`. With one database
/// it is what `db.stats()` gives with the `name` label, plus the HELP
/// lines.
pub fn write_prometheus(out: &mut String, parts: &[Part], opts: &PrometheusOptions) {
    let mut merged: Vec<PrometheusFamily> = Vec::new();
    for (stats, ctx) in parts {
        for family in stats.prometheus_families(ctx, opts, Document::EveryDatabase) {
            match merged.iter_mut().find(|f| f.header == family.header) {
                Some(same) => same.samples.push_str(&family.samples),
                None => merged.push(family),
            }
        }
    }
    for family in merged {
        out.push_str(&family.header);
        out.push_str(&family.samples);
    }
}
