//! The deterministic cost benchmark (issue 15): N NULL RPCs or N 4 KiB DDP RPCs (a 4 KiB Read
//! chunk argument and a 4 KiB Write chunk result) through the real `Client`, `Server` and soft
//! provider, both endpoints on ONE reactor thread, so the same run executes the same
//! instructions whatever the load; and, as the baseline an RPC is compared with, N bare
//! soft-provider SEND round trips on one thread ([`send`], kind `send`). Counted by `valgrind --tool=callgrind` (scripts/cost.sh);
//! [`profile`] parses the callgrind output and splits it into client, server, provider,
//! application and runtime costs (docs/performance.md, "Instructions per RPC").
//!
//! Normal operation: one call in flight; each reply's callback checks the reply and starts the
//! next call on the reactor itself, so nothing waits on another thread. The callback of the
//! last warm-up call turns callgrind's collection on for the reactor thread
//! ([`callgrind_toggle_collect`]) and the callback of the last measured call turns it off again:
//! the counted window is exactly `n` full call cycles (submit, client reactor, provider, server,
//! handler, reply, callback). Outside valgrind the client request is a no-op instruction
//! sequence. Recovery: none is needed; a wrong reply or a failed call is counted and reported
//! as an error by [`run`] (the run then fails).

pub mod profile;
pub mod send;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BufPool, CallbackMode, Client, ClientOptions, Cores, Endpoint, EndpointConfig, PinPolicy,
    Program, ReactorConfig, ReactorSet, Reject, Reply, ReplyBuilder, Request, Server,
    ServerOptions,
};

/// The benchmark's RPC program number.
pub const PROG: u32 = 0x2000_0c05;
/// Procedure: echo a DDP-eligible opaque (Read chunk in, Write chunk out).
pub const XFER: u32 = 1;
/// Octets of each DDP item.
pub const DDP_LEN: usize = 4096;
/// The reply size every call states ([`rpcrdma_poller::CallArgs::expect_reply`]): the RPC
/// reply header (24 octets with AUTH_NONE) and the XFER reply's 4-octet length, with room to
/// spare. The reply buffers are `DDP_LEN` octets, more than an inline reply can carry (the
/// inline threshold less the transport header), so without it every call would offer a
/// Reply chunk, a memory window bound over the reply buffer, that no reply uses.
pub const REPLY_HINT: usize = 64;

/// Which RPC the run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Procedure 0, no arguments, empty reply.
    Null,
    /// A 4 KiB opaque sent as a Read chunk and echoed back into a 4 KiB Write chunk.
    Ddp,
    /// No RPC: a bare soft-provider SEND round trip, 32 octets each way ([`send`]).
    Send,
}

impl Kind {
    /// The name used on the command line and in the budget file.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Ddp => "ddp",
            Kind::Send => "send",
        }
    }

    /// What one counted operation is (the unit of "instructions per ...").
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Null | Kind::Ddp => "RPC",
            Kind::Send => "SEND round trip",
        }
    }

    /// Parses [`Kind::name`].
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "null" => Some(Kind::Null),
            "ddp" => Some(Kind::Ddp),
            "send" => Some(Kind::Send),
            _ => None,
        }
    }
}

/// What a run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Calls completed with the right reply (warm-up included).
    pub ok: u64,
    /// Calls that failed or came back with a wrong reply.
    pub bad: u64,
}

/// Issues callgrind's `TOGGLE_COLLECT` client request for the calling thread (Valgrind's
/// "special instruction preamble" for amd64 followed by `xchg rbx, rbx`, as `valgrind.h`
/// spells it). Natively the sequence rotates `rdi` by 128 bits in total and exchanges `rbx`
/// with itself: it changes nothing. On other architectures it does nothing at all.
#[inline(never)]
pub fn callgrind_toggle_collect() {
    #[cfg(target_arch = "x86_64")]
    {
        // VG_USERREQ_TOOL_BASE('C','T') + 2 (callgrind.h: CALLGRIND_TOGGLE_COLLECT).
        let args: [u64; 6] = [
            ((b'C' as u64) << 24 | (b'T' as u64) << 16) + 2,
            0,
            0,
            0,
            0,
            0,
        ];
        // SAFETY: the instructions only rotate rdi back to its own value, exchange rbx with
        // itself and set the result register rdx (declared as an output); they read `args`
        // (valid, 48 octets) only when run under Valgrind, which interprets the request.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") args.as_ptr(),
                inout("rdx") 0u64 => _,
                out("rdi") _,
                options(nostack, preserves_flags),
            );
        }
    }
}

/// Fills `buf` with `byte`.
#[inline(never)] // its own symbol: the profile counts it as application code
fn fill(buf: &mut [u8], byte: u8) {
    buf.fill(byte);
}

