//! A reader and checker of the Prometheus text exposition format 0.0.4: what `rpcrdma-stat`
//! reads a metrics port with, and what the tests check this crate's exposition against.
//!
//! Normal operation: [`parse`] reads the text line by line with the format's grammar — `# HELP
//! name text`, `# TYPE name type`, other `#` comments, and samples `name{label="value",...}
//! value [timestamp]` — and returns the families in order. It is strict where this crate's
//! output must be: every sample follows the `# TYPE` of its family (a histogram's
//! `_bucket` / `_sum` / `_count`, a summary's `_sum` / `_count`), a family is typed once,
//! names match `[a-zA-Z_:][a-zA-Z0-9_:]*` and label names `[a-zA-Z_][a-zA-Z0-9_]*`, label
//! values use only the escapes `\\`, `\"`, `\n`, counters are not negative, and a histogram's
//! buckets of one label set have increasing `le` bounds, cumulative counts, end with
//! `le="+Inf"` and that bucket equals the `_count`.
//!
//! Recovery: the first violation is returned as a [`ParseError`] naming the line; input of any
//! size or content never panics.

use super::prometheus::{valid_name, Kind};

/// One sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name (the family's, or with a histogram / summary suffix).
    pub name: String,
    /// Labels, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `k`.
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// A metric family: its `# TYPE`, `# HELP` and samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The family's name.
    pub name: String,
    /// Its type.
    pub kind: Kind,
    /// Its help text (unescaped), empty without `# HELP`.
    pub help: String,
    /// Its samples, in order.
    pub samples: Vec<Sample>,
}

/// Why a text is not a valid exposition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Line number (1-based; 0 for a check over a whole family).
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

fn err(line: usize, what: impl Into<String>) -> ParseError {
    ParseError {
        line,
        what: what.into(),
    }
}

fn kind_of(s: &str) -> Option<Kind> {
    Some(match s {
        "counter" => Kind::Counter,
        "gauge" => Kind::Gauge,
        "histogram" => Kind::Histogram,
        "summary" => Kind::Summary,
        _ => return None,
    })
}

/// Parses and checks an exposition (see the module documentation).
pub fn parse(text: &str) -> Result<Vec<Family>, ParseError> {
    let mut fams: Vec<Family> = Vec::new();
    let mut helps: Vec<(String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let mut w = rest.trim_start().splitn(3, ' ');
            match (w.next(), w.next(), w.next()) {
                (Some("HELP"), Some(name), text) => {
                    if !valid_name(name) {
                        return Err(err(n, format!("bad metric name {name:?}")));
                    }
                    helps.push((name.into(), unescape_help(text.unwrap_or(""))));
                }
                (Some("TYPE"), Some(name), Some(k)) => {
                    if !valid_name(name) {
                        return Err(err(n, format!("bad metric name {name:?}")));
                    }
                    let kind = kind_of(k.trim()).ok_or_else(|| err(n, "unknown type"))?;
                    if fams.iter().any(|f| f.name == name) {
                        return Err(err(n, format!("{name} typed twice")));
                    }
                    fams.push(Family {
                        name: name.into(),
                        kind,
                        help: String::new(),
                        samples: Vec::new(),
                    });
                }
                _ => {}
            }
            continue;
        }
        let s = sample(line).map_err(|w| err(n, w))?;
        let Some(f) = fams.last_mut() else {
            return Err(err(n, format!("sample {} before any TYPE", s.name)));
        };
        if !belongs(f, &s.name) {
            return Err(err(
                n,
                format!("sample {} outside its family's TYPE", s.name),
            ));
        }
        if f.kind == Kind::Counter && s.value < 0.0 {
            return Err(err(n, "negative counter"));
        }
        f.samples.push(s);
    }
    for f in &mut fams {
        if let Some((_, h)) = helps.iter().find(|(n, _)| *n == f.name) {
            f.help = h.clone();
        }
        if f.kind == Kind::Histogram {
            check_histogram(f)?;
        }
    }
    Ok(fams)
}

/// Whether sample `name` belongs to family `f`.
fn belongs(f: &Family, name: &str) -> bool {
    let Some(suffix) = name.strip_prefix(f.name.as_str()) else {
        return false;
    };
    match (f.kind, suffix) {
        (_, "") => f.kind != Kind::Histogram,
        (Kind::Histogram, "_bucket" | "_sum" | "_count") => true,
        (Kind::Summary, "_sum" | "_count") => true,
        _ => false,
    }
}

fn unescape_help(t: &str) -> String {
    let mut out = String::new();
    let mut c = t.chars();
    while let Some(ch) = c.next() {
        match (ch, ch == '\\') {
            (_, true) => match c.next() {
                Some('n') => out.push('\n'),
                Some(x) => out.push(x),
                None => out.push('\\'),
            },
            (ch, false) => out.push(ch),
        }
    }
    out
}

/// Parses one sample line.
fn sample(line: &str) -> Result<Sample, String> {
    let end = line.find(['{', ' ']).ok_or("sample without value")?;
    let name = &line[..end];
    if !valid_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let (l, after) = label_set(r)?;
        labels = l;
        rest = after;
    }
    let mut w = rest.split_whitespace();
    let v = w.next().ok_or("sample without value")?;
    let value = match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = w.next() {
        ts.parse::<i64>().map_err(|_| "bad timestamp")?;
    }
    if w.next().is_some() {
        return Err("trailing text".into());
    }
    Ok(Sample {
        name: name.into(),
        labels,
        value,
    })
}

type Labels = Vec<(String, String)>;

