//! perftest's statistics, computed the way perftest computes them.
//!
//! Latency (`print_report_lat`): the client stamps every post; the `n - 1` differences between
//! consecutive posts are the round trips. They are sorted, the two largest are dropped
//! (`LAT_MEASURE_TAIL`), and with `m = n - 3` remaining samples: t_min = `d[0]`, t_max = `d[m]`
//! (the largest kept index plus one, exactly as perftest indexes it), t_typical = the median of
//! `d[..m]` (integer mean of the two middle samples when `m` is even), t_avg = mean of `d[..m]`,
//! t_stdev = population standard deviation of `d[..m]`, 99% = `d[ceil(0.99 m)]`, 99.9% =
//! `d[ceil(0.999 m)]`. Every value is divided by 1000 (ns to usec) times the RTT factor: 2 for
//! SEND and RDMA WRITE (half the round trip), 1 for RDMA READ.
//!
//! One deliberate difference: perftest truncates each deviation to an `int` number of usec
//! before squaring, which makes its t_stdev 0 for sub-microsecond jitter; this module keeps the
//! deviation in floating point.
//!
//! Bandwidth (`print_report_bw`): the client stamps every post (`tposted[i]`) and, at each
//! completion, the completion time of the last message it covers (`tcompleted[k - 1]` where `k`
//! is the number of messages completed so far; with CQ moderation only every `cq_mod`-th slot
//! is written, the others stay 0 and are skipped). Peak = message size over the smallest
//! `(tcompleted[j] - tposted[i]) / (j - i + 1)` for `i <= j`; average = `size * count` over
//! `tcompleted[last] - tposted[0]`; message rate = `count` over the same span, in Mpps. MiB/s
//! divide by 2^20 octets, Gb/s by 1.25e8 octets (10^9 bits).
//!
//! Normal operation: the functions take the raw nanosecond stamps gathered during the run and
//! return the numbers perftest prints. Recovery: too few samples (fewer than 3 round trips) or
//! unusable stamps give `None`; nothing here panics on any input.

/// Samples perftest drops from the top of the sorted round trips.
pub const LAT_MEASURE_TAIL: usize = 2;

/// Nanoseconds per microsecond (the unit perftest prints).
const NS_PER_USEC: f64 = 1000.0;

/// The nine latency columns perftest prints (all in usec).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// t_min.
    pub min: f64,
    /// t_max.
    pub max: f64,
    /// t_typical (median).
    pub typical: f64,
    /// t_avg.
    pub avg: f64,
    /// t_stdev.
    pub stdev: f64,
    /// 99% percentile.
    pub p99: f64,
    /// 99.9% percentile.
    pub p999: f64,
}

impl LatStats {
    /// Statistics from `n` post timestamps (ns, non-decreasing): computes the `n - 1` round
    /// trips in place (the slice is used as scratch and ends up holding the sorted round
    /// trips) and calls [`LatStats::from_round_trips`]. `None` when `n < 4`.
    pub fn from_post_times(stamps: &mut [u64], rtt_factor: u32) -> Option<LatStats> {
        let n = stamps.len();
        if n < 2 {
            return None;
        }
        for i in 0..n - 1 {
            stamps[i] = stamps[i + 1].saturating_sub(stamps[i]);
        }
        LatStats::from_round_trips(&mut stamps[..n - 1], rtt_factor)
    }

