//! Shared set-up of the API tests: a soft fabric with a server and a client device, a set of
//! two reactors with idle back-off on (the machine's two cores are shared by the test threads),
//! one endpoint per device, and small RPC programs.
#![allow(dead_code)]

pub mod back;
pub mod counting;
pub mod raw;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use rpcrdma_engine::verbs::soft::{SoftConfig, SoftFabric, SoftProvider};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackoffConfig, ClientError, Cores, EndpointConfig, PinPolicy, Program, ReactorConfig,
    ReactorSet, Reject, Reply, ReplyBuilder, Request,
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
        reply_buffer_size: 0,
        workers,
        worker_ring: 64,
        hugepages: false,
        ..EndpointConfig::default()
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
        World::with_client_endpoint(workers, cfg, dev, endpoint_config(workers))
    }

    /// As [`World::with_devices`], the client endpoint configured with `client` (e.g. opted in
    /// to persistent STags on a device without memory windows).
    pub fn with_client_endpoint(
        workers: usize,
        cfg: &ReactorConfig,
        dev: &SoftConfig,
        client: EndpointConfig,
    ) -> World {
        World::with_endpoints(cfg, dev, endpoint_config(workers), client)
    }

    /// Two endpoints configured with `server` and `client`, on reactors run with `cfg`.
    pub fn with_endpoints(
        cfg: &ReactorConfig,
        dev: &SoftConfig,
        server: EndpointConfig,
        client: EndpointConfig,
    ) -> World {
        let fabric = SoftFabric::new();
        let sdev = fabric.open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), *dev);
        let cdev = fabric.open_with(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), *dev);
        let set = ReactorSet::start(cfg).expect("reactors");
        let server_ep = Endpoint::new(&set, sdev, server).expect("server ep");
        let client_ep = Endpoint::new(&set, cdev, client).expect("client ep");
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

