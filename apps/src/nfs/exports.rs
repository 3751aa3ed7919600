//! The export list: which paths are served, to which clients, with which options — the
//! `/etc/exports` syntax of exports(5) (Linux nfs-utils) for the parts that apply here.
//!
//! ```text
//! # path        client(options)            client(options) ...
//! /export       10.0.0.0/24(rw,no_root_squash)  *(ro)
//! /scratch      10.0.0.7(rw,all_squash,anonuid=1000,anongid=1000,sec=sys:none)
//! ```
//!
//! A client is `*` (anyone), an IPv4 or IPv6 address, or a prefix (`10.0.0.0/24`,
//! `10.0.0.0/255.255.255.0`, `fd00::/64`). Host names, wildcards in names and netgroups need
//! name resolution and are refused with a message. Options: `ro` (default) / `rw`;
//! `root_squash` (default) / `no_root_squash` / `all_squash` / `no_all_squash`;
//! `anonuid=N`, `anongid=N` (default 65534); `sec=FLAVOR[:FLAVOR...]` with `sys` and `none`
//! (default `sys`). The Linux options that have no meaning for this server (`sync`, `async`,
//! `subtree_check`, `no_subtree_check`, `secure`, `insecure`, `wdelay`, `no_wdelay`, `hide`,
//! `nohide`, `crossmnt`, `fsid=`) are accepted and ignored, so an existing exports file
//! loads; any other option is an error. A line may start the client list with `-OPTIONS`, the
//! defaults of the clients after it; a path with no clients is exported to `*` with the
//! defaults; `\` at the end of a line continues it; `#` starts a comment.
//!
//! Normal operation: [`Exports::parse`] validates the whole text first and answers the list
//! or the first error with its line number; the daemon holds the list and asks
//! [`Export::options_for`] with each call's peer address. The most specific rule matches, as
//! nfs-utils orders them: an exact address, then the longest prefix, then `*`; a client no
//! rule names gets nothing. Recovery: a file that does not parse is refused whole (at start
//! the daemon exits; on reload it keeps serving the list it had and says why).

use std::fmt;
use std::net::IpAddr;

/// The uid and gid squashed callers act as by default (`nobody` / `nogroup`).
pub const ANON_ID: u32 = 65534;

/// Whose identity is replaced by the anonymous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Squash {
    /// uid 0 becomes `anonuid`, gid 0 `anongid` (`root_squash`, the default).
    Root,
    /// Nobody is squashed (`no_root_squash`).
    None,
    /// Every caller becomes `anonuid` / `anongid` (`all_squash`).
    All,
}

/// Credential flavors an export accepts (`sec=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecFlavors {
    /// AUTH_SYS (`sys`).
    pub sys: bool,
    /// AUTH_NONE (`none`): the caller acts as the anonymous identity.
    pub none: bool,
    /// `none` was listed before `sys` (the order MOUNT reports them in).
    none_first: bool,
}

impl SecFlavors {
    /// The RFC 5531 flavor numbers in the order the export lists them (MOUNT MNT's
    /// `auth_flavors`).
    pub fn numbers(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(2);
        if self.none_first && self.none {
            v.push(0);
        }
        if self.sys {
            v.push(1);
        }
        if !self.none_first && self.none {
            v.push(0);
        }
        v
    }
}

/// The options one client gets on one export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    /// Writes are refused with NFS3ERR_ROFS.
    pub read_only: bool,
    /// Whose identity is squashed.
    pub squash: Squash,
    /// The uid squashed callers (and AUTH_NONE callers) act as.
    pub anon_uid: u32,
    /// The gid squashed callers (and AUTH_NONE callers) act as.
    pub anon_gid: u32,
    /// Accepted credential flavors.
    pub sec: SecFlavors,
}

impl Default for ExportOptions {
    /// exports(5)'s defaults: `ro,root_squash,sec=sys,anonuid=65534,anongid=65534`.
    fn default() -> Self {
        ExportOptions {
            read_only: true,
            squash: Squash::Root,
            anon_uid: ANON_ID,
            anon_gid: ANON_ID,
            sec: SecFlavors {
                sys: true,
                none: false,
                none_first: false,
            },
        }
    }
}

