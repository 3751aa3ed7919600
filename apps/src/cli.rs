//! Pieces the apps' hand-written command-line parsers share (`rpcrdma-ping`,
//! `rpcrdma-nfs-check`): a cursor over the arguments that splits `--flag=value`, and numbers
//! (decimal or `0x` hex) checked against a range.
//!
//! Recovery: every malformed argument is an error message naming the flag; nothing panics.

use std::net::IpAddr;

/// `v` as a number (decimal, or hex after `0x`), which must lie in `lo..=hi`.
pub fn num(flag: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let t = v.trim();
    let n = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    }
    .map_err(|_| format!("{flag} expects a number, got {v:?}"))?;
    if n < lo || n > hi {
        return Err(format!("{flag} must be between {lo} and {hi}"));
    }
    Ok(n)
}

/// Walks the arguments one token at a time; a flag's value is either inline
/// (`--flag=value`) or the next argument.
#[derive(Debug)]
pub struct ArgCursor<'a> {
    argv: &'a [String],
    next: usize,
    token: &'a str,
    inline: Option<&'a str>,
}

impl<'a> ArgCursor<'a> {
    /// A cursor before the first of `argv` (the program name already removed).
    pub fn new(argv: &'a [String]) -> Self {
        ArgCursor {
            argv,
            next: 0,
            token: "",
            inline: None,
        }
    }

    /// The next token's name: `--flag` of `--flag=value`, otherwise the whole token (a short
    /// flag or a positional argument). `None` after the last argument.
    pub fn next_name(&mut self) -> Option<&'a str> {
        let tok = self.argv.get(self.next)?.as_str();
        self.next += 1;
        self.token = tok;
        let (name, inline) = match tok.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (tok, None),
        };
        self.inline = inline;
        Some(name)
    }

    /// The current token as given (with its `=value`, if any).
    pub fn token(&self) -> &'a str {
        self.token
    }

    /// The current flag's value: the inline one, or the next argument (consumed).
    pub fn value(&mut self, name: &str) -> Result<String, String> {
        if let Some(v) = self.inline.take() {
            return Ok(v.to_string());
        }
        let v = self
            .argv
            .get(self.next)
            .ok_or_else(|| format!("{name} needs a value"))?;
        self.next += 1;
        Ok(v.clone())
    }

    /// The current flag's value as a number in `lo..=hi` (see [`num`]).
    pub fn num(&mut self, name: &str, lo: u64, hi: u64) -> Result<u64, String> {
        num(name, &self.value(name)?, lo, hi)
    }

    /// The current flag's value as an IP address.
    pub fn ip(&mut self, name: &str) -> Result<IpAddr, String> {
        let v = self.value(name)?;
        v.parse()
            .map_err(|_| format!("{name} expects an IP address, got {v:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn accepts_inline_and_separate_values() {
        let a = argv(&["--port=7", "-c", "0x10", "host", "--bind", "10.0.0.1"]);
        let mut c = ArgCursor::new(&a);
        assert_eq!(c.next_name(), Some("--port"));
        assert_eq!(c.num("--port", 1, 65535), Ok(7));
        assert_eq!(c.next_name(), Some("-c"));
        assert_eq!(c.num("-c", 0, 100), Ok(16));
        assert_eq!(c.next_name(), Some("host"));
        assert_eq!(c.token(), "host");
        assert_eq!(c.next_name(), Some("--bind"));
        assert_eq!(c.ip("--bind"), Ok("10.0.0.1".parse().unwrap()));
        assert_eq!(c.next_name(), None);
    }

    #[test]
    fn rejects_missing_bad_and_out_of_range_values() {
        let a = argv(&["--port=0", "--count", "x", "--bind=nope", "--last"]);
        let mut c = ArgCursor::new(&a);
        c.next_name();
        assert_eq!(
            c.num("--port", 1, 65535),
            Err("--port must be between 1 and 65535".into())
        );
        c.next_name();
        assert_eq!(
            c.num("--count", 0, 9),
            Err("--count expects a number, got \"x\"".into())
        );
        c.next_name();
        assert!(c
            .ip("--bind")
            .unwrap_err()
            .contains("expects an IP address"));
        c.next_name();
        assert_eq!(c.value("--last"), Err("--last needs a value".into()));
    }
}
