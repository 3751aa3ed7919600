//! What `rpcrdma-perf` prints and writes while and after it runs, for the verbs tests
//! ([`VerbsPrinter`]) and the RPC tests ([`RpcPrinter`]) alike: the results table in
//! perftest's layout ([`Table`]: the dashed rule, the header, one row per size as it arrives),
//! the `--hist-log` interval log, the `--out_json` file and the `--pcap` trace's summary line.
//! The formats themselves are in [`super::report`].
//!
//! Normal operation: the runners call the printer's observer methods as connections come up and
//! sizes finish; rows are written and flushed at once, the histograms kept only when a
//! `--hist-log` was asked for. Recovery: errors writing stdout are ignored (as perftest does);
//! errors writing a file are returned with the option's name, for the caller to report.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::soft::SoftFabric;

use super::report::{self, RESULT_LINE};
use super::rpc::{RpcConfig, RpcConnInfo, RpcObserver, RpcSizeInfo, RpcTest};
use super::stats::BwUnit;
use super::verbs_loops::{ConnInfo, Observer};
use super::{Config, SizeResult, Test};
use crate::pcap::{Mtu, PcapTrace};

/// The results table: prints the header and one row per size, and keeps each size's histogram
/// when a histogram log is wanted.
pub struct Table {
    unit: BwUnit,
    hists: Vec<(SizeResult, Histogram<u64>)>,
    keep_hists: bool,
}

impl Table {
    /// A table reporting bandwidth in `unit`; `keep_hists` keeps each size's histogram (for
    /// [`Table::write_hist_log`]).
    pub fn new(unit: BwUnit, keep_hists: bool) -> Table {
        Table {
            unit,
            hists: Vec::new(),
            keep_hists,
        }
    }

    /// Prints the rule and the header of a latency (`latency`; in duration mode `duration`)
    /// or bandwidth table.
    pub fn start(&self, latency: bool, duration: bool) {
        let mut o = io::stdout().lock();
        let _ = o.write_all(RESULT_LINE.as_bytes());
        let header = report::table_header(latency, duration, self.unit);
        let _ = o.write_all(header.as_bytes());
        let _ = o.flush();
    }

    /// Prints the row of `r` and keeps `hist` if asked to.
    pub fn row(&mut self, r: &SizeResult, hist: &Histogram<u64>) {
        let mut o = io::stdout().lock();
        let _ = o.write_all(report::result_line(r, self.unit).as_bytes());
        let _ = o.flush();
        if self.keep_hists {
            self.hists.push((*r, hist.clone()));
        }
    }

    /// Writes the kept histograms to `path` as an hdrhistogram interval log, one interval per
    /// size tagged `size=N`, under the comment `comment`.
    pub fn write_hist_log(&self, path: &Path, comment: &str) -> io::Result<()> {
        let mut out = BufWriter::new(File::create(path)?);
        let mut ser = V2Serializer::new();
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .with_start_time(std::time::SystemTime::now())
            .begin_log_with(&mut out, &mut ser)?;
        for (r, h) in &self.hists {
            let tag = format!("size={}", r.size);
            w.write_histogram(h, r.start, r.elapsed, Tag::new(&tag))
                .map_err(|e| io::Error::other(format!("{e:?}")))?;
        }
        drop(w);
        out.flush()
    }
}

/// Prints a verbs test's connection lines and results table; keeps the results for the JSON
/// document.
pub struct VerbsPrinter {
    /// The results table.
    pub table: Table,
    /// Every size's result, in order.
    pub results: Vec<SizeResult>,
}

impl VerbsPrinter {
    /// A printer reporting bandwidth in `unit`, keeping histograms when `keep_hists`.
    pub fn new(unit: BwUnit, keep_hists: bool) -> VerbsPrinter {
        VerbsPrinter {
            table: Table::new(unit, keep_hists),
            results: Vec::new(),
        }
    }

    /// Writes the `--hist-log` file of `test` to `path`.
    pub fn write_hist_log(&self, path: &Path, test: Test) -> Result<(), String> {
        let comment = format!(
            "rpcrdma-perf {} {}: one interval per message size, values in ns ({})",
            test,
            env!("CARGO_PKG_VERSION"),
            if test.is_latency() {
                "round trip / rtt factor per iteration"
            } else {
                "post to completion of each signaled WR"
            }
        );
        hist_log_result(path, self.table.write_hist_log(path, &comment))
    }
}

