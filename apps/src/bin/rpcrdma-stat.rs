//! `rpcrdma-stat`: reads an rpcrdma metrics port (Prometheus text, `GET /metrics`) and prints
//! it the way `nfsstat` and `mountstats` do: per server the totals, per node the reactor's
//! completions and errors, per connection calls, replies, bytes, credits, receive queue, chunk
//! kinds, memory windows, RDMA_ERRORs and reconnections, and per procedure the latency
//! percentiles; `--json` prints the same as one JSON document.
//!
//! Normal operation: one HTTP GET (a plain TCP exchange, 10 s timeout) of `http://ADDR/metrics`
//! (or a file with `--file`), parsed and checked by `rpcrdma_poller::metrics::parse` (the
//! exposition grammar), grouped by the labels the poller writes (`name`, `node`, `conn`,
//! `peer`, `prog` / `vers` / `proc`), printed under a UTC timestamp. `-i SECS` repeats it;
//! every later report covers only the interval since the previous scrape: counters as rates
//! per second over the measured interval, gauges as they are, and the latency of the calls
//! that completed in the interval (count, average, and percentiles read from the histograms'
//! bucket differences, as upper bucket bounds).
//!
//! Recovery: an unreachable port, an HTTP error or an exposition that does not parse ends the
//! run with a message and exit status 1; usage errors exit with 2.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rpcrdma_apps::cli;
use rpcrdma_apps::nfs::v3::proto::proc_name as nfs3_proc_name;
use rpcrdma_poller::metrics::parse::{parse, Family, Sample};
use rpcrdma_poller::metrics::prometheus::Kind;
use serde_json::{json, Map, Value};

