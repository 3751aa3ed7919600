//! Raw soft-provider connections to a real `Server` and the set-ups the admission, eviction and
//! log tests share: a QP that connects with valid RFC 8797 private data and then never sends
//! ([`Raw`]), a flood of them, the server under test, the options of an honest client.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use rpcrdma_engine::proto::private_data::PrivateData as Rfc8797;
use rpcrdma_engine::verbs::soft::{SoftCq, SoftDevice, SoftPd, SoftQp};
use rpcrdma_engine::verbs::{CmEvent, CmEventKind, Device, QpInit, QpOptions, QueuePair};
use rpcrdma_poller::{ClientOptions, Server, ServerOptions};

use super::{program, World};

/// A raw connection: a QP that connected with valid RFC 8797 private data and sends nothing.
pub struct Raw {
    pub qp: SoftQp,
    _cq: SoftCq,
    _pd: SoftPd,
}

impl Raw {
    /// Connects to `addr` from `dev` (not waiting for the outcome).
    pub fn connect(dev: &SoftDevice, addr: SocketAddr) -> Raw {
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

    /// The next CM event, if one is there now.
    pub fn poll(&mut self) -> Option<CmEvent> {
        self.qp.poll_event().expect("poll_event")
    }

    /// The next CM event within 10 s (`None`: none came).
    pub fn event(&mut self) -> Option<CmEvent> {
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
    pub fn established(&mut self) {
        let ev = self.event().expect("no CM event");
        assert_eq!(ev.kind, CmEventKind::Established, "raw connect: {ev:?}");
    }
}

pub fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

pub fn start(w: &World, o: ServerOptions) -> Server {
    Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(o)
        .start(&w.server_ep, w.addr)
        .expect("server")
}

/// The server's whole connection capacity: `max_conns_per_reactor` × reactors.
pub fn capacity(w: &World) -> usize {
    w.server_ep.config().max_conns_per_reactor * w.server_ep.nodes()
}

/// Opens `n` raw connections from `dev` and waits until every one is established.
pub fn flood(dev: &SoftDevice, addr: SocketAddr, n: usize) -> Vec<Raw> {
    let mut v: Vec<Raw> = (0..n).map(|_| Raw::connect(dev, addr)).collect();
    for r in v.iter_mut() {
        r.established();
    }
    v
}

pub fn honest_opts() -> ClientOptions {
    ClientOptions {
        call_timeout_ms: 20_000,
        reconnect_min_ms: 5,
        reconnect_max_ms: 200,
        max_reconnects: 200,
        ..ClientOptions::default()
    }
}

/// Waits (≤ 10 s) until `f` holds.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}