impl Observer for VerbsPrinter {
    fn connected(&mut self, c: &ConnInfo) {
        let mut o = io::stdout().lock();
        let _ = writeln!(
            o,
            " local address: QPN {:#06x} IP {} port {}\t\tQP {}",
            c.qpn,
            c.local.ip(),
            c.local.port(),
            c.qp_index
        );
        let _ = writeln!(
            o,
            " remote address: IP {} port {}",
            c.remote.ip(),
            c.remote.port()
        );
    }

    fn running(&mut self, cfg: &Config) {
        self.table
            .start(cfg.test.is_latency(), cfg.duration.is_some());
    }

    fn result(&mut self, r: &SizeResult, hist: &Histogram<u64>) {
        self.table.row(r, hist);
        self.results.push(*r);
    }
}

/// Prints an RPC test's connection lines and results table; keeps the results and their RPC
/// counters for the summary line and the JSON document.
pub struct RpcPrinter {
    /// The results table.
    pub table: Table,
    /// Every size's result and counters, in order.
    pub results: Vec<(SizeResult, RpcSizeInfo)>,
}

impl RpcPrinter {
    /// A printer reporting bandwidth in `unit`, keeping histograms when `keep_hists`.
    pub fn new(unit: BwUnit, keep_hists: bool) -> RpcPrinter {
        RpcPrinter {
            table: Table::new(unit, keep_hists),
            results: Vec::new(),
        }
    }

    /// Writes the `--hist-log` file of `test` to `path`.
    pub fn write_hist_log(&self, path: &Path, test: RpcTest) -> Result<(), String> {
        let comment = format!(
            "rpcrdma-perf {test} {}: one interval per message size, values in ns (full round \
             trip of each RPC)",
            env!("CARGO_PKG_VERSION")
        );
        hist_log_result(path, self.table.write_hist_log(path, &comment))
    }
}

impl RpcObserver for RpcPrinter {
    fn connected(&mut self, c: &RpcConnInfo) {
        let core = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("core {c}"));
        let mut o = io::stdout().lock();
        let _ = writeln!(
            o,
            " local address: IP {}\t\tclient reactor {}, {}",
            c.client,
            c.client_reactor,
            core(c.client_core)
        );
        if c.server_in_process {
            let _ = writeln!(
                o,
                " remote address: IP {} port {}\tserver reactor 0, {}",
                c.server.ip(),
                c.server.port(),
                core(c.server_core)
            );
        } else {
            let _ = writeln!(
                o,
                " remote address: IP {} port {}\tserver process",
                c.server.ip(),
                c.server.port()
            );
        }
    }

    fn running(&mut self, cfg: &RpcConfig) {
        self.table
            .start(cfg.test.is_latency(), cfg.duration.is_some());
    }

    fn result(&mut self, r: &SizeResult, hist: &Histogram<u64>, info: &RpcSizeInfo) {
        self.table.row(r, hist);
        self.results.push((*r, *info));
    }
}

fn hist_log_result(path: &Path, r: io::Result<()>) -> Result<(), String> {
    r.map_err(|e| format!("--hist-log {}: {e}", path.display()))
}

/// Writes the `--out_json` document `doc` to `path` (pretty-printed, newline-terminated).
pub fn write_json(path: &Path, doc: &serde_json::Value) -> Result<(), String> {
    let s = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    std::fs::write(path, s + "\n").map_err(|e| format!("--out_json {}: {e}", path.display()))
}

/// Starts the `--pcap` trace of `fabric` into `path` (none without a path).
pub fn start_pcap(
    fabric: &SoftFabric,
    path: Option<&Path>,
    mtu: Mtu,
) -> Result<Option<PcapTrace>, String> {
    match path {
        Some(p) => PcapTrace::create(fabric, p, mtu)
            .map(Some)
            .map_err(|e| format!("--pcap {}: {e}", p.display())),
        None => Ok(None),
    }
}

/// Ends the `--pcap` trace and prints how many frames went to `path` (or why writing failed)
/// to stderr.
pub fn finish_pcap(trace: Option<PcapTrace>, path: Option<&Path>) {
    if let (Some(t), Some(p)) = (trace, path) {
        match t.finish() {
            Ok(n) => eprintln!(" pcap: {n} frames written to {}", p.display()),
            Err(e) => eprintln!(" pcap: writing {} failed: {e}", p.display()),
        }
    }
}
