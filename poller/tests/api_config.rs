//! Configuration from TOML and JSON, statistics readable at run time, back-pressure of a full
//! worker ring (calls wait, none dropped or reordered), and call timeouts on the timer wheel.

mod api_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallbackMode, Client, ClientError, ClientOptions, Config, ConfigError, Endpoint, Program,
    Reject, ReplyBuilder, Request, Server, ServerOptions,
};

#[test]
fn accepts_toml_and_json_configuration() {
    let t = r#"
        [runtime]
        reactors = 2
        backoff = "shared_cores"
        nice = -5
        [endpoint]
        workers = 3
        buffer_size = 8192
        [client]
        credits = 16
        mode = "worker"
        call_timeout_ms = 250
        [server]
        credits = 8
        max_call = 65536
    "#;
    let c = Config::from_toml_str(t).expect("toml");
    assert_eq!(c.runtime.reactors, 2);
    assert_eq!(c.endpoint.workers, 3);
    assert_eq!(c.endpoint.buffer_size, 8192);
    assert_eq!(c.endpoint.buffers, 4096, "unset fields keep their defaults");
    assert_eq!(c.client.credits, 16);
    assert_eq!(c.client.mode, CallbackMode::Worker);
    assert_eq!(c.server.max_call, 65536);
    assert!(c.runtime.reactor_config().backoff.enabled);
    assert_eq!(c.runtime.reactor_config().nice, Some(-5));
    assert_eq!(Config::default().runtime.reactor_config().nice, None);
    let j = r#"{"client": {"credits": 4, "inline_send": 1024}, "server": {"mode": "worker"}}"#;
    let c = Config::from_json_str(j).expect("json");
    assert_eq!(c.client.credits, 4);
    assert_eq!(c.client.inline_send, 1024);
    assert_eq!(c.server.mode, CallbackMode::Worker);
    // Round trip through the TOML writer.
    let back = Config::from_toml_str(&c.to_toml_string()).expect("round trip");
    assert_eq!(back, c);
    // Files, by extension.
    let dir = std::env::temp_dir().join(format!("rpcrdma-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.toml"), t).unwrap();
    std::fs::write(dir.join("a.json"), j).unwrap();
    std::fs::write(dir.join("a.yaml"), j).unwrap();
    assert_eq!(
        Config::from_file(dir.join("a.toml"))
            .unwrap()
            .client
            .credits,
        16
    );
    assert_eq!(
        Config::from_file(dir.join("a.json"))
            .unwrap()
            .client
            .credits,
        4
    );
    assert_eq!(
        Config::from_file(dir.join("a.yaml")),
        Err(ConfigError::UnknownFormat)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn accepts_session_grace_from_toml_and_json() {
    assert_eq!(ServerOptions::default().session_grace_ms, 90_000);
    let c = Config::from_toml_str("[server]\nsession_grace_ms = 250\nbackchannel_credits = 2")
        .expect("toml");
    assert_eq!(c.server.session_grace_ms, 250);
    assert_eq!(c.server.backchannel_credits, 2);
    assert_eq!(
        c.server.backchannel_timeout_ms, 30_000,
        "unset fields keep their defaults"
    );
    let c = Config::from_json_str(r#"{"server": {"session_grace_ms": 0}}"#).expect("json");
    assert_eq!(c.server.session_grace_ms, 0, "0 keeps sessions forever");
    let c = Config::from_toml_str("[client]\ncredits = 4").expect("toml");
    assert_eq!(c.server.session_grace_ms, 90_000);
    let back = Config::from_toml_str(&c.to_toml_string()).expect("round trip");
    assert_eq!(back.server.session_grace_ms, 90_000);
    assert!(matches!(
        Config::from_toml_str("[server]\nsession_grace_ms = -1"),
        Err(ConfigError::Toml(_))
    ));
    assert!(matches!(
        Config::from_json_str(r#"{"server": {"session_grace": 5}}"#),
        Err(ConfigError::Json(_))
    ));
}

#[test]
fn rejects_malformed_configuration() {
    assert!(matches!(
        Config::from_toml_str("[client]\ncredits = \"many\""),
        Err(ConfigError::Toml(_))
    ));
    // Unknown fields are typos, not silently ignored.
    assert!(matches!(
        Config::from_toml_str("[client]\ncredit = 3"),
        Err(ConfigError::Toml(_))
    ));
    assert!(matches!(
        Config::from_json_str("{\"server\": {\"mode\": \"sideways\"}}"),
        Err(ConfigError::Json(_))
    ));
}

#[test]
fn accepts_stats_readable_at_run_time() {
    let w = World::new(0);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("c");
    for i in 0..50u32 {
        let mut a = client.args().unwrap();
        a.put_u32(i).unwrap();
        client
            .call_blocking(Proc::new(PROG, 2, SUM), a)
            .expect("sum");
    }
    let _ = client.call_blocking(Proc::new(PROG, 9, SUM), client.args().unwrap());
    let s = client.stats().snapshot();
    assert_eq!(s.calls, 51);
    assert_eq!(s.replies, 51);
    assert_eq!(s.errors, 1, "PROG_MISMATCH counted: {s:?}");
    assert!(s.bytes_out >= 50 * 44 && s.bytes_in >= 51 * 24, "{s:?}");
    assert!(s.credits_granted >= 1);
    let t = server.totals();
    assert_eq!(t.calls, 51);
    assert_eq!(t.errors, 1);
    let mut polls = 0;
    let mut busy = 0;
    let mut completions = 0;
    for i in 0..w.client_ep.nodes() {
        let n = w.client_ep.node_stats(i).unwrap();
        polls += n.polls;
        busy += n.busy_polls;
        completions += n.completions;
        assert!(n.busy_fraction() <= 1.0);
    }
    assert!(
        polls >= busy && busy > 0 && completions >= 102,
        "{polls} {busy} {completions}"
    );
    let r = w.set.stats(0).unwrap();
    assert!(r.iterations > 0);
    w.stop();
}

/// A handler that blocks until released (worker mode only), recording the order of calls.
#[test]
fn accepts_backpressure_of_full_worker_ring_without_loss_or_reorder() {
    let fabric = rpcrdma_engine::verbs::soft::SoftFabric::new();
    let sdev = fabric.open("10.0.1.2".parse().unwrap());
    let cdev = fabric.open("10.0.1.1".parse().unwrap());
    let set = rpcrdma_poller::ReactorSet::start(&reactor_config(2)).unwrap();
    let mut scfg = endpoint_config(1);
    scfg.worker_ring = 2; // tiny: fills at once
    let sep: Endpoint<P> = Endpoint::new(&set, sdev, scfg).unwrap();
    let cep: Endpoint<P> = Endpoint::new(&set, cdev, endpoint_config(1)).unwrap();
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (g2, o2) = (Arc::clone(&gate), Arc::clone(&order));
    let prog = Program::new(PROG, 2..=2).procedure(
        SUM,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let v = u32::from_be_bytes(req.args[..4].try_into().unwrap());
            if v < 1000 {
                let (m, c) = &*g2;
                let mut open = m.lock().unwrap();
                while !*open {
                    open = c.wait(open).unwrap();
                }
                o2.lock().unwrap().push(v);
            }
            out.put_u32(v).map_err(|_| Reject::SystemErr)
        },
    );
    let addr = "10.0.1.2:4000".parse().unwrap();
    let _server = Server::builder()
        .program(prog)
        .options(ServerOptions {
            credits: 16,
            mode: CallbackMode::Worker,
            ..ServerOptions::default()
        })
        .start(&sep, addr)
        .unwrap();
    let client = Client::connect(
        &cep,
        addr,
        ClientOptions {
            credits: 16,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    assert!(client.wait_connected(Duration::from_secs(5)));
    // A first reply grants the full credits (one call until then).
    let mut a = client.args().unwrap();
    a.put_u32(1000).unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, SUM), a)
        .expect("first call");
    let done = Arc::new(AtomicU64::new(0));
    let got = Arc::new(Mutex::new(Vec::new()));
    for i in 0..40u32 {
        let mut a = client.args().unwrap();
        a.put_u32(i).unwrap();
        let (d, g) = (Arc::clone(&done), Arc::clone(&got));
        client
            .call(Proc::new(PROG, 2, SUM), a, move |r| {
                g.lock().unwrap().push(r.map(|r| r.results().to_vec()));
                d.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    // The worker is blocked: the ring (2 slots) is full, the rest waits in the node.
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let s = sep.node_stats(0).unwrap();
        let s1 = sep.node_stats(1).unwrap();
        if s.worker_overflow + s1.worker_overflow > 0 {
            assert!(s.worker_ring_full + s1.worker_ring_full > 0);
            break;
        }
        assert!(Instant::now() < end, "no back-pressure seen: {s:?} {s1:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(done.load(Ordering::SeqCst), 0);
    {
        let (m, c) = &*gate;
        *m.lock().unwrap() = true;
        c.notify_all();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while done.load(Ordering::SeqCst) < 40 {
        assert!(
            Instant::now() < end,
            "stalled at {}",
            done.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Served in the order sent (one connection, one worker), none lost.
    assert_eq!(*order.lock().unwrap(), (0..40).collect::<Vec<u32>>());
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 40);
    assert!(got.iter().all(|r| r.is_ok()));
    drop(got);
    let mut set = set;
    set.stop().unwrap();
    sep.stop_workers();
    cep.stop_workers();
}

#[test]
fn rejects_unanswered_call_after_timeout() {
    let fabric = rpcrdma_engine::verbs::soft::SoftFabric::new();
    let sdev = fabric.open("10.0.2.2".parse().unwrap());
    let cdev = fabric.open("10.0.2.1".parse().unwrap());
    let set = rpcrdma_poller::ReactorSet::start(&reactor_config(2)).unwrap();
    let sep: Endpoint<P> = Endpoint::new(&set, sdev, endpoint_config(1)).unwrap();
    let cep: Endpoint<P> = Endpoint::new(&set, cdev, endpoint_config(0)).unwrap();
    let release = Arc::new(AtomicU64::new(0));
    let r2 = Arc::clone(&release);
    let prog = Program::new(PROG, 2..=2).procedure(
        SUM,
        move |_: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            while r2.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            out.put_u32(1).map_err(|_| Reject::SystemErr)
        },
    );
    let addr = "10.0.2.2:4000".parse().unwrap();
    let _server = Server::builder()
        .program(prog)
        .mode(CallbackMode::Worker)
        .start(&sep, addr)
        .unwrap();
    let client = Client::connect(
        &cep,
        addr,
        ClientOptions {
            call_timeout_ms: 30,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let t = Instant::now();
    let e = client.call_blocking(Proc::new(PROG, 2, SUM), client.args().unwrap());
    assert_eq!(e.unwrap_err(), ClientError::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(30));
    release.store(1, Ordering::SeqCst);
    let mut set = set;
    set.stop().unwrap();
    sep.stop_workers();
}

/// A call that waits for a credit is "not answered" too: when the server holds the one call
/// its grant allows, that call times out and keeps its credit (the server may still answer it),
/// and the call queued behind it must fail with `TimedOut` as well, while the server still
/// holds the first one, instead of waiting for a credit that never comes.
#[test]
fn rejects_call_waiting_for_a_credit_after_timeout() {
    let fabric = rpcrdma_engine::verbs::soft::SoftFabric::new();
    let sdev = fabric.open("10.0.2.2".parse().unwrap());
    let cdev = fabric.open("10.0.2.1".parse().unwrap());
    let set = rpcrdma_poller::ReactorSet::start(&reactor_config(2)).unwrap();
    let sep: Endpoint<P> = Endpoint::new(&set, sdev, endpoint_config(1)).unwrap();
    let cep: Endpoint<P> = Endpoint::new(&set, cdev, endpoint_config(0)).unwrap();
    let release = Arc::new(AtomicU64::new(0));
    let (r2, served) = (Arc::clone(&release), Arc::new(AtomicU64::new(0)));
    let s2 = Arc::clone(&served);
    let prog = Program::new(PROG, 2..=2).procedure(
        SUM,
        move |_: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            s2.fetch_add(1, Ordering::SeqCst);
            while r2.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            out.put_u32(1).map_err(|_| Reject::SystemErr)
        },
    );
    let addr = "10.0.2.2:4001".parse().unwrap();
    let _server = Server::builder()
        .program(prog)
        .mode(CallbackMode::Worker)
        .credits(1)
        .start(&sep, addr)
        .unwrap();
    let client = Client::connect(
        &cep,
        addr,
        ClientOptions {
            call_timeout_ms: 30,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    assert!(client.wait_connected(Duration::from_secs(10)));
    let (tx, rx) = std::sync::mpsc::channel();
    for k in 0..2u32 {
        let tx = tx.clone();
        let cb = move |r: Result<rpcrdma_poller::Reply, ClientError>| {
            let _ = tx.send((k, r.map(|_| ())));
        };
        assert!(client
            .call(Proc::new(PROG, 2, SUM), client.args().unwrap(), cb)
            .is_ok());
    }
    // Both outcomes, while the server still holds the first call (a generous bound: without
    // a deadline of its own the second call would wait for the release).
    let mut got = Vec::new();
    while got.len() < 2 {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(o) => got.push(o),
            Err(_) => break,
        }
    }
    let held = release.load(Ordering::SeqCst) == 0;
    release.store(1, Ordering::SeqCst);
    got.sort_by_key(|(k, _)| *k);
    assert_eq!(
        got,
        vec![
            (0, Err(ClientError::TimedOut)),
            (1, Err(ClientError::TimedOut))
        ],
        "both calls time out, the second one never sent"
    );
    assert!(held);
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "the second call was never sent"
    );
    let s = client.stats().snapshot();
    assert_eq!(s.calls, 1, "{s:?}");
    let mut set = set;
    set.stop().unwrap();
    sep.stop_workers();
}