/// Which clients a rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMatch {
    /// `*`: anyone.
    Any,
    /// One address.
    Addr(IpAddr),
    /// Addresses whose first `len` bits equal `net`'s.
    Prefix(IpAddr, u8),
}

impl ClientMatch {
    /// How specific the rule is (higher wins): exact 256, a prefix its length, `*` -1.
    fn rank(&self) -> i32 {
        match self {
            ClientMatch::Addr(_) => 256,
            ClientMatch::Prefix(_, len) => i32::from(*len),
            ClientMatch::Any => -1,
        }
    }

    /// True when `ip` is one of the clients named.
    pub fn matches(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match *self {
            ClientMatch::Any => true,
            ClientMatch::Addr(a) => a == ip,
            ClientMatch::Prefix(net, len) => prefix_eq(net, ip, len),
        }
    }
}

impl fmt::Display for ClientMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientMatch::Any => f.write_str("*"),
            ClientMatch::Addr(a) => write!(f, "{a}"),
            ClientMatch::Prefix(n, l) => write!(f, "{n}/{l}"),
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_eq(net: IpAddr, ip: IpAddr, len: u8) -> bool {
    let (a, b, bits): (u128, u128, u32) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (u32::from(n).into(), u32::from(i).into(), 32),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (a >> shift) == (b >> shift)
}

/// One client rule of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRule {
    /// Who.
    pub who: ClientMatch,
    /// With which options.
    pub opts: ExportOptions,
}

/// One exported path and its client rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The path clients mount (`/export`).
    pub path: String,
    /// The rules, in the order written.
    pub clients: Vec<ClientRule>,
}

impl Export {
    /// The options client `ip` gets: those of the most specific rule naming it (an exact
    /// address, then the longest prefix, then `*`; the first written among equals), `None`
    /// when no rule names it.
    pub fn options_for(&self, ip: IpAddr) -> Option<ExportOptions> {
        options_for(&self.clients, ip)
    }

    /// The client names MOUNT EXPORT lists as this export's groups (`*`, addresses,
    /// prefixes).
    pub fn group_names(&self) -> Vec<String> {
        self.clients.iter().map(|r| r.who.to_string()).collect()
    }
}

/// The options client `ip` gets from `rules`: those of the most specific rule naming it (an
/// exact address, then the longest prefix, then `*`; the first written among equals), `None`
/// when no rule names it.
pub fn options_for(rules: &[ClientRule], ip: IpAddr) -> Option<ExportOptions> {
    let mut best: Option<&ClientRule> = None;
    for r in rules.iter().filter(|r| r.who.matches(ip)) {
        if best.map_or(true, |b| r.who.rank() > b.who.rank()) {
            best = Some(r);
        }
    }
    best.map(|r| r.opts)
}

/// What is wrong with an exports text, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportsError {
    /// 1-based line (of the line's start when continued); 0 for a one-line `--export`.
    pub line: usize,
    /// What.
    pub why: String,
}

impl fmt::Display for ExportsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.why)
        } else {
            write!(f, "line {}: {}", self.line, self.why)
        }
    }
}

impl std::error::Error for ExportsError {}

/// The export list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exports {
    list: Vec<Export>,
}

/// Longest exported path accepted (MOUNT's MNTPATHLEN, RFC 1813 Appendix I).
const MNTPATHLEN: usize = 1024;
/// Most exports in one list.
pub const MAX_EXPORTS: usize = 64;
/// Most client rules of one export.
pub const MAX_CLIENTS: usize = 256;

