//! The rig of the server-side hostile-peer suites (`hostile_server*.rs`): a [`Server`] on a
//! soft fabric serving the api_common test program plus KICK (one backward call), an honest
//! [`Client`] on another connection, a device for raw peers (`hostile_raw`), background
//! honest traffic ([`Liveness`]) and the valid calls the cases follow up with.
//!
//! Normal operation: [`rig`] starts everything and waits for the honest client; each case
//! opens raw connections with [`Rig::peer`] and closes them with [`Rig::close`], which waits
//! until the server has counted the loss. Recovery: every wait fails the test after 15–20 s.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::api_common::*;
use crate::hostile_raw::*;
use rpcrdma_engine::proto::chunks::ChunkListsRef;
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::verbs::soft::SoftDevice;
use rpcrdma_engine::verbs::QueuePair;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    Client, ClientOptions, Program, Reject, ReplyBuilder, Request, Server, ServerOptions,
};

/// Forward procedure KICK: sends one backward call (CB_PROG/CB_PROC, argument 7) on the
/// caller's backchannel; its outcome is recorded in the rig's `back` list. Replies 0.
pub const KICK: u32 = 30;
pub const CB_PROG: u32 = 0x4000_0077;
pub const CB_PROC: u32 = 1;

/// The outcomes of backward calls (Ok(result word) or the error text).
pub type BackLog = Arc<Mutex<Vec<Result<u32, String>>>>;

/// A server, an honest client on another connection, and a device for raw peers.
pub struct Rig {
    pub w: World,
    pub server: Server,
    pub honest: Client,
    pub raw: SoftDevice,
    pub back: BackLog,
}

/// Where the server's connections take their receives from: each its own (two reactors), or
/// one shared receive queue (`ServerOptions::shared_receive_queue`) on one reactor, so every
/// connection of the case — the honest client's and the raw peers' — draws from the same SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receives {
    PerConnection,
    Shared,
}

/// SRQ depth of the rig in [`Receives::Shared`] (when the case sets none): room for the
/// honest client's grant and a dozen raw peers' at the configured credits, so grants do not
/// shrink.
pub const SRQ_DEPTH: u32 = 640;

/// Runs each named case (`fn name(rx: Receives)`) as two tests, one per receive mode, in the
/// modules `per_connection_receives` and `shared_receive_queue`.
#[macro_export]
macro_rules! in_both_receive_modes {
    ($($name:ident),* $(,)?) => {
        mod per_connection_receives {
            $( #[test] fn $name() { super::$name($crate::hostile_rig::Receives::PerConnection) } )*
        }
        mod shared_receive_queue {
            $( #[test] fn $name() { super::$name($crate::hostile_rig::Receives::Shared) } )*
        }
    };
}

pub fn rig(opts: ServerOptions) -> Rig {
    rig_in(opts, Receives::PerConnection)
}

/// [`rig`] with receives as `rx` says.
pub fn rig_in(opts: ServerOptions, rx: Receives) -> Rig {
    rig_on_in(
        opts,
        &rpcrdma_engine::verbs::soft::SoftConfig::default(),
        rx,
    )
}

/// [`rig`] on soft devices configured as `dev` (e.g. without memory windows).
pub fn rig_on(opts: ServerOptions, dev: &rpcrdma_engine::verbs::soft::SoftConfig) -> Rig {
    rig_on_in(opts, dev, Receives::PerConnection)
}

/// [`rig_on`] with receives as `rx` says.
pub fn rig_on_in(
    mut opts: ServerOptions,
    dev: &rpcrdma_engine::verbs::soft::SoftConfig,
    rx: Receives,
) -> Rig {
    // The honest client's own endpoint opts in to persistent STags where the device has no
    // memory windows (the server's endpoint is separate and exposes nothing).
    let mut cep = endpoint_config(0);
    if !dev.caps.mw_type2 {
        cep.persistent_stags = rpcrdma_poller::PersistentStags::EndpointWide;
    }
    let reactors = match rx {
        Receives::PerConnection => {
            opts.shared_receive_queue = None;
            2
        }
        Receives::Shared => {
            opts.shared_receive_queue = opts.shared_receive_queue.or(Some(SRQ_DEPTH));
            1
        }
    };
    let w = World::with_client_endpoint(0, &reactor_config(reactors), dev, cep);
    let back: BackLog = Arc::new(Mutex::new(Vec::new()));
    let b2 = Arc::clone(&back);
    let prog: Program = program(w.server_ep.buffers().clone()).procedure(
        KICK,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let bc = req.backchannel().ok_or(Reject::SystemErr)?;
            bc.enable();
            let mut a = bc.args().ok_or(Reject::SystemErr)?;
            a.put_u32(7).map_err(|_| Reject::SystemErr)?;
            let log = Arc::clone(&b2);
            bc.call(Proc::new(CB_PROG, 1, CB_PROC), a, move |r| {
                let v = match r {
                    Ok(rep) => match rep.results().try_into() {
                        Ok(b) => Ok(u32::from_be_bytes(b)),
                        Err(_) => Err(format!("results {:?}", rep.results())),
                    },
                    Err(e) => Err(format!("{e:?}")),
                };
                log.lock().unwrap().push(v);
            })
            .map_err(|_| Reject::SystemErr)?;
            out.put_u32(0).map_err(|_| Reject::SystemErr)
        },
    );
    let server = Server::builder()
        .program(prog)
        .options(opts)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let honest = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(honest.wait_connected(Duration::from_secs(10)));
    let raw = w
        .fabric
        .open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)), *dev);
    Rig {
        w,
        server,
        honest,
        raw,
        back,
    }
}