/// Parses `k="v",...}` and returns the labels and what follows the `}`.
fn label_set(mut r: &str) -> Result<(Labels, &str), String> {
    let mut labels: Labels = Vec::new();
    loop {
        if let Some(after) = r.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = r.find('=').ok_or("label without value")?;
        let k = &r[..eq];
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!("bad label name {k:?}"));
        }
        if labels.iter().any(|(n, _)| n == k) {
            return Err(format!("label {k} twice"));
        }
        r = r[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut v = String::new();
        let mut it = r.char_indices();
        let close = loop {
            match it.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match it.next() {
                    Some((_, '\\')) => v.push('\\'),
                    Some((_, '"')) => v.push('"'),
                    Some((_, 'n')) => v.push('\n'),
                    _ => return Err("bad escape in label value".into()),
                },
                Some((_, '\n')) => return Err("newline in label value".into()),
                Some((_, c)) => v.push(c),
            }
        };
        labels.push((k.into(), v));
        r = &r[close + 1..];
        if let Some(after) = r.strip_prefix(',') {
            r = after;
        } else if !r.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

/// A sample's labels without `le`.
fn key(s: &Sample) -> Labels {
    s.labels
        .iter()
        .filter(|(k, _)| k != "le")
        .cloned()
        .collect()
}

/// The samples of `f` named `name` with the label set `set` (`le` aside).
fn samples_of<'a>(
    f: &'a Family,
    name: &'a str,
    set: &'a Labels,
) -> impl Iterator<Item = &'a Sample> {
    f.samples
        .iter()
        .filter(move |s| s.name == name && key(s) == *set)
}

/// A histogram's buckets per label set: increasing bounds, cumulative counts, `+Inf` last
/// and equal to `_count`, `_sum` present.
fn check_histogram(f: &Family) -> Result<(), ParseError> {
    let mut sets: Vec<Labels> = Vec::new();
    for s in &f.samples {
        let k = key(s);
        if !sets.contains(&k) {
            sets.push(k);
        }
    }
    let bucket = format!("{}_bucket", f.name);
    let (sum, count) = (format!("{}_sum", f.name), format!("{}_count", f.name));
    for set in &sets {
        let of = |n| samples_of(f, n, set);
        let (mut last_le, mut last_c) = (f64::NEG_INFINITY, 0.0);
        for b in of(&bucket) {
            let le = b
                .label("le")
                .ok_or_else(|| err(0, format!("{bucket} without le")))?;
            let le = match le {
                "+Inf" => f64::INFINITY,
                v => v
                    .parse::<f64>()
                    .map_err(|_| err(0, format!("{bucket}: bad le {v:?}")))?,
            };
            if le <= last_le || b.value < last_c {
                return Err(err(0, format!("{bucket}: buckets not cumulative")));
            }
            (last_le, last_c) = (le, b.value);
        }
        if last_le != f64::INFINITY {
            return Err(err(0, format!("{bucket}: no le=\"+Inf\" bucket last")));
        }
        let c = of(&count).next().map(|s| s.value);
        if c != Some(last_c) {
            return Err(err(
                0,
                format!("{}: +Inf bucket differs from _count", f.name),
            ));
        }
        if of(&sum).next().is_none() {
            return Err(err(0, format!("{}: no _sum", f.name)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# HELP h_seconds x \\\\ y\n# TYPE h_seconds histogram\n\
        h_seconds_bucket{a=\"q\\\"\\n\",le=\"0.5\"} 1\nh_seconds_bucket{a=\"q\\\"\\n\",le=\"+Inf\"} 3\n\
        h_seconds_sum{a=\"q\\\"\\n\"} 2.5\nh_seconds_count{a=\"q\\\"\\n\"} 3\n\
        # TYPE c_total counter\nc_total 7 1700000000\n";

    #[test]
    fn accepts_histogram_with_escaped_labels() {
        let f = parse(GOOD).expect("valid");
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].help, "x \\ y");
        assert_eq!(f[0].samples[0].label("a"), Some("q\"\n"));
        assert_eq!(f[1].samples[0].value, 7.0);
    }

    #[test]
    fn rejects_grammar_violations() {
        for (bad, why) in [
            ("c_total 1\n", "before any TYPE"),
            ("# TYPE c counter\nd 1\n", "outside"),
            ("# TYPE c counter\n# TYPE c counter\n", "twice"),
            ("# TYPE c counter\nc -1\n", "negative"),
            ("# TYPE 9c counter\n", "bad metric name"),
            ("# TYPE c counter\nc{a=\"x\\q\"} 1\n", "bad escape"),
            ("# TYPE c counter\nc{a=\"x} 1\n", "unterminated"),
            ("# TYPE c counter\nc{a=x} 1\n", "not quoted"),
            ("# TYPE c counter\nc{a=\"1\",a=\"2\"} 1\n", "twice"),
            ("# TYPE c counter\nc{1a=\"1\"} 1\n", "bad label name"),
            ("# TYPE c counter\nc one\n", "bad value"),
            ("# TYPE c gauge\nc 1 2 3\n", "trailing"),
            ("# TYPE h histogram\nh 1\n", "outside"),
            ("# TYPE c wobble\n", "unknown type"),
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.what.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn rejects_broken_histograms() {
        let h = "# TYPE h histogram\n";
        for (body, why) in [
            (
                "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                "cumulative",
            ),
            (
                "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
                "cumulative",
            ),
            ("h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"),
            ("h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", "_count"),
            ("h_bucket{le=\"+Inf\"} 1\nh_count 1\n", "_sum"),
        ] {
            let e = parse(&format!("{h}{body}")).expect_err(body);
            assert!(e.what.contains(why), "{body:?}: {e}");
        }
    }
}
