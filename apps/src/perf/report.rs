//! perftest's text layout (header lines, result lines, the dashed rule and the test banner),
//! the `--out_json` document, the hdrhistogram interval log and the progress indicator.
//!
//! Normal operation: the format strings are perftest's own (`RESULT_FMT*`, `REPORT_FMT*`
//! from `perftest_parameters.h`, MiB-era layout), rendered with Rust's formatter, which pads
//! and rounds like C's `%-7.2f`. Recovery: writing errors are returned to the caller; the
//! progress indicator silently stays off when stderr is not a terminal.

use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use super::stats::{BwStats, BwUnit, LatStats};
use super::{Outcome, SizeResult, Test};

/// perftest's `RESULT_LINE` (87 dashes and a newline).
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------\n";

/// perftest's latency header (`RESULT_FMT_LAT` + `RESULT_EXT`; note the trailing space).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n";

/// perftest's duration-mode latency header (`RESULT_FMT_LAT_DUR` + `RESULT_EXT`).
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average\n";

/// perftest's bandwidth header in MiB/sec (`RESULT_FMT` + `RESULT_EXT`).
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n";

/// perftest's bandwidth header with `--report_gbits` (`RESULT_FMT_G` + `RESULT_EXT`).
pub const BW_HEADER_GBITS: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n";

/// The header line of `test`'s results.
pub fn header(test: Test, duration: bool, unit: BwUnit) -> &'static str {
    table_header(test.is_latency(), duration, unit)
}

/// The header line of a latency test's results (`latency`; `duration`: in duration mode) or
/// a bandwidth test's (in `unit`), verbs or RPC.
pub fn table_header(latency: bool, duration: bool, unit: BwUnit) -> &'static str {
    if latency {
        if duration {
            LAT_DUR_HEADER
        } else {
            LAT_HEADER
        }
    } else {
        match unit {
            BwUnit::MiB => BW_HEADER,
            BwUnit::Gbit => BW_HEADER_GBITS,
        }
    }
}

/// One latency result line (`REPORT_FMT_LAT` + `REPORT_EXT`).
pub fn lat_line(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}\n",
        size, iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
    )
}

/// One duration-mode latency line (`REPORT_FMT_LAT_DUR` + `REPORT_EXT`).
pub fn lat_dur_line(size: u64, iters: u64, avg: f64, tps: f64) -> String {
    format!(" {size:<7}       {iters}            {avg:<7.2}        {tps:<7.2}\n")
}

/// One bandwidth line (`REPORT_FMT`, or `REPORT_FMT_EXT` when reporting Gb/s below 0.1, as
/// perftest's `inc_accuracy` does) + `REPORT_EXT`.
pub fn bw_line(size: u64, iters: u64, s: &BwStats, unit: BwUnit) -> String {
    if unit == BwUnit::Gbit && s.avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}\n",
            size, iters, s.peak, s.avg, s.msg_rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}\n",
            size, iters, s.peak, s.avg, s.msg_rate
        )
    }
}

/// The result line of `r`.
pub fn result_line(r: &SizeResult, unit: BwUnit) -> String {
    match &r.outcome {
        Outcome::Lat(s) => lat_line(r.size, r.iters, s),
        Outcome::LatDuration { avg, tps } => lat_dur_line(r.size, r.iters, *avg, *tps),
        Outcome::Bw(s) => bw_line(r.size, r.iters, s, unit),
    }
}

/// What the banner shows.
#[derive(Debug, Clone)]
pub struct BannerInfo<'a> {
    /// The test.
    pub test: Test,
    /// Device name shown (`-d`, else the provider's name).
    pub device: &'a str,
    /// Provider name.
    pub provider: &'a str,
    /// Transport type as perftest prints it (`IB`, `IW`).
    pub transport: &'a str,
    /// "loopback", "server" or "client".
    pub role: &'a str,
    /// QPs.
    pub qps: u32,
    /// TX depth.
    pub tx_depth: u32,
    /// RX depth (SEND tests).
    pub rx_depth: u32,
    /// CQ moderation (BW tests).
    pub cq_mod: u32,
    /// MTU.
    pub mtu: u32,
    /// GID index when given.
    pub gid_index: Option<i32>,
    /// Inline data size.
    pub inline: u32,
    /// Outstanding reads (READ tests).
    pub out_reads: u32,
    /// Memory backing.
    pub memory: &'a str,
}

