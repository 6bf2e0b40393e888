//! SVG plots of S1 and S2.
use super::*;

// SVG

pub(crate) fn nice_step(range: f64, ticks: f64) -> f64 {
    let raw = range / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub(crate) const COLORS: [&str; 3] = ["#1f77b4", "#2ca02c", "#d62728"];
pub(crate) const VMOD_COLORS: [&str; 2] = ["#1f77b4", "#ff7f0e"];

/// Frame, title and y axis from 0 to a nice top; returns (top, y of value).
pub(crate) fn svg_frame(
    svg: &mut String,
    w: f64,
    h: f64,
    m: [f64; 4],
    title: &str,
    ylabel: &str,
    ymax: f64,
) -> f64 {
    let [top, right, bottom, left] = m;
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(svg, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{}</text>",
        w / 2.0,
        esc(title)
    );
    let step = nice_step(ymax.max(1e-9), 6.0);
    let ytop = (ymax / step).ceil().max(1.0) * step;
    let plot_h = h - top - bottom;
    let mut v = 0.0;
    while v <= ytop + step / 2.0 {
        let y = top + plot_h - v / ytop * plot_h;
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - right,
            left - 6.0,
            y + 4.0,
            trim_num(v)
        );
        v += step;
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" x2=\"{left}\" y1=\"{top}\" y2=\"{}\" stroke=\"black\"/>\
         <line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    let _ = writeln!(
        svg,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        top + plot_h / 2.0,
        esc(ylabel)
    );
    ytop
}

pub(crate) fn trim_num(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".into()
    } else {
        s.into()
    }
}

