//! RPC programs served by a [`Server`](crate::Server): procedure handlers, the
//! zero-copy request view they get, the reply builder they write results into, and the RFC 5531
//! dispatch rules.
//!
//! Normal operation: a [`Program`] is a program number, a version range and a handler per
//! procedure (for every version, or for one). For each call the server decodes the RPC header
//! and [`Programs::dispatch`]es it: procedure 0 (NULL) of a served version is answered at once
//! with an empty SUCCESS; a registered procedure runs its [`Handler`] with a [`Request`] (the
//! arguments are a slice of the received or reassembled stream: inline payload in the receive
//! buffer, Read-chunk payloads already placed by RDMA Read; nothing is copied) and a
//! [`ReplyBuilder`] over a registered reply buffer. Results the handler marks as DDP
//! ([`ReplyBuilder::ddp`]) go into the call's Write chunks when the client offered them.
//!
//! Recovery (RFC 5531 section 9): unknown program → PROG_UNAVAIL; known program, version outside
//! every range registered for it → PROG_MISMATCH with the lowest and highest version served;
//! known version, unknown procedure → PROC_UNAVAIL; a handler returning [`Reject`] → GARBAGE_ARGS
//! or SYSTEM_ERR; an RPC version other than 2 → MSG_DENIED / RPC_MISMATCH {2, 2}; an
//! over-long credential or verifier → AUTH_ERROR (BADCRED / BADVERF). A header too short to
//! decode is answered GARBAGE_ARGS with the transport header's XID.

use std::sync::Arc;

use rpcrdma_engine::rpc::{AcceptStat, AuthStat, OpaqueAuth};
use rpcrdma_mempool::PoolBuf;

pub use crate::call::CallTransport;
pub(crate) use crate::ddp::zero_above;
pub use crate::ddp::{BuildError, DdpItems, MAX_DDP};
use crate::session::BackChannel;

/// Length of an accepted SUCCESS reply header with an AUTH_NONE verifier: xid, msg_type,
/// reply_stat, verifier flavor and length, accept_stat.
pub const SUCCESS_HEADER_LEN: usize = 24;

/// Why a handler refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// The arguments could not be decoded (GARBAGE_ARGS).
    GarbageArgs,
    /// The server failed (SYSTEM_ERR).
    SystemErr,
    /// Send no reply: the server closes the connection instead (after the handler ran). The
    /// client reconnects and retransmits with the same XID, which is what an appliance's fault
    /// injection or an administrator's "drop this client" asks for; a duplicate request cache
    /// then answers the retransmission. Not for backward calls a client serves (answered
    /// SYSTEM_ERR there).
    Disconnect,
    /// The credential is refused: MSG_DENIED / AUTH_ERROR with this `auth_stat` (RFC 5531
    /// section 9: e.g. AUTH_BADCRED for a body that does not decode or a flavor not served,
    /// AUTH_TOOWEAK for a flavor the service does not accept for this call).
    Auth(AuthStat),
}

/// Runs `handler` on the reactor: its results go after the success header
/// ([`SUCCESS_HEADER_LEN`] octets) in `reply`, within the first `limit` octets (the largest RPC
/// reply the transport can carry: see [`reply_window`]). Returns the results' length (or why
/// the handler refused) and the DDP items it handed over.
pub(crate) fn serve_inline(
    handler: &dyn Handler,
    req: &Request<'_>,
    reply: &mut [u8],
    limit: usize,
) -> (Result<usize, Reject>, DdpItems) {
    let mut ddp = DdpItems::new();
    let r = {
        let out = reply.get_mut(SUCCESS_HEADER_LEN..).unwrap_or_default();
        let mut b = ReplyBuilder::new(out, SUCCESS_HEADER_LEN as u32, &mut ddp)
            .with_window(limit.saturating_sub(SUCCESS_HEADER_LEN));
        handler.handle(req, &mut b).map(|()| b.len())
    };
    (r, ddp)
}