const USAGE: &str = "usage: rpcrdma-stat [--json] [-i SECS [-c COUNT]] ADDR[:PORT]... | --file FILE
  ADDR[:PORT]     metrics port (host:port or http://host:port[/metrics]; port 9100 if none);
                  several ports are read and reported together
  --json          one JSON document instead of the tables
  -i SECS         repeat every SECS seconds, showing counters as differences
  -c COUNT        with -i: stop after COUNT reports
  --file FILE     read the exposition from FILE (- for standard input) instead
  -h, --help      this text
  -V, --version   the program's version
";

/// Counters of one entity, by field name (the family name without prefix and `_total`).
type Fields = BTreeMap<String, f64>;

/// Everything one scrape says, grouped.
#[derive(Debug, Default, Clone, PartialEq)]
struct Stats {
    /// Per server (`name` label): totals.
    servers: BTreeMap<String, Fields>,
    /// Per node (`endpoint`, `node`).
    nodes: BTreeMap<(String, String), Fields>,
    /// Per connection (`conn` id as a number, then role, name, peer).
    conns: BTreeMap<(u64, String, String, String), Fields>,
    /// Latency rows: (kind, name, conn-or-node, prog, vers, proc) → (count, sum, quantiles).
    latency: BTreeMap<LatKey, Lat>,
    /// Which fields are gauges.
    gauges: Vec<String>,
    /// Latency histograms' cumulative buckets per latency row: (upper bound in seconds, count).
    buckets: BTreeMap<LatKey, Vec<(f64, f64)>>,
    /// `Some(seconds)` when this is an interval report ([`delta`]): counters are rates per
    /// second, latency rows cover the interval and their quantiles are upper bucket bounds.
    interval: Option<f64>,
    /// When the scrape was taken (UTC, ISO 8601).
    time: String,
}

type LatKey = (String, String, String, String, String, String);

#[derive(Debug, Default, Clone, PartialEq)]
struct Lat {
    count: f64,
    sum: f64,
    /// (quantile, seconds).
    q: Vec<(String, f64)>,
}

fn label(s: &Sample, k: &str) -> String {
    s.label(k).unwrap_or("").to_string()
}

/// Groups the families the poller writes.
fn group(fams: &[Family]) -> Stats {
    let mut st = Stats::default();
    for f in fams {
        let field = |p: &str| {
            let n = f.name.strip_prefix(p)?;
            Some(n.strip_suffix("_total").unwrap_or(n).to_string())
        };
        if f.kind == Kind::Gauge {
            if let Some(n) = field("rpcrdma_conn_").or_else(|| field("rpcrdma_node_")) {
                st.gauges.push(n);
            }
        }
        for s in &f.samples {
            // A summary's samples: the quantiles, `_sum` and `_count` (by the sample's name).
            let suffix = |p: &str| s.name.strip_prefix(p).filter(|_| f.name == p);
            if let Some(n) = suffix("rpcrdma_server_latency_quantile_seconds") {
                lat_sample(&mut st, "server", "node", n, s);
            } else if let Some(n) = suffix("rpcrdma_client_rtt_quantile_seconds") {
                lat_sample(&mut st, "client", "conn", n, s);
            } else if let Some(k) = suffix("rpcrdma_server_latency_seconds") {
                bucket_sample(&mut st, "server", "node", k, s);
            } else if let Some(k) = suffix("rpcrdma_client_rtt_seconds") {
                bucket_sample(&mut st, "client", "conn", k, s);
            } else if f.kind == Kind::Histogram {
                // Another histogram: not one this report prints.
            } else if let Some(n) = field("rpcrdma_server_") {
                let e = st.servers.entry(label(s, "name")).or_default();
                e.insert(n, s.value);
            } else if let Some(n) = field("rpcrdma_node_") {
                let k = (label(s, "endpoint"), label(s, "node"));
                st.nodes.entry(k).or_default().insert(n, s.value);
            } else if let Some(n) = field("rpcrdma_conn_") {
                let id = s.label("conn").and_then(|c| c.parse().ok()).unwrap_or(0);
                let k = (id, label(s, "role"), label(s, "name"), label(s, "peer"));
                st.conns.entry(k).or_default().insert(n, s.value);
            }
        }
    }
    st
}

/// The latency row a sample of `kind` (`server` / `client`) belongs to; `second` names the
/// label after `name` (`node` / `conn`).
fn lat_key(kind: &str, second: &str, s: &Sample) -> LatKey {
    (
        kind.to_string(),
        label(s, "name"),
        label(s, second),
        label(s, "prog"),
        label(s, "vers"),
        label(s, "proc"),
    )
}

fn lat_sample(st: &mut Stats, kind: &str, second: &str, suffix: &str, s: &Sample) {
    let e = st.latency.entry(lat_key(kind, second, s)).or_default();
    match suffix {
        "_count" => e.count = s.value,
        "_sum" => e.sum = s.value,
        "" => e.q.push((label(s, "quantile"), s.value)),
        _ => {}
    }
}

/// A histogram's `_bucket` sample: its cumulative count under its `le` bound.
fn bucket_sample(st: &mut Stats, kind: &str, second: &str, suffix: &str, s: &Sample) {
    if suffix != "_bucket" {
        return;
    }
    let le = match s.label("le") {
        Some("+Inf") => f64::INFINITY,
        Some(v) => match v.parse() {
            Ok(v) => v,
            Err(_) => return,
        },
        None => return,
    };
    let k = lat_key(kind, second, s);
    st.buckets.entry(k).or_default().push((le, s.value));
}

/// The quantiles the reports print.
const QUANTILES: [&str; 4] = ["0.5", "0.9", "0.99", "0.999"];

/// Quantile `q` of a histogram given by cumulative `buckets`: the upper bound of the first
/// bucket holding it (`None` without samples).
fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let want = q * total;
    buckets.iter().find(|(_, c)| *c >= want).map(|(le, _)| *le)
}

