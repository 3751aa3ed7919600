//! Latency percentiles of several histograms as one plot (`bench --bin rpc --svg FILE`): x is
//! the percentile on a "number of nines" scale (p50, p90, p99, p99.9, p99.99, then the
//! maximum one step further), y the round trip in µs on a log10 axis, one line per
//! configuration. Normal operation: [`percentile_plot`] reads the quantiles from each
//! histogram and builds a [`LinePlot`]; nothing here measures. Recovery: an empty histogram
//! gives a line without drawable points (its values are 0, which a log axis skips).

use hdrhistogram::Histogram;

use crate::svg::LinePlot;

/// The quantiles plotted and printed, with their labels; `1.0` is the maximum.
pub const QUANTILES: [(f64, &str); 6] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
    (1.0, "max"),
];

/// The x position of quantile `q`: its number of nines, `-log10(1 - q)` (p50 ≈ 0.3, p90 = 1,
/// p99 = 2, ...); the maximum (`q ≥ 1`) is placed one step past p99.99, at 5.
pub fn nines(q: f64) -> f64 {
    if q >= 1.0 {
        5.0
    } else {
        -(1.0 - q).log10()
    }
}

/// The value of quantile `q` in `h` (the maximum for `q ≥ 1`).
pub fn quantile(h: &Histogram<u64>, q: f64) -> u64 {
    if q >= 1.0 {
        h.max()
    } else {
        h.value_at_quantile(q)
    }
}

/// The points of one line: (nines, value in µs) for every [`QUANTILES`] entry of `h` (in ns).
pub fn points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    QUANTILES
        .iter()
        .map(|&(q, _)| (nines(q), quantile(h, q) as f64 / 1000.0))
        .collect()
}

/// A plot of the [`QUANTILES`] of each `(name, histogram in ns)`, one line each, in order.
pub fn percentile_plot(title: &str, subtitle: &str, lines: &[(&str, &Histogram<u64>)]) -> LinePlot {
    let mut p = LinePlot::new(
        title,
        "percentile (log scale of 1 - q: one step per nine)",
        "round trip [µs], log scale",
    );
    p.subtitle = subtitle.into();
    p.y_log10 = true;
    p.x_ticks = QUANTILES
        .iter()
        .map(|&(q, l)| (nines(q), l.to_string()))
        .collect();
    for (name, h) in lines {
        p.add(name, points(h));
    }
    p
}