/// Runs `handler` once on `req` (see [`Request::detached`]) outside any connection, as a
/// reactor runs it inline: its results go into `results` (as after the
/// [`SUCCESS_HEADER_LEN`]-octet success header of a reply that can carry all of `results`);
/// returns their length, or why the handler refused. DDP items the handler hands over go
/// back to their pools when this returns.
pub fn serve_detached(
    handler: &dyn Handler,
    req: &Request<'_>,
    results: &mut [u8],
) -> Result<usize, Reject> {
    let mut ddp = DdpItems::new();
    let mut b = ReplyBuilder::new(results, SUCCESS_HEADER_LEN as u32, &mut ddp);
    handler.handle(req, &mut b).map(|()| b.len())
}

/// Worker mode: offers the call to `handler` on the reactor ([`Handler::handle_on_reactor`]);
/// `None` when it declined (the call goes to a worker, `reply` untouched), else as
/// [`serve_inline`].
pub(crate) fn serve_on_reactor(
    handler: &dyn Handler,
    req: &Request<'_>,
    reply: &mut [u8],
    limit: usize,
) -> Option<(Result<usize, Reject>, DdpItems)> {
    let mut ddp = DdpItems::new();
    let r = {
        let out = reply.get_mut(SUCCESS_HEADER_LEN..).unwrap_or_default();
        let mut b = ReplyBuilder::new(out, SUCCESS_HEADER_LEN as u32, &mut ddp)
            .with_window(limit.saturating_sub(SUCCESS_HEADER_LEN));
        handler.handle_on_reactor(req, &mut b)?.map(|()| b.len())
    };
    Some((r, ddp))
}

/// The largest RPC reply (header and inline results) a call can be answered with: the inline
/// threshold `inline_send`, or the Reply chunk the client offered when that is larger. The
/// [`ReplyBuilder::space`] offers no space beyond it, which bounds what it zeroes.
pub(crate) fn reply_window(inline_send: u32, reply_chunk: Option<u32>) -> usize {
    inline_send.max(reply_chunk.unwrap_or(0)) as usize
}

/// A procedure handler. Runs on a reactor (inline mode) or on a worker thread; must not block
/// in inline mode.
pub trait Handler: Send + Sync + 'static {
    /// Serves one call: decode `req.args`, write the results into `reply`.
    fn handle(&self, req: &Request<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), Reject>;

    /// Worker mode: serves the call on the reactor when the handler can answer it at once
    /// without blocking (`Some`, as [`Handler::handle`] would), saving the hand-off to a
    /// worker and back; `None` sends it to a worker, and then `reply` must be left unwritten.
    /// The default declines every call.
    fn handle_on_reactor(
        &self,
        _req: &Request<'_>,
        _reply: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>> {
        None
    }
}

impl<F> Handler for F
where
    F: Fn(&Request<'_>, &mut ReplyBuilder<'_>) -> Result<(), Reject> + Send + Sync + 'static,
{
    #[inline]
    fn handle(&self, req: &Request<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        self(req, reply)
    }
}

/// A call as a handler sees it (borrowed; valid for the duration of the handler).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
    /// The caller's credential.
    pub cred: OpaqueAuth<'a>,
    /// The encoded arguments (zero-copy view; DDP arguments are already in place).
    pub args: &'a [u8],
    /// Capacity of each Write chunk the client offered (DDP results fit there).
    pub write_chunks: &'a [u32],
    /// The peer and the call's chunks.
    pub transport: CallTransport,
    /// The backchannel of the connection the call arrived on (server with
    /// `backchannel_credits` > 0; `None` for backward calls a client serves).
    pub(crate) back: Option<&'a BackChannel>,
}

impl<'a> Request<'a> {
    /// A call of procedure `proc_num` with arguments `args` that arrived as `transport` says,
    /// outside any connection: XID 0, program and version 0, an AUTH_NONE credential, no
    /// Write chunk and no backchannel (set the public fields to change them). With
    /// [`serve_detached`], what a handler's unit test or fuzz target drives it with.
    pub fn detached(proc_num: u32, args: &'a [u8], transport: CallTransport) -> Request<'a> {
        Request {
            xid: 0,
            prog: 0,
            vers: 0,
            proc_num,
            cred: OpaqueAuth::NONE,
            args,
            write_chunks: &[],
            transport,
            back: None,
        }
    }

    /// The backchannel of the connection this call arrived on: a `Send + Clone` handle to
    /// enable it once the client said it serves backward calls, bind the connection to a
    /// session, and send backward calls (RFC 8167). `None` when the server has no backchannel
    /// (`ServerOptions::backchannel_credits` 0) and in backward calls a client serves.
    pub fn backchannel(&self) -> Option<&'a BackChannel> {
        self.back
    }
}

