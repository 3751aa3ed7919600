//! Reads a callgrind output file (the format of the Callgrind manual, "Callgrind Format
//! Specification": `fn=`/`cfn=` name compression, `calls=` lines followed by the call's
//! inclusive cost) and splits its instructions into buckets: client, server, provider,
//! application and runtime, plus per-function self and inclusive costs for the top-N tables.
//!
//! Attribution rule (docs/performance.md, "Instructions per RPC"): a function whose demangled
//! name starts with one of the [`ANCHORS`] prefixes (after any leading `<`, so trait impls
//! count by the implementing type) belongs to that bucket. Every other function (shared engine
//! code, codecs, mempool, `core`/`std`, libc's memcpy) inherits the buckets of its callers, in
//! proportion to the inclusive cost callgrind recorded on each caller → callee edge (iterated to
//! a fixed point); a function without an anchored caller (the reactor loop, the endpoint's node
//! poller) stays in `runtime`. Callgrind records edges, not whole stacks, so the split of code
//! shared by both sides is approximate; the total is exact.
//!
//! Normal operation: parse, attribute, report. Recovery: lines it does not understand are
//! skipped (the format has many optional ones); a file without a `totals:`/`summary:` line or
//! without an `Ir` event is an error.

use std::collections::HashMap;

/// The buckets a function's cost can go to.
pub const BUCKETS: [&str; 5] = ["client", "server", "provider", "application", "runtime"];
const RUNTIME: usize = 4;

/// Name prefixes that anchor a function to a bucket (index into [`BUCKETS`]). The first match
/// wins, so more specific prefixes come first.
pub const ANCHORS: &[(&str, usize)] = &[
    ("rpcrdma_engine::verbs::soft", 2),
    ("rpcrdma_engine::conn::requester", 0),
    ("rpcrdma_engine::conn::responder", 1),
    ("rpcrdma_poller::client", 0),
    ("rpcrdma_poller::server", 1),
    ("rpcrdma_poller::program", 1),
    ("rpcrdma_bench::cost", 3),
    ("cost::", 3),
];

/// The costs of one callgrind run.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    /// Function names by id.
    pub names: Vec<String>,
    /// Self (exclusive) instructions per function id.
    pub self_cost: Vec<u64>,
    /// Inclusive instructions of calls: (caller, callee) → cost.
    pub edges: HashMap<(usize, usize), u64>,
    /// The file's total instructions.
    pub total: u64,
}

/// Per-bucket and per-function results.
#[derive(Debug, Clone)]
pub struct Split {
    /// Instructions per bucket (order of [`BUCKETS`]).
    pub buckets: [f64; 5],
    /// (name, self, inclusive) per function.
    pub functions: Vec<(String, u64, u64)>,
}

impl Profile {
    fn id(&mut self, index: &mut HashMap<String, usize>, name: &str) -> usize {
        if let Some(&i) = index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.self_cost.push(0);
        index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    /// Parses callgrind output (`events:` must list `Ir`; its column is used).
    pub fn parse(text: &str) -> Result<Profile, String> {
        let mut p = Profile::default();
        let mut index = HashMap::new();
        let mut compressed: HashMap<String, String> = HashMap::new();
        let mut col = None;
        let (mut cur, mut callee, mut in_call) = (None, None, false);
        let mut total = None;
        for line in text.lines() {
            if let Some(ev) = line.strip_prefix("events:") {
                col = ev.split_whitespace().position(|e| e == "Ir");
            } else if let Some(v) = line
                .strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
            {
                let i = col.ok_or("no Ir event")?;
                total = v.split_whitespace().nth(i).and_then(|x| x.parse().ok());
            } else if let Some(v) = line.strip_prefix("fn=") {
                let name = resolve(&mut compressed, v);
                cur = Some(p.id(&mut index, &name));
            } else if let Some(v) = line.strip_prefix("cfn=") {
                let name = resolve(&mut compressed, v);
                callee = Some(p.id(&mut index, &name));
            } else if line.starts_with("calls=") {
                in_call = true;
            } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
                let i = col.ok_or("cost line before events:")?;
                let ir: u64 = line
                    .split_whitespace()
                    .nth(1 + i)
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                match (cur, in_call, callee) {
                    (Some(f), true, Some(g)) => *p.edges.entry((f, g)).or_default() += ir,
                    (Some(f), false, _) => p.self_cost[f] += ir,
                    _ => {}
                }
                in_call = false;
            }
        }
        p.total = total.ok_or("no totals: or summary: line")?;
        Ok(p)
    }

    /// The bucket a name is anchored to, if any.
    pub fn anchor(name: &str) -> Option<usize> {
        let n = name.trim_start_matches('<');
        ANCHORS
            .iter()
            .find(|(pre, _)| n.starts_with(pre))
            .map(|&(_, b)| b)
    }

    /// Attributes every function's self cost to the buckets (the rule in the module docs).
    pub fn split(&self) -> Split {
        let n = self.names.len();
        let anchors: Vec<Option<usize>> = self.names.iter().map(|s| Self::anchor(s)).collect();
        let mut callers: Vec<Vec<(usize, u64)>> = vec![Vec::new(); n];
        for (&(f, g), &c) in &self.edges {
            if f != g && c > 0 {
                callers[g].push((f, c));
            }
        }
        let mut dist: Vec<[f64; 5]> = anchors
            .iter()
            .map(|a| {
                let mut d = [0.0; 5];
                d[a.unwrap_or(RUNTIME)] = 1.0;
                d
            })
            .collect();
        for _ in 0..200 {
            let mut changed = 0.0f64;
            for g in 0..n {
                if anchors[g].is_some() || callers[g].is_empty() {
                    continue;
                }
                let sum: u64 = callers[g].iter().map(|&(_, c)| c).sum();
                let mut d = [0.0; 5];
                for &(f, c) in &callers[g] {
                    for (b, x) in d.iter_mut().enumerate() {
                        *x += dist[f][b] * c as f64 / sum as f64;
                    }
                }
                for b in 0..5 {
                    changed = changed.max((d[b] - dist[g][b]).abs());
                }
                dist[g] = d;
            }
            if changed < 1e-9 {
                break;
            }
        }
        let mut buckets = [0.0; 5];
        for (d, &c) in dist.iter().zip(&self.self_cost) {
            for (x, share) in buckets.iter_mut().zip(d) {
                *x += c as f64 * share;
            }
        }
        let mut out_calls = vec![0u64; n];
        for (&(f, g), &c) in &self.edges {
            if f != g {
                out_calls[f] += c;
            }
        }
        let functions = (0..n)
            .map(|g| {
                let s = self.self_cost[g];
                (self.names[g].clone(), s, s + out_calls[g])
            })
            .collect();
        Split { buckets, functions }
    }
}

/// Resolves callgrind's name compression: `(id) name` defines, `(id)` refers.
fn resolve(map: &mut HashMap<String, String>, v: &str) -> String {
    let v = v.trim();
    if let Some(rest) = v.strip_prefix('(') {
        if let Some(end) = rest.find(')') {
            let id = &rest[..end];
            let name = rest[end + 1..].trim();
            if name.is_empty() {
                return map.get(id).cloned().unwrap_or_else(|| format!("({id})"));
            }
            map.insert(id.to_string(), name.to_string());
            return name.to_string();
        }
    }
    v.to_string()
}

/// Reads the budget file: `key = integer` lines (`#` comments); returns the value of `key`.
pub fn budget_value(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .and_then(|(_, v)| v.trim().replace('_', "").parse().ok())
}
