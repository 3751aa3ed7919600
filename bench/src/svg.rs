//! A tiny hand-written SVG line-plot writer (no dependencies): lines with point markers, a
//! linear or log2 x axis (or caller-chosen x ticks), a linear y axis from 0 or a log10 y axis,
//! grid, tick labels, axis labels, a legend and an optional subtitle.
//!
//! Normal operation: build a [`LinePlot`], add [`Series`], call [`LinePlot::to_svg`]; the
//! result is a standalone SVG 1.1 document. Recovery: points that cannot be drawn (non-finite
//! values, x ≤ 0 on a log x axis, y ≤ 0 on a log y axis) are skipped; an empty plot still
//! renders its frame; all text is XML-escaped.

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
    /// Log10 y axis (labelled ticks at powers of ten, unlabelled grid lines at 2× and 5×).
    pub y_log10: bool,
    /// X ticks chosen by the caller: (x in data units, label). Empty: automatic ticks. The x
    /// range still comes from the data, widened to include these ticks.
    pub x_ticks: Vec<(f64, String)>,
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

/// A power of ten `10^e` as a plain label: 0.01, 0.1, 1, 10, 1000, 100000.
pub fn pow10_label(e: i32) -> String {
    if e >= 0 {
        format!("1{}", "0".repeat(e as usize))
    } else {
        format!("0.{}1", "0".repeat((-e - 1) as usize))
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

/// Where the plot area is and which (transformed) data ranges it shows.
struct Frame {
    w: f64,
    h: f64,
    ml: f64,
    mt: f64,
    pw: f64,
    ph: f64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Frame {
    /// Pixel x of a transformed x value.
    fn px(&self, x: f64) -> f64 {
        self.ml + (x - self.x.0) / (self.x.1 - self.x.0) * self.pw
    }

    /// Pixel y of a transformed y value (clamped to the plot area's bottom).
    fn py(&self, y: f64) -> f64 {
        self.mt + self.ph - ((y - self.y.0).max(0.0) / (self.y.1 - self.y.0)) * self.ph
    }
}

/// A tick: transformed value, label (empty: grid line only).
type Tick = (f64, String);

impl LinePlot {
    /// An empty 800×480 plot with linear axes.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LinePlot {
        LinePlot {
            title: title.into(),
            subtitle: String::new(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log2: false,
            y_log10: false,
            x_ticks: Vec::new(),
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

    fn yt(&self, y: f64) -> Option<f64> {
        if !y.is_finite() {
            return None;
        }
        if self.y_log10 {
            (y > 0.0).then(|| y.log10())
        } else {
            Some(y)
        }
    }

    /// A point in transformed units, if it can be drawn.
    fn point(&self, (x, y): (f64, f64)) -> Option<(f64, f64)> {
        Some((self.xt(x)?, self.yt(y)?))
    }

    /// The plot area and the data ranges: x over the points (and the caller's ticks), y from
    /// 0 to a round value (linear) or over whole decades (log).
    fn frame(&self) -> Frame {
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
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter_map(|&p| self.point(p))
            .collect();
        let xs = pts
            .iter()
            .map(|p| p.0)
            .chain(self.x_ticks.iter().filter_map(|t| self.xt(t.0)));
        let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
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
        let y = if self.y_log10 {
            let (lo, hi) = pts
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                    (a.min(p.1), b.max(p.1))
                });
            let (lo, hi) = if lo.is_finite() {
                (lo.floor(), hi.ceil())
            } else {
                (0.0, 1.0)
            };
            (lo, if hi > lo { hi } else { lo + 1.0 })
        } else {
            let ymax = pts.iter().map(|p| p.1).fold(0.0f64, f64::max);
            let ystep = self.y_step(ymax);
            (0.0, (ymax / ystep).ceil().max(1.0) * ystep)
        };
        Frame {
            w,
            h,
            ml,
            mt,
            pw: w - ml - mr,
            ph: h - mt - mb,
            x: (x0, x1),
            y,
        }
    }

    fn y_step(&self, ymax: f64) -> f64 {
        nice_step(if ymax > 0.0 { ymax } else { 1.0 }, 6)
    }

    fn ticks_x(&self, f: &Frame) -> Vec<Tick> {
        let (x0, x1) = f.x;
        let mut t = Vec::new();
        if !self.x_ticks.is_empty() {
            for (x, label) in &self.x_ticks {
                if let Some(v) = self.xt(*x) {
                    t.push((v, label.clone()));
                }
            }
        } else if self.x_log2 {
            let mut e = x0;
            while e <= x1 + 1e-9 {
                t.push((e, pow2_label(e.exp2())));
                e += 1.0;
            }
        } else {
            let st = nice_step(x1 - x0, 8);
            let mut v = (x0 / st).ceil() * st;
            while v <= x1 + 1e-9 {
                t.push((v, tick_label(v, st)));
                v += st;
            }
        }
        t
    }

    fn ticks_y(&self, f: &Frame) -> Vec<Tick> {
        let (y0, y1) = f.y;
        let mut t = Vec::new();
        if self.y_log10 {
            let (lo, hi) = (y0.round() as i32, y1.round() as i32);
            for e in lo..=hi {
                t.push((f64::from(e), pow10_label(e)));
                if e < hi {
                    for m in [2.0f64, 5.0] {
                        t.push((f64::from(e) + m.log10(), String::new()));
                    }
                }
            }
        } else {
            let step = self.y_step(y1);
            let mut v = 0.0;
            while v <= y1 + step * 1e-6 {
                t.push((v, tick_label(v, step)));
                v += step;
            }
        }
        t
    }

    fn write_head(&self, s: &mut String, f: &Frame) {
        let _ = writeln!(
            s,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
            w = num(f.w),
            h = num(f.h),
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{}" height="{}" fill="white"/>"#,
            num(f.w),
            num(f.h)
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"#,
            num(f.w / 2.0),
            escape(&self.title)
        );
        if !self.subtitle.is_empty() {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="40" text-anchor="middle" font-size="11" fill="#555">{}</text>"##,
                num(f.w / 2.0),
                escape(&self.subtitle)
            );
        }
    }

    /// Grid lines, axes, tick labels and axis labels.
    fn write_axes(&self, s: &mut String, f: &Frame) {
        let (xticks, yticks) = (self.ticks_x(f), self.ticks_y(f));
        s.push_str("<g class=\"grid\" stroke=\"#ddd\" stroke-width=\"1\">\n");
        for (v, _) in &xticks {
            let _ = writeln!(
                s,
                r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                num(f.mt),
                num(f.mt + f.ph),
                x = num(f.px(*v))
            );
        }
        for (v, label) in &yticks {
            let dash = if label.is_empty() {
                r#" stroke-dasharray="2,3""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"{dash}/>"#,
                num(f.ml),
                num(f.ml + f.pw),
                y = num(f.py(*v))
            );
        }
        s.push_str("</g>\n");
        let _ = writeln!(
            s,
            r#"<g class="axes" stroke="black" stroke-width="1"><line x1="{l}" y1="{b}" x2="{r}" y2="{b}"/><line x1="{l}" y1="{t}" x2="{l}" y2="{b}"/></g>"#,
            l = num(f.ml),
            r = num(f.ml + f.pw),
            t = num(f.mt),
            b = num(f.mt + f.ph)
        );
        s.push_str("<g class=\"ticks\">\n");
        for (v, label) in &xticks {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                num(f.px(*v)),
                num(f.mt + f.ph + 16.0),
                escape(label)
            );
        }
        for (v, label) in yticks.iter().filter(|t| !t.1.is_empty()) {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                num(f.ml - 6.0),
                num(f.py(*v) + 4.0),
                escape(label)
            );
        }
        s.push_str("</g>\n");
        let _ = writeln!(
            s,
            r#"<text class="xlabel" x="{}" y="{}" text-anchor="middle">{}</text>"#,
            num(f.ml + f.pw / 2.0),
            num(f.h - 12.0),
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text class="ylabel" x="16" y="{y}" text-anchor="middle" transform="rotate(-90 16 {y})">{}</text>"#,
            escape(&self.y_label),
            y = num(f.mt + f.ph / 2.0)
        );
    }

    /// One `<g class="series">` per line: a polyline and a circle per drawable point.
    fn write_series(&self, s: &mut String, f: &Frame) {
        for (i, se) in self.series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let p: Vec<(f64, f64)> = se
                .points
                .iter()
                .filter_map(|&p| self.point(p))
                .map(|(x, y)| (f.px(x), f.py(y)))
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
    }

    /// The legend, top left inside the plot area.
    fn write_legend(&self, s: &mut String, f: &Frame) {
        if self.series.is_empty() {
            return;
        }
        let lw = self
            .series
            .iter()
            .map(|s| s.name.chars().count())
            .max()
            .unwrap_or(0) as f64
            * 6.6
            + 44.0;
        let lh = 18.0 * self.series.len() as f64 + 8.0;
        let (lx, ly) = (f.ml + 10.0, f.mt + 10.0);
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

    /// The SVG document.
    pub fn to_svg(&self) -> String {
        let f = self.frame();
        let mut s = String::new();
        self.write_head(&mut s, &f);
        self.write_axes(&mut s, &f);
        self.write_series(&mut s, &f);
        self.write_legend(&mut s, &f);
        s.push_str("</svg>\n");
        s
    }
}