pub(crate) fn s1_svg(s1: &S1) -> String {
    let (w, h) = (760.0, 460.0);
    let m = [40.0, 170.0, 50.0, 70.0];
    let mut ymax: f64 = 0.0;
    let mut series = Vec::new();
    // With `--ours-only` theirs has no line (nor a legend entry).
    let vmods = if s1.theirs_ran() { 2 } else { 1 };
    for vi in 0..vmods {
        for ci in 0..S1_CMDS.len() {
            let pts: Vec<(f64, f64)> = S1_NS
                .iter()
                .map(|&n| (n as f64, median(&s1.values(vi, ci, n, |c| c.ms))))
                .collect();
            ymax = pts
                .iter()
                .map(|p| p.1)
                .filter(|y| y.is_finite())
                .fold(ymax, f64::max);
            series.push((vi, ci, pts));
        }
    }
    let mut svg = String::new();
    let ytop = svg_frame(
        &mut svg,
        w,
        h,
        m,
        "S1: ms per request vs commands per request (median)",
        "ms / request",
        ymax * 1.05,
    );
    let plot_w = w - m[1] - m[3];
    let plot_h = h - m[0] - m[2];
    let x = |n: f64| m[3] + n / 8.0 * plot_w;
    let y = |v: f64| m[0] + plot_h - v / ytop * plot_h;
    for n in S1_NS {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>",
            x(n as f64),
            h - m[2] + 18.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">commands per request (N)</text>",
        m[3] + plot_w / 2.0,
        h - 10.0
    );
    for (i, (vi, ci, pts)) in series.iter().enumerate() {
        let dash = if *vi == 0 {
            ""
        } else {
            " stroke-dasharray=\"6 4\""
        };
        let path: Vec<String> = pts
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            COLORS[*ci],
            path.join(" ")
        );
        for p in pts.iter().filter(|p| p.1.is_finite()) {
            if *vi == 0 {
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"/>",
                    x(p.0),
                    y(p.1),
                    COLORS[*ci]
                );
            } else {
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"white\" stroke=\"{}\" stroke-width=\"1.5\"/>",
                    x(p.0) - 3.5,
                    y(p.1) - 3.5,
                    COLORS[*ci]
                );
            }
        }
        let ly = m[0] + 10.0 + i as f64 * 22.0;
        let lx = w - m[1] + 15.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{lx}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{}\" stroke-width=\"2\"{dash}/>\
             <text x=\"{}\" y=\"{}\">{} {}</text>",
            lx + 30.0,
            COLORS[*ci],
            lx + 36.0,
            ly + 4.0,
            S1_CMDS[*ci],
            if *vi == 0 { "ours" } else { "theirs (C)" }
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The S2 plot: a group per column, each bar the median req/s of one VMOD
/// over the repetitions, with a whisker from the lowest to the highest.
/// A configuration theirs could not run (TLS) has no theirs bar.
pub(crate) fn s2_svg(rows: &[Row], title: &str) -> String {
    let (w, h) = (900.0, 460.0);
    let m = [40.0, 20.0, 70.0, 80.0];
    let ymax = rows
        .iter()
        .flat_map(|(_, r)| r.iter().flatten().map(|x| x.load.rps))
        .fold(0.0, f64::max);
    let mut svg = String::new();
    let ytop = svg_frame(&mut svg, w, h, m, title, "requests / s", ymax * 1.05);
    let plot_w = w - m[1] - m[3];
    let plot_h = h - m[0] - m[2];
    let modes = columns(rows);
    let group = plot_w / modes.len().max(1) as f64;
    let bar = group * 0.36;
    let y = |rps: f64| m[0] + plot_h - rps / ytop * plot_h;
    for (i, &mode) in modes.iter().enumerate() {
        let gx = m[3] + i as f64 * group;
        let mut medians = [0.0; 2];
        let mut top = 0.0_f64;
        for (vi, med) in medians.iter_mut().enumerate() {
            let values = rps_values(rows, |c| c.mode == mode, vi);
            if values.is_empty() {
                continue;
            }
            let (lo, hi) = values.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
                (lo.min(*v), hi.max(*v))
            });
            *med = median(&values);
            top = top.max(hi);
            let bx = gx + group * 0.14 + vi as f64 * bar;
            let tooltip = format!(
                "{} {}: {:.0} req/s (repetitions: {})",
                mode.label(),
                if vi == 0 { "ours" } else { "theirs" },
                *med,
                values
                    .iter()
                    .map(|v| f(*v, 0))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let _ = writeln!(
                svg,
                "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" \
                 fill=\"{}\"><title>{}</title></rect>",
                y(*med),
                m[0] + plot_h - y(*med),
                VMOD_COLORS[vi],
                esc(&tooltip)
            );
            if values.len() > 1 {
                let cx = bx + bar / 2.0;
                let _ = writeln!(
                    svg,
                    "<path d=\"M{cx:.1},{:.1}V{:.1}M{:.1},{:.1}H{:.1}M{:.1},{:.1}H{:.1}\" \
                     stroke=\"#333\" stroke-width=\"1\" fill=\"none\"/>",
                    y(lo),
                    y(hi),
                    cx - 3.0,
                    y(lo),
                    cx + 3.0,
                    cx - 3.0,
                    y(hi),
                    cx + 3.0
                );
            }
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            gx + group / 2.0,
            y(top) - 5.0,
            match ratio(medians[0], medians[1]) {
                q if q.is_finite() => format!("×{}", f(q, 2)),
                _ => "theirs n/a".to_owned(),
            }
        );
        let label = mode.label();
        let (l1, l2) = label.split_once(' ').unwrap_or((&label, ""));
        let cx = gx + group / 2.0;
        let _ = writeln!(
            svg,
            "<text x=\"{cx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{cx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            h - m[2] + 18.0,
            esc(l1),
            h - m[2] + 33.0,
            esc(l2)
        );
    }
    let vmods = if theirs_ran(rows) { 2 } else { 1 };
    for (vi, name) in ["ours", "theirs (C VMOD)"].iter().enumerate().take(vmods) {
        let lx = m[3] + 10.0 + vi as f64 * 120.0;
        let ly = h - 18.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{lx}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{name}</text>",
            ly - 11.0,
            VMOD_COLORS[vi],
            lx + 20.0,
            ly
        );
    }
    svg.push_str("</svg>\n");
    svg
}
