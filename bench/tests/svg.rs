//! The SVG writer's output is well-formed XML (checked by a small parser written here, not by
//! the writer) with the structure a line plot needs; the latency-percentile plot of
//! `bench --bin rpc --svg` has one line per mode with x increasing along each line.

use hdrhistogram::Histogram;
use rpcrdma_bench::percentiles::{nines, percentile_plot, points, QUANTILES};
use rpcrdma_bench::svg::{escape, nice_step, pow10_label, pow2_label, LinePlot};

/// One element: name, attributes, children (elements only), text.
#[derive(Debug, Default)]
struct Elem {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Elem>,
    text: String,
}

impl Elem {
    fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, name: &str, out: &mut Vec<&'a Elem>) {
        if self.name == name {
            out.push(self);
        }
        for c in &self.children {
            c.all(name, out);
        }
    }

    fn find(&self, name: &str) -> Vec<&Elem> {
        let mut v = Vec::new();
        self.all(name, &mut v);
        v
    }
}

fn unescape(s: &str) -> Result<String, String> {
    let mut o = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        o.push_str(&rest[..i]);
        let end = rest[i..].find(';').ok_or("unterminated entity")? + i;
        o.push(match &rest[i + 1..end] {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            e => return Err(format!("unknown entity &{e};")),
        });
        rest = &rest[end + 1..];
    }
    if rest.contains('<') {
        return Err("raw < in text".into());
    }
    o.push_str(rest);
    Ok(o)
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        && !s.starts_with(|c: char| c.is_ascii_digit() || c == '-')
}

/// Parses a document: optional XML declaration, one root element, balanced tags, quoted
/// attributes without duplicates, known entities only.
fn parse(doc: &str) -> Result<Elem, String> {
    let mut s = doc.trim_start();
    if let Some(r) = s.strip_prefix("<?xml") {
        let end = r.find("?>").ok_or("unterminated declaration")?;
        s = r[end + 2..].trim_start();
    }
    let mut stack: Vec<Elem> = vec![Elem::default()];
    while !s.is_empty() {
        if let Some(r) = s.strip_prefix("</") {
            let end = r.find('>').ok_or("unterminated end tag")?;
            let name = r[..end].trim();
            let e = stack.pop().ok_or("stack")?;
            if e.name != name {
                return Err(format!("</{name}> closes <{}>", e.name));
            }
            stack
                .last_mut()
                .ok_or("end tag at top level")?
                .children
                .push(e);
            s = &r[end + 1..];
        } else if let Some(r) = s.strip_prefix('<') {
            let end = r.find('>').ok_or("unterminated start tag")?;
            let mut body = &r[..end];
            let empty = body.ends_with('/');
            if empty {
                body = &body[..body.len() - 1];
            }
            let (name, mut attrs) = match body.find(char::is_whitespace) {
                Some(i) => (&body[..i], &body[i..]),
                None => (body, ""),
            };
            if !is_name(name) {
                return Err(format!("bad element name {name:?}"));
            }
            let mut e = Elem {
                name: name.into(),
                ..Elem::default()
            };
            loop {
                attrs = attrs.trim_start();
                if attrs.is_empty() {
                    break;
                }
                let eq = attrs
                    .find('=')
                    .ok_or(format!("attribute without value in <{name}>"))?;
                let an = attrs[..eq].trim();
                if !is_name(an) {
                    return Err(format!("bad attribute name {an:?}"));
                }
                let v = &attrs[eq + 1..];
                let q = v.chars().next().ok_or("missing value")?;
                if q != '"' && q != '\'' {
                    return Err(format!("unquoted attribute {an}"));
                }
                let close = v[1..].find(q).ok_or("unterminated attribute")? + 1;
                if e.attr(an).is_some() {
                    return Err(format!("duplicate attribute {an}"));
                }
                e.attrs.push((an.into(), unescape(&v[1..close])?));
                attrs = &v[close + 1..];
            }
            if empty {
                stack.last_mut().ok_or("stack")?.children.push(e);
            } else {
                stack.push(e);
            }
            s = &r[end + 1..];
        } else {
            let end = s.find('<').unwrap_or(s.len());
            let text = unescape(&s[..end])?;
            if stack.len() == 1 && !text.trim().is_empty() {
                return Err("text outside the root".into());
            }
            stack.last_mut().ok_or("stack")?.text.push_str(&text);
            s = &s[end..];
        }
    }
    if stack.len() != 1 {
        return Err(format!("{} unclosed element(s)", stack.len() - 1));
    }
    let mut top = stack.pop().ok_or("stack")?;
    if top.children.len() != 1 {
        return Err(format!("{} root elements", top.children.len()));
    }
    Ok(top.children.remove(0))
}

