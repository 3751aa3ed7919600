//! The soak's RPC programs and payloads: call kinds, the seeded payload generator, the
//! checksum, and the handlers that check every argument at the receiving end and answer with
//! a reply the caller checks again.
//!
//! Normal operation: a call carries `(id_hi, id_lo, kind, reply_len, arg_ck)` and one opaque
//! argument; the handler recomputes the argument's checksum and answers `(id_hi, id_lo,
//! seen_ck, reply_len, reply_ck)` and one opaque result whose octets are generated from the
//! call id, so the caller can regenerate and compare them. Forward calls (program
//! [`PROG`]) and backward calls (program [`CB_PROG`], served by the clients) use the same
//! layout.
//!
//! Recovery: a handler that finds a wrong checksum or a malformed argument counts it in
//! [`HandlerCounters::bad_args`] (an invariant violation of the soak) and answers
//! GARBAGE_ARGS; one that finds its endpoint pool empty answers SYSTEM_ERR and counts
//! [`HandlerCounters::pool_empty`]. Nothing here panics on any input.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_poller::{BufPool, Program, Reject, ReplyBuilder, Request};

/// The forward program the servers serve.
pub const PROG: u32 = 0x2000_5a0c;
/// The backward program the clients serve on their backchannel.
pub const CB_PROG: u32 = 0x4000_5a0c;
/// Forward and backward: the checked call (layout in the module doc).
pub const P_CHECK: u32 = 1;
/// Forward: `(session_hi, session_lo)`: enable the backchannel, bind the connection to the
/// session; results `0`.
pub const P_SESSION: u32 = 2;

/// The inline threshold both sides use (the default).
pub const INLINE: usize = 4096;
/// Size of every payload buffer (arguments, DDP items, receptacles, replies).
pub const BUF_SIZE: usize = 16 * 1024;

/// What a call exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Small arguments and results, both inline.
    Inline = 0,
    /// A large argument sent as a DDP item: a Read chunk the server pulls by RDMA Read.
    ReadDdp = 1,
    /// A large result placed by DDP into the caller's receptacle: a Write chunk.
    WriteDdp = 2,
    /// Arguments above the inline threshold without DDP items: RDMA_NOMSG with a
    /// Position-Zero Read chunk.
    LongCall = 3,
    /// Results above the inline threshold: sent through the Reply chunk.
    LongReply = 4,
    /// A backward call (RFC 8167), server to client, small both ways.
    Backward = 5,
    /// The forward call that binds a connection to its session (after every reconnection).
    Bind = 6,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 7] = [
        Kind::Inline,
        Kind::ReadDdp,
        Kind::WriteDdp,
        Kind::LongCall,
        Kind::LongReply,
        Kind::Backward,
        Kind::Bind,
    ];

    /// The kinds a forward checked call may have.
    pub const FORWARD: [Kind; 5] = [
        Kind::Inline,
        Kind::ReadDdp,
        Kind::WriteDdp,
        Kind::LongCall,
        Kind::LongReply,
    ];

    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Inline => "inline",
            Kind::ReadDdp => "ddp-read",
            Kind::WriteDdp => "ddp-write",
            Kind::LongCall => "long-call",
            Kind::LongReply => "long-reply",
            Kind::Backward => "backward",
            Kind::Bind => "bind",
        }
    }

    fn from_u32(v: u32) -> Option<Kind> {
        Kind::ALL.get(v as usize).copied()
    }

    /// `(argument length, result length)` for a call of this kind, from `rng`; multiples of
    /// four (so no XDR pad is involved).
    pub fn sizes(self, rng: &mut Rng) -> (usize, usize) {
        let small = |r: &mut Rng| r.below(256) as usize * 4;
        let large = |r: &mut Rng| (INLINE + 256 + r.below(2000) as usize * 4) & !3;
        match self {
            Kind::Inline | Kind::Backward => (small(rng), small(rng)),
            Kind::ReadDdp | Kind::LongCall => (large(rng), small(rng)),
            Kind::WriteDdp | Kind::LongReply => (small(rng), large(rng)),
            Kind::Bind => (0, 0),
        }
    }
}

/// SplitMix64: the soak's seeded generator (schedules and sizes).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// Fills `out` with the payload of `(id, salt)`: the same octets every time.
pub fn fill(id: u64, salt: u64, out: &mut [u8]) {
    let mut r = Rng::new(id.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ salt);
    for c in out.chunks_mut(8) {
        let w = r.next_u64().to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
}

/// FNV-1a over `data`, 32 bits.
pub fn checksum(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Salt of argument payloads.
pub const ARG_SALT: u64 = 0xa5a5_0001;
/// Salt of result payloads.
pub const REPLY_SALT: u64 = 0x5a5a_0002;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with the payload of `(id, salt)` of `len` octets in a per-thread scratch buffer.
pub fn with_payload<R>(id: u64, salt: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < len {
            s.resize(len, 0);
        }
        fill(id, salt, &mut s[..len]);
        f(&s[..len])
    })
}