/// The latency of the calls completed between `earlier` and `later`: count, sum and the
/// quantiles of the bucket differences.
fn latency_delta(later: &Stats, earlier: &Stats, k: &LatKey, l: &Lat) -> Lat {
    let old = earlier.latency.get(k).cloned().unwrap_or_default();
    let now_b = later.buckets.get(k).map(Vec::as_slice).unwrap_or(&[]);
    let old_b = earlier.buckets.get(k).map(Vec::as_slice).unwrap_or(&[]);
    let diff: Vec<(f64, f64)> = now_b
        .iter()
        .map(|(le, c)| {
            let before = old_b.iter().find(|(l2, _)| l2 == le).map_or(0.0, |b| b.1);
            (*le, (c - before).max(0.0))
        })
        .collect();
    let q = QUANTILES
        .iter()
        .filter_map(|n| Some((n.to_string(), bucket_quantile(&diff, n.parse().ok()?)?)))
        .collect();
    Lat {
        count: (l.count - old.count).max(0.0),
        sum: (l.sum - old.sum).max(0.0),
        q,
    }
}

/// Now, UTC, ISO 8601 to the second.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    iso8601(secs)
}

/// `secs` after the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (the proleptic Gregorian calendar).
fn iso8601(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from a day count (H. Hinnant's algorithm, days since 1970-01-01).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A procedure's name when the program is one this project knows.
fn proc_label(prog: &str, vers: &str, proc_num: &str) -> String {
    let p: Option<u32> = proc_num.parse().ok();
    let name = match (prog, vers, p) {
        (_, _, None) => return "other".into(),
        ("100003", "3", Some(p)) => nfs3_proc_name(p).to_string(),
        ("100003", "4", Some(0)) | ("100005", _, Some(0)) => "NULL".into(),
        ("100003", "4", Some(1)) => "COMPOUND".into(),
        ("100005", "3", Some(p)) => ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"]
            .get(p as usize)
            .unwrap_or(&"?")
            .to_string(),
        ("536891984", "1", Some(1)) => "XFER".into(),
        (_, _, Some(0)) => "NULL".into(),
        (_, _, Some(p)) => format!("proc {p}"),
    };
    let prog = match prog {
        "100003" => "nfs".to_string(),
        "100005" => "mount".to_string(),
        "536891984" => "rpc_perf".to_string(),
        p => p.to_string(),
    };
    format!("{prog}v{vers} {name}")
}

/// The interval report between two scrapes `secs` apart: counters as rates per second
/// (`later` minus `earlier`, divided by `secs`), gauges as they are in `later`, latency rows of
/// the calls completed in between.
fn delta(later: &Stats, earlier: &Stats, secs: f64) -> Stats {
    let secs = secs.max(1e-3);
    let sub = |a: &Fields, b: Option<&Fields>| -> Fields {
        a.iter()
            .map(|(k, v)| {
                let gauge = later.gauges.contains(k);
                let old = b.and_then(|b| b.get(k)).copied().unwrap_or(0.0);
                (k.clone(), if gauge { *v } else { (v - old) / secs })
            })
            .collect()
    };
    let mut d = later.clone();
    for (k, v) in &mut d.servers {
        *v = sub(&later.servers[k], earlier.servers.get(k));
    }
    for (k, v) in &mut d.nodes {
        *v = sub(&later.nodes[k], earlier.nodes.get(k));
    }
    for (k, v) in &mut d.conns {
        *v = sub(&later.conns[k], earlier.conns.get(k));
    }
    for (k, v) in &mut d.latency {
        *v = latency_delta(later, earlier, k, &later.latency[k]);
    }
    d.interval = Some(secs);
    d
}

/// A field's value (0 when absent).
fn v(f: &Fields, k: &str) -> f64 {
    f.get(k).copied().unwrap_or(0.0).max(0.0)
}

/// A field as printed: whole numbers as integers, rates with one decimal.
fn g(f: &Fields, k: &str) -> String {
    let x = v(f, k);
    if x.fract() == 0.0 {
        format!("{}", x as u64)
    } else {
        format!("{x:.1}")
    }
}

/// The report as text (nfsstat / mountstats style).
fn text(st: &Stats) -> String {
    let mut o = match st.interval {
        None => format!("--- {}: totals since each counter started\n", st.time),
        Some(s) => format!(
            "--- {}: the last {s:.2} s; counters per second, latency of the calls completed in it\n",
            st.time
        ),
    };
    for (name, f) in &st.servers {
        o += &format!("Server {name}:\n");
        o += &format!(
            "  connections accepted {}, rejected {}, losses {}, idle closes {}, evictions {}\n",
            g(f, "accepted"),
            g(f, "rejected"),
            g(f, "connection_losses"),
            g(f, "idle_closes"),
            g(f, "evictions")
        );
        o += &traffic(f);
    }
    for ((ep, node), f) in &st.nodes {
        o += &format!("Node {node} of {ep}:\n");
        o += &format!(
            "  polls {} (busy {}), completions {}, doorbells {}, work requests {}, connections {}\n",
            g(f, "polls"),
            g(f, "busy_polls"),
            g(f, "completions"),
            g(f, "doorbells"),
            g(f, "work_requests"),
            g(f, "connections")
        );
        o += &format!(
            "  completion errors: RNR {}, flushed {}, other {}; stray {}; verbs errors {}; rejects full {} peer-limit {} other {}\n",
            g(f, "rnr_errors"),
            g(f, "flush_errors"),
            g(f, "wc_errors"),
            g(f, "stray_completions"),
            g(f, "verbs_errors"),
            g(f, "rejects_full"),
            g(f, "rejects_peer_limit"),
            g(f, "rejects_other")
        );
    }
    for ((id, role, name, peer), f) in &st.conns {
        o += &format!("Connection {id} ({role} {name}, peer {peer}):\n");
        o += &traffic(f);
        o += &format!(
            "  credits granted {}, in use {}, queued {}; receives posted {}, low-water {}\n",
            g(f, "credits_granted"),
            g(f, "credits_in_use"),
            g(f, "queued"),
            g(f, "recv_posted"),
            g(f, "recv_low_water")
        );
        o += &format!(
            "  reconnects {}, losses {}, connect failures {}, retransmits {}",
            g(f, "reconnects"),
            g(f, "connection_losses"),
            g(f, "connect_failures"),
            g(f, "retransmits"),
        );
        // The version gauge is the client's (a server connection answers in each call's).
        match v(f, "rdma_version") as u64 {
            0 => o += "\n",
            ver => o += &format!(", RPC-over-RDMA version {ver}\n"),
        }
    }
    if !st.latency.is_empty() {
        o += &latency_table(st);
    }
    o
}

/// Calls, bytes, chunks, windows and errors of a server total or a connection.
fn traffic(f: &Fields) -> String {
    let mut o = format!(
        "  calls {}, replies {}, errors {}, bytes in {}, bytes out {}\n",
        g(f, "calls"),
        g(f, "replies"),
        g(f, "errors"),
        g(f, "received_bytes"),
        g(f, "sent_bytes")
    );
    o += &format!(
        "  chunks: read {}, write {}, reply {}, position-zero {}; replies via reply chunk {}\n",
        g(f, "read_chunk_calls"),
        g(f, "write_chunk_calls"),
        g(f, "reply_chunk_calls"),
        g(f, "long_calls"),
        g(f, "reply_chunk_replies")
    );
    o += &format!(
        "  send with invalidate {}, remote invalidations {}, windows bound {}, invalidated {}\n",
        g(f, "send_invalidates"),
        g(f, "remote_invalidations"),
        g(f, "mw_binds"),
        g(f, "mw_invalidates")
    );
    o += &format!(
        "  RDMA_ERROR received: ERR_VERS {}, ERR_CHUNK {}, other {}; sent: ERR_CHUNK {}, CANT_REPLY {}\n",
        g(f, "err_vers_in"),
        g(f, "err_chunk_in"),
        g(f, "err_other_in"),
        g(f, "err_chunk_out"),
        g(f, "err_cant_reply_out")
    );
    if v(f, "back_calls") > 0.0 {
        o += &format!(
            "  backchannel: calls {}, replies {}, errors {}, retransmits {}\n",
            g(f, "back_calls"),
            g(f, "back_replies"),
            g(f, "back_errors"),
            g(f, "back_retransmits")
        );
    }
    o
}

fn latency_table(st: &Stats) -> String {
    let mut o = String::from(
        "Latency per procedure (ms; client: round trip, server: call to reply sent):\n",
    );
    if st.interval.is_some() {
        o += "  (calls completed in the interval; percentiles are upper bucket bounds: p99 1.000 = at most 1 ms)\n";
    }
    o += &format!(
        "  {:<6} {:<22} {:<28} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "side", "name", "procedure", "count", "avg", "p50", "p90", "p99", "p99.9"
    );
    for ((kind, name, at, prog, vers, p), l) in &st.latency {
        let q = |n: &str| {
            l.q.iter()
                .find(|(k, _)| k == n)
                .map_or(0.0, |(_, v)| v * 1e3)
        };
        let avg = if l.count > 0.0 {
            l.sum / l.count * 1e3
        } else {
            0.0
        };
        let who = format!(
            "{name} {}",
            if kind == "client" {
                format!("conn {at}")
            } else {
                format!("node {at}")
            }
        );
        o += &format!(
            "  {:<6} {:<22} {:<28} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}\n",
            kind,
            who,
            proc_label(prog, vers, p),
            l.count as u64,
            avg,
            q("0.5"),
            q("0.9"),
            q("0.99"),
            q("0.999")
        );
    }
    o
}

fn fields_json(f: &Fields) -> Value {
    Value::Object(
        f.iter()
            .map(|(k, v)| {
                let n = if v.fract() == 0.0 {
                    json!(*v as u64)
                } else {
                    json!(v)
                };
                (k.clone(), n)
            })
            .collect(),
    )
}

/// The report as JSON.
fn to_json(st: &Stats) -> Value {
    let servers: Vec<Value> = st
        .servers
        .iter()
        .map(|(n, f)| json!({ "name": n, "counters": fields_json(f) }))
        .collect();
    let nodes: Vec<Value> = st
        .nodes
        .iter()
        .map(|((e, n), f)| json!({ "endpoint": e, "node": n, "counters": fields_json(f) }))
        .collect();
    let conns: Vec<Value> = st
        .conns
        .iter()
        .map(|((id, role, name, peer), f)| {
            json!({ "conn": id, "role": role, "name": name, "peer": peer, "counters": fields_json(f) })
        })
        .collect();
    let lat: Vec<Value> = st
        .latency
        .iter()
        .map(|((kind, name, at, prog, vers, p), l)| {
            let mut q = Map::new();
            for (k, v) in &l.q {
                q.insert(k.clone(), json!(v));
            }
            json!({
                "side": kind, "name": name, if kind == "client" { "conn" } else { "node" }: at,
                "prog": prog, "vers": vers, "proc": p, "procedure": proc_label(prog, vers, p),
                "count": l.count as u64, "sum_seconds": l.sum, "quantiles_seconds": q,
            })
        })
        .collect();
    json!({
        "time": st.time, "interval_seconds": st.interval, "servers": servers, "nodes": nodes,
        "connections": conns, "latency": lat,
    })
}

/// `host:port`, `http://host:port` or `http://host:port/path` → (address, path).
fn target(a: &str) -> Result<(String, String), String> {
    let rest = a.strip_prefix("http://").unwrap_or(a);
    if a.starts_with("https://") {
        return Err("https is not supported".into());
    }
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if host.is_empty() {
        return Err("no address".into());
    }
    let port = host
        .rsplit_once(':')
        .filter(|(h, p)| !h.is_empty() && !h.ends_with(':') && !p.is_empty())
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()));
    if let Some((_, p)) = port {
        rpcrdma_apps::cli::port(&format!("{a}: port"), p)?;
    }
    let has_port = port.is_some();
    let host = if has_port {
        host.to_string()
    } else {
        format!("{host}:9100")
    };
    Ok((host, path.to_string()))
}

