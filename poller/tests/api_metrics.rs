//! The metrics port (issue 16): the Prometheus text a server's `metrics_addr` and a
//! `Metrics` registry serve over HTTP, checked with the format's line grammar
//! (`rpcrdma_poller::metrics::parse`: every sample after its family's TYPE, valid names,
//! label escaping, cumulative histogram buckets ending with `le="+Inf"` equal to `_count`);
//! counters scraped during and after traffic against `Server::totals()` and the client's
//! counters; chunk kinds, memory windows and RDMA_ERROR counts; and a whole RPC with
//! histograms on still allocating nothing on the reactors. The tests run one at a time (the
//! counting allocator is process-wide).

mod api_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::counting::{allocs, Counting};
use api_common::*;
use rpcrdma_poller::metrics::parse::{parse, Family};
use rpcrdma_poller::metrics::prometheus::Kind;
use rpcrdma_poller::metrics::{Collector, Exposition};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallbackMode, Client, ClientOptions, Metrics, ProtocolVersion, Server, ServerOptions,
};

static SERIAL: Mutex<()> = Mutex::new(());

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What `curl http://addr/path` does: one GET, the status code and the body.
fn get(addr: SocketAddr, path: &str, method: &str) -> (u32, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    let (head, body) = out.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, head.to_string(), body.to_string())
}

/// Scrapes and checks the format; the families.
fn scrape(addr: SocketAddr) -> Vec<Family> {
    let (status, head, body) = get(addr, "/metrics", "GET");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    parse(&body).unwrap_or_else(|e| panic!("exposition rejected: {e}\n{body}"))
}

