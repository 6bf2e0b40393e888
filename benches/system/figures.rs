//! Statistics over repetitions: medians, spreads, slopes.

// Statistics

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub(crate) fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// (max - min) / median, in percent.
pub(crate) fn spread_pct(values: &[f64]) -> f64 {
    let (lo, hi) = min_max(values);
    100.0 * (hi - lo) / median(values)
}

/// Least-squares slope of y over x.
pub(crate) fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    sxy / sxx
}

pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

pub(crate) fn f(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "–".to_owned()
    }
}

pub(crate) fn opt(x: Option<u64>) -> String {
    x.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

pub(crate) fn yes_no(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**not met**"
    }
}