/// Asserts that every string of `want` is the text of some `<text>` element.
fn assert_texts(root: &Elem, want: &[&str]) {
    let texts: Vec<String> = root.find("text").iter().map(|t| t.text.clone()).collect();
    for w in want {
        assert!(
            texts.iter().any(|t| t == w),
            "missing text {w:?}: {texts:?}"
        );
    }
}

fn plot() -> LinePlot {
    let mut p = LinePlot::new(
        "Latency <vs> size & more",
        "message size [octets]",
        "round trip [us]",
    );
    p.subtitle = "load average 1.23 \"shared\"".into();
    p.x_log2 = true;
    let sizes: Vec<f64> = (1..=16).map(|e| f64::from(1u32 << e)).collect();
    p.add(
        "send_lat",
        sizes.iter().map(|&s| (s, 2.0 + s / 8000.0)).collect(),
    );
    p.add(
        "write_lat",
        sizes.iter().map(|&s| (s, 1.5 + s / 9000.0)).collect(),
    );
    p.add(
        "rpc_lat",
        sizes.iter().map(|&s| (s, 9.0 + s / 3000.0)).collect(),
    );
    p
}

#[test]
fn accepts_the_checker_on_known_documents() {
    assert!(parse(r#"<a x="1"><b/>t &amp; u</a>"#).is_ok());
    assert!(parse("<a><b></a></b>").is_err());
    assert!(parse("<a x=1/>").is_err());
    assert!(parse(r#"<a x="1" x="2"/>"#).is_err());
    assert!(parse("<a>&nbsp;</a>").is_err());
    assert!(parse("<a/><b/>").is_err());
    assert!(parse("<a>").is_err());
}

#[test]
fn accepts_well_formed_line_plot() {
    let svg = plot().to_svg();
    let root = parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert_eq!(root.name, "svg");
    assert_eq!(root.attr("xmlns"), Some("http://www.w3.org/2000/svg"));
    assert_eq!(root.attr("width"), Some("800"));
    assert_eq!(root.attr("viewBox"), Some("0 0 800 480"));
    // Three lines, each with 16 points, every coordinate inside the canvas.
    let lines = root.find("polyline");
    assert_eq!(lines.len(), 3);
    for l in &lines {
        let pts: Vec<(f64, f64)> = l
            .attr("points")
            .unwrap()
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        assert_eq!(pts.len(), 16);
        assert!(pts
            .iter()
            .all(|&(x, y)| (0.0..=800.0).contains(&x) && (0.0..=480.0).contains(&y)));
        // Log2 x axis: equal steps between consecutive powers of two.
        let d1 = pts[1].0 - pts[0].0;
        let d2 = pts[15].0 - pts[14].0;
        assert!((d1 - d2).abs() < 0.02, "{d1} {d2}");
        // Increasing y values are drawn upwards.
        assert!(pts[15].1 < pts[0].1);
    }
    assert_eq!(root.find("circle").len(), 48);
    assert_texts(
        &root,
        &[
            "Latency <vs> size & more",
            "load average 1.23 \"shared\"",
            "message size [octets]",
            "round trip [us]",
            "send_lat",
            "write_lat",
            "rpc_lat",
            "2",
            "1K",
            "64K",
        ],
    );
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

#[test]
fn accepts_degenerate_plots() {
    // No series, one point, non-finite and non-positive values on a log axis: still valid.
    let mut p = LinePlot::new("t", "x", "y");
    assert!(parse(&p.to_svg()).is_ok());
    p.x_log2 = true;
    p.add(
        "a",
        vec![
            (0.0, 1.0),
            (f64::NAN, 2.0),
            (4.0, f64::INFINITY),
            (8.0, 3.0),
        ],
    );
    let svg = p.to_svg();
    let root = parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert_eq!(root.find("circle").len(), 1);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

#[test]
fn accepts_helpers() {
    assert_eq!(
        escape(r#"<a href="x">&'"#),
        "&lt;a href=&quot;x&quot;&gt;&amp;&apos;"
    );
    assert_eq!(pow2_label(2.0), "2");
    assert_eq!(pow2_label(4096.0), "4K");
    assert_eq!(pow2_label(65536.0), "64K");
    assert_eq!(pow2_label(1048576.0), "1M");
    assert_eq!(nice_step(100.0, 5), 20.0);
    assert_eq!(nice_step(7.0, 6), 2.0);
    assert_eq!(nice_step(0.0, 6), 1.0);
}

/// The pixel points of every polyline, in document order.
fn polylines(root: &Elem) -> Vec<Vec<(f64, f64)>> {
    root.find("polyline")
        .iter()
        .map(|l| {
            l.attr("points")
                .unwrap()
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

/// A histogram (ns) with `n` samples spread over `lo .. lo * 1000`, heavier at the low end.
fn hist(lo: u64, n: u64) -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    for i in 0..n {
        let f = (i as f64 / n as f64).powi(8); // most samples near `lo`, a long tail
        h.record(lo + (f * lo as f64 * 1000.0) as u64).unwrap();
    }
    h
}

#[test]
fn accepts_percentile_plot_with_one_series_per_mode_and_increasing_x() {
    let modes = [
        ("inline mode", hist(1_500, 20_000)),
        ("worker mode, shared cores", hist(18_000, 20_000)),
        ("worker mode, dedicated cores", hist(1_400, 20_000)),
        ("TCP loopback", hist(12_000, 20_000)),
    ];
    let lines: Vec<(&str, &Histogram<u64>)> = modes.iter().map(|(n, h)| (*n, h)).collect();
    let svg = percentile_plot("RPC <percentiles>", "load 1.0", &lines).to_svg();
    let root = parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert_eq!(root.name, "svg");
    let series = root.find("g");
    let series: Vec<_> = series
        .iter()
        .filter(|g| g.attr("class") == Some("series"))
        .collect();
    assert_eq!(series.len(), modes.len(), "one series group per mode");
    let lines = polylines(&root);
    assert_eq!(lines.len(), modes.len(), "one line per mode");
    for l in &lines {
        assert_eq!(l.len(), QUANTILES.len(), "a point per quantile: {l:?}");
        assert!(l.windows(2).all(|w| w[1].0 > w[0].0), "x increases: {l:?}");
        // Latency percentiles never decrease: drawn upwards or level (pixel y shrinks).
        assert!(l.windows(2).all(|w| w[1].1 <= w[0].1 + 1e-9), "{l:?}");
        assert!(l
            .iter()
            .all(|&(x, y)| (0.0..=800.0).contains(&x) && (0.0..=480.0).contains(&y)));
    }
    // The same quantiles sit at the same x on every line.
    for l in &lines[1..] {
        for (a, b) in l.iter().zip(&lines[0]) {
            assert!((a.0 - b.0).abs() < 0.01);
        }
    }
    let want: Vec<&str> = modes.iter().map(|m| m.0).collect();
    assert_texts(&root, &want);
    assert_texts(&root, &["p50", "p99.99", "max", "RPC <percentiles>"]);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

#[test]
fn accepts_log10_y_axis_with_equal_decades() {
    let mut p = LinePlot::new("t", "x", "y");
    p.y_log10 = true;
    p.add("a", vec![(1.0, 1.0), (2.0, 10.0), (3.0, 100.0), (4.0, 0.0)]);
    let svg = p.to_svg();
    let root = parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    let l = &polylines(&root)[0];
    assert_eq!(l.len(), 3, "y = 0 cannot be drawn on a log axis: {l:?}");
    let (d1, d2) = (l[0].1 - l[1].1, l[1].1 - l[2].1);
    assert!(d1 > 0.0 && (d1 - d2).abs() < 0.02, "{d1} {d2}");
    assert_texts(&root, &["1", "10", "100"]);
}

#[test]
fn accepts_quantile_positions_and_points() {
    assert!((nines(0.5) - std::f64::consts::LOG10_2).abs() < 1e-12);
    assert!((nines(0.99) - 2.0).abs() < 1e-9);
    assert!((nines(0.9999) - 4.0).abs() < 1e-6);
    assert_eq!(nines(1.0), 5.0);
    let h = hist(1000, 1000);
    let pts = points(&h);
    assert_eq!(pts.len(), QUANTILES.len());
    assert_eq!(
        pts[0],
        (nines(0.5), h.value_at_quantile(0.5) as f64 / 1000.0)
    );
    assert_eq!(pts[5], (5.0, h.max() as f64 / 1000.0), "max in µs");
    assert!(pts[5].1 > 900.0, "{pts:?}");
    assert_eq!(pow10_label(0), "1");
    assert_eq!(pow10_label(3), "1000");
    assert_eq!(pow10_label(-2), "0.01");
}