/// The test banner in the shape of perftest's `ctx_print_test_info`, plus a provider line.
pub fn banner(b: &BannerInfo<'_>) -> String {
    let mut s = String::new();
    s.push_str(RESULT_LINE);
    let _ = writeln!(s, "                    {}", b.test.title());
    let _ = writeln!(s, " Dual-port       : OFF\t\tDevice         : {}", b.device);
    let _ = writeln!(
        s,
        " Number of qps   : {}\t\tTransport type : {}",
        b.qps, b.transport
    );
    let _ = writeln!(s, " Connection type : RC\t\tUsing SRQ      : OFF");
    if b.role != "server" {
        let _ = writeln!(s, " TX depth        : {}", b.tx_depth);
    }
    if b.test.is_send() && b.role != "client" {
        let _ = writeln!(s, " RX depth        : {}", b.rx_depth);
    }
    if !b.test.is_latency() {
        let _ = writeln!(s, " CQ Moderation   : {}", b.cq_mod);
    }
    let _ = writeln!(s, " Mtu             : {}[B]", b.mtu);
    let _ = writeln!(s, " Link type       : Ethernet");
    if let Some(g) = b.gid_index {
        let _ = writeln!(s, " GID index       : {g}");
    }
    if b.test.is_read() {
        let _ = writeln!(s, " Outstand reads  : {}", b.out_reads);
    } else {
        let _ = writeln!(s, " Max inline data : {}[B]", b.inline);
    }
    let _ = writeln!(s, " rdma_cm QPs\t : ON");
    let _ = writeln!(s, " Data ex. method : rdma_cm");
    let _ = writeln!(s, " Provider        : {} ({})", b.provider, b.role);
    let _ = writeln!(s, " Memory          : {}", b.memory);
    s.push_str(RESULT_LINE);
    s
}

/// The `--out_json` document: perftest's `test_info` keys and one `results` entry per size
/// (perftest writes one object per run; with `-a` this file holds every size in order).
pub fn json_report(b: &BannerInfo<'_>, results: &[SizeResult], unit: BwUnit) -> serde_json::Value {
    use serde_json::{json, Map, Value};
    let mut info = Map::new();
    info.insert("test".into(), json!(b.test.json_name()));
    info.insert("Dual_port".into(), json!("OFF"));
    info.insert("Device".into(), json!(b.device));
    info.insert("Provider".into(), json!(b.provider));
    info.insert("Role".into(), json!(b.role));
    info.insert("Number_of_qps".into(), json!(b.qps));
    info.insert("Transport_type".into(), json!(b.transport));
    info.insert("Connection_type".into(), json!("RC"));
    info.insert("Using_SRQ".into(), json!("OFF"));
    info.insert("TX_depth".into(), json!(b.tx_depth));
    if b.test.is_send() {
        info.insert("RX_depth".into(), json!(b.rx_depth));
    }
    if !b.test.is_latency() {
        info.insert("CQ_Moderation".into(), json!(b.cq_mod));
    }
    info.insert("Mtu".into(), json!(b.mtu));
    info.insert("Link_type".into(), json!("Ethernet"));
    if let Some(g) = b.gid_index {
        info.insert("GID_index".into(), json!(g));
    }
    if b.test.is_read() {
        info.insert("Outstand_reads".into(), json!(b.out_reads));
    } else {
        info.insert("Max_inline_data".into(), json!(b.inline));
    }
    info.insert("rdma_cm_QPs".into(), json!("ON"));
    info.insert("Data_ex_method".into(), json!("rdma_cm"));
    let rows: Vec<Value> = results
        .iter()
        .map(|r| match &r.outcome {
            Outcome::Lat(s) => json!({
                "MsgSize": r.size,
                "n_iterations": r.iters,
                "t_min": s.min,
                "t_max": s.max,
                "t_typical": s.typical,
                "t_avg": s.avg,
                "t_stdev": s.stdev,
                "percentile_99": s.p99,
                "percentile_99.9": s.p999,
            }),
            Outcome::LatDuration { avg, tps } => json!({
                "MsgSize": r.size,
                "n_iterations": r.iters,
                "t_avg": avg,
                "tps_average": tps,
            }),
            Outcome::Bw(s) => json!({
                "MsgSize": r.size,
                "n_iterations": r.iters,
                "BW_peak": s.peak,
                "BW_average": s.avg,
                "MsgRate": s.msg_rate,
                "unit": match unit { BwUnit::MiB => "MiB/sec", BwUnit::Gbit => "Gb/sec" },
            }),
        })
        .collect();
    json!({ "test_info": Value::Object(info), "results": rows })
}

/// A progress indicator on stderr for long runs: off unless stderr is a terminal; prints at
/// most five times a second, and only once a size has run for more than a second.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    started: Instant,
    last: Instant,
    shown: bool,
}

impl Progress {
    /// A new indicator; `want` = false forces it off.
    pub fn new(want: bool) -> Progress {
        let now = Instant::now();
        Progress {
            enabled: want && io::stderr().is_terminal(),
            started: now,
            last: now,
            shown: false,
        }
    }

    /// Whether it prints at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Starts a new size.
    pub fn start(&mut self) {
        let now = Instant::now();
        self.started = now;
        self.last = now;
    }

    /// Called every few thousand iterations: `done` of `total` (0 = unknown, duration mode).
    #[cold]
    pub fn tick(&mut self, size: u64, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.started) < Duration::from_secs(1)
            || now.duration_since(self.last) < Duration::from_millis(200)
        {
            return;
        }
        self.last = now;
        self.shown = true;
        let secs = now.duration_since(self.started).as_secs_f64();
        let mut e = io::stderr().lock();
        let _ = if total > 0 {
            write!(
                e,
                "\r  {size} B: {done}/{total} ({:.0}%) {secs:.1}s",
                done as f64 * 100.0 / total as f64
            )
        } else {
            write!(e, "\r  {size} B: {done} {secs:.1}s")
        };
        let _ = e.flush();
    }

    /// Clears the progress line, if any was printed.
    pub fn clear(&mut self) {
        if self.shown {
            let _ = write!(io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}
