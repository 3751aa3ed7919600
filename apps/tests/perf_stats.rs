//! perftest statistics against values computed by hand from perftest's algorithm
//! (`print_report_lat`, `print_report_bw`).

use rpcrdma_apps::perf::stats::{lat_duration, BwStats, BwUnit, LatStats, LAT_MEASURE_TAIL};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn accepts_perftest_latency_statistics_with_two_largest_dropped() {
    // 12 post stamps (ns) whose differences are the 11 round trips
    // 2000 4000 3000 1000 5000 2000 3000 100000 2000 90000 6000.
    let rtts = [
        2000u64, 4000, 3000, 1000, 5000, 2000, 3000, 100_000, 2000, 90_000, 6000,
    ];
    let mut stamps = vec![0u64];
    for r in rtts {
        stamps.push(stamps.last().copied().unwrap_or(0) + r);
    }
    let s = LatStats::from_post_times(&mut stamps, 2).expect("enough samples");
    // Sorted: 1000 2000 2000 2000 3000 3000 4000 5000 6000 | 90000 100000 (dropped).
    // m = 9, values in usec are ns / 1000 / 2 (half the round trip).
    assert_eq!(LAT_MEASURE_TAIL, 2);
    assert!(close(s.min, 0.5), "min {}", s.min);
    // perftest prints delta[m] as t_max: the larger of the two dropped samples is the only
    // one really excluded.
    assert!(close(s.max, 45.0), "max {}", s.max);
    // m odd: the median is delta[m / 2] = delta[4] = 3000 ns.
    assert!(close(s.typical, 1.5), "typical {}", s.typical);
    // Mean of the nine kept: 28000 / 9 ns / 2000.
    assert!(close(s.avg, 28.0 / 18.0), "avg {}", s.avg);
    // Population stdev of {1,2,2,2,3,3,4,5,6}/2: sqrt(47)/9.
    assert!(close(s.stdev, 47f64.sqrt() / 9.0), "stdev {}", s.stdev);
    // ceil(9 * 0.99) = ceil(9 * 0.999) = 9: delta[9] = 90000 ns.
    assert!(close(s.p99, 45.0) && close(s.p999, 45.0), "{s:?}");
}

#[test]
fn accepts_perftest_percentiles_and_even_median() {
    // Round trips 1..=202 usec (ns values), shuffled; READ factor 1.
    let mut d: Vec<u64> = (1..=202u64).map(|i| i * 1000).collect();
    d.reverse();
    d.swap(3, 150);
    let s = LatStats::from_round_trips(&mut d, 1).expect("enough samples");
    // m = 200 kept: 1..=200 usec.
    assert!(close(s.min, 1.0));
    assert!(close(s.max, 201.0), "delta[m] = 201 usec, got {}", s.max);
    // m even: (delta[100] + delta[99]) / 2 = (101000 + 100000) / 2 ns.
    assert!(close(s.typical, 100.5), "typical {}", s.typical);
    assert!(close(s.avg, 100.5), "avg {}", s.avg);
    // Population stdev of 1..=200: sqrt((200^2 - 1) / 12).
    assert!(
        close(s.stdev, (39_999f64 / 12.0).sqrt()),
        "stdev {}",
        s.stdev
    );
    // ceil(200 * 0.99) = 198 -> 199 usec; ceil(200 * 0.999) = 200 -> 201 usec.
    assert!(close(s.p99, 199.0), "p99 {}", s.p99);
    assert!(close(s.p999, 201.0), "p99.9 {}", s.p999);
}

#[test]
fn accepts_integer_median_like_cycles_t() {
    // Sorted 3 4 | 100 100: m = 2, (4 + 3) / 2 = 3 ns in integer arithmetic.
    let mut d = [100u64, 4, 100, 3];
    let s = LatStats::from_round_trips(&mut d, 1).expect("enough samples");
    assert!(close(s.typical, 0.003), "typical {}", s.typical);
    assert!(close(s.avg, 0.0035));
}

#[test]
fn rejects_too_few_samples() {
    assert!(LatStats::from_round_trips(&mut [5, 6], 2).is_none());
    assert!(LatStats::from_round_trips(&mut [], 2).is_none());
    assert!(LatStats::from_round_trips(&mut [1, 2, 3], 0).is_none());
    assert!(LatStats::from_post_times(&mut [1, 2, 3], 2).is_none());
    assert!(LatStats::from_post_times(&mut [1, 2, 3, 4], 2).is_some());
}

#[test]
fn accepts_perftest_bandwidth_peak_and_average() {
    // Four 1 MiB messages posted at 0, 1, 2, 3 usec; CQ moderation 2: completions stamped at
    // j = 1 (3 usec) and j = 3 (9 usec); the others stay 0 and are skipped.
    let size = 1_048_576;
    let tp = [0u64, 1000, 2000, 3000];
    let tc = [0u64, 3000, 0, 9000];
    let s = BwStats::from_stamps(size, &tp, &tc, BwUnit::MiB).expect("stamps");
    // Windows: (j=1,i=0) 3000/2 = 1500 ns per message is the smallest.
    assert!(close(s.peak, 1e9 / 1500.0), "peak {}", s.peak);
    // 4 MiB over tc[3] - tp[0] = 9000 ns.
    assert!(close(s.avg, 4e9 / 9000.0), "avg {}", s.avg);
    assert!(close(s.msg_rate, 4e3 / 9000.0), "msg rate {}", s.msg_rate);
    let g = BwStats::from_stamps(size, &tp, &tc, BwUnit::Gbit).expect("stamps");
    // Gb/s: octets * 8 / 1e9 per second.
    assert!(
        close(g.peak, size as f64 * 1e9 / (1500.0 * 1.25e8)),
        "{}",
        g.peak
    );
    assert!(close(g.avg, size as f64 * 4.0 * 1e9 / (9000.0 * 1.25e8)));
    assert!(close(g.msg_rate, s.msg_rate));
}

#[test]
fn rejects_missing_last_completion_stamp() {
    assert!(BwStats::from_stamps(64, &[0, 1], &[5, 0], BwUnit::MiB).is_none());
    assert!(BwStats::from_stamps(64, &[0, 1], &[5], BwUnit::MiB).is_none());
    assert!(BwStats::from_stamps(64, &[], &[], BwUnit::MiB).is_none());
}

#[test]
fn accepts_no_peak_span_and_duration_latency() {
    let s = BwStats::from_span(65536, 1000, 1_000_000, BwUnit::MiB);
    assert_eq!(s.peak, 0.0);
    // 65536000 octets in 1 ms = 62500 MiB/s; 1000 messages / ms = 1 Mpps.
    assert!(close(s.avg, 62_500.0), "avg {}", s.avg);
    assert!(close(s.msg_rate, 1.0));
    // 1000 round trips in 4 ms, half round trip: 2 usec; 250000 per second.
    let (avg, tps) = lat_duration(1000, 4_000_000, 2);
    assert!(close(avg, 2.0) && close(tps, 250_000.0), "{avg} {tps}");
    assert_eq!(lat_duration(0, 5, 2), (0.0, 0.0));
}