/// The value of family `name`'s sample whose labels include `want` (summed over matches).
fn value(f: &[Family], name: &str, want: &[(&str, &str)]) -> f64 {
    let fam = f
        .iter()
        .find(|x| name.starts_with(x.name.as_str()) && x.samples.iter().any(|s| s.name == name))
        .unwrap_or_else(|| panic!("no samples of {name}"));
    fam.samples
        .iter()
        .filter(|s| s.name == name && want.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

fn server_opts() -> ServerOptions {
    ServerOptions {
        credits: 16,
        mode: CallbackMode::Inline,
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..ServerOptions::default()
    }
}

fn client_opts() -> ClientOptions {
    ClientOptions {
        credits: 16,
        mode: CallbackMode::Inline,
        latency_histograms: true,
        ..ClientOptions::default()
    }
}

/// A server with a metrics port and a client with histograms, connected: (server, its port,
/// client).
fn start(w: &World, copts: ClientOptions) -> (Server, SocketAddr, Client) {
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(server_opts())
        .start(&w.server_ep, w.addr)
        .expect("server");
    let port = server.metrics_addr().expect("metrics port");
    let client = Client::connect(&w.client_ep, w.addr, copts).expect("client");
    assert!(client.wait_connected(Duration::from_secs(10)));
    (server, port, client)
}

/// Waits (≤ 20 s) until `check` holds for a fresh scrape of `addr`.
fn eventually(addr: SocketAddr, what: &str, check: impl Fn(&[Family]) -> bool) -> Vec<Family> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let f = scrape(addr);
        if check(&f) {
            return f;
        }
        assert!(Instant::now() < end, "{what}: not reached");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn accepts_exposition_during_traffic_matching_totals() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new(0);
    let (server, port, client) = start(&w, client_opts());
    // The client's side through a registry of its own.
    let reg = Metrics::new();
    reg.add_endpoint("client-ep", &w.client_ep);
    reg.add_client("bench", &client);
    let cport = reg
        .serve("127.0.0.1:0".parse().unwrap())
        .expect("client port");
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let n = 3000;
    let traffic = {
        let (c, d, b) = (client.clone(), Arc::clone(&done), Arc::clone(&bad));
        std::thread::spawn(move || run_sum_calls(&c, n, 8, &d, &b))
    };
    // Scrapes during the run: each one a valid exposition, counters never going back.
    let name = w.addr.to_string();
    let mut last = 0.0;
    while !traffic.is_finished() {
        let f = scrape(port);
        let calls = value(&f, "rpcrdma_server_calls_total", &[("name", &name)]);
        assert!(calls >= last, "calls went back from {last} to {calls}");
        last = calls;
        scrape(cport.local_addr());
        std::thread::sleep(Duration::from_millis(5));
    }
    traffic.join().unwrap();
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    // After the run: the port says what `totals()` and the client's counters say.
    let f = eventually(port, "server latency count = replies", |f| {
        let t = server.totals();
        value(
            f,
            "rpcrdma_server_latency_seconds_count",
            &[("name", &name)],
        ) == t.replies as f64
            && value(f, "rpcrdma_server_replies_total", &[("name", &name)]) == t.replies as f64
    });
    let t = server.totals();
    assert_eq!(t.calls, n);
    assert_eq!(
        value(&f, "rpcrdma_server_calls_total", &[("name", &name)]),
        n as f64
    );
    assert_eq!(
        value(
            &f,
            "rpcrdma_server_received_bytes_total",
            &[("name", &name)]
        ),
        t.bytes_in as f64
    );
    let conn = value(&f, "rpcrdma_conn_calls_total", &[("role", "server")]);
    assert_eq!(conn, n as f64);
    assert_eq!(
        value(&f, "rpcrdma_server_accepted_total", &[("name", &name)]),
        1.0
    );
    assert!(value(&f, "rpcrdma_node_completions_total", &[("endpoint", &name)]) > 0.0);
    // The server connection's peer label is the client's address.
    let peer = &f
        .iter()
        .find(|x| x.name == "rpcrdma_conn_calls_total")
        .unwrap()
        .samples[0];
    assert!(
        peer.label("peer").unwrap().starts_with("10.0.0.1:"),
        "{peer:?}"
    );
    let c = client.stats();
    let cf = scrape(cport.local_addr());
    let id = c.id().to_string();
    let lab = [("role", "client"), ("conn", id.as_str())];
    assert_eq!(
        value(&cf, "rpcrdma_conn_calls_total", &lab),
        c.snapshot().calls as f64
    );
    assert_eq!(value(&cf, "rpcrdma_conn_replies_total", &lab), n as f64);
    assert_eq!(value(&cf, "rpcrdma_conn_credits_granted", &lab), 16.0);
    let rtt = [("conn", id.as_str()), ("proc", "2")];
    assert_eq!(
        value(&cf, "rpcrdma_client_rtt_seconds_count", &rtt),
        n as f64
    );
    let inf = [("conn", id.as_str()), ("proc", "2"), ("le", "+Inf")];
    assert_eq!(
        value(&cf, "rpcrdma_client_rtt_seconds_bucket", &inf),
        n as f64
    );
    assert!(value(&cf, "rpcrdma_client_rtt_quantile_seconds", &rtt) > 0.0);
    // Other paths and methods.
    assert_eq!(get(port, "/nothing", "GET").0, 404);
    assert_eq!(get(port, "/metrics", "POST").0, 405);
    assert_eq!(get(port, "/", "GET").0, 200);
    drop(cport);
    w.stop();
}

/// Chunks of every kind, memory windows and an RDMA2_ERR_CANT_REPLY, as the port shows them.
#[test]
fn accepts_chunk_window_and_error_counters() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new(0);
    let opts = ClientOptions {
        version: ProtocolVersion::V2,
        ..client_opts()
    };
    let (server, port, client) = start(&w, opts);
    // FILL into a receptacle: a Write chunk.
    let mut a = client.args().unwrap();
    a.put_u32(9000).unwrap();
    a.put_u32(0x5a).unwrap();
    a.receptacle(client.buffer().unwrap()).unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, FILL), a)
        .expect("fill");
    // LEN with a DDP item: a Read chunk.
    let mut a = client.args().unwrap();
    a.put_u32(12000).unwrap();
    a.ddp(client.buffer().unwrap(), 12000).unwrap();
    client
        .call_blocking(Proc::new(PROG, 3, LEN), a)
        .expect("len");
    // A long call (Position-Zero Read chunk) whose long reply comes through the Reply chunk,
    // with a reply hint too small: RDMA2_ERR_CANT_REPLY, then the retry.
    let mut a = client.args().unwrap();
    a.put_opaque(&[7u8; 10_000]).unwrap();
    a.expect_reply(64);
    client
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("long echo");
    let name = w.addr.to_string();
    let l = [("name", name.as_str())];
    let f = eventually(port, "every reply sent", |f| {
        value(f, "rpcrdma_server_replies_total", &l) == server.totals().replies as f64
    });
    let t = server.totals();
    assert_eq!(
        value(&f, "rpcrdma_server_long_calls_total", &l),
        t.long_calls as f64
    );
    assert!(t.long_calls >= 1 && t.write_chunk_calls >= 1 && t.reply_chunk_calls >= 1);
    assert!(t.read_chunk_calls >= 2, "{t:?}");
    assert_eq!(
        value(&f, "rpcrdma_server_read_chunk_calls_total", &l),
        t.read_chunk_calls as f64
    );
    assert_eq!(
        value(&f, "rpcrdma_server_err_cant_reply_out_total", &l),
        1.0
    );
    assert_eq!(t.err_cant_reply_out, 1);
    let c = client.stats().snapshot();
    assert_eq!((c.read_chunk_calls, c.write_chunk_calls), (1, 1), "{c:?}");
    assert!(c.mw_binds >= 3, "{c:?}");
    assert!(c.mw_invalidates + c.remote_invalidations >= 1, "{c:?}");
    assert!(c.recv_posted > 0, "{c:?}");
    assert_eq!(c.err_chunk_in + c.err_vers_in + c.err_other_in, 0, "{c:?}");
    w.stop();
}

