//! Shared set-up of the API tests: a soft fabric with a server and a client device, a set of
//! two reactors with idle back-off on (the machine's two cores are shared by the test threads),
//! one endpoint per device, and small RPC programs.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::verbs::soft::{SoftConfig, SoftFabric, SoftProvider};
use rpcrdma_poller::{
    BackoffConfig, Cores, EndpointConfig, PinPolicy, Program, ReactorConfig, ReactorSet, Reject,
    ReplyBuilder, Request,
};

pub type P = SoftProvider;
pub type Endpoint = rpcrdma_poller::Endpoint<P>;

pub const PROG: u32 = 0x2000_0001;
/// Echo: returns its opaque argument.
pub const ECHO: u32 = 1;
/// Sum: returns the sum of its u32 arguments.
pub const SUM: u32 = 2;
/// Fill: argument (len, byte); result: opaque of `len` bytes placed by DDP when offered.
pub const FILL: u32 = 3;
/// Length: argument opaque (DDP-eligible); result: its length and checksum.
pub const LEN: u32 = 4;

static PORT: AtomicU16 = AtomicU16::new(30000);

pub struct World {
    pub fabric: SoftFabric,
    pub set: ReactorSet,
    pub server_ep: Endpoint,
    pub client_ep: Endpoint,
    pub addr: SocketAddr,
}

pub fn reactor_config(n: usize) -> ReactorConfig {
    let mut c = ReactorConfig::new(Cores::Count(n));
    c.pin = PinPolicy::Off;
    c.backoff = BackoffConfig::shared_cores();
    c.drain_timeout = Duration::from_secs(5);
    c
}

pub fn endpoint_config(workers: usize) -> EndpointConfig {
    EndpointConfig {
        max_conns_per_reactor: 16,
        max_credits: 32,
        buffers: 1024,
        reply_buffers: 512,
        buffer_size: 16 * 1024,
        workers,
        worker_ring: 64,
        hugepages: false,
    }
}

impl World {
    pub fn new(workers: usize) -> World {
        World::with_reactors(workers, &reactor_config(2))
    }

    /// A world whose reactors run with `cfg` (e.g. pure busy polling).
    pub fn with_reactors(workers: usize, cfg: &ReactorConfig) -> World {
        World::with_devices(workers, cfg, &SoftConfig::default())
    }

    /// A world whose two soft devices have `dev` (e.g. capabilities a device lacks).
    pub fn with_devices(workers: usize, cfg: &ReactorConfig, dev: &SoftConfig) -> World {
        let fabric = SoftFabric::new();
        let sdev = fabric.open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), *dev);
        let cdev = fabric.open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), *dev);
        let set = ReactorSet::start(cfg).expect("reactors");
        let server_ep = Endpoint::new(&set, sdev, endpoint_config(workers)).expect("server ep");
        let client_ep = Endpoint::new(&set, cdev, endpoint_config(workers)).expect("client ep");
        let port = PORT.fetch_add(1, Ordering::Relaxed);
        World {
            fabric,
            set,
            server_ep,
            client_ep,
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), port),
        }
    }

    /// Stops the reactors (graceful), then the workers.
    pub fn stop(mut self) {
        self.set.stop().expect("stop");
        self.server_ep.stop_workers();
        self.client_ep.stop_workers();
    }
}

fn be32(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

pub fn echo(req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
    let n = be32(req.args, 0).ok_or(Reject::GarbageArgs)? as usize;
    let data = req.args.get(4..4 + n).ok_or(Reject::GarbageArgs)?;
    out.put_opaque(data).map_err(|_| Reject::SystemErr)
}

pub fn sum(req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
    if req.args.len() % 4 != 0 {
        return Err(Reject::GarbageArgs);
    }
    let mut s = 0u32;
    for i in (0..req.args.len()).step_by(4) {
        s = s.wrapping_add(be32(req.args, i).ok_or(Reject::GarbageArgs)?);
    }
    out.put_u32(s).map_err(|_| Reject::SystemErr)
}

/// The test program, version 2..=3; FILL needs a pool to take its DDP buffer from.
pub fn program(pool: rpcrdma_poller::BufPool) -> Program {
    Program::new(PROG, 2..=3)
        .procedure(ECHO, echo)
        .procedure(SUM, sum)
        .procedure(
            FILL,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let n = be32(req.args, 0).ok_or(Reject::GarbageArgs)? as usize;
                let byte = be32(req.args, 4).ok_or(Reject::GarbageArgs)? as u8;
                let mut b = pool.get().ok_or(Reject::SystemErr)?;
                if n > b.len() {
                    return Err(Reject::GarbageArgs);
                }
                b[..n].fill(byte);
                out.put_u32(n as u32).map_err(|_| Reject::SystemErr)?;
                out.ddp(b, n).map_err(|_| Reject::SystemErr)?;
                // The pad of the opaque is implied (never sent); a trailer word follows.
                out.put_u32(0xfeed_f00d).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(LEN, |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            let n = be32(req.args, 0).ok_or(Reject::GarbageArgs)? as usize;
            let data = req.args.get(4..4 + n).ok_or(Reject::GarbageArgs)?;
            let ck = data
                .iter()
                .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(b as u32));
            out.put_u32(n as u32).map_err(|_| Reject::SystemErr)?;
            out.put_u32(ck).map_err(|_| Reject::SystemErr)
        })
}

pub fn checksum(data: &[u8]) -> u32 {
    data.iter()
        .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(b as u32))
}

/// Runs `n` SUM calls (version 2 of the test program), up to `window` outstanding, spinning for
/// completions: no allocation and no system call on the calling thread (the measuring tests
/// rely on it). Each wrong result counts in `bad`; `done` counts completions.
pub fn run_sum_calls(
    client: &rpcrdma_poller::Client,
    n: u64,
    window: u64,
    done: &Arc<AtomicU64>,
    bad: &Arc<AtomicU64>,
) {
    // Acquire: pairs with the Release increments in the callbacks.
    let start = done.load(Ordering::Acquire);
    let mut issued = 0u64;
    let mut spins = 0u64;
    // The clock is read through the vDSO (no system call), and only now and then.
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // Acquire: as above.
        let finished = done.load(Ordering::Acquire) - start;
        if finished >= n {
            break;
        }
        spins += 1;
        if spins % 4096 == 0 {
            assert!(
                std::time::Instant::now() < end,
                "stalled: {finished} of {n} done"
            );
        }
        if issued < n && issued - finished < window {
            let Some(mut a) = client.args() else {
                std::hint::spin_loop();
                continue;
            };
            a.put_u32(issued as u32).unwrap();
            a.put_u32(1).unwrap();
            let want = issued as u32 + 1;
            let (d, b) = (Arc::clone(done), Arc::clone(bad));
            match client.call(PROG, 2, SUM, a, move |r| {
                if !matches!(r, Ok(rep) if rep.results() == want.to_be_bytes()) {
                    // Relaxed: read after the run, ordered by the Release/Acquire on `done`.
                    b.fetch_add(1, Ordering::Relaxed);
                }
                // Release: pairs with the test thread's Acquire loads.
                d.fetch_add(1, Ordering::Release);
            }) {
                Ok(()) => issued += 1,
                Err(r) => drop(r),
            }
        } else {
            std::hint::spin_loop();
        }
    }
}