/// Writes results into a registered reply buffer (zero-copy: the buffer is what the reply Send
/// gathers). Offsets are relative to the start of the results.
///
/// Pool buffers are reused without being cleared, so the buffer may hold an earlier reply to
/// another client. The builder never sends such octets: it keeps a mark below which every octet
/// was written in this reply (`put*`) or zeroed by the builder. [`ReplyBuilder::space`] zeroes
/// the part of the free space above the mark once (later calls cost nothing), and
/// [`ReplyBuilder::advance`] zeroes what it moves over above the mark, so advancing over octets
/// the handler did not write sends zeros. The free space `space` offers is only what the reply
/// can carry — the inline threshold, or the Reply chunk the client offered when larger — so the
/// one memset costs at most that many octets (about 4 KiB for an inline reply), never the
/// whole buffer. `put*` may go beyond it (into the rest of the reply buffer): such a reply
/// cannot be sent as it is, and the transport answers with RDMA2_ERR_CANT_REPLY / ERR_CHUNK so
/// that the client retries with a larger Reply chunk. A handler that wants that behaviour for
/// oversized results writes them with `put*`; through `space` they fail with
/// [`BuildError::Full`].
pub struct ReplyBuilder<'a> {
    out: &'a mut [u8],
    len: usize,
    /// Every octet of `out` below this was written in this reply or zeroed (≥ `len`).
    clean: usize,
    /// `space` offers octets up to this offset of `out` (what the reply can carry).
    window: usize,
    /// Offset of the results in the RPC reply (the header length).
    base: u32,
    ddp: &'a mut DdpItems,
}

impl<'a> ReplyBuilder<'a> {
    pub(crate) fn new(out: &'a mut [u8], base: u32, ddp: &'a mut DdpItems) -> Self {
        let window = out.len();
        ReplyBuilder {
            out,
            len: 0,
            clean: 0,
            window,
            base,
            ddp,
        }
    }

    /// `space` offers no more than the first `window` octets of the results (what the reply
    /// can carry); `put*` is not limited.
    pub(crate) fn with_window(mut self, window: usize) -> Self {
        self.window = window.min(self.out.len());
        self
    }

    /// The free space after the results written so far (as much as the reply can carry);
    /// write into it, then [`ReplyBuilder::advance`]. The first call zeroes the octets no
    /// earlier `put*` wrote (so an earlier reply held by the pool buffer cannot be sent); later
    /// calls cost nothing.
    pub fn space(&mut self) -> &mut [u8] {
        let end = self.window.max(self.clean);
        zero_above(self.out, &mut self.clean, end);
        &mut self.out[self.len..end]
    }

    /// The results written so far (DDP items excluded): what a duplicate request cache keeps.
    pub fn results(&self) -> &[u8] {
        &self.out[..self.len]
    }

    crate::ddp::xdr_writes!(out);

    /// Places the first `len` octets of `buf` at the current offset as a DDP-eligible result
    /// item (its XDR length word must already be written; no pad follows in the stream). The
    /// item goes into the next Write chunk the client offered, or inline when none is left. On
    /// error the buffer is handed back.
    pub fn ddp(&mut self, buf: PoolBuf, len: usize) -> Result<(), (BuildError, PoolBuf)> {
        let len = len.min(buf.len());
        let at = self.base as usize + self.len;
        if at > u32::MAX as usize {
            return Err((BuildError::Full, buf));
        }
        self.ddp
            .push(at as u32, len as u32, buf)
            .map_err(|b| (BuildError::TooManyItems, b))
    }
}

