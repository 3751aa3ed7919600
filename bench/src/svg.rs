//! A tiny hand-written SVG line-plot writer (no dependencies): lines with point markers, a
//! linear or log2 x axis, a linear y axis from 0, grid, tick labels, axis labels, a legend and
//! an optional subtitle.
//!
//! Normal operation: build a [`LinePlot`], add [`Series`], call [`LinePlot::to_svg`]; the
//! result is a standalone SVG 1.1 document. Recovery: points that cannot be drawn (non-finite
//! values, x ≤ 0 on a log axis) are skipped; an empty plot still renders its frame; all text
//! is XML-escaped.

use std::fmt::Write as _;

/// Line colours, in series order (repeated past the end).
pub const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// One line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// A line plot.
#[derive(Debug, Clone, PartialEq)]
pub struct LinePlot {
    /// Title (top).
    pub title: String,
    /// Smaller line under the title (empty: none).
    pub subtitle: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Log2 x axis (ticks at powers of two).
    pub x_log2: bool,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The lines.
    pub series: Vec<Series>,
}

/// Escapes `s` for XML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

/// A power of two as a short label: 2, 512, 1K, 64K, 1M.
pub fn pow2_label(v: f64) -> String {
    let v = v.round() as u64;
    if v >= 1 << 20 && v % (1 << 20) == 0 {
        format!("{}M", v >> 20)
    } else if v >= 1024 && v % 1024 == 0 {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over `span`.
pub fn nice_step(span: f64, n: u32) -> f64 {
    if !(span.is_finite() && span > 0.0) || n == 0 {
        return 1.0;
    }
    let raw = span / f64::from(n);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn num(v: f64) -> String {
    // Two decimals are plenty for pixels; no exponent notation.
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else {
        let d = (-step.log10().floor()) as usize;
        format!("{v:.d$}")
    }
}

impl LinePlot {
    /// An empty 800×480 plot with a linear x axis.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LinePlot {
        LinePlot {
            title: title.into(),
            subtitle: String::new(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log2: false,
            width: 800,
            height: 480,
            series: Vec::new(),
        }
    }

    /// Adds a line.
    pub fn add(&mut self, name: &str, points: Vec<(f64, f64)>) {
        self.series.push(Series {
            name: name.into(),
            points,
        });
    }

    fn xt(&self, x: f64) -> Option<f64> {
        if !x.is_finite() {
            return None;
        }
        if self.x_log2 {
            (x > 0.0).then(|| x.log2())
        } else {
            Some(x)
        }
    }

    /// The SVG document.
    pub fn to_svg(&self) -> String {
        let (w, h) = (
            f64::from(self.width.max(200)),
            f64::from(self.height.max(150)),
        );
        let (ml, mr, mt, mb) = (
            70.0,
            20.0,
            if self.subtitle.is_empty() { 40.0 } else { 58.0 },
            55.0,
        );
        let (pw, ph) = (w - ml - mr, h - mt - mb);
        // Data ranges over drawable points.
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter_map(|&(x, y)| Some((self.xt(x)?, y)).filter(|p| p.1.is_finite()))
            .collect();
        let (mut x0, mut x1) = pts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                (a.min(p.0), b.max(p.0))
            });
        if !x0.is_finite() {
            (x0, x1) = (0.0, 1.0);
        }
        if self.x_log2 {
            (x0, x1) = (x0.floor(), x1.ceil());
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let ymax = pts.iter().map(|p| p.1).fold(0.0f64, f64::max);
        let ystep = nice_step(if ymax > 0.0 { ymax } else { 1.0 }, 6);
        let y1 = ((ymax / ystep).ceil().max(1.0)) * ystep;
        let px = |x: f64| ml + (x - x0) / (x1 - x0) * pw;
        let py = |y: f64| mt + ph - (y.max(0.0) / y1) * ph;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{}" height="{}" viewBox="0 0 {} {}" font-family="sans-serif" font-size="12">"#,
            num(w),
            num(h),
            num(w),
            num(h)
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{}" height="{}" fill="white"/>"#,
            num(w),
            num(h)
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"#,
            num(w / 2.0),
            escape(&self.title)
        );
        if !self.subtitle.is_empty() {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="40" text-anchor="middle" font-size="11" fill="#555">{}</text>"##,
                num(w / 2.0),
                escape(&self.subtitle)
            );
        }
        // Grid and ticks.
        s.push_str("<g class=\"grid\" stroke=\"#ddd\" stroke-width=\"1\">\n");
        let mut xticks = Vec::new();
        if self.x_log2 {
            let mut e = x0;
            while e <= x1 + 1e-9 {
                xticks.push((e, pow2_label(e.exp2())));
                e += 1.0;
            }
        } else {
            let st = nice_step(x1 - x0, 8);
            let mut v = (x0 / st).ceil() * st;
            while v <= x1 + 1e-9 {
                xticks.push((v, tick_label(v, st)));
                v += st;
            }
        }
        for (v, _) in &xticks {
            let _ = writeln!(
                s,
                r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                num(mt),
                num(mt + ph),
                x = num(px(*v))
            );
        }
        let mut yticks = Vec::new();
        let mut v = 0.0;
        while v <= y1 + ystep * 1e-6 {
            yticks.push(v);
            v += ystep;
        }
        for v in &yticks {
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/>"#,
                num(ml),
                num(ml + pw),
                y = num(py(*v))
            );
        }
        s.push_str("</g>\n");
        // Axes.
        let _ = writeln!(
            s,
            r#"<g class="axes" stroke="black" stroke-width="1"><line x1="{l}" y1="{b}" x2="{r}" y2="{b}"/><line x1="{l}" y1="{t}" x2="{l}" y2="{b}"/></g>"#,
            l = num(ml),
            r = num(ml + pw),
            t = num(mt),
            b = num(mt + ph)
        );
        s.push_str("<g class=\"ticks\">\n");
        for (v, label) in &xticks {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                num(px(*v)),
                num(mt + ph + 16.0),
                escape(label)
            );
        }
        for v in &yticks {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                num(ml - 6.0),
                num(py(*v) + 4.0),
                escape(&tick_label(*v, ystep))
            );
        }
        s.push_str("</g>\n");
        let _ = writeln!(
            s,
            r#"<text class="xlabel" x="{}" y="{}" text-anchor="middle">{}</text>"#,
            num(ml + pw / 2.0),
            num(h - 12.0),
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text class="ylabel" x="16" y="{y}" text-anchor="middle" transform="rotate(-90 16 {y})">{}</text>"#,
            escape(&self.y_label),
            y = num(mt + ph / 2.0)
        );
        // Lines and markers.
        for (i, se) in self.series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let p: Vec<(f64, f64)> = se
                .points
                .iter()
                .filter_map(|&(x, y)| Some((px(self.xt(x)?), py(y))).filter(|_| y.is_finite()))
                .collect();
            let _ = writeln!(s, r#"<g class="series" stroke="{c}" fill="{c}">"#);
            let coords: Vec<String> = p
                .iter()
                .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke-width="2" points="{}"/>"#,
                coords.join(" ")
            );
            for (x, y) in &p {
                let _ = writeln!(s, r#"<circle cx="{}" cy="{}" r="3"/>"#, num(*x), num(*y));
            }
            s.push_str("</g>\n");
        }
        // Legend, top left inside the plot area.
        if !self.series.is_empty() {
            let lw = self
                .series
                .iter()
                .map(|s| s.name.chars().count())
                .max()
                .unwrap_or(0) as f64
                * 6.6
                + 44.0;
            let lh = 18.0 * self.series.len() as f64 + 8.0;
            let (lx, ly) = (ml + 10.0, mt + 10.0);
            let _ = writeln!(
                s,
                r##"<g class="legend"><rect x="{}" y="{}" width="{}" height="{}" fill="white" fill-opacity="0.85" stroke="#999"/>"##,
                num(lx),
                num(ly),
                num(lw),
                num(lh)
            );
            for (i, se) in self.series.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                let y = ly + 16.0 + 18.0 * i as f64;
                let _ = writeln!(
                    s,
                    r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                    num(lx + 8.0),
                    num(lx + 32.0),
                    num(lx + 38.0),
                    num(y + 4.0),
                    escape(&se.name),
                    y = num(y)
                );
            }
            s.push_str("</g>\n");
        }
        s.push_str("</svg>\n");
        s
    }
}