/// Whether every octet of `data` is `byte` (no early exit, so it vectorises).
#[inline(never)] // its own symbol: the profile counts it as application code
fn all_eq(data: &[u8], byte: u8) -> bool {
    let pat = u64::from_ne_bytes([byte; 8]);
    let mut acc = 0u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w: [u8; 8] = c.try_into().unwrap_or([!byte; 8]);
        acc |= u64::from_ne_bytes(w) ^ pat;
    }
    acc == 0 && chunks.remainder().iter().all(|&b| b == byte)
}

/// The server's XFER handler: checks the 4 KiB argument and echoes it as a DDP result.
#[inline(never)] // its own symbol: the profile counts it as application code
fn xfer(pool: &BufPool, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
    let len = req
        .args
        .get(..4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as usize)
        .ok_or(Reject::GarbageArgs)?;
    let data = req.args.get(4..4 + len).ok_or(Reject::GarbageArgs)?;
    let mut b = pool.get().ok_or(Reject::SystemErr)?;
    let dst = b.get_mut(..len).ok_or(Reject::GarbageArgs)?;
    dst.copy_from_slice(data);
    out.put_u32(len as u32).map_err(|_| Reject::SystemErr)?;
    out.ddp(b, len).map_err(|_| Reject::SystemErr)
}

/// The closed loop: its callbacks run on the reactor and start the next call.
struct Driver {
    client: Client,
    kind: Kind,
    /// Calls in total (warm-up + measured).
    total: u64,
    /// Warm-up calls (collection turns on when the last one completes).
    warmup: u64,
    /// Calls in flight: call `i`'s callback starts call `i + window`.
    window: u64,
    /// Calls completed so far (only the reactor thread, which runs the callbacks, counts).
    completions: AtomicU64,
    ok: AtomicU64,
    bad: AtomicU64,
    done: Mutex<Option<mpsc::Sender<()>>>,
}

impl Driver {
    /// Starts call `i` (its callback starts `i + window`).
    fn issue(self: &Arc<Self>, i: u64) {
        let Some(mut args) = self.client.args() else {
            return self.fail(i);
        };
        args.expect_reply(REPLY_HINT);
        let byte = (i % 251) as u8;
        let (proc_num, ok) = match self.kind {
            Kind::Ddp => (XFER, self.ddp_args(&mut args, byte)),
            Kind::Null | Kind::Send => (0, true),
        };
        if !ok {
            return self.fail(i);
        }
        let d = Arc::clone(self);
        let r = self
            .client
            .call(Proc::new(PROG, 1, proc_num), args, move |r| {
                let good = r.is_ok_and(|rep| d.check(&rep, byte));
                d.completed(i, good);
            });
        if r.is_err() {
            self.fail(i);
        }
    }

    /// Builds the DDP call: the length word, the 4 KiB item (Read chunk) and a receptacle.
    #[inline(never)] // its own symbol: the profile counts it as application code
    fn ddp_args(&self, args: &mut rpcrdma_poller::CallArgs, byte: u8) -> bool {
        let (Some(mut item), Some(rec)) = (self.client.buffer(), self.client.buffer()) else {
            return false;
        };
        let Some(head) = item.get_mut(..DDP_LEN) else {
            return false;
        };
        fill(head, byte);
        args.put_u32(DDP_LEN as u32).is_ok()
            && args.ddp(item, DDP_LEN).is_ok()
            && args.receptacle(rec).is_ok()
    }

    /// Whether `rep` is the right reply for the call that sent `byte`.
    #[inline(never)] // its own symbol: the profile counts it as application code
    fn check(&self, rep: &Reply, byte: u8) -> bool {
        match self.kind {
            Kind::Null | Kind::Send => rep.results().is_empty(),
            Kind::Ddp => {
                rep.results() == (DDP_LEN as u32).to_be_bytes()
                    && rep
                        .receptacle(0)
                        .is_some_and(|d| d.len() == DDP_LEN && all_eq(d, byte))
            }
        }
    }

    fn fail(self: &Arc<Self>, i: u64) {
        self.completed(i, false);
    }

    /// Counts call `i`, toggles collection when the completions reach the end of the warm-up
    /// and the total, starts call `i + window`.
    fn completed(self: &Arc<Self>, i: u64, good: bool) {
        // Relaxed: read by the main thread after the channel message (which orders them).
        if good {
            self.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.bad.fetch_add(1, Ordering::Relaxed);
        }
        // Relaxed: callbacks run on the one reactor thread, one after the other.
        let done = self.completions.fetch_add(1, Ordering::Relaxed) + 1;
        if done == self.warmup || done == self.total {
            callgrind_toggle_collect();
        }
        if i + self.window < self.total {
            self.issue(i + self.window);
        }
        if done == self.total {
            if let Some(tx) = self.done.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = tx.send(());
            }
        }
    }
}