/// One GET; the body of a 200 answer.
fn fetch(addr: &str, path: &str) -> Result<String, String> {
    let sa = addr
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let t = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&sa, t).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{addr}: {e}"))?;
    let mut out = Vec::new();
    s.take(64 << 20)
        .read_to_end(&mut out)
        .map_err(|e| format!("{addr}: {e}"))?;
    let out = String::from_utf8_lossy(&out);
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{addr}{path}: {status}"));
    }
    Ok(body.to_string())
}

struct Opts {
    json: bool,
    interval: Option<u64>,
    count: Option<u64>,
    sources: Vec<Source>,
}

enum Source {
    Port(String, String),
    File(String),
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        json: false,
        interval: None,
        count: None,
        sources: Vec::new(),
    };
    let mut c = cli::ArgCursor::new(args);
    while let Some(a) = c.next_name() {
        match a {
            "--json" => o.json = true,
            "-i" | "--interval" => o.interval = Some(c.num(a, 1, 86_400)?),
            "-c" | "--count" => o.count = Some(c.num(a, 1, 1_000_000)?),
            "--file" => {
                let f = c.value(a)?;
                if f != "-" {
                    cli::check_in_file(a, std::path::Path::new(&f))?;
                }
                o.sources.push(Source::File(f));
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(format!("unknown option {}", c.token()))
            }
            _ => {
                let (h, p) = target(c.token())?;
                o.sources.push(Source::Port(h, p));
            }
        }
    }
    if o.sources.is_empty() {
        return Err("no metrics port given".into());
    }
    if o.count.is_some() && o.interval.is_none() {
        return Err("-c COUNT counts the reports of -i SECS: give -i too".into());
    }
    Ok(o)
}