/// The checksum of the payload of `(id, salt)` of `len` octets.
pub fn payload_checksum(id: u64, salt: u64, len: usize) -> u32 {
    with_payload(id, salt, len, checksum)
}

fn be32(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i.checked_add(4)?)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The fixed words before the opaque argument or result.
pub const HEADER: usize = 20;

/// The parsed header and opaque of a checked call's arguments or results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked<'a> {
    /// The call id.
    pub id: u64,
    /// Word 2: the kind (call) or the checksum the handler saw (reply).
    pub word2: u32,
    /// The result length asked for / sent.
    pub reply_len: u32,
    /// Word 4: the argument checksum (call) or the result checksum (reply).
    pub word4: u32,
    /// The opaque's octets (empty when they travelled in a receptacle).
    pub data: &'a [u8],
    /// The opaque's length word.
    pub data_len: u32,
}

/// Parses `(id_hi, id_lo, w2, reply_len, w4, len, data...)`; `data` is empty when fewer
/// octets than `len` follow (the caller then looks for them in a receptacle).
pub fn parse(b: &[u8]) -> Option<Checked<'_>> {
    let id = (u64::from(be32(b, 0)?) << 32) | u64::from(be32(b, 4)?);
    let data_len = be32(b, HEADER)?;
    let start = HEADER + 4;
    let data = b
        .get(start..start.checked_add(data_len as usize)?)
        .unwrap_or(&[]);
    Some(Checked {
        id,
        word2: be32(b, 8)?,
        reply_len: be32(b, 12)?,
        word4: be32(b, 16)?,
        data,
        data_len,
    })
}

/// Counters of one side's handlers (server or clients' backchannel).
#[derive(Debug, Default)]
pub struct HandlerCounters {
    /// Calls handled.
    pub handled: AtomicU64,
    /// Arguments that did not decode or whose checksum was wrong (must stay 0).
    pub bad_args: AtomicU64,
    /// Calls answered SYSTEM_ERR because the endpoint pool was empty.
    pub pool_empty: AtomicU64,
    /// Calls delayed by a worker stall.
    pub stalled: AtomicU64,
    /// Session binds served.
    pub binds: AtomicU64,
}

/// Shared state of a server's handlers.
#[derive(Debug, Default)]
pub struct ServerCtx {
    /// What the handlers counted.
    pub counters: HandlerCounters,
    /// While set, handlers sleep a little before answering (the "worker ring full" fault:
    /// only meaningful for a server in worker mode).
    pub stall: AtomicBool,
}

/// Handles a checked call: verifies the argument, writes the results. `pool`: where a DDP
/// result buffer comes from (`None`: the result goes inline or in the Reply chunk).
fn serve_checked(
    req: &Request<'_>,
    out: &mut ReplyBuilder<'_>,
    c: &HandlerCounters,
    pool: Option<&BufPool>,
) -> Result<(), Reject> {
    c.handled.fetch_add(1, Ordering::Relaxed);
    let bad = || {
        c.bad_args.fetch_add(1, Ordering::Relaxed);
        Reject::GarbageArgs
    };
    let a = parse(req.args).ok_or_else(bad)?;
    if a.data.len() != a.data_len as usize || checksum(a.data) != a.word4 {
        return Err(bad());
    }
    let kind = Kind::from_u32(a.word2).ok_or_else(bad)?;
    let n = a.reply_len as usize;
    if n > BUF_SIZE - 64 {
        return Err(bad());
    }
    let ck = payload_checksum(a.id, REPLY_SALT, n);
    let se = |_| Reject::SystemErr;
    out.put_u32((a.id >> 32) as u32).map_err(se)?;
    out.put_u32(a.id as u32).map_err(se)?;
    out.put_u32(checksum(a.data)).map_err(se)?;
    out.put_u32(n as u32).map_err(se)?;
    out.put_u32(ck).map_err(se)?;
    out.put_u32(n as u32).map_err(se)?;
    match (kind, pool) {
        (Kind::WriteDdp, Some(pool)) => {
            let Some(mut b) = pool.get() else {
                c.pool_empty.fetch_add(1, Ordering::Relaxed);
                return Err(Reject::SystemErr);
            };
            fill(a.id, REPLY_SALT, &mut b[..n]);
            out.ddp(b, n).map_err(|_| Reject::SystemErr)
        }
        _ => with_payload(a.id, REPLY_SALT, n, |d| out.put(d)).map_err(se),
    }
}

/// The servers' forward program: [`P_CHECK`] and [`P_SESSION`].
pub fn server_program(ctx: Arc<ServerCtx>, pool: BufPool) -> Program {
    let c2 = Arc::clone(&ctx);
    Program::new(PROG, 1..=1)
        .procedure(
            P_CHECK,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
                if ctx.stall.load(Ordering::Relaxed) {
                    ctx.counters.stalled.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(300));
                }
                serve_checked(req, out, &ctx.counters, Some(&pool))
            },
        )
        .procedure(
            P_SESSION,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let hi = be32(req.args, 0).ok_or(Reject::GarbageArgs)?;
                let lo = be32(req.args, 4).ok_or(Reject::GarbageArgs)?;
                let bc = req.backchannel().ok_or(Reject::SystemErr)?;
                bc.enable();
                bc.bind((u64::from(hi) << 32) | u64::from(lo))
                    .map_err(|_| Reject::SystemErr)?;
                c2.counters.binds.fetch_add(1, Ordering::Relaxed);
                out.put_u32(0).map_err(|_| Reject::SystemErr)
            },
        )
}