/// With histograms on both sides and the metrics port open, a whole RPC still allocates
/// nothing (scrapes before and after the window exercise the hand-off; the port's thread idles
/// during it).
#[test]
fn accepts_zero_allocations_per_rpc_with_metrics_on() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c0 = allocs();
    drop(std::hint::black_box(vec![1u8; 10]));
    assert!(allocs() > c0, "counting allocator not active");
    let w = World::new(0);
    let (_server, port, client) = start(&w, client_opts());
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    run_sum_calls(&client, 3000, 16, &done, &bad);
    scrape(port);
    let lat = client.latency().expect("client histograms");
    assert_eq!(lat.snapshot(Duration::from_secs(10))[0].hist.len(), 3000);
    std::thread::sleep(Duration::from_millis(20));
    let before = allocs();
    run_sum_calls(&client, 5000, 16, &done, &bad);
    std::thread::sleep(Duration::from_millis(5));
    let after = allocs();
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(
        after - before,
        0,
        "{} heap allocations in 5000 RPCs with histograms on",
        after - before
    );
    let snap = lat.snapshot(Duration::from_secs(10));
    assert_eq!(snap[0].hist.len(), 8000);
    let f = eventually(port, "server histogram", |f| {
        value(f, "rpcrdma_server_latency_seconds_count", &[]) == 8000.0
    });
    assert_eq!(
        f.iter()
            .find(|x| x.name == "rpcrdma_server_latency_seconds")
            .map(|x| x.kind),
        Some(Kind::Histogram)
    );
    w.stop();
}