    /// Statistics from round trips in ns (sorted in place). `rtt_factor` is 2 for SEND /
    /// WRITE (reported latency = RTT / 2) and 1 for READ. `None` with fewer than 3 samples
    /// (perftest needs at least one sample left after dropping the two largest) or a zero
    /// factor.
    pub fn from_round_trips(d: &mut [u64], rtt_factor: u32) -> Option<LatStats> {
        if d.len() < LAT_MEASURE_TAIL + 1 || rtt_factor == 0 {
            return None;
        }
        d.sort_unstable();
        let m = d.len() - LAT_MEASURE_TAIL;
        let q = NS_PER_USEC * f64::from(rtt_factor);
        let median = if (m - 1) % 2 != 0 {
            // Integer mean of the two middle samples, as perftest's get_median (cycles_t).
            ((u128::from(d[m / 2]) + u128::from(d[m / 2 - 1])) / 2) as u64
        } else {
            d[m / 2]
        };
        let kept = &d[..m];
        let avg = kept.iter().map(|&x| x as f64 / q).sum::<f64>() / m as f64;
        let var = kept
            .iter()
            .map(|&x| {
                let dev = avg - x as f64 / q;
                dev * dev
            })
            .sum::<f64>()
            / m as f64;
        let i99 = ((m as f64) * 0.99).ceil() as usize;
        let i999 = ((m as f64) * 0.999).ceil() as usize;
        // Both indexes are at most m, and d has m + 2 entries.
        Some(LatStats {
            min: d[0] as f64 / q,
            max: d[m] as f64 / q,
            typical: median as f64 / q,
            avg,
            stdev: var.sqrt(),
            p99: d[i99.min(m)] as f64 / q,
            p999: d[i999.min(m)] as f64 / q,
        })
    }
}

/// Bandwidth unit of the BW columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BwUnit {
    /// MiB/sec (2^20 octets per second), perftest's default.
    #[default]
    MiB,
    /// Gb/sec (10^9 bits per second), `--report_gbits`.
    Gbit,
}

impl BwUnit {
    /// perftest's `format_factor`: octets per reported unit.
    pub const fn octets(self) -> f64 {
        match self {
            BwUnit::MiB => 1_048_576.0,
            BwUnit::Gbit => 125_000_000.0,
        }
    }
}

/// The three bandwidth columns perftest prints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwStats {
    /// BW peak (0 when the peak is not computed).
    pub peak: f64,
    /// BW average.
    pub avg: f64,
    /// MsgRate in Mpps.
    pub msg_rate: f64,
}

impl BwStats {
    /// Peak and average from per-message stamps (ns). `tposted[i]` is the post time of
    /// message `i`; `tcompleted[j]`, when non-zero, the time the completion covering messages
    /// up to `j` was polled. Both slices have one entry per message. `None` when the slices
    /// differ in length, are empty, or the last completion stamp is missing.
    pub fn from_stamps(
        size: u64,
        tposted: &[u64],
        tcompleted: &[u64],
        unit: BwUnit,
    ) -> Option<BwStats> {
        let n = tposted.len();
        if n == 0 || tcompleted.len() != n || tcompleted[n - 1] == 0 {
            return None;
        }
        // Smallest time per message over any window [i, j] ending at a stamped completion.
        let mut opt = f64::INFINITY;
        for (j, &tc) in tcompleted.iter().enumerate() {
            if tc == 0 {
                continue;
            }
            for (i, &tp) in tposted[..=j].iter().enumerate() {
                if tc < tp {
                    continue;
                }
                let t = (tc - tp) as f64 / (j - i + 1) as f64;
                if t < opt {
                    opt = t;
                }
            }
        }
        let span = tcompleted[n - 1].checked_sub(tposted[0])?;
        let mut s = BwStats::from_span(size, n as u64, span, unit);
        if opt.is_finite() {
            // A window shorter than the clock resolution counts as one nanosecond.
            s.peak = size as f64 * 1e9 / (opt.max(1.0) * unit.octets());
        }
        Some(s)
    }

    /// Average and message rate of `count` messages of `size` octets over `span_ns`; peak 0
    /// (perftest's `--noPeak` / duration mode). A zero span counts as one nanosecond.
    pub fn from_span(size: u64, count: u64, span_ns: u64, unit: BwUnit) -> BwStats {
        let span = span_ns.max(1) as f64;
        BwStats {
            peak: 0.0,
            avg: size as f64 * count as f64 * 1e9 / (span * unit.octets()),
            msg_rate: count as f64 * 1e9 / (span * 1e6),
        }
    }
}

/// Average latency (usec) and transactions per second of a duration-mode latency run:
/// `count` round trips over `span_ns`.
pub fn lat_duration(count: u64, span_ns: u64, rtt_factor: u32) -> (f64, f64) {
    if count == 0 || span_ns == 0 {
        return (0.0, 0.0);
    }
    let avg = span_ns as f64 / NS_PER_USEC / f64::from(rtt_factor.max(1)) / count as f64;
    let tps = count as f64 * 1e9 / span_ns as f64;
    (avg, tps)
}