/// The clients' backchannel program: [`P_CHECK`] (results always inline).
pub fn client_program(counters: Arc<HandlerCounters>) -> Program {
    Program::new(CB_PROG, 1..=1).procedure(
        P_CHECK,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            serve_checked(req, out, &counters, None)
        },
    )
}

/// Writes the arguments of a checked call of `kind` with id `id` into `args`: the header and
/// an opaque of `arg_len` octets (a DDP item from `ddp_buf` for [`Kind::ReadDdp`]). Returns
/// the argument checksum, or `None` when something did not fit.
pub fn build_args(
    args: &mut rpcrdma_poller::CallArgs,
    kind: Kind,
    id: u64,
    arg_len: usize,
    reply_len: usize,
    ddp_buf: Option<rpcrdma_mempool::PoolBuf>,
) -> Option<u32> {
    let ck = payload_checksum(id, ARG_SALT, arg_len);
    args.put_u32((id >> 32) as u32).ok()?;
    args.put_u32(id as u32).ok()?;
    args.put_u32(kind as u32).ok()?;
    args.put_u32(reply_len as u32).ok()?;
    args.put_u32(ck).ok()?;
    args.put_u32(arg_len as u32).ok()?;
    match ddp_buf {
        Some(mut b) => {
            if b.len() < arg_len {
                return None;
            }
            fill(id, ARG_SALT, &mut b[..arg_len]);
            args.ddp(b, arg_len).ok()?;
        }
        None => with_payload(id, ARG_SALT, arg_len, |d| args.put(d)).ok()?,
    }
    Some(ck)
}

/// Checks the results of a checked call: `Ok` when the id, the argument checksum the handler
/// saw, the result length and the result octets (from `results` or `receptacle`) are all
/// right; otherwise what was wrong.
pub fn verify_reply(
    results: &[u8],
    receptacle: Option<&[u8]>,
    id: u64,
    arg_ck: u32,
    reply_len: usize,
) -> Result<(), String> {
    let r = parse(results).ok_or("results do not decode")?;
    if r.id != id {
        return Err(format!("reply for id {} to call {id}", r.id));
    }
    if r.word2 != arg_ck {
        return Err(format!(
            "handler saw argument checksum {:#x}, sent {arg_ck:#x}",
            r.word2
        ));
    }
    if r.reply_len as usize != reply_len || r.data_len as usize != reply_len {
        return Err(format!(
            "result length {} / {}, asked {reply_len}",
            r.reply_len, r.data_len
        ));
    }
    let data = match receptacle {
        Some(d) => d,
        None => r.data,
    };
    if data.len() != reply_len {
        return Err(format!(
            "{} result octets, want {reply_len} (receptacle: {})",
            data.len(),
            receptacle.is_some()
        ));
    }
    let want = payload_checksum(id, REPLY_SALT, reply_len);
    if r.word4 != want {
        return Err(format!(
            "result checksum word {:#x}, want {want:#x}",
            r.word4
        ));
    }
    if checksum(data) != want {
        return Err(format!(
            "result octets checksum {:#x}, want {want:#x}",
            checksum(data)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_payloads_that_repeat_per_id_and_differ_across_ids() {
        let mut a = [0u8; 37];
        let mut b = [0u8; 37];
        fill(7, ARG_SALT, &mut a);
        fill(7, ARG_SALT, &mut b);
        assert_eq!(a, b);
        fill(8, ARG_SALT, &mut b);
        assert_ne!(a, b);
        assert_eq!(checksum(&a), payload_checksum(7, ARG_SALT, 37));
    }

    #[test]
    fn rejects_results_with_one_flipped_octet() {
        let id = 42;
        let mut res = Vec::new();
        for w in [
            0,
            id as u32,
            0xabc,
            8,
            payload_checksum(id, REPLY_SALT, 8),
            8,
        ] {
            res.extend_from_slice(&w.to_be_bytes());
        }
        let mut data = [0u8; 8];
        fill(id, REPLY_SALT, &mut data);
        res.extend_from_slice(&data);
        assert_eq!(verify_reply(&res, None, id, 0xabc, 8), Ok(()));
        assert!(verify_reply(&res, None, id, 0xabd, 8).is_err());
        assert!(verify_reply(&res, None, id + 1, 0xabc, 8).is_err());
        let last = res.len() - 1;
        res[last] ^= 1;
        assert!(verify_reply(&res, None, id, 0xabc, 8).is_err());
        assert!(verify_reply(&res[..10], None, id, 0xabc, 8).is_err());
    }
}
