//! Zero heap allocations per RPC in steady state through the whole stack, inline mode: the
//! client call (submission ring), the client reactor (XID, RPC header, engine, soft QP post),
//! the server reactor (receive, dispatch, handler, reply), the reply completion and the
//! callback. The same for backward calls (RFC 8167): a server's backchannel handle, the server
//! reactor, the client's backchannel handler and the reply back. A counting global allocator
//! counts on every thread; the test thread itself does not allocate while measuring (it spins
//! on an atomic). In Version One, and in Version Two with reply size hints where every fourth
//! call's reply is larger than its hint (an RDMA2_ERR_CANT_REPLY answer and a retry with the
//! same XID). The tests run one at a time (the count is process-wide).

mod api_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api_common::counting::{allocs, Counting};
use api_common::*;
use rpcrdma_poller::{
    BackChannel, BackchannelService, CallbackMode, Client, ClientOptions, Program, ProtocolVersion,
    Reject, ReplyBuilder, Request, Server, ServerOptions,
};

/// One measuring test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `n` calls as `run_sum_calls` does, in Version Two: SUM calls with a 64-octet reply hint, and
/// every fourth an ECHO of 5000 octets with the same hint (a long call; its reply is larger
/// than the inline room the hint offers: CANT_REPLY, retried with the whole reply buffer).
fn run_v2(client: &Client, n: u64, window: u64, done: &Arc<AtomicU64>, bad: &Arc<AtomicU64>) {
    let payload = [0x6bu8; 5000];
    run_window(n, window, done, |i| {
        let Some(mut a) = client.args() else {
            return false;
        };
        if i % 4 != 0 {
            a.put_u32(i as u32).unwrap();
            a.put_u32(1).unwrap();
            a.expect_reply(64);
            return client
                .call(PROG, 2, SUM, a, expect_sum(done, bad, i as u32 + 1))
                .is_ok();
        }
        a.put_opaque(&payload).unwrap();
        a.expect_reply(64);
        let (d, b) = (Arc::clone(done), Arc::clone(bad));
        client
            .call(PROG, 2, ECHO, a, move |r| {
                let ok = matches!(r, Ok(rep) if rep.results().get(..4) == Some(&5000u32.to_be_bytes()[..])
                    && rep.results().len() == 4 + 5000
                    && rep.results()[4..].iter().all(|&x| x == 0x6b));
                if !ok {
                    // Relaxed: read after the run, ordered by the Release/Acquire on `done`.
                    b.fetch_add(1, Ordering::Relaxed);
                }
                // Release: pairs with the Acquire loads in `run_window`.
                d.fetch_add(1, Ordering::Release);
            })
            .is_ok()
    });
}

#[test]
fn accepts_zero_allocations_per_rpc_v2_with_cant_reply_retries() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new(0);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(ServerOptions {
            credits: 16,
            mode: CallbackMode::Inline,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(
        &w.client_ep,
        w.addr,
        ClientOptions {
            credits: 16,
            mode: CallbackMode::Inline,
            version: ProtocolVersion::V2,
            ..ClientOptions::default()
        },
    )
    .expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    run_v2(&client, 3000, 16, &done, &bad);
    assert_eq!(
        client.negotiated().map(|n| n.version),
        Some(ProtocolVersion::V2)
    );
    std::thread::sleep(Duration::from_millis(20));
    let errors = client.stats().snapshot().errors;
    let served = server.totals().calls;
    let before = allocs();
    run_v2(&client, 5000, 16, &done, &bad);
    std::thread::sleep(Duration::from_millis(5));
    let after = allocs();
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(client.stats().snapshot().errors, errors);
    // Every ECHO reached the server twice (CANT_REPLY, then the retry).
    assert_eq!(server.totals().calls - served, 5000 + 1250);
    assert_eq!(
        after - before,
        0,
        "{} heap allocations in 5000 Version Two RPCs (1250 retried after CANT_REPLY)",
        after - before
    );
    w.stop();
}

#[test]
fn accepts_zero_allocations_per_rpc_inline() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c0 = allocs();
    drop(std::hint::black_box(vec![1u8; 10]));
    assert!(allocs() > c0, "counting allocator not active");
    let w = World::new(0);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(ServerOptions {
            credits: 16,
            mode: CallbackMode::Inline,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(
        &w.client_ep,
        w.addr,
        ClientOptions {
            credits: 16,
            mode: CallbackMode::Inline,
            ..ClientOptions::default()
        },
    )
    .expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    // Warm-up: pool caches, lazily initialised state, every call slot used at least once.
    run_sum_calls(&client, 3000, 16, &done, &bad);
    // Let the reactors reach their idle back-off too (its sleeping path must not allocate).
    std::thread::sleep(Duration::from_millis(20));
    let before = allocs();
    run_sum_calls(&client, 5000, 16, &done, &bad);
    std::thread::sleep(Duration::from_millis(5));
    let after = allocs();
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(
        after - before,
        0,
        "{} heap allocations in 5000 RPCs (client call -> server handler -> reply completion)",
        after - before
    );
    w.stop();
}

/// Backward program: SUM on the client's backchannel.
const CB_PROG: u32 = 0x4000_0001;
/// Forward: enable the backchannel and bind session 1.
const SESSION: u32 = 20;

/// Runs `n` backward SUM calls through `bc`, up to `window` outstanding.
fn run_back(bc: &BackChannel, n: u64, window: u64, done: &Arc<AtomicU64>, bad: &Arc<AtomicU64>) {
    run_window(n, window, done, |i| {
        let Some(mut a) = bc.args() else {
            return false;
        };
        a.put_u32(i as u32).unwrap();
        a.put_u32(2).unwrap();
        bc.call(CB_PROG, 1, SUM, a, expect_sum(done, bad, i as u32 + 2))
            .is_ok()
    });
}

#[test]
fn accepts_zero_allocations_per_backward_call_inline() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c0 = allocs();
    drop(std::hint::black_box(vec![1u8; 10]));
    assert!(allocs() > c0, "counting allocator not active");
    let w = World::new(0);
    let server = Server::builder()
        .program(Program::new(PROG, 2..=2).procedure(
            SESSION,
            |req: &Request<'_>, _: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                bc.enable();
                bc.bind(1).map_err(|_| Reject::SystemErr)
            },
        ))
        .options(ServerOptions {
            credits: 16,
            mode: CallbackMode::Inline,
            backchannel_credits: 8,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect_serving(
        &w.client_ep,
        w.addr,
        ClientOptions {
            credits: 16,
            mode: CallbackMode::Inline,
            ..ClientOptions::default()
        },
        BackchannelService::new()
            .program(Program::new(CB_PROG, 1..=1).procedure(SUM, sum))
            .credits(8),
    )
    .expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    client
        .call_blocking(PROG, 2, SESSION, client.args().unwrap())
        .expect("session");
    let bc = server.session_backchannel(1).expect("bound");
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    // Warm-up: caches, every record and engine slot used at least once, the deadline timer
    // armed.
    run_back(&bc, 3000, 8, &done, &bad);
    std::thread::sleep(Duration::from_millis(20));
    let before = allocs();
    run_back(&bc, 5000, 8, &done, &bad);
    std::thread::sleep(Duration::from_millis(5));
    let after = allocs();
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(
        after - before,
        0,
        "{} heap allocations in 5000 backward calls (server handle -> client handler -> reply)",
        after - before
    );
    let s = bc.stats().snapshot();
    assert_eq!(s.back_replies, 8000, "{s:?}");
    w.stop();
}