/// Keeps up to `window` calls outstanding until `n` more have completed (`done` counts
/// completions; the callbacks increment it with Release). `issue(i)` starts call `i` and says
/// whether it was accepted (`false`: retried). Spins: no allocation and no system call on the
/// calling thread (the measuring tests rely on it; the clock is read through the vDSO, and only
/// now and then).
pub fn run_window(n: u64, window: u64, done: &AtomicU64, mut issue: impl FnMut(u64) -> bool) {
    // Acquire: pairs with the Release increments in the callbacks.
    let start = done.load(Ordering::Acquire);
    let mut issued = 0u64;
    let mut spins = 0u64;
    // Progress, not elapsed time, decides: the run fails only when no call completed for 60 s
    // (a loaded machine slows it down, a hang ends it).
    let mut last = (0u64, std::time::Instant::now());
    loop {
        // Acquire: as above.
        let finished = done.load(Ordering::Acquire) - start;
        if finished >= n {
            break;
        }
        spins += 1;
        if spins % 4096 == 0 {
            let now = std::time::Instant::now();
            if finished > last.0 {
                last = (finished, now);
            }
            assert!(
                now.duration_since(last.1) < Duration::from_secs(60),
                "stalled: {finished} of {n} done, none for 60 s"
            );
        }
        if issued < n && issued - finished < window && issue(issued) {
            issued += 1;
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The completion of a call whose results must be `want`: counts a wrong outcome in `bad`,
/// then the completion in `done`.
pub fn expect_sum(
    done: &Arc<AtomicU64>,
    bad: &Arc<AtomicU64>,
    want: u32,
) -> impl FnOnce(Result<Reply, ClientError>) + Send + 'static {
    let (d, b) = (Arc::clone(done), Arc::clone(bad));
    move |r| {
        if !matches!(r, Ok(rep) if rep.results() == want.to_be_bytes()) {
            // Relaxed: read after the run, ordered by the Release/Acquire on `done`.
            b.fetch_add(1, Ordering::Relaxed);
        }
        // Release: pairs with the Acquire loads in `run_window`.
        d.fetch_add(1, Ordering::Release);
    }
}

/// Runs `n` SUM calls (version 2 of the test program), up to `window` outstanding, as
/// [`run_window`] does. Each wrong result counts in `bad`; `done` counts completions.
pub fn run_sum_calls(
    client: &rpcrdma_poller::Client,
    n: u64,
    window: u64,
    done: &Arc<AtomicU64>,
    bad: &Arc<AtomicU64>,
) {
    run_window(n, window, done, |i| {
        let Some(mut a) = client.args() else {
            return false;
        };
        a.put_u32(i as u32).unwrap();
        a.put_u32(1).unwrap();
        client
            .call(
                Proc::new(PROG, 2, SUM),
                a,
                expect_sum(done, bad, i as u32 + 1),
            )
            .is_ok()
    });
}

/// Outcomes counted per call index: each must be recorded exactly once.
pub struct Tally {
    pub seen: Mutex<Vec<u32>>,
    pub xids: Mutex<Vec<u32>>,
    pub errors: Mutex<Vec<ClientError>>,
    pub ok: AtomicU64,
    pub err: AtomicU64,
    pub bad: AtomicU64,
}

impl Tally {
    pub fn new(n: usize) -> Arc<Tally> {
        Arc::new(Tally {
            seen: Mutex::new(vec![0; n]),
            xids: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
            ok: AtomicU64::new(0),
            err: AtomicU64::new(0),
            bad: AtomicU64::new(0),
        })
    }
    pub fn record(&self, i: usize, r: &Result<Reply, ClientError>, want: u32) {
        self.seen.lock().unwrap()[i] += 1;
        if let Ok(rep) = r {
            self.xids.lock().unwrap().push(rep.xid());
        }
        match r {
            Ok(rep) if rep.results() == want.to_be_bytes() => {
                self.ok.fetch_add(1, Ordering::SeqCst);
            }
            Ok(_) => {
                self.bad.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                self.errors.lock().unwrap().push(*e);
                self.err.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    pub fn done(&self) -> u64 {
        self.ok.load(Ordering::SeqCst)
            + self.err.load(Ordering::SeqCst)
            + self.bad.load(Ordering::SeqCst)
    }
    pub fn wait(&self, n: u64, secs: u64, what: &str) {
        let end = Instant::now() + Duration::from_secs(secs);
        while self.done() < n {
            assert!(
                Instant::now() < end,
                "{what}: only {} of {n} completed",
                self.done()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    /// Every call completed once (whatever the outcome).
    pub fn exactly_once(&self) {
        let s = self.seen.lock().unwrap();
        assert!(
            s.iter().all(|&c| c == 1),
            "calls not completed exactly once: {:?}",
            s.iter()
                .enumerate()
                .filter(|(_, &c)| c != 1)
                .take(10)
                .collect::<Vec<_>>()
        );
    }
    /// Every call completed once, with the right result.
    pub fn all_ok_exactly_once(&self, n: usize, what: &str) {
        let s = self.seen.lock().unwrap();
        assert_eq!(s.len(), n);
        assert!(
            s.iter().all(|&c| c == 1),
            "{what}: not completed exactly once: {:?}",
            s.iter()
                .enumerate()
                .filter(|(_, &c)| c != 1)
                .take(10)
                .collect::<Vec<_>>()
        );
        assert_eq!(self.bad.load(Ordering::SeqCst), 0, "{what}: wrong results");
        assert_eq!(
            self.ok.load(Ordering::SeqCst),
            n as u64,
            "{what}: errors {:?}",
            self.errors
                .lock()
                .unwrap()
                .iter()
                .take(10)
                .collect::<Vec<_>>()
        );
    }
}

/// Calls [`rejects_round`] makes.
pub const REJECTS_ROUND_CALLS: u64 = 5;

/// The RFC 5531 rejections on `client` (PROG_UNAVAIL, PROG_MISMATCH with the versions
/// served, PROC_UNAVAIL, GARBAGE_ARGS), then a SUM that succeeds.
pub fn rejects_round(client: &rpcrdma_poller::Client) {
    let e = client.call_blocking(Proc::new(PROG + 1, 2, 1), client.args().unwrap());
    assert_eq!(
        e.unwrap_err(),
        ClientError::Rpc(rpcrdma_engine::rpc::AcceptStat::ProgUnavail)
    );
    let e = client.call_blocking(Proc::new(PROG, 7, 1), client.args().unwrap());
    assert_eq!(
        e.unwrap_err(),
        ClientError::Rpc(rpcrdma_engine::rpc::AcceptStat::ProgMismatch { low: 2, high: 3 })
    );
    let e = client.call_blocking(Proc::new(PROG, 2, 99), client.args().unwrap());
    assert_eq!(
        e.unwrap_err(),
        ClientError::Rpc(rpcrdma_engine::rpc::AcceptStat::ProcUnavail)
    );
    let mut a = client.args().unwrap();
    a.put(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    // ECHO with a length beyond the arguments.
    let mut bad = client.args().unwrap();
    bad.put_u32(1000).unwrap();
    let e = client.call_blocking(Proc::new(PROG, 2, ECHO), bad);
    assert_eq!(
        e.unwrap_err(),
        ClientError::Rpc(rpcrdma_engine::rpc::AcceptStat::GarbageArgs)
    );
    let r = client
        .call_blocking(Proc::new(PROG, 2, SUM), a)
        .expect("sum");
    assert_eq!(
        r.results(),
        &(0x0102_0304u32.wrapping_add(0x0506_0708)).to_be_bytes()
    );
}

/// Calls [`ddp_round`] makes.
pub const DDP_ROUND_CALLS: u64 = 4;

/// DDP both ways, a long call and a long reply, on `client`.
pub fn ddp_round(client: &rpcrdma_poller::Client) {
    // FILL: the result goes into our receptacle through a Write chunk.
    let mut a = client.args().unwrap();
    a.put_u32(9000).unwrap();
    a.put_u32(0x5a).unwrap();
    let rec = client.buffer().unwrap();
    a.receptacle(rec).unwrap();
    let mut r = client
        .call_blocking(Proc::new(PROG, 2, FILL), a)
        .expect("fill");
    assert_eq!(&r.results()[..4], &9000u32.to_be_bytes());
    // After the length word, the trailer (the item travelled in the Write chunk).
    assert_eq!(&r.results()[4..8], &0xfeed_f00du32.to_be_bytes());
    let got = r.receptacle(0).expect("receptacle");
    assert_eq!(got.len(), 9000);
    assert!(got.iter().all(|&b| b == 0x5a));
    let (buf, n) = r.take_receptacle(0).unwrap();
    assert_eq!(n, 9000);
    drop(buf);
    // LEN: a 12000-octet argument pulled by RDMA Read (larger than the inline threshold).
    let mut payload = client.buffer().unwrap();
    for (i, b) in payload[..12000].iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    let want = checksum(&payload[..12000]);
    let mut a = client.args().unwrap();
    a.put_u32(12000).unwrap();
    a.ddp(payload, 12000).unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 3, LEN), a)
        .expect("len");
    assert_eq!(&r.results()[..4], &12000u32.to_be_bytes());
    assert_eq!(&r.results()[4..8], &want.to_be_bytes());
    // A call larger than the inline threshold without DDP items (a long call: Position
    // Zero Read chunk) whose reply is long too (Reply chunk).
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
    let mut a = client.args().unwrap();
    a.put_opaque(&big).unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("long echo");
    assert_eq!(&r.results()[..4], &10_000u32.to_be_bytes());
    assert_eq!(&r.results()[4..10_004], &big[..]);
    // FILL without a receptacle: the item comes back inline (or in the Reply chunk).
    let mut a = client.args().unwrap();
    a.put_u32(5000).unwrap();
    a.put_u32(0x11).unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 2, FILL), a)
        .expect("fill inline");
    assert_eq!(&r.results()[..4], &5000u32.to_be_bytes());
    assert!(r.results()[4..5004].iter().all(|&b| b == 0x11));
}