impl ReplyBuilder<'_> {
    /// As [`ReplyBuilder::ddp`], for `len` octets at `off` in a buffer shared with its owner
    /// (zero copy from a store that keeps data in registered buffers). The item holds a
    /// reference until the reply's Send completes; the owner must not change those octets
    /// meanwhile (copy on write: replace a buffer whose `Arc` is shared instead of writing
    /// into it). A range past the buffer's end is cut to it.
    pub fn ddp_shared(
        &mut self,
        buf: Arc<PoolBuf>,
        off: usize,
        len: usize,
    ) -> Result<(), (BuildError, Arc<PoolBuf>)> {
        let off = off.min(buf.len());
        let len = len.min(buf.len() - off);
        let at = self.base as usize + self.len;
        if at > u32::MAX as usize {
            return Err((BuildError::Full, buf));
        }
        self.ddp
            .push_shared(at as u32, len as u32, buf, off as u32)
            .map_err(|b| (BuildError::TooManyItems, b))
    }
}

/// One RPC program: a number, a version range and handlers.
#[derive(Clone)]
pub struct Program {
    prog: u32,
    low: u32,
    high: u32,
    /// `table[v - low][proc]`.
    table: Vec<Vec<Option<Arc<dyn Handler>>>>,
}

impl core::fmt::Debug for Program {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Program")
            .field("prog", &self.prog)
            .field("versions", &(self.low..=self.high))
            .finish()
    }
}

/// Most versions one [`Program`] may span.
pub const MAX_VERSIONS: u32 = 64;
/// Highest procedure number a handler may be registered for.
pub const MAX_PROC: u32 = 4095;

impl Program {
    /// Program `prog` serving versions `low..=high` (swapped if reversed; at most
    /// [`MAX_VERSIONS`] versions, the range is cut there).
    pub fn new(prog: u32, versions: core::ops::RangeInclusive<u32>) -> Program {
        let (mut low, mut high) = (*versions.start(), *versions.end());
        if low > high {
            core::mem::swap(&mut low, &mut high);
        }
        high = high.min(low.saturating_add(MAX_VERSIONS - 1));
        Program {
            prog,
            low,
            high,
            table: vec![Vec::new(); (high - low + 1) as usize],
        }
    }

    /// The program number.
    pub fn number(&self) -> u32 {
        self.prog
    }

    /// The version range.
    pub fn versions(&self) -> (u32, u32) {
        (self.low, self.high)
    }

    /// Registers `handler` for procedure `proc_num` of every version. Procedure 0 is NULL and
    /// always answered by the server; numbers above [`MAX_PROC`] are ignored.
    pub fn procedure<H: Handler>(mut self, proc_num: u32, handler: H) -> Program {
        let h: Arc<dyn Handler> = Arc::new(handler);
        for v in self.low..=self.high {
            self.set(v, proc_num, Arc::clone(&h));
        }
        self
    }

    /// Registers `handler` for procedure `proc_num` of version `vers` only (ignored when `vers`
    /// is outside the range).
    pub fn procedure_for<H: Handler>(mut self, vers: u32, proc_num: u32, handler: H) -> Program {
        self.set(vers, proc_num, Arc::new(handler));
        self
    }

    fn set(&mut self, vers: u32, proc_num: u32, h: Arc<dyn Handler>) {
        if proc_num == 0 || proc_num > MAX_PROC || vers < self.low || vers > self.high {
            return;
        }
        let row = &mut self.table[(vers - self.low) as usize];
        if row.len() <= proc_num as usize {
            row.resize(proc_num as usize + 1, None);
        }
        row[proc_num as usize] = Some(h);
    }
}

/// What the server does with a call.
#[derive(Clone)]
pub enum Dispatch<'a> {
    /// Run this handler.
    Handler(&'a Arc<dyn Handler>),
    /// NULL procedure: empty SUCCESS.
    Null,
    /// Answer with this accept_stat (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL).
    Error(AcceptStat),
}

impl core::fmt::Debug for Dispatch<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Dispatch::Handler(_) => f.write_str("Handler"),
            Dispatch::Null => f.write_str("Null"),
            Dispatch::Error(s) => write!(f, "Error({s:?})"),
        }
    }
}

/// The programs of one server.
#[derive(Clone, Debug, Default)]
pub struct Programs {
    progs: Vec<Program>,
}

impl Programs {
    /// No programs.
    pub fn new() -> Programs {
        Programs::default()
    }

