//! The runtime's log events (docs/observability.md, "Logs"): a refused connect, an eviction and
//! a client's lost connection each emit an event naming the peer and the reason, at the level
//! an operator's default filter (`info`) keeps.
//!
//! The reactors log from their own threads, so the events are collected by one process-wide
//! subscriber ([`Capture`]); each test tells its events apart by a peer address of its own
//! (raw connections from 10.0.0.41 / .42) or its server's port. The set-ups are the admission
//! and eviction tests' (`api_common::raw`). Events a peer can cause are rate-limited per call
//! site (`rpcrdma_poller::log`): the tests here cause a few each, not a flood of one kind (the
//! eviction test's flood of accepted connections is not asserted on).

mod api_common;

use std::sync::OnceLock;
use std::time::Duration;

use api_common::raw::*;
use api_common::*;
use rpcrdma_engine::verbs::CmEventKind;
use rpcrdma_poller::log::{Capture, Captured};
use rpcrdma_poller::{Client, RejectReason, ServerOptions};
use tracing::Level;

/// The process-wide capture (installed by the first test that asks).
fn capture() -> &'static Capture {
    static C: OnceLock<Capture> = OnceLock::new();
    C.get_or_init(|| {
        let c = Capture::new(Level::INFO);
        tracing::subscriber::set_global_default(c.clone()).expect("no other subscriber");
        c
    })
}

/// The first event (within 10 s) with `message` for which `f` holds.
fn find(message: &str, f: impl Fn(&Captured) -> bool) -> Captured {
    let c = capture();
    c.wait_for(message, Duration::from_secs(10), f)
        .unwrap_or_else(|| panic!("no {message:?} event among {:#?}", c.events()))
}

fn field_starts(e: &Captured, name: &str, prefix: &str) -> bool {
    e.field(name).is_some_and(|v| v.starts_with(prefix))
}

/// A connect over `max_conns_per_peer` is refused, and the refusal is logged at `info` with
/// the requester's address and the reason the reject carries.
#[test]
fn rejects_connect_over_the_per_peer_limit_with_a_logged_peer_and_reason() {
    capture();
    let w = World::new(0);
    let o = ServerOptions {
        max_conns_per_peer: 1,
        ..ServerOptions::default()
    };
    let _s = start(&w, o);
    let dev = w.fabric.open(ip(41));
    let mut first = Raw::connect(&dev, w.addr);
    first.established();
    let mut second = Raw::connect(&dev, w.addr);
    let ev = second.event().expect("reject");
    assert_eq!(ev.kind, CmEventKind::Rejected, "{ev:?}");
    let refused = find("connection refused", |e| {
        field_starts(e, "peer", "10.0.0.41:")
    });
    assert_eq!(refused.level, Level::INFO);
    assert_eq!(
        refused.field("reason"),
        Some(RejectReason::PeerLimit.to_string().as_str()),
        "{refused:?}"
    );
    assert_eq!(refused.target, "rpcrdma_poller::accept");
    drop((first, second));
    w.stop();
}

/// An idle connection evicted for a newcomer: the eviction is logged with the victim's
/// address, how long it was idle and who it made room for, and its close with the reason.
#[test]
fn accepts_eviction_with_a_logged_victim_and_reason() {
    capture();
    let w = World::with_reactors(0, &reactor_config(1));
    let o = ServerOptions {
        evict_idle_ms: 0,
        max_conns_per_peer: 0,
        ..ServerOptions::default()
    };
    let _s = start(&w, o);
    let attacker = w.fabric.open(ip(42));
    let raw = flood(&attacker, w.addr, capacity(&w));
    let c = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("client");
    let evicted = find("connection evicted", |e| {
        e.field("peer") == Some("10.0.0.42")
    });
    assert_eq!(evicted.level, Level::INFO);
    assert_eq!(evicted.field("requester"), Some("10.0.0.1"), "{evicted:?}");
    assert!(field_starts(&evicted, "reason", "idle"), "{evicted:?}");
    assert!(evicted.field("idle_ms").is_some(), "{evicted:?}");
    let closed = find("connection closed", |e| {
        field_starts(e, "peer", "10.0.0.42:") && e.field("reason") == Some("evicted")
    });
    assert_eq!(closed.level, Level::INFO);
    c.close();
    drop(raw);
    w.stop();
}

/// A client whose connection the server closes (idle timeout) logs the loss at `warn` with the
/// server's address, then its reconnection; the server logs the close with its reason.
#[test]
fn accepts_lost_connection_logged_by_client_and_server() {
    capture();
    let w = World::new(0);
    let o = ServerOptions {
        // Long enough that its closes stay well within the rate limit of their call site,
        // which the other tests' closes share.
        idle_timeout_ms: 400,
        ..ServerOptions::default()
    };
    let _s = start(&w, o);
    let server = w.addr.to_string();
    let c = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("client");
    let on_ours = |e: &Captured| e.field("server") == Some(server.as_str());
    find("connected", on_ours);
    let lost = find("connection lost", on_ours);
    assert_eq!(lost.level, Level::WARN);
    assert_eq!(lost.target, "rpcrdma_poller::client_conn");
    find("reconnecting", on_ours);
    let again = find("reconnected", on_ours);
    assert_eq!(again.level, Level::INFO);
    find("connection closed", |e| {
        field_starts(e, "peer", "10.0.0.1:") && e.field("reason") == Some("idle timeout")
    });
    c.close();
    w.stop();
}