impl Exports {
    /// The export list of an exports file's text.
    pub fn parse(text: &str) -> Result<Exports, ExportsError> {
        let mut e = Exports::default();
        let mut pending = String::new();
        let mut start = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            if pending.is_empty() {
                start = i + 1;
            }
            if let Some(head) = line.trim_end().strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            pending.push_str(line);
            let whole = std::mem::take(&mut pending);
            if !whole.trim().is_empty() {
                let x = parse_line(&whole).map_err(|why| ExportsError { line: start, why })?;
                e.push(x).map_err(|why| ExportsError { line: start, why })?;
            }
        }
        if !pending.trim().is_empty() {
            let x = parse_line(&pending).map_err(|why| ExportsError { line: start, why })?;
            e.push(x).map_err(|why| ExportsError { line: start, why })?;
        }
        Ok(e)
    }

    /// Adds the export of a `--export PATH[:OPTIONS]` argument: OPTIONS is either a client
    /// list as in the file (`10.0.0.0/24(rw) *(ro)`) or bare options for `*` (`rw,no_root_squash`).
    pub fn add_spec(&mut self, spec: &str) -> Result<(), ExportsError> {
        let err = |why: String| ExportsError { line: 0, why };
        let (path, rest) = match spec.split_once(':') {
            Some((p, r)) => (p, r.trim()),
            None => (spec, ""),
        };
        let line = if rest.is_empty() {
            path.to_string()
        } else if rest.contains('(') || rest.contains(char::is_whitespace) || rest == "*" {
            format!("{path} {rest}")
        } else {
            format!("{path} *({rest})")
        };
        let x = parse_line(&line).map_err(err)?;
        self.push(x).map_err(err)
    }

    fn push(&mut self, x: Export) -> Result<(), String> {
        if self.list.iter().any(|e| e.path == x.path) {
            return Err(format!("{} is exported twice", x.path));
        }
        if self.list.len() >= MAX_EXPORTS {
            return Err(format!("more than {MAX_EXPORTS} exports"));
        }
        self.list.push(x);
        Ok(())
    }

    /// The exports, in the order written.
    pub fn list(&self) -> &[Export] {
        &self.list
    }

    /// The export mounted as `path`, with its index in [`Exports::list`].
    pub fn find(&self, path: &str) -> Option<(usize, &Export)> {
        self.list.iter().enumerate().find(|(_, e)| e.path == path)
    }

    /// True when nothing is exported.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// One logical line: `PATH [-DEFAULTS] [CLIENT[(OPTIONS)] ...]`.
fn parse_line(line: &str) -> Result<Export, String> {
    let line = line.trim();
    let (path, rest) = split_path(line)?;
    if !path.starts_with('/') {
        return Err(format!("export path {path:?} must be absolute"));
    }
    if path.len() > MNTPATHLEN {
        return Err(format!("export path longer than {MNTPATHLEN} octets"));
    }
    if path.split('/').any(|c| c == "." || c == "..") {
        return Err(format!("export path {path:?} holds . or .."));
    }
    let mut defaults = ExportOptions::default();
    let mut clients = Vec::new();
    for tok in tokens(rest)? {
        if let Some(o) = tok.strip_prefix('-') {
            defaults = apply_options(defaults, o)?;
            continue;
        }
        let (who, opts) = match tok.find('(') {
            Some(i) => {
                let Some(body) = tok[i + 1..].strip_suffix(')') else {
                    return Err(format!("{tok:?}: options must end with ')'"));
                };
                (&tok[..i], apply_options(defaults, body)?)
            }
            None => (tok, defaults),
        };
        if clients.len() >= MAX_CLIENTS {
            return Err(format!("more than {MAX_CLIENTS} clients for {path}"));
        }
        clients.push(ClientRule {
            who: parse_client(who)?,
            opts,
        });
    }
    if clients.is_empty() {
        clients.push(ClientRule {
            who: ClientMatch::Any,
            opts: defaults,
        });
    }
    Ok(Export {
        path: normalise(path),
        clients,
    })
}

/// `/a//b/` → `/a/b`.
fn normalise(p: &str) -> String {
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// The path (possibly in double quotes) and the rest of the line.
fn split_path(line: &str) -> Result<(&str, &str), String> {
    if let Some(q) = line.strip_prefix('"') {
        let Some(end) = q.find('"') else {
            return Err("unterminated quoted path".into());
        };
        return Ok((&q[..end], &q[end + 1..]));
    }
    Ok(match line.find(char::is_whitespace) {
        Some(i) => (&line[..i], &line[i..]),
        None => (line, ""),
    })
}

/// The client tokens: whitespace separates them, but not inside parentheses.
fn tokens(rest: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, None);
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c.is_whitespace() && depth == 0 => {
                if let Some(s) = start.take() {
                    out.push(&rest[s..i]);
                }
                continue;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced parentheses".into());
        }
        start.get_or_insert(i);
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    if let Some(s) = start {
        out.push(&rest[s..]);
    }
    Ok(out)
}