    /// Adds a program (several entries may share a program number with disjoint versions).
    pub fn add(&mut self, p: Program) {
        self.progs.push(p);
    }

    /// The RFC 5531 decision for `prog`/`vers`/`proc_num`.
    pub fn dispatch(&self, prog: u32, vers: u32, proc_num: u32) -> Dispatch<'_> {
        let mut known = false;
        let (mut low, mut high) = (u32::MAX, 0u32);
        for p in &self.progs {
            if p.prog != prog {
                continue;
            }
            known = true;
            low = low.min(p.low);
            high = high.max(p.high);
            if vers < p.low || vers > p.high {
                continue;
            }
            if proc_num == 0 {
                return Dispatch::Null;
            }
            let row = &p.table[(vers - p.low) as usize];
            return match row.get(proc_num as usize) {
                Some(Some(h)) => Dispatch::Handler(h),
                _ => Dispatch::Error(AcceptStat::ProcUnavail),
            };
        }
        if known {
            Dispatch::Error(AcceptStat::ProgMismatch { low, high })
        } else {
            Dispatch::Error(AcceptStat::ProgUnavail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &Request<'_>, _: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        Ok(())
    }

    fn progs() -> Programs {
        let mut p = Programs::new();
        p.add(Program::new(100_003, 3..=4).procedure(1, ok));
        p.add(Program::new(100_003, 6..=6).procedure_for(6, 2, ok));
        p
    }

    #[test]
    fn accepts_null_and_registered_procedures() {
        let p = progs();
        assert!(matches!(p.dispatch(100_003, 3, 0), Dispatch::Null));
        assert!(matches!(p.dispatch(100_003, 4, 1), Dispatch::Handler(_)));
        assert!(matches!(p.dispatch(100_003, 6, 2), Dispatch::Handler(_)));
    }

    #[test]
    fn rejects_unknown_program_version_and_procedure() {
        let p = progs();
        assert!(matches!(
            p.dispatch(7, 3, 1),
            Dispatch::Error(AcceptStat::ProgUnavail)
        ));
        // Lowest and highest version over every entry of the program.
        assert!(matches!(
            p.dispatch(100_003, 5, 1),
            Dispatch::Error(AcceptStat::ProgMismatch { low: 3, high: 6 })
        ));
        assert!(matches!(
            p.dispatch(100_003, 3, 9),
            Dispatch::Error(AcceptStat::ProcUnavail)
        ));
        assert!(matches!(
            p.dispatch(100_003, 6, 1),
            Dispatch::Error(AcceptStat::ProcUnavail)
        ));
    }

    #[test]
    fn accepts_a_detached_call_and_reports_a_refusal() {
        let peer = "10.0.0.1:700".parse().unwrap();
        let echo = |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            if req.args.is_empty() {
                return Err(Reject::GarbageArgs);
            }
            out.put_u32(req.proc_num).map_err(|_| Reject::SystemErr)?;
            out.put(req.args).map_err(|_| Reject::SystemErr)
        };
        let mut results = [0u8; 16];
        let req = Request::detached(7, &[1, 2, 3, 4], CallTransport::plain(peer, 1));
        assert_eq!(serve_detached(&echo, &req, &mut results), Ok(8));
        assert_eq!(results[..8], [0, 0, 0, 7, 1, 2, 3, 4]);
        let empty = Request::detached(7, &[], CallTransport::plain(peer, 1));
        assert_eq!(
            serve_detached(&echo, &empty, &mut results),
            Err(Reject::GarbageArgs)
        );
    }

    #[test]
    fn rejects_reply_builder_overflow() {
        let mut buf = [0u8; 8];
        let mut d = DdpItems::new();
        let mut b = ReplyBuilder::new(&mut buf, 24, &mut d);
        assert_eq!(b.put_u32(1), Ok(()));
        assert_eq!(b.put_opaque(&[1, 2, 3]), Err(BuildError::Full));
        assert_eq!(b.put(&[9; 4]), Ok(()));
        assert_eq!(b.put(&[9]), Err(BuildError::Full));
        assert_eq!(&buf, &[0, 0, 0, 1, 9, 9, 9, 9]);
    }
}
