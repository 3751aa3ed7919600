//! The Prometheus text exposition format, version 0.0.4: a writer of metric families (`# HELP`,
//! `# TYPE`, then the samples `name{label="value",...} value`), with the format's escaping.
//!
//! Normal operation: [`Exposition`] appends to a `String`; each family is written once, all its
//! samples together (the format requires it). Label values escape `\`, `"` and newlines; help
//! text escapes `\` and newlines. Names are this crate's constants, checked in debug builds.
//! Recovery: nothing to recover (writing to a `String` cannot fail).

use core::fmt::Write as _;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A monotonically increasing count (name ends in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Cumulative buckets, `_sum`, `_count`.
    Histogram,
    /// Quantiles, `_sum`, `_count`.
    Summary,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Appends `v` escaped as a label value (`\` → `\\`, `"` → `\"`, newline → `\n`).
pub fn escape_label(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Builds an exposition.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family: its `# HELP` (whitespace collapsed, escaped) and `# TYPE` lines.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) {
        debug_assert!(valid_name(name), "metric name {name}");
        let _ = write!(self.out, "# HELP {name} ");
        let mut first = true;
        for w in help.split_whitespace() {
            if !first {
                self.out.push(' ');
            }
            first = false;
            for c in w.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    c => self.out.push(c),
                }
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.name());
    }

    /// One sample of the current family: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl core::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(v, &mut self.out);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_escaped_labels_and_help() {
        let mut e = Exposition::new();
        e.family("a_total", "line one\n  two \\ x", Kind::Counter);
        e.sample("a_total", &[("peer", "x\"y\\z\nw"), ("n", "1")], 5u64);
        e.sample("a_total", &[], 0u64);
        assert_eq!(
            e.finish(),
            "# HELP a_total line one two \\\\ x\n# TYPE a_total counter\n\
             a_total{peer=\"x\\\"y\\\\z\\nw\",n=\"1\"} 5\na_total 0\n"
        );
    }

    #[test]
    fn rejects_bad_names() {
        assert!(valid_name("rpcrdma_node_polls_total"));
        assert!(valid_name("_a:b9"));
        assert!(!valid_name("9a"));
        assert!(!valid_name("a-b"));
        assert!(!valid_name(""));
    }
}
