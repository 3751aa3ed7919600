//! Idle connections and connection admission (issue 13 §2 item 5): raw soft-provider QPs that
//! connect to a real `Server` with valid RFC 8797 private data and then never send.

mod api_common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::proto::private_data::PrivateData as Rfc8797;
use rpcrdma_engine::verbs::soft::{SoftCq, SoftDevice, SoftPd, SoftQp};
use rpcrdma_engine::verbs::{CmEventKind, Device, QpInit, QpOptions, QueuePair};
use rpcrdma_poller::{Client, ClientError, ClientOptions, Server, ServerOptions};

/// A raw connection: a QP that connected with valid RFC 8797 private data and sends nothing.
struct Raw {
    qp: SoftQp,
    _cq: SoftCq,
    _pd: SoftPd,
}

impl Raw {
    /// Connects to `addr` from `dev` (not waiting for the outcome).
    fn connect(dev: &SoftDevice, addr: SocketAddr) -> Raw {
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(64).expect("cq");
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts: QpOptions::default(),
        };
        let pd_msg = Rfc8797::v1(false, 1024, 1024).encode();
        let qp = dev.connect(addr, init, &pd_msg).expect("connect");
        Raw {
            qp,
            _cq: cq,
            _pd: pd,
        }
    }

    /// The next CM event within 10 s (`None`: none came).
    fn event(&mut self) -> Option<rpcrdma_engine::verbs::CmEvent> {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Some(ev) = self.qp.poll_event().expect("poll_event") {
                return Some(ev);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    /// Waits for the connection to be established.
    fn established(&mut self) {
        let ev = self.event().expect("no CM event");
        assert_eq!(ev.kind, CmEventKind::Established, "raw connect: {ev:?}");
    }
}

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn start(w: &World, o: ServerOptions) -> Server {
    Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(o)
        .start(&w.server_ep, w.addr)
        .expect("server")
}

fn sum_call(c: &Client, a: u32, b: u32) -> Result<u32, ClientError> {
    let mut args = c.args().expect("args");
    args.put_u32(a).unwrap();
    args.put_u32(b).unwrap();
    let r = c.call_blocking(PROG, 2, SUM, args)?;
    let v = r.results();
    Ok(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

/// The server's whole connection capacity: `max_conns_per_reactor` × reactors.
fn capacity(w: &World) -> usize {
    w.server_ep.config().max_conns_per_reactor * w.server_ep.nodes()
}

/// Opens `n` raw connections from `dev` and waits until every one is established.
fn flood(dev: &SoftDevice, addr: SocketAddr, n: usize) -> Vec<Raw> {
    let mut v: Vec<Raw> = (0..n).map(|_| Raw::connect(dev, addr)).collect();
    for r in v.iter_mut() {
        r.established();
    }
    v
}

fn honest_opts() -> ClientOptions {
    ClientOptions {
        call_timeout_ms: 20_000,
        reconnect_min_ms: 5,
        reconnect_max_ms: 200,
        max_reconnects: 200,
        ..ClientOptions::default()
    }
}

/// Issue 13 §2 item 5: `max_conns_per_reactor` × reactors idle raw connections (established with
/// valid RFC 8797 private data, RFC 8797 §5.1, then silent) must not lock an honest client out:
/// like Linux's `svc_check_conn_limits`, a connect at capacity closes the connection idle the
/// longest instead of being refused.
#[test]
fn accepts_honest_client_after_idle_flood() {
    let w = World::new(0);
    let _s = start(&w, ServerOptions::default());
    let attacker = w.fabric.open(ip(3));
    let _raw = flood(&attacker, w.addr, capacity(&w));
    let c = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("client");
    assert_eq!(
        sum_call(&c, 40, 2),
        Ok(42),
        "honest client after an idle flood"
    );
    c.close();
    w.stop();
}
