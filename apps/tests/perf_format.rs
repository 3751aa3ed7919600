//! Output lines byte-exact against perftest's format strings (perftest 4.5,
//! `perftest_parameters.h`: RESULT_LINE, RESULT_FMT_LAT, RESULT_FMT, RESULT_FMT_G,
//! RESULT_FMT_LAT_DUR, REPORT_FMT_LAT, REPORT_FMT, REPORT_FMT_EXT, REPORT_FMT_LAT_DUR).

use rpcrdma_apps::perf::report::{
    self, bw_line, lat_dur_line, lat_line, BW_HEADER, BW_HEADER_GBITS, LAT_DUR_HEADER, LAT_HEADER,
    RESULT_LINE,
};
use rpcrdma_apps::perf::stats::{BwStats, BwUnit, LatStats};
use rpcrdma_apps::perf::Test;

#[test]
fn accepts_result_line_of_87_dashes() {
    assert_eq!(RESULT_LINE.len(), 88);
    assert!(RESULT_LINE[..87].bytes().all(|b| b == b'-'));
    assert!(RESULT_LINE.ends_with('\n'));
}

#[test]
fn accepts_latency_header_byte_exact() {
    // RESULT_FMT_LAT (with its trailing space) + RESULT_EXT.
    let want = concat!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    ",
        "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
        "\n"
    );
    assert_eq!(LAT_HEADER, want);
    assert_eq!(report::header(Test::WriteLat, false, BwUnit::MiB), want);
    assert_eq!(
        LAT_DUR_HEADER,
        " #bytes        #iterations       t_avg[usec]    tps average\n"
    );
    assert_eq!(
        report::header(Test::SendLat, true, BwUnit::MiB),
        LAT_DUR_HEADER
    );
}

#[test]
fn accepts_bandwidth_headers_byte_exact() {
    assert_eq!(
        BW_HEADER,
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
    );
    assert_eq!(
        BW_HEADER_GBITS,
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    );
    assert_eq!(report::header(Test::ReadBw, false, BwUnit::MiB), BW_HEADER);
    assert_eq!(
        report::header(Test::SendBw, false, BwUnit::Gbit),
        BW_HEADER_GBITS
    );
}

#[test]
fn accepts_latency_line_like_printf() {
    let s = LatStats {
        min: 1.5,
        max: 739.55,
        typical: 1.93,
        avg: 4.444,
        stdev: 25.826,
        p99: 39.95,
        p999: 739.55,
    };
    // " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f" "\n"
    let want = concat!(
        " 2      ",   // " %-7lu"
        " 1000",      // " %lu"
        "          ", // 10 spaces
        "1.50   ",    // %-7.2f t_min
        "        ",   // 8 spaces
        "739.55 ",    // %-7.2f t_max
        "      ",     // 6 spaces
        "1.93   ",    // %-7.2f t_typical
        "  \t       ",
        "4.44   ", // t_avg
        "     \t",
        "25.83  ", // t_stdev (25.826 rounds up)
        "\t\t",
        "39.95  ", // 99%
        " \t\t",
        "739.55 ", // 99.9%
        "\n",
    );
    assert_eq!(lat_line(2, 1000, &s), want);
}

#[test]
fn accepts_duration_latency_line_like_printf() {
    // " %-7lu       %lu            %-7.2f        %-7.2f" "\n"
    let want = " 2             259422            2.06           243099.48\n";
    assert_eq!(lat_dur_line(2, 259_422, 2.06, 243_099.48), want);
}

#[test]
fn accepts_bandwidth_line_like_printf() {
    let s = BwStats {
        peak: 42_666.714,
        avg: 17_972.666,
        msg_rate: 0.287_562_6,
    };
    // " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf" "\n"
    let want = concat!(
        " 65536  ",     // " %-7lu"
        "    ",         // 4 spaces
        "5000      ",   // %-10lu
        "       ",      // 7 spaces
        "42666.71",     // %-7.2lf peak
        "            ", // 12 spaces
        "17972.67",     // %-7.2lf average
        "\t\t     ",
        "0.287563", // %-7.6lf message rate
        "\n",
    );
    assert_eq!(bw_line(65536, 5000, &s, BwUnit::MiB), want);
}

#[test]
fn accepts_extended_accuracy_below_a_tenth_of_a_gigabit() {
    let s = BwStats {
        peak: 0.05,
        avg: 0.04,
        msg_rate: 2.5,
    };
    // REPORT_FMT_EXT: " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf" "\n"
    let want = " 2          1000           0.050000            0.040000            2.500000\n";
    assert_eq!(bw_line(2, 1000, &s, BwUnit::Gbit), want);
    // The same numbers in MiB/s use the normal format.
    assert!(bw_line(2, 1000, &s, BwUnit::MiB).contains("0.05   "));
}
