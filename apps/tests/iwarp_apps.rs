//! `rpcrdma-perf --provider iwarp` as perftest is used: a server process started without an
//! address and a client process given `127.0.0.1`, talking iWARP (RDMAP/DDP/MPA) over a
//! loopback TCP port. The client's perftest-format output must show the size and iteration
//! count asked for and one result row whose columns are ordered as statistics must be; the
//! server must see the client's calls and exit on its own once the client is gone. The RPC
//! tests are the two-process checks of the apps (docs/apps.md): NULL-sized calls inline, 64 KiB
//! calls with eight in flight (the argument in a Read chunk, the result in a Write chunk), and
//! 8 KiB long replies through the Reply chunk; each client must report every call answered and
//! its server `n calls, n replies, errors 0, connections 1`. And
//! `rpcrdma-ping --provider iwarp --loopback`: NULL calls to an in-process server over TCP.
//! And `rpcrdma-nfs-check --provider iwarp --parts small` against a server whose connection is
//! dead (module `nfs_check_dead`): the test is the server, at the verbs level — one that
//! accepts, posts its receives and never answers (the first call, NULL, times out with nothing
//! received, and the next call must fail at once saying so instead of waiting out its own
//! `--timeout`), and one that disconnects when the first call arrives (the next call must fail
//! at once saying the connection was lost). Either way the run ends with `FAIL` lines and exit
//! status 1; the checks count the calls that waited out the timeout, never the time taken.

mod procs;

use procs::{free_port, run_to_end, Server};

const PERF: &str = env!("CARGO_BIN_EXE_rpcrdma-perf");
const PING: &str = env!("CARGO_BIN_EXE_rpcrdma-ping");

/// Starts the server `rpcrdma-perf args`, waiting until it listens.
fn server(args: &[&str]) -> Server {
    Server::start(PERF, args, "Waiting for client")
}

/// Runs the client `rpcrdma-perf args` to the end.
fn client(args: &[&str]) -> std::process::Output {
    run_to_end(PERF, args)
}

/// The latency row under perftest's `#bytes #iterations t_min ...` header: size, iterations
/// and the seven statistics (t_min, t_max, t_typical, t_avg, t_stdev, 99%, 99.9%).
fn latency_row(stdout: &str) -> (u64, u64, Vec<f64>) {
    let mut lines = stdout.lines();
    let header = lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))
        .unwrap_or_else(|| panic!("no result header in:\n{stdout}"));
    assert!(
        header.contains("#iterations") && header.contains("t_typical[usec]"),
        "not perftest's latency header: {header}"
    );
    let row = lines.next().expect("a result row");
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(f.len(), 9, "size, iterations and 7 statistics: {row:?}");
    let n = |s: &str| {
        s.parse::<u64>()
            .unwrap_or_else(|_| panic!("{s:?} in {row:?}"))
    };
    let stats: Vec<f64> = f[2..]
        .iter()
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{s:?} in {row:?}")))
        .collect();
    let (min, max, typ, avg) = (stats[0], stats[1], stats[2], stats[3]);
    assert!(
        min > 0.0 && min <= typ && typ <= max,
        "min/typical/max: {row:?}"
    );
    assert!(
        min <= avg && avg <= max,
        "average outside min..max: {row:?}"
    );
    assert!(
        stats[5] <= stats[6] && stats[6] <= max,
        "percentiles: {row:?}"
    );
    (n(f[0]), n(f[1]), stats)
}