fn parse_client(who: &str) -> Result<ClientMatch, String> {
    if who == "*" {
        return Ok(ClientMatch::Any);
    }
    if who.is_empty() {
        return Err("a client is missing before '('".into());
    }
    if let Some((net, len)) = who.split_once('/') {
        let net: IpAddr = net
            .parse()
            .map_err(|_| format!("{who:?}: not an address prefix"))?;
        let net = canonical(net);
        let bits = if net.is_ipv4() { 32 } else { 128 };
        let len = match len.parse::<u8>() {
            Ok(l) if u32::from(l) <= bits => l,
            Ok(_) => return Err(format!("{who:?}: prefix longer than {bits} bits")),
            Err(_) => netmask_len(len).ok_or_else(|| format!("{who:?}: bad prefix length"))?,
        };
        return Ok(ClientMatch::Prefix(net, len));
    }
    match who.parse::<IpAddr>() {
        Ok(a) => Ok(ClientMatch::Addr(canonical(a))),
        Err(_) => Err(format!(
            "{who:?}: clients are addresses, prefixes or '*' (host names, wildcards and \
             netgroups need name resolution, which this server does not do)"
        )),
    }
}

/// The prefix length of a dotted IPv4 netmask with contiguous ones.
fn netmask_len(mask: &str) -> Option<u8> {
    let m: std::net::Ipv4Addr = mask.parse().ok()?;
    let m = u32::from(m);
    let len = m.leading_ones();
    (m.checked_shl(len).unwrap_or(0) == 0).then_some(len as u8)
}

fn apply_options(mut o: ExportOptions, list: &str) -> Result<ExportOptions, String> {
    for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match (k, v) {
            ("rw", None) => o.read_only = false,
            ("ro", None) => o.read_only = true,
            ("root_squash", None) => o.squash = Squash::Root,
            ("no_root_squash", None) => o.squash = Squash::None,
            ("all_squash", None) => o.squash = Squash::All,
            ("no_all_squash", None) if o.squash == Squash::All => o.squash = Squash::Root,
            ("no_all_squash", None) => {}
            ("anonuid", Some(v)) => o.anon_uid = id(k, v)?,
            ("anongid", Some(v)) => o.anon_gid = id(k, v)?,
            ("sec", Some(v)) => o.sec = sec(v)?,
            (
                "sync" | "async" | "subtree_check" | "no_subtree_check" | "secure" | "insecure"
                | "wdelay" | "no_wdelay" | "hide" | "nohide" | "crossmnt",
                None,
            )
            | ("fsid", Some(_)) => {}
            _ => return Err(format!("unknown export option {opt:?}")),
        }
    }
    Ok(o)
}

fn id(k: &str, v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .map_err(|_| format!("{k}={v:?}: not a number from 0 to 4294967295"))
}