impl Rig {
    /// A raw peer with RFC 8797 data advertising 4096 both ways.
    pub fn peer(&self) -> RawPeer {
        self.peer_with(&pd_v1(4096, 4096), RawOpts::default())
    }

    pub fn peer_with(&self, pd: &[u8], o: RawOpts) -> RawPeer {
        RawPeer::connect(&self.raw, self.w.addr, pd, o).expect("raw peer connects")
    }

    /// Waits until the server has counted every connection but the honest one as lost.
    pub fn wait_only_honest_left(&self, what: &str) {
        wait_until(what, || {
            let t = self.server.totals();
            self.server.accepted() == t.connection_losses + 1
        });
    }

    /// Closes `p` and waits until the server counted the loss.
    pub fn close(&self, mut p: RawPeer, what: &str) {
        let _ = p.qp.disconnect();
        drop(p);
        self.wait_only_honest_left(what);
    }

    /// `n` SUM calls on the honest client: every one completes once with the right result.
    pub fn honest_round(&self, n: usize, what: &str) {
        let t = Tally::new(n);
        for i in 0..n {
            let mut a = loop {
                match self.honest.args() {
                    Some(a) => break a,
                    None => std::thread::sleep(Duration::from_micros(100)),
                }
            };
            a.put_u32(i as u32).unwrap();
            a.put_u32(1).unwrap();
            let t2 = Arc::clone(&t);
            let mut args = a;
            loop {
                let t3 = Arc::clone(&t2);
                match self.honest.call(Proc::new(PROG, 2, SUM), args, move |r| {
                    t3.record(i, &r, i as u32 + 1)
                }) {
                    Ok(()) => break,
                    Err(r) => {
                        args = r.args;
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
        t.wait(n as u64, 20, what);
        t.all_ok_exactly_once(n, what);
    }

    pub fn stop(self) {
        self.w.stop();
    }
}

/// Honest traffic running in the background for the whole test: SUM calls, four at a time.
pub struct Liveness {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
    tally: Arc<Tally>,
}

pub const LIVE_CAP: usize = 200_000;

pub fn liveness(c: &Client) -> Liveness {
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Tally::new(LIVE_CAP);
    let (s2, t2, c2) = (Arc::clone(&stop), Arc::clone(&tally), c.clone());
    let thread = std::thread::spawn(move || {
        let mut i = 0u64;
        while !s2.load(Ordering::SeqCst) && (i as usize) < LIVE_CAP {
            if i - t2.done() >= 4 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            let Some(mut a) = c2.args() else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            a.put_u32(i as u32).unwrap();
            a.put_u32(1).unwrap();
            let t3 = Arc::clone(&t2);
            let k = i as usize;
            match c2.call(Proc::new(PROG, 2, SUM), a, move |r| {
                t3.record(k, &r, k as u32 + 1)
            }) {
                Ok(()) => i += 1,
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        i
    });
    // The case starts only once honest traffic runs: on a loaded machine the thread above may
    // not be scheduled before a short case ends (then `finish` would find no honest call).
    let t0 = std::time::Instant::now();
    while tally.done() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "liveness: the first honest call did not complete within 20 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    Liveness {
        stop,
        thread,
        tally,
    }
}

impl Liveness {
    /// Honest calls completed so far.
    pub fn done(&self) -> u64 {
        self.tally.done()
    }

    /// Stops issuing, waits for the calls issued, and checks each completed once, correctly.
    pub fn finish(self, what: &str) {
        self.stop.store(true, Ordering::SeqCst);
        let issued = self.thread.join().expect("liveness thread");
        assert!(issued > 0, "{what}: no honest call was made");
        self.tally.wait(issued, 20, what);
        let seen = self.tally.seen.lock().unwrap();
        assert!(
            seen[..issued as usize].iter().all(|&c| c == 1),
            "{what}: honest calls not completed exactly once"
        );
        assert!(seen[issued as usize..].iter().all(|&c| c == 0));
        assert_eq!(self.tally.bad.load(Ordering::SeqCst), 0, "{what}: wrong");
        assert_eq!(
            self.tally.ok.load(Ordering::SeqCst),
            issued,
            "{what}: honest errors {:?}",
            self.tally.errors.lock().unwrap()
        );
    }
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A valid SUM(a, b) call in Version One.
pub fn sum_v1(xid: u32, a: u32, b: u32) -> Vec<u8> {
    v1_msg(
        xid,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(xid, PROG, 2, SUM, &words(&[a, b])),
    )
}

/// A valid SUM(a, b) call in Version Two.
pub fn sum_v2(xid: u32, a: u32, b: u32) -> Vec<u8> {
    v2_msg(
        xid,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(xid, PROG, 2, SUM, &words(&[a, b])),
    )
}

/// Asserts that `msg` is the successful reply to `xid` in version `vers` with result `sum`.
pub fn assert_sum_reply(msg: &[u8], xid: u32, vers: u32, sum: u32, what: &str) {
    match decode(msg) {
        Answer::Reply {
            xid: x,
            vers: v,
            stat: Some(AcceptStat::Success),
            results,
            ..
        } => {
            assert_eq!((x, v), (xid, vers), "{what}: reply XID / version");
            assert_eq!(results, sum.to_be_bytes(), "{what}: result");
        }
        other => panic!("{what}: expected the reply to {xid:#x}, got {other:?}"),
    }
}

/// ECHO of `n` octets in Version One (inline).
pub fn echo_v1(xid: u32, n: usize) -> Vec<u8> {
    let mut args = words(&[n as u32]);
    args.extend((0..n).map(|i| (i * 13) as u8));
    args.resize(4 + n.div_ceil(4) * 4, 0);
    v1_msg(
        xid,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(xid, PROG, 2, ECHO, &args),
    )
}

/// A backward REPLY (RFC 8167 §5.2) as the raw requester sends it.
pub fn back_reply(xid: u32, result: u32) -> Vec<u8> {
    v1_msg(
        xid,
        1,
        ChunkListsRef::EMPTY,
        &rpc_reply(xid, &result.to_be_bytes()),
    )
}