/// A verbs test (`send_lat` ... `read_bw`) as a server process and a client process, as the VM
/// apps run has them over rxe and siw (docs/vm.md): both exit 0; the client prints the test's
/// banner naming the iWARP transport and its result row for `size` and `n` (a latency row for
/// `*_lat`, a bandwidth row for `*_bw`); `send_bw`'s server prints its row too.
fn verbs_pair(test: &str, size: u64, n: u64) -> String {
    let port = free_port().to_string();
    let (s, ns) = (size.to_string(), n.to_string());
    let common = [
        test,
        "--provider",
        "iwarp",
        "-p",
        &port,
        "-s",
        &s,
        "-n",
        &ns,
    ];
    let server = server(&[&common[..], &["--bind", "127.0.0.1"]].concat());
    let out = client(&[&common[..], &["127.0.0.1"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(" Provider        : iwarp (client)"),
        "{stdout}"
    );
    // perftest's banner names the transport: iWARP, not InfiniBand.
    assert!(stdout.contains("Transport type : IW"), "{stdout}");
    let row = if test.ends_with("_lat") {
        let (a, b, _) = latency_row(&stdout);
        (a, b)
    } else {
        bandwidth_row(&stdout)
    };
    assert_eq!(row, (size, n), "{stdout}");
    let (ok, rest) = server.finish();
    assert!(ok, "the server failed once the client was done: {rest}");
    if test == "send_bw" {
        assert_eq!(bandwidth_row(&rest), (size, n), "the server's row: {rest}");
    }
    stdout
}

#[test]
fn accepts_send_lat_between_two_iwarp_processes() {
    let out = verbs_pair("send_lat", 64, 40);
    assert!(out.contains("Send Latency Test"), "{out}");
}

#[test]
fn accepts_write_and_read_lat_between_two_iwarp_processes() {
    let out = verbs_pair("write_lat", 2, 100);
    assert!(out.contains("RDMA_Write Latency Test"), "{out}");
    let out = verbs_pair("read_lat", 2, 100);
    assert!(out.contains("RDMA_Read Latency Test"), "{out}");
}

#[test]
fn accepts_send_write_and_read_bw_between_two_iwarp_processes() {
    for (t, banner) in [
        ("send_bw", "Send BW Test"),
        ("write_bw", "RDMA_Write BW Test"),
        ("read_bw", "RDMA_Read BW Test"),
    ] {
        let out = verbs_pair(t, 65536, 32);
        assert!(out.contains(banner), "{t}: {out}");
    }
}

#[test]
fn accepts_rpc_lat_between_two_iwarp_processes() {
    // 6000 octets: above the 4096-octet inline threshold, so each call's argument travels in
    // a Read chunk (the server's RDMA Read) and the result in a Write chunk (RDMA Write).
    // Persistent STags here; the other RPC tests expose chunks through memory windows.
    let out = rpc_pair("rpc_lat", 6000, 30, 1, &[], &["--persistent-stags"]);
    assert!(out.contains(" Provider        : iwarp (client)"), "{out}");
    assert!(
        out.contains("Read chunk") && out.contains("Write chunk"),
        "{out}"
    );
}

#[test]
fn accepts_an_iwarp_rpc_client_with_memory_windows() {
    // The device has type-2 memory windows (its DeviceCaps say so): without
    // --persistent-stags the client exposes each call's chunks through windows bound for that
    // call (dynamic STags), and the Read and Write chunks still move the data.
    let port = free_port().to_string();
    let common = [
        "rpc_lat",
        "--provider",
        "iwarp",
        "-p",
        &port,
        "-s",
        "6000",
        "-n",
        "10",
    ];
    let server = server(&common);
    let out = client(&[&common[..], &["127.0.0.1"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed: {stdout}\n{stderr}");
    assert!(!stderr.contains("--persistent-stags"), "{stderr}");
    assert!(
        stdout.contains(" RPCs completed  : 10, errors 0"),
        "every call answered: {stdout}"
    );
    let (ok, rest) = server.finish();
    assert!(ok, "the server failed: {rest}");
}

#[test]
fn accepts_an_iwarp_loopback_ping_with_chunks() {
    // A call above the inline threshold (RDMA_NOMSG with a Position-Zero Read chunk) and a
    // Reply chunk offered with every call.
    let port = free_port().to_string();
    let args = [
        "--provider",
        "iwarp",
        "--loopback",
        "--persistent-stags",
        "-c",
        "4",
        "-p",
        &port,
        "--arg-size",
        "6000",
        "--reply-chunk",
    ];
    let out = run_to_end(PING, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("registered at 127.0.0.1:{port}")),
        "{stdout}"
    );
    assert!(stdout.contains(" 4 calls, 4 replies, 0 failed"), "{stdout}");
    // The device has memory windows and Send With Invalidate: both sides set the RFC 8797 R
    // bit and remote invalidation is on.
    assert!(stdout.contains("remote invalidation on"), "{stdout}");
}

/// The bandwidth row under perftest's `#bytes #iterations BW peak ...` header: size,
/// iterations, and BW peak, BW average and MsgRate: the average and the rate positive, the
/// peak 0 (not computed, as a `send_bw` client prints it) or at least the average (the peak is
/// the best of the windows the average is one of).
fn bandwidth_row(stdout: &str) -> (u64, u64) {
    let mut lines = stdout.lines();
    lines
        .by_ref()
        .find(|l| l.starts_with(" #bytes     #iterations    BW peak["))
        .unwrap_or_else(|| panic!("no bandwidth header in:\n{stdout}"));
    let row = lines.next().expect("a result row");
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(f.len(), 5, "size, iterations and 3 rates: {row:?}");
    let rates: Vec<f64> = f[2..]
        .iter()
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{s:?} in {row:?}")))
        .collect();
    let (peak, avg, rate) = (rates[0], rates[1], rates[2]);
    assert!(avg > 0.0 && rate > 0.0, "rates: {row:?}");
    assert!(
        peak == 0.0 || peak >= avg - 0.01,
        "peak below the average: {row:?}"
    );
    let n = |s: &str| {
        s.parse::<u64>()
            .unwrap_or_else(|_| panic!("{s:?} in {row:?}"))
    };
    (n(f[0]), n(f[1]))
}

/// The server's summary ` RPCs served : C calls, R replies, errors E, connections K`.
fn served(out: &str) -> (u64, u64, u64, u64) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(" RPCs served     : "))
        .unwrap_or_else(|| panic!("no server summary in:\n{out}"));
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().expect("a count"))
        .collect();
    assert_eq!(n.len(), 4, "{line:?}");
    (n[0], n[1], n[2], n[3])
}

/// An RPC test as a server process and a client process (given `client_extra` too), `n` calls
/// of `size` octets, at most `window` in flight. The client
/// must print its result row and `RPCs completed : n, errors 0`; the server `n calls, n
/// replies, errors 0, connections 1`, where the last `window` replies may count as flushed:
/// the client disconnects once it has every reply, possibly before the server saw its last
/// Sends complete.
fn rpc_pair(
    test: &str,
    size: usize,
    n: u64,
    window: u64,
    extra: &[&str],
    client_extra: &[&str],
) -> String {
    let port = free_port().to_string();
    let (s, ns) = (size.to_string(), n.to_string());
    let common = [
        &[
            test,
            "--provider",
            "iwarp",
            "-p",
            &port,
            "-s",
            &s,
            "-n",
            &ns,
        ][..],
        extra,
    ]
    .concat();
    let server = server(&common);
    let out = client(&[&common[..], client_extra, &["127.0.0.1"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rsize, iters) = if test == "rpc_lat" {
        let (a, b, _) = latency_row(&stdout);
        (a, b)
    } else {
        bandwidth_row(&stdout)
    };
    assert_eq!((rsize, iters), (size as u64, n), "{stdout}");
    assert!(
        stdout.contains(&format!(" RPCs completed  : {n}, errors 0")),
        "every call answered: {stdout}"
    );
    let (ok, rest) = server.finish();
    assert!(ok, "the server failed: {rest}");
    let (calls, replies, errors, conns) = served(&rest);
    assert_eq!((calls, errors, conns), (n, 0, 1), "server summary: {rest}");
    assert!(
        replies <= n && replies + window >= n,
        "server replies {replies} of {n}: {rest}"
    );
    stdout
}

#[test]
fn accepts_inline_rpc_lat_between_two_iwarp_processes() {
    let out = rpc_pair("rpc_lat", 2, 100, 1, &[], &[]);
    assert!(out.contains(" Provider        : iwarp (client)"), "{out}");
    assert!(out.contains("Transport type : IW"), "{out}");
}

#[test]
fn accepts_rpc_bw_with_eight_in_flight_between_two_iwarp_processes() {
    let out = rpc_pair("rpc_bw", 65536, 32, 8, &["-t", "8"], &[]);
    assert!(
        out.contains("Read chunk") && out.contains("Write chunk"),
        "{out}"
    );
}

#[test]
fn accepts_long_replies_between_two_iwarp_processes() {
    let out = rpc_pair("rpc_lat", 8192, 32, 1, &["--chunks", "reply"], &[]);
    assert!(out.contains("Reply chunk"), "{out}");
}

/// `rpcrdma-nfs-check` against a server whose connection is dead (see the file's documentation).
mod nfs_check_dead {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::procs::run_to_end;
    use rpcrdma_engine::verbs::conformance::Buf;
    use rpcrdma_engine::verbs::iwarp::IwarpProvider;
    use rpcrdma_engine::verbs::{
        Access, Completion, CompletionQueue, ConnRequest, Device, Listener, Provider, QpInit,
        QpOptions, QueuePair, RecvWr,
    };

    type P = IwarpProvider;
    const CHECK: &str = env!("CARGO_BIN_EXE_rpcrdma-nfs-check");
    /// Receives the server posts (more than the client's credits: no Send finds none).
    const RECVS: u64 = 32;
    const RECV_LEN: usize = 4096;

    /// What the server does with the connection once accepted.
    #[derive(Clone, Copy, PartialEq)]
    enum Then {
        /// Takes every call and answers none.
        Silent,
        /// Disconnects when the first call arrives.
        Drop,
    }

    /// Serves one client connection per connect request on `l` as `then` says, until `stop`.
    fn serve(
        dev: <P as Provider>::Device,
        mut l: <P as Provider>::Listener,
        then: Then,
        stop: Arc<AtomicBool>,
    ) {
        let pd = dev.alloc_pd().expect("pd");
        let mut cq = dev.create_cq(256).expect("cq");
        let rb =
            Buf::<P>::new(&pd, RECV_LEN * RECVS as usize, Access::LOCAL_WRITE).expect("buffer");
        let mut qps = Vec::new();
        let mut wc = [Completion::default(); 16];
        while !stop.load(Ordering::Relaxed) {
            if let Some(req) = l.poll().expect("listener") {
                let init = QpInit {
                    pd: &pd,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    opts: QpOptions::default(),
                };
                let qp = req
                    .accept_prepared(init, &[], &mut |qp| {
                        for i in 0..RECVS {
                            let sgl = [rb.sge(i as usize * RECV_LEN, RECV_LEN)];
                            qp.queue_recv(&RecvWr {
                                wr_id: i,
                                sgl: &sgl,
                            })?;
                        }
                        qp.flush_recv()
                    })
                    .expect("accept");
                qps.push(qp);
            }
            let n = cq.poll(&mut wc).expect("poll");
            for qp in &mut qps {
                // Established, then (after a drop) Disconnected: nothing to do but read them.
                while let Ok(Some(_)) = qp.poll_event() {}
                if then == Then::Drop && n > 0 {
                    let _ = qp.disconnect();
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Runs the small client of the check against a server that does `then`; its output.
    fn check_against(then: Then) -> (Option<i32>, String) {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let dev = P::open(lo).expect("open");
        let l = dev.listen(SocketAddr::new(lo, 0), 4).expect("listen");
        let port = l.local_addr().port();
        let stop = Arc::new(AtomicBool::new(false));
        let s = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || serve(dev, l, then, stop))
        };
        let target = format!("127.0.0.1:{port}");
        let out = run_to_end(
            CHECK,
            &[
                "--provider",
                "iwarp",
                "--parts",
                "small",
                "--timeout",
                "1000",
                "--grace-wait",
                "0",
                &target,
            ],
        );
        stop.store(true, Ordering::Relaxed);
        s.join().expect("server thread");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        (
            out.status.code(),
            format!("{stdout}\n---- stderr\n{stderr}"),
        )
    }

    /// The FAIL lines of the calls (the connection checks aside).
    fn call_fails(out: &str) -> Vec<&str> {
        out.lines()
            .filter(|l| l.starts_with("FAIL ") && !l.contains("connection-kept"))
            .collect()
    }

    #[test]
    fn rejects_calls_at_once_after_the_first_call_got_no_reply() {
        let (code, out) = check_against(Then::Silent);
        assert_eq!(code, Some(1), "{out}");
        let fails = call_fails(&out);
        assert!(
            fails[0].starts_with(
                "FAIL small/null: no reply within the call timeout; no reply to the first call on \
                 this connection"
            ),
            "{out}"
        );
        let waited = out.matches("no reply within the call timeout").count();
        assert_eq!(
            waited, 1,
            "only the first call waits out the timeout: {out}"
        );
        let lookup = fails
            .iter()
            .find(|l| l.starts_with("FAIL small/getattr-inline"));
        assert!(
            lookup.is_some_and(
                |l| l.contains("not sent: no reply to the first call on this connection")
            ),
            "the next call fails at once, saying why: {out}"
        );
        assert!(out.contains(" failed (small/null, "), "{out}");
    }

    #[test]
    fn rejects_calls_at_once_after_the_server_dropped_the_connection() {
        let (code, out) = check_against(Then::Drop);
        assert_eq!(code, Some(1), "{out}");
        assert!(
            !out.contains("no reply within the call timeout"),
            "no call waits out the timeout on a connection reported lost: {out}"
        );
        assert!(
            out.contains("FAIL small/null: the connection was lost with the call outstanding"),
            "{out}"
        );
        // "not sent" once the poller has published the loss; the same words when the call was
        // handed over just before and the poller failed it.
        assert!(
            out.contains("FAIL small/getattr-inline: call failed: not sent: connection lost")
                || out.contains("FAIL small/getattr-inline: call failed: connection lost"),
            "the next call fails at once, saying why: {out}"
        );
        assert!(
            out.contains("FAIL small/connection-kept: 1 connection losses"),
            "{out}"
        );
        assert!(
            out.contains("nfs-check: 0 passed, 4 failed (small/null, "),
            "{out}"
        );
    }
}