/// One reactor (unpinned, busy-polling), a soft fabric and one endpoint per side on it.
struct World {
    set: ReactorSet,
    eps: [Endpoint<SoftProvider>; 2],
    addr: SocketAddr,
}

/// The world for `window` calls in flight: 8 credits (the budgeted one-in-flight runs), or
/// `window` when more.
fn world(window: u64) -> Result<World, String> {
    let credits = window.clamp(8, 128) as u32;
    let mut rc = ReactorConfig::new(Cores::Count(1));
    rc.pin = PinPolicy::Off;
    let set = ReactorSet::start(&rc).map_err(|e| format!("reactor: {e}"))?;
    let fabric = SoftFabric::new();
    let sdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 15, 0, 2)));
    let cdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 15, 0, 1)));
    let ecfg = EndpointConfig {
        max_conns_per_reactor: 2,
        max_credits: credits,
        buffers: 8 * credits as usize,
        reply_buffers: 8 * credits as usize,
        buffer_size: DDP_LEN,
        reply_buffer_size: 0,
        workers: 0,
        hugepages: false,
        ..EndpointConfig::default()
    };
    let sep = Endpoint::new(&set, sdev, ecfg.clone()).map_err(|e| format!("endpoint: {e:?}"))?;
    let cep = Endpoint::new(&set, cdev, ecfg).map_err(|e| format!("endpoint: {e:?}"))?;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 15, 0, 2)), 2049);
    Ok(World {
        set,
        eps: [sep, cep],
        addr,
    })
}

/// Runs `warmup` then `n` calls of `kind`, one in flight, on one reactor; returns the tally.
/// Under callgrind (`--collect-atstart=no`) only the `n` measured calls are counted.
/// [`Kind::Send`] runs bare SEND round trips instead ([`send::run`]).
pub fn run(kind: Kind, warmup: u64, n: u64) -> Result<Outcome, String> {
    run_window(kind, warmup, n, 1)
}

/// [`run`] with `window` calls in flight (at most 128; credits as many, at least 8): the
/// cost per RPC with the batching of doorbells and completion polls a loaded connection
/// gets. Collection turns on at the `warmup`-th completion and off at the last, so the
/// counted window holds `n` completions but about `window` fewer call starts than that (the
/// error is about `window / n` of the submit side; not for the budget).
pub fn run_window(kind: Kind, warmup: u64, n: u64, window: u64) -> Result<Outcome, String> {
    if kind == Kind::Send {
        return send::run(warmup, n);
    }
    let window = window.clamp(1, 128);
    let mut w = world(window)?;
    let credits = window.max(8) as u32;
    let pool = w.eps[0].buffers().clone();
    let program = Program::new(PROG, 1..=1).procedure(
        XFER,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| xfer(&pool, req, out),
    );
    let _server = Server::builder()
        .program(program)
        .options(ServerOptions {
            mode: CallbackMode::Inline,
            credits,
            listen_reactor: Some(0),
            ..ServerOptions::default()
        })
        .start(&w.eps[0], w.addr)
        .map_err(|e| format!("server: {e:?}"))?;
    let client = Client::connect(
        &w.eps[1],
        w.addr,
        ClientOptions {
            mode: CallbackMode::Inline,
            credits,
            reactor: Some(0),
            ..ClientOptions::default()
        },
    )
    .map_err(|e| format!("client: {e:?}"))?;
    if !client.wait_connected(Duration::from_secs(30)) {
        return Err("client did not connect".into());
    }
    let (tx, rx) = mpsc::channel();
    let d = Arc::new(Driver {
        client,
        kind,
        total: warmup.max(1) + n,
        warmup: warmup.max(1),
        window,
        completions: AtomicU64::new(0),
        ok: AtomicU64::new(0),
        bad: AtomicU64::new(0),
        done: Mutex::new(Some(tx)),
    });
    for i in 0..window.min(d.total) {
        d.issue(i);
    }
    let finished = rx.recv_timeout(Duration::from_secs(600)).is_ok();
    let out = Outcome {
        // Relaxed: ordered by the channel message (or the run is reported as stuck).
        ok: d.ok.load(Ordering::Relaxed),
        bad: d.bad.load(Ordering::Relaxed),
    };
    d.client.close();
    w.set.stop().map_err(|e| format!("stop: {e}"))?;
    for e in &w.eps {
        e.stop_workers();
    }
    if !finished {
        return Err(format!("stuck after {out:?}"));
    }
    Ok(out)
}