fn sec(v: &str) -> Result<SecFlavors, String> {
    let mut s = SecFlavors {
        sys: false,
        none: false,
        none_first: false,
    };
    for f in v.split(':') {
        match f {
            "sys" => s.sys = true,
            "none" => {
                s.none_first = !s.sys;
                s.none = true;
            }
            _ => {
                return Err(format!(
                    "sec={v:?}: flavors are sys and none (krb5 needs RPCSEC_GSS, not served)"
                ))
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn accepts_the_exports_5_syntax_with_most_specific_match() {
        let e = Exports::parse(
            "# comment\n\
             /export  10.0.0.0/24(rw,no_root_squash) *(ro)  10.0.0.7(rw,all_squash,anonuid=1000,anongid=100)\n\
             \n\
             \"/with space\" -rw 192.168.0.0/255.255.0.0 \\\n   fd00::/64(sec=none:sys)\n\
             /only\n",
        )
        .unwrap();
        assert_eq!(e.list().len(), 3);
        let x = &e.list()[0];
        let o = x.options_for(ip("10.0.0.7")).unwrap();
        assert!(!o.read_only);
        assert_eq!((o.squash, o.anon_uid, o.anon_gid), (Squash::All, 1000, 100));
        let o = x.options_for(ip("10.0.0.9")).unwrap();
        assert_eq!((o.read_only, o.squash), (false, Squash::None));
        let o = x.options_for(ip("10.1.0.9")).unwrap();
        assert_eq!((o.read_only, o.squash), (true, Squash::Root));
        // IPv4-mapped IPv6 peers match IPv4 rules.
        assert_eq!(
            x.options_for(ip("::ffff:10.0.0.7")).unwrap().squash,
            Squash::All
        );
        assert_eq!(x.group_names(), ["10.0.0.0/24", "*", "10.0.0.7"]);

        let (i, w) = e.find("/with space").unwrap();
        assert_eq!(i, 1);
        let o = w.options_for(ip("192.168.3.4")).unwrap();
        assert!(
            !o.read_only,
            "-rw sets the defaults of the clients after it"
        );
        assert_eq!(o.sec.numbers(), [1]);
        let o = w.options_for(ip("fd00::5")).unwrap();
        assert_eq!(o.sec.numbers(), [0, 1]);
        assert!(w.options_for(ip("10.0.0.1")).is_none());

        let only = e.find("/only").unwrap().1;
        assert_eq!(
            only.options_for(ip("1.2.3.4")),
            Some(ExportOptions::default())
        );
    }

    #[test]
    fn accepts_one_line_specs() {
        let mut e = Exports::default();
        e.add_spec("/export:rw,no_root_squash").unwrap();
        e.add_spec("/b:10.0.0.2(rw) *(ro)").unwrap();
        e.add_spec("/c").unwrap();
        let a = e
            .find("/export")
            .unwrap()
            .1
            .options_for(ip("9.9.9.9"))
            .unwrap();
        assert_eq!((a.read_only, a.squash), (false, Squash::None));
        let b = &e.find("/b").unwrap().1;
        assert!(!b.options_for(ip("10.0.0.2")).unwrap().read_only);
        assert!(b.options_for(ip("10.0.0.3")).unwrap().read_only);
        assert!(
            e.find("/c")
                .unwrap()
                .1
                .options_for(ip("1.1.1.1"))
                .unwrap()
                .read_only
        );
        assert_eq!(e.add_spec("/c:rw").unwrap_err().why, "/c is exported twice");
    }

    #[test]
    fn accepts_linux_options_without_meaning_here() {
        let e = Exports::parse("/x *(rw,sync,no_subtree_check,insecure,fsid=0,crossmnt)").unwrap();
        assert!(!e.list()[0].options_for(ip("1.1.1.1")).unwrap().read_only);
    }

    #[test]
    fn rejects_bad_lines_naming_the_line() {
        for (text, line, needle) in [
            ("/x *(rw)\nrelative *(rw)", 2, "absolute"),
            ("/x host.example(rw)", 1, "name resolution"),
            ("/x @netgroup(rw)", 1, "name resolution"),
            ("/x *(rw,nosuchopt)", 1, "unknown export option"),
            ("/x *(anonuid=-1)", 1, "anonuid"),
            ("/x *(sec=krb5)", 1, "krb5"),
            ("/x 10.0.0.0/33(rw)", 1, "prefix longer"),
            ("/x 10.0.0.0/255.0.255.0(rw)", 1, "bad prefix"),
            ("/x *(rw", 1, "unbalanced"),
            ("/x *(rw))", 1, "unbalanced"),
            ("/x (rw)", 1, "missing"),
            ("/a/../b", 1, ". or .."),
            ("/x\n\n/x", 3, "twice"),
            ("\"/x *(rw)", 1, "unterminated"),
        ] {
            let e = Exports::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.why.contains(needle), "{text:?}: {e}");
        }
        let long = format!("/{}", "a".repeat(MNTPATHLEN));
        assert!(Exports::parse(&long).is_err());
        let many: String = (0..=MAX_EXPORTS).map(|i| format!("/e{i}\n")).collect();
        assert!(Exports::parse(&many).unwrap_err().why.contains("more than"));
    }

    #[test]
    fn accepts_prefix_edges() {
        let m = ClientMatch::Prefix(ip("10.0.0.0"), 0);
        assert!(m.matches(ip("200.1.1.1")));
        assert!(!m.matches(ip("fd00::1")));
        let m = parse_client("10.0.0.128/25").unwrap();
        assert!(m.matches(ip("10.0.0.200")) && !m.matches(ip("10.0.0.127")));
        assert_eq!(parse_client("10.0.0.128/255.255.255.128").unwrap(), m);
        assert_eq!(netmask_len("0.0.0.0"), Some(0));
        assert_eq!(netmask_len("255.255.255.255"), Some(32));
    }
}