/// Adds what `from` says to `into` (several ports in one report).
fn merge(into: &mut Stats, from: Stats) {
    into.servers.extend(from.servers);
    into.nodes.extend(from.nodes);
    into.conns.extend(from.conns);
    into.latency.extend(from.latency);
    into.gauges.extend(from.gauges);
    into.buckets.extend(from.buckets);
}

/// Reads every source into one report.
fn scrape_all(srcs: &[Source]) -> Result<Stats, String> {
    let mut st = Stats {
        time: utc_now(),
        ..Stats::default()
    };
    for s in srcs {
        merge(&mut st, scrape(s)?);
    }
    Ok(st)
}

fn scrape(src: &Source) -> Result<Stats, String> {
    let text = match src {
        Source::Port(h, p) => fetch(h, p)?,
        Source::File(f) if f == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| e.to_string())?;
            s
        }
        Source::File(f) => std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?,
    };
    let fams = parse(&text).map_err(|e| format!("not a valid exposition: {e}"))?;
    Ok(group(&fams))
}

fn report(st: &Stats, json: bool) -> String {
    if json {
        format!("{:#}\n", to_json(st))
    } else {
        text(st)
    }
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let prog = "rpcrdma-stat";
    let takes = |t: &str| matches!(t, "-i" | "--interval" | "-c" | "--count" | "--file");
    if let Some(code) = cli::start(prog, &args, &takes, USAGE) {
        return code;
    }
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => return cli::usage_error(prog, &e),
    };
    let mut last: Option<(Stats, Instant)> = None;
    let mut n = 0u64;
    loop {
        let at = Instant::now();
        let st = match scrape_all(&o.sources) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rpcrdma-stat: {e}");
                return ExitCode::from(1);
            }
        };
        let shown = match &last {
            Some((prev, t)) => delta(&st, prev, at.duration_since(*t).as_secs_f64()),
            None => st.clone(),
        };
        print!("{}", report(&shown, o.json));
        let _ = std::io::stdout().flush();
        n += 1;
        let (Some(i), false) = (o.interval, o.count.is_some_and(|c| n >= c)) else {
            return ExitCode::SUCCESS;
        };
        last = Some((st, at));
        std::thread::sleep(Duration::from_secs(i));
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
    use rpcrdma_poller::{
        CallbackMode, Client, ClientOptions, Cores, Endpoint, EndpointConfig, Metrics, PinPolicy,
        Program, ReactorConfig, ReactorSet, Server, ServerOptions,
    };
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    /// A server and a client over the soft provider, both exposed, after `n` NULL calls: the
    /// report of both ports.
    fn world(n: usize) -> Stats {
        let fabric = SoftFabric::new();
        let sdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        let cdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        let mut rc = ReactorConfig::new(Cores::Count(1));
        rc.pin = PinPolicy::Off;
        rc.backoff = rpcrdma_poller::BackoffConfig::shared_cores();
        let set = ReactorSet::start(&rc).expect("reactors");
        let cfg = EndpointConfig {
            buffers: 64,
            reply_buffers: 64,
            hugepages: false,
            ..EndpointConfig::default()
        };
        let sep = Endpoint::<SoftProvider>::new(&set, sdev, cfg.clone()).expect("ep");
        let cep = Endpoint::<SoftProvider>::new(&set, cdev, cfg).expect("ep");
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 20049);
        let server = Server::builder()
            .program(Program::new(100003, 3..=3))
            .options(ServerOptions {
                metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
                mode: CallbackMode::Inline,
                ..ServerOptions::default()
            })
            .start(&sep, addr)
            .expect("server");
        let opts = ClientOptions {
            latency_histograms: true,
            ..ClientOptions::default()
        };
        let client = Client::connect(&cep, addr, opts).expect("client");
        assert!(client.wait_connected(Duration::from_secs(10)));
        for _ in 0..n {
            let a = client.args().unwrap();
            client
                .call_blocking(rpcrdma_poller::Proc::new(100003, 3, 0), a)
                .expect("NULL");
        }
        let reg = Metrics::new();
        reg.add_client("nfs-client", &client);
        let port = reg.serve("127.0.0.1:0".parse().unwrap()).expect("port");
        let args = [
            server.metrics_addr().unwrap().to_string(),
            format!("http://{}/metrics", port.local_addr()),
        ];
        let o = parse_args(&args).expect("arguments");
        let st = scrape_all(&o.sources).expect("both ports");
        drop((port, server, client));
        let mut set = set;
        set.stop().expect("stop");
        st
    }

    #[test]
    fn accepts_server_and_client_ports_printed_and_as_json() {
        let st = world(5);
        let t = text(&st);
        assert!(t.contains("Server 10.0.0.2:20049:"), "{t}");
        assert!(t.contains("  calls 5, replies 5, errors 0"), "{t}");
        assert!(t.contains("(server 10.0.0.2:20049, peer 10.0.0.1:"), "{t}");
        assert!(
            t.contains("(client nfs-client, peer 10.0.0.2:20049)"),
            "{t}"
        );
        assert!(t.contains("nfsv3 NULL"), "{t}");
        assert!(t.contains("credits granted 32"), "{t}");
        let j = to_json(&st);
        assert_eq!(j["servers"][0]["counters"]["calls"], 5);
        let client_rtt = j["latency"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["side"] == "client")
            .expect("client latency");
        assert_eq!(client_rtt["count"], 5);
        assert_eq!(client_rtt["procedure"], "nfsv3 NULL");
        assert!(client_rtt["quantiles_seconds"]["0.99"].as_f64().unwrap() > 0.0);
    }

    #[test]
    fn accepts_differences_between_scrapes() {
        let text = |calls: u32, credits: u32| {
            format!(
                "# TYPE rpcrdma_conn_calls_total counter\nrpcrdma_conn_calls_total{{role=\"client\",name=\"c\",conn=\"3\",peer=\"p\"}} {calls}\n\
                 # TYPE rpcrdma_conn_credits_granted gauge\nrpcrdma_conn_credits_granted{{role=\"client\",name=\"c\",conn=\"3\",peer=\"p\"}} {credits}\n"
            )
        };
        let a = group(&parse(&text(10, 32)).unwrap());
        let b = group(&parse(&text(25, 16)).unwrap());
        let d = delta(&b, &a, 5.0);
        let f = d.conns.values().next().unwrap();
        // Counters per second over the 5 s, gauges as they are.
        assert_eq!((f["calls"], f["credits_granted"]), (3.0, 16.0));
        assert!(super::text(&d).contains("the last 5.00 s; counters per second"));
    }

    #[test]
    fn accepts_interval_percentiles_from_the_buckets_of_the_interval() {
        // 100 calls under 1 ms before; 10 more in the interval, all between 5 and 10 ms.
        let text = |fast: u32, slow: u32, sum: f64| {
            let l = "name=\"s\",node=\"0\",prog=\"1\",vers=\"1\",proc=\"0\"";
            let n = fast + slow;
            format!(
                "# TYPE rpcrdma_server_latency_seconds histogram\n\
                 rpcrdma_server_latency_seconds_bucket{{{l},le=\"0.001\"}} {fast}\n\
                 rpcrdma_server_latency_seconds_bucket{{{l},le=\"0.005\"}} {fast}\n\
                 rpcrdma_server_latency_seconds_bucket{{{l},le=\"0.01\"}} {n}\n\
                 rpcrdma_server_latency_seconds_bucket{{{l},le=\"+Inf\"}} {n}\n\
                 rpcrdma_server_latency_seconds_sum{{{l}}} {sum}\n\
                 rpcrdma_server_latency_seconds_count{{{l}}} {n}\n\
                 # TYPE rpcrdma_server_latency_quantile_seconds summary\n\
                 rpcrdma_server_latency_quantile_seconds{{{l},quantile=\"0.99\"}} 0.0009\n\
                 rpcrdma_server_latency_quantile_seconds_sum{{{l}}} {sum}\n\
                 rpcrdma_server_latency_quantile_seconds_count{{{l}}} {n}\n"
            )
        };
        let a = group(&parse(&text(100, 0, 0.05)).unwrap());
        let b = group(&parse(&text(100, 10, 0.125)).unwrap());
        let d = delta(&b, &a, 2.0);
        let l = d.latency.values().next().expect("a latency row");
        assert_eq!(l.count, 10.0);
        assert!((l.sum - 0.075).abs() < 1e-9);
        // The running summary says p99 < 1 ms; the interval's calls were all 5-10 ms.
        let p = |n: &str| l.q.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(p("0.5"), Some(0.01));
        assert_eq!(p("0.99"), Some(0.01));
        // The first report keeps the running totals.
        let first = b.latency.values().next().unwrap();
        assert_eq!((first.count, first.q.len()), (110.0, 1));
    }

    #[test]
    fn accepts_utc_timestamps_on_every_report() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        let st = group(&parse("").unwrap());
        let st = Stats {
            time: iso8601(86_399),
            ..st
        };
        assert!(super::text(&st)
            .starts_with("--- 1970-01-01T23:59:59Z: totals since each counter started"));
        assert_eq!(to_json(&st)["time"], "1970-01-01T23:59:59Z");
    }

    #[test]
    fn rejects_bad_arguments_and_targets() {
        let a = |v: &[&str]| parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(a(&[]).is_err());
        assert!(a(&["--bogus", "x:1"]).is_err());
        assert!(a(&["-i", "0", "x:1"]).is_err());
        assert!(a(&["-c", "3", "x:1"])
            .err()
            .unwrap_or_default()
            .contains("give -i"));
        assert!(a(&["x:70000"])
            .err()
            .unwrap_or_default()
            .contains("1..=65535"));
        assert!(a(&["x:1", ""]).is_err());
        assert_eq!(a(&["x:1", "y:2"]).map(|o| o.sources.len()), Ok(2));
        assert!(a(&["https://x:1"]).is_err());
        assert_eq!(target("h").unwrap(), ("h:9100".into(), "/metrics".into()));
        assert_eq!(
            target("http://10.0.0.1:9200/m").unwrap(),
            ("10.0.0.1:9200".into(), "/m".into())
        );
        assert_eq!(target("[::1]:9").unwrap().0, "[::1]:9");
        assert!(matches!(a(&["--json", "h:1"]), Ok(Opts { json: true, .. })));
        assert_eq!(proc_label("100005", "3", "1"), "mountv3 MNT");
        assert_eq!(proc_label("other", "other", "other"), "other");
    }
}