/// The options read from a configuration file; the port serves as long as the server does.
#[test]
fn accepts_metrics_options_from_toml_and_port_lifetime() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = rpcrdma_poller::Config::from_toml_str(
        "[server]\nmetrics_addr = \"127.0.0.1:0\"\nlatency_histograms = true\n\
         [client]\nlatency_histograms = true\n",
    )
    .expect("toml");
    assert_eq!(c.server.metrics_addr, Some("127.0.0.1:0".parse().unwrap()));
    assert!(c.server.latency_histograms && c.client.latency_histograms);
    assert_eq!(
        ServerOptions::default().metrics_addr,
        None,
        "off by default"
    );
    let w = World::new(0);
    // A port in use is an error at start, and nothing is left listening on the RPC address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let opts = ServerOptions {
        metrics_addr: Some(taken.local_addr().unwrap()),
        ..ServerOptions::default()
    };
    let e = Server::builder()
        .options(opts)
        .start(&w.server_ep, w.addr)
        .expect_err("port in use");
    assert!(matches!(e, rpcrdma_poller::ServerError::Metrics(_)), "{e}");
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(c.server)
        .start(&w.server_ep, w.addr)
        .expect("server on the same address");
    let port = server.metrics_addr().expect("metrics port");
    // Without any handle the server serves on, and so does its port.
    drop(server);
    assert_eq!(
        get(port, "/metrics", "GET").0,
        200,
        "port closed with the handle"
    );
    w.stop();
    let end = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(port).is_ok() {
        assert!(
            Instant::now() < end,
            "port still open after the server is gone"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A TCP connection to `dst` from the loopback address `src` (127.0.0.0/8: every address is
/// local), so one test can act as several peers.
fn connect_from(src: [u8; 4], dst: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(d) = dst else {
        panic!("IPv4 only")
    };
    let sin = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns until it is wrapped.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let from = sin(src, 0);
        let to = sin(d.ip().octets(), d.port());
        let rc = libc::bind(fd, &from as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "bind {src:?}");
        let rc = libc::connect(fd, &to as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "connect from {src:?}");
        TcpStream::from_raw_fd(fd)
    }
}

/// Waits (≤ `within`) for the server to close `s`; how long it took from `since`, `None` if
/// it stayed open.
fn closed_by_server(s: &mut TcpStream, since: Instant, within: Duration) -> Option<Duration> {
    let end = Instant::now() + within;
    let mut b = [0u8; 64];
    while Instant::now() < end {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        match s.read(&mut b) {
            Ok(0) => return Some(since.elapsed()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Some(since.elapsed()),
        }
    }
    None
}

/// Slowloris against the metrics port: two addresses hold six silent connections each and a
/// third trickles one octet of a request head every 200 ms on four connections. A scrape from
/// another address still succeeds at once (connections are served concurrently); connections
/// over an address's bound (`MAX_SCRAPES_PER_PEER`) are closed at once; every slow one is
/// closed at its whole-request deadline (`HEAD_DEADLINE`), however it trickles.
#[test]
fn rejects_slowloris_holding_the_metrics_port() {
    use rpcrdma_poller::metrics::http::{HEAD_DEADLINE, MAX_SCRAPES_PER_PEER};
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new(0);
    let (_server, port, client) = start(&w, client_opts());
    let t0 = Instant::now();
    let mut silent: Vec<TcpStream> = [[127, 0, 0, 2], [127, 0, 0, 3]]
        .iter()
        .flat_map(|src| (0..6).map(|_| connect_from(*src, port)))
        .collect();
    let trickle: Vec<_> = (0..4)
        .map(|_| {
            let mut s = connect_from([127, 0, 0, 4], port);
            std::thread::spawn(move || {
                let start = Instant::now();
                for b in b"GET /metrics HTTP/1.1\r\nHost: a-very-slow-client\r\n"
                    .iter()
                    .cycle()
                {
                    if start.elapsed() > Duration::from_secs(6) {
                        return None;
                    }
                    if s.write_all(&[*b]).is_err() {
                        return Some(start.elapsed());
                    }
                    if let Some(t) = closed_by_server(&mut s, start, Duration::from_millis(200)) {
                        return Some(t);
                    }
                }
                None
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A scrape from 127.0.0.1, with a deadline of its own, while all of them are held.
    let mut s = TcpStream::connect(port).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out)
        .expect("a scrape while slow sockets are held");
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out:.200}");
    let (_, body) = out.split_once("\r\n\r\n").expect("head and body");
    parse(body).expect("exposition");
    // Per address: the connections over the bound were closed at once, the others at the
    // deadline.
    let mut closed: Vec<Option<Duration>> = vec![None; silent.len()];
    let end = Instant::now() + Duration::from_secs(5);
    while closed.iter().any(|c| c.is_none()) && Instant::now() < end {
        for (s, c) in silent.iter_mut().zip(closed.iter_mut()) {
            if c.is_none() {
                *c = closed_by_server(s, t0, Duration::from_millis(1));
            }
        }
    }
    let closed: Vec<Duration> = closed.into_iter().map(|c| c.expect("closed")).collect();
    let quick = closed
        .iter()
        .filter(|t| **t < Duration::from_millis(1000))
        .count();
    assert_eq!(
        quick,
        2 * (6 - MAX_SCRAPES_PER_PEER as usize),
        "over the per-address bound: {closed:?}"
    );
    let late = HEAD_DEADLINE + Duration::from_millis(1500);
    assert!(closed.iter().all(|t| *t < late), "{closed:?}");
    for t in trickle {
        let t = t.join().expect("trickler").expect("a trickler stayed open");
        assert!(t < late, "trickled for {t:?}");
    }
    client.close();
    w.stop();
}

/// An application's counter, exposed through [`Collector`].
struct AppCounter(AtomicU64);

impl Collector for AppCounter {
    fn collect(&self, e: &mut Exposition) {
        e.family(
            "app_widgets_total",
            "Widgets the application made.",
            Kind::Counter,
        );
        e.sample(
            "app_widgets_total",
            &[("kind", "round")],
            self.0.load(Ordering::Relaxed),
        );
    }
}

#[test]
fn accepts_application_families_on_the_servers_port_with_prometheus_names() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new(0);
    let (server, port, client) = start(&w, client_opts());
    let app = Arc::new(AppCounter(AtomicU64::new(7)));
    server
        .metrics()
        .expect("registry")
        .add_collector(app.clone());
    let f = scrape(port);
    assert_eq!(value(&f, "app_widgets_total", &[("kind", "round")]), 7.0);
    app.0.store(9, Ordering::Relaxed);
    assert_eq!(
        value(&scrape(port), "app_widgets_total", &[("kind", "round")]),
        9.0
    );
    // Prometheus naming: octets in `_bytes`, counters of them in `_bytes_total`.
    for fam in &f {
        if let Some(i) = fam.name.find("bytes") {
            let rest = &fam.name[i..];
            assert!(rest == "bytes" || rest == "bytes_total", "{}", fam.name);
        }
    }
    drop((client, server));
    w.stop();
}
