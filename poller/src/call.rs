//! The call-facing types both call directions share: a call's arguments in registered memory
//! ([`CallArgs`]), its completion callback ([`Callback`], stored without allocation), its
//! outcome ([`Reply`] or [`ClientError`]), a refusal at submission that hands the arguments
//! back ([`Refused`]), the blocking wait the blocking wrappers are built on, and what the
//! transport knows of a call a handler serves ([`CallTransport`]). Forward calls
//! ([`Client`](crate::Client)) and backward calls ([`BackChannel`](crate::BackChannel)) use
//! them alike; this module names neither role.
//!
//! Normal operation: a callback runs exactly once, with the reply or an error. Recovery: a
//! [`Callback`] dropped without having run (a ring dropped at teardown) runs with
//! [`ClientError::Dropped`]; a blocking wait retries while the submission ring is full
//! ([`ClientError::Busy`]) and returns any other refusal at once.

// Refusals carry the call's arguments back by value, so nothing allocates on the way.
#![allow(clippy::result_large_err)]

use core::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rpcrdma_engine::conn::{CallError, StartError};
use rpcrdma_engine::proto::reject::RejectReason;
use rpcrdma_engine::rpc::{AcceptStat, RejectedReply};
use rpcrdma_mempool::PoolBuf;

use crate::ddp::{zero_above, BuildError, DdpItems, MAX_DDP};

// ---------------------------------------------------------------------------------------------
// Which procedure a call is for.

/// The procedure a call is for: RFC 5531's program number, program version and procedure
/// number (the call header's `prog`, `vers`, `proc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Proc {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
}

impl Proc {
    /// Procedure `proc_num` of version `vers` of program `prog`.
    pub const fn new(prog: u32, vers: u32, proc_num: u32) -> Proc {
        Proc {
            prog,
            vers,
            proc_num,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the transport knows of a call.

/// What the transport knows of a call: who sent it and how its chunks were shaped
/// (RPC-over-RDMA Read list, Write list, Reply chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTransport {
    /// The requester's address as RDMA-CM reports it. Its port is the connection's RDMA-CM
    /// port, chosen anew for every connection: key per-client state on the IP address.
    pub peer: SocketAddr,
    /// Identifies the connection the call arrived on (unique within the process).
    pub conn_id: u64,
    /// Read segments the call carried (its Read chunks, Position Zero included).
    pub read_segments: u8,
    /// The call came as RDMA_NOMSG through a Position-Zero Read chunk (a long call).
    pub position_zero: bool,
    /// Capacity of the Reply chunk the client offered, if any.
    pub reply_chunk: Option<u32>,
}

impl CallTransport {
    /// A call that came with no chunks from `peer` (backward calls, tests).
    pub const fn plain(peer: SocketAddr, conn_id: u64) -> CallTransport {
        CallTransport {
            peer,
            conn_id,
            read_segments: 0,
            position_zero: false,
            reply_chunk: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and results.

/// Why a call did not produce results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientError {
    /// The submission ring is full (back-pressure); try again later.
    Busy,
    /// The client was closed.
    Closed,
    /// The connection could not be (re)established within `max_reconnects` attempts.
    ReconnectFailed,
    /// The call was sent `1 + max_retransmits` times and every connection carrying it was lost.
    RetransmitsExhausted,
    /// No reply within `call_timeout_ms`.
    TimedOut,
    /// The server accepted the call but did not run it: PROG_UNAVAIL, PROG_MISMATCH,
    /// PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR or an unknown accept_stat.
    Rpc(AcceptStat),
    /// The server denied the call (RPC_MISMATCH or AUTH_ERROR).
    Denied(RejectedReply),
    /// The transport failed the call (RDMA_ERROR, bad reply, ...).
    Transport(CallError),
    /// The reply's RPC header did not decode.
    BadReply,
    /// The call could not be expressed (too large, too many items, ...).
    BadCall(StartError),
    /// The requested protocol version cannot be spoken with these options (Version Two needs
    /// inline send and receive sizes of at least 4096 octets).
    Unsupported,
    /// Version Two RDMA2_ERR_CANT_REPLY: the server's reply did not fit the reply resources the
    /// call offered (reply buffer, receptacles) and there was nothing larger to send the call
    /// again with (no [`CallArgs::expect_reply`] hint below the reply buffer's size, or the
    /// retry was too small as well).
    CantReply {
        /// The first segment too short (1-based, Write list segments then the Reply chunk's;
        /// 0 when the server did not say).
        segment: u32,
        /// Octets that segment needed (the whole reply when it is the reply buffer).
        needed: u32,
    },
    /// Setting the connection up failed locally (memory, verbs).
    Setup,
    /// The call was dropped without running (runtime torn down with the call in a ring).
    Dropped,
    /// Backward call (server side): the client has not said it serves the backchannel (the
    /// upper layer did not enable it, RFC 8167 §6). Refused locally; nothing was sent.
    NotServed,
    /// Backward call (server side): the session is unknown or was closed.
    SessionClosed,
    /// A blocking wrapper was called on the reactor thread that has to complete it.
    WouldBlock,
    /// The client gave up reconnecting (as [`ClientError::ReconnectFailed`]) and the server had
    /// rejected its last connect with this reason in the reject's private data (this crate's
    /// format, `rpcrdma_engine::proto::reject`; a reject without a reason it understands is
    /// `ReconnectFailed`).
    Rejected(RejectReason),
    /// [`Client::connect`](crate::Client::connect): the device has no type-2 memory windows, so chunks could only be
    /// exposed through endpoint-wide persistent STags, and the endpoint was not configured to
    /// allow that ([`EndpointConfig::persistent_stags`](crate::EndpointConfig::persistent_stags)
    /// is [`PersistentStags::Refuse`](crate::PersistentStags::Refuse)). Nothing was connected.
    PersistentStagsRefused,
}

impl core::fmt::Display for ClientError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ClientError::PersistentStagsRefused => f.write_str(
                "the device has no type-2 memory windows: a client on it exposes the \
                 endpoint's pools to every peer through persistent STags, which needs \
                 EndpointConfig::persistent_stags = EndpointWide (see docs/rdma-provider.md)",
            ),
            _ => write!(f, "RPC call failed: {self:?}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A call refused at submission, with its arguments handed back.
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub error: ClientError,
    /// The arguments, untouched.
    pub args: CallArgs,
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "call refused: {:?}", self.error)
    }
}

impl std::error::Error for Refused {}

/// A successful reply. Owns the reply buffer (and the call's receptacles); dropping it returns
/// them to their pool.
#[derive(Debug)]
pub struct Reply {
    pub(crate) buf: PoolBuf,
    // Offsets in a registered buffer (whose length is a `u32`, as every `LocalBuf`'s): as
    // `u32` they keep the reply within 128 octets, moved with a few loads and stores rather
    // than a `memcpy` call (it moves from the engine's report to the callback by value).
    pub(crate) off: u32,
    pub(crate) len: u32,
    pub(crate) xid: u32,
    pub(crate) receptacles: [Option<(PoolBuf, u32)>; MAX_DDP],
}

// See `Reply::off`.
const _: () = assert!(core::mem::size_of::<Result<Reply, ClientError>>() <= 128);

impl Reply {
    /// The XID of the call.
    pub fn xid(&self) -> u32 {
        self.xid
    }

    /// The encoded results (after the RPC reply header; DDP results are in the receptacles).
    pub fn results(&self) -> &[u8] {
        self.buf.get(self.range()).unwrap_or(&[])
    }

    /// The octets the server wrote into receptacle `i` (in the order they were given).
    pub fn receptacle(&self, i: usize) -> Option<&[u8]> {
        let (b, n) = self.receptacles.get(i)?.as_ref()?;
        b.get(..*n as usize)
    }

    /// Takes receptacle `i` with the number of octets written into it.
    pub fn take_receptacle(&mut self, i: usize) -> Option<(PoolBuf, usize)> {
        let (b, n) = self.receptacles.get_mut(i)?.take()?;
        Some((b, n as usize))
    }

    /// The reply buffer itself and the results' range in it.
    pub fn into_buf(self) -> (PoolBuf, core::ops::Range<usize>) {
        let r = self.range();
        (self.buf, r)
    }

    fn range(&self) -> core::ops::Range<usize> {
        let off = self.off as usize;
        off..off + self.len as usize
    }
}

/// A call's arguments in registered memory: the encoded XDR arguments, DDP argument items (sent
/// as Read chunks) and receptacles for DDP results (offered as Write chunks).
#[derive(Debug)]
///
/// The buffer comes from a pool and may hold an earlier call's arguments or results: the
/// builder never sends such octets. It keeps a mark below which every octet was written for
/// this call (`put*`) or zeroed; [`CallArgs::space`] zeroes the free space above the mark once
/// (one memset of the rest of the buffer per call that uses it; later calls cost nothing) and
/// [`CallArgs::advance`] zeroes what it moves over above the mark. Calls built with `put*`
/// alone pay nothing.
pub struct CallArgs {
    pub(crate) buf: PoolBuf,
    pub(crate) len: usize,
    /// Every octet of `buf` below this was written for this call or zeroed (≥ `len`).
    pub(crate) clean: usize,
    pub(crate) ddp: DdpItems,
    pub(crate) receptacles: [Option<PoolBuf>; MAX_DDP],
    pub(crate) nrec: usize,
    /// Reply size hint (0: none): see [`CallArgs::expect_reply`].
    pub(crate) reply_hint: u32,
}

impl CallArgs {
    /// Arguments written into `buf` (from its start).
    pub fn new(buf: PoolBuf) -> CallArgs {
        CallArgs {
            buf,
            len: 0,
            clean: 0,
            ddp: DdpItems::new(),
            receptacles: Default::default(),
            nrec: 0,
            reply_hint: 0,
        }
    }

    /// Expects a reply (RPC reply header and inline results, DDP results excluded) of at most
    /// `n` octets. The call then offers only part of its reply buffer: `n` octets, or what any
    /// inline reply needs when that is more — so with `n` within the inline threshold no
    /// Reply chunk, and no memory window for it, is offered. When the server answers that the
    /// reply did not fit — RDMA2_ERR_CANT_REPLY in Version Two, ERR_CHUNK in Version One —
    /// the call is sent again, with the same XID, offering the whole reply buffer, and the
    /// callback gets the reply as usual (a reply larger than the whole buffer fails with
    /// [`ClientError::CantReply`], or in Version One `Transport(ErrChunk)`). Without a hint a
    /// Version One call whose reply buffer exceeds the inline threshold always offers a Reply
    /// chunk, and the Linux server then always answers through it (an RDMA Write and
    /// RDMA_NOMSG even for a small reply; see docs/interop-nfs.md). The first call of a
    /// Version Two connection (which probes the server) always offers the whole buffer. 0 (the
    /// default) or a size at least the buffer's: no hint.
    pub fn expect_reply(&mut self, n: usize) -> &mut Self {
        self.reply_hint = n.min(u32::MAX as usize) as u32;
        self
    }

    /// The free space after the arguments written so far. The first call zeroes the octets no
    /// earlier `put*` wrote (so an earlier call's data left in the pool buffer cannot be
    /// sent); later calls cost nothing.
    pub fn space(&mut self) -> &mut [u8] {
        let end = self.buf.len();
        zero_above(&mut self.buf, &mut self.clean, end);
        &mut self.buf[self.len..]
    }

    crate::ddp::xdr_writes!(buf);

    /// Places the first `len` octets of `buf` at the current offset as a DDP-eligible argument
    /// item (its XDR length word must already be written; no pad follows). It travels as a
    /// Read chunk the server pulls with RDMA Read (or inline when DDP is off).
    pub fn ddp(&mut self, buf: PoolBuf, len: usize) -> Result<(), (BuildError, PoolBuf)> {
        let len = len.min(buf.len());
        if self.len > u32::MAX as usize {
            return Err((BuildError::Full, buf));
        }
        self.ddp
            .push(self.len as u32, len as u32, buf)
            .map_err(|b| (BuildError::TooManyItems, b))
    }

    /// Offers `buf` (whole) as a receptacle for the next DDP-eligible result (a Write chunk).
    pub fn receptacle(&mut self, buf: PoolBuf) -> Result<(), (BuildError, PoolBuf)> {
        if self.nrec >= MAX_DDP {
            return Err((BuildError::TooManyItems, buf));
        }
        self.receptacles[self.nrec] = Some(buf);
        self.nrec += 1;
        Ok(())
    }

    /// The buffer (and gives up the items).
    pub fn into_buf(self) -> PoolBuf {
        self.buf
    }
}

// ---------------------------------------------------------------------------------------------
// Callbacks without allocation.

const CB_WORDS: usize = 6;

/// What a call's completion callback is: any `FnOnce(Result<Reply, ClientError>) + Send +
/// 'static` (a closure usually). Every call entry point (`Client::call`, `Server::back_call`,
/// `BackChannel::call`, [`Callback::new`]) takes one; it runs exactly once.
pub trait OnReply: FnOnce(Result<Reply, ClientError>) + Send + 'static {}

impl<F: FnOnce(Result<Reply, ClientError>) + Send + 'static> OnReply for F {}

/// A completion callback: any `FnOnce(Result<Reply, ClientError>) + Send + 'static`, stored
/// inline (no allocation) when it fits in six machine words, boxed otherwise. Runs exactly
/// once: by [`Callback::call`], or with [`ClientError::Dropped`] when dropped unrun.
pub struct Callback {
    data: MaybeUninit<[usize; CB_WORDS]>,
    call_fn: unsafe fn(*mut u8, Result<Reply, ClientError>),
    drop_fn: unsafe fn(*mut u8),
    /// 0: armed, 1: consumed, 2: disarmed (drop without running).
    state: u8,
    /// Runs on the reactor even in worker mode (it only hands the outcome over).
    pub(crate) on_reactor: bool,
}

// SAFETY: constructed only from `F: Send`.
unsafe impl Send for Callback {}

unsafe fn call_tramp<F: FnOnce(Result<Reply, ClientError>)>(
    p: *mut u8,
    r: Result<Reply, ClientError>,
) {
    // SAFETY: `p` holds an initialised `F` that is read (moved out) exactly once.
    let f = unsafe { core::ptr::read(p.cast::<F>()) };
    f(r)
}

unsafe fn drop_tramp<F>(p: *mut u8) {
    // SAFETY: `p` holds an initialised `F`, dropped exactly once.
    unsafe { core::ptr::drop_in_place(p.cast::<F>()) }
}

impl Callback {
    /// Wraps `f`.
    pub fn new<F: OnReply>(f: F) -> Callback {
        if Self::fits::<F>() {
            Self::inline(f)
        } else {
            let b = Box::new(f);
            Self::inline(b)
        }
    }

    const fn fits<F>() -> bool {
        core::mem::size_of::<F>() <= core::mem::size_of::<[usize; CB_WORDS]>()
            && core::mem::align_of::<F>() <= core::mem::align_of::<usize>()
    }

    fn inline<F: OnReply>(f: F) -> Callback {
        assert!(Self::fits::<F>(), "callback storage");
        let mut data = MaybeUninit::<[usize; CB_WORDS]>::uninit();
        // SAFETY: `F` fits in `data` (size and alignment checked above).
        unsafe { core::ptr::write(data.as_mut_ptr().cast::<F>(), f) };
        Callback {
            data,
            call_fn: call_tramp::<F>,
            drop_fn: drop_tramp::<F>,
            state: 0,
            on_reactor: false,
        }
    }

    /// Marks a callback that only hands the outcome over (a rendezvous that never blocks):
    /// it runs on the reactor even in worker mode, so a thread waiting for it on a worker
    /// does not wait for itself.
    pub(crate) fn on_reactor(mut self) -> Callback {
        self.on_reactor = true;
        self
    }

    /// Runs the callback.
    pub fn call(mut self, r: Result<Reply, ClientError>) {
        if self.state == 0 {
            self.state = 1;
            // SAFETY: armed, so `data` holds the closure; `state` keeps it from running twice.
            unsafe { (self.call_fn)(self.data.as_mut_ptr().cast::<u8>(), r) }
        }
    }

    /// Drops the callback without running it.
    pub(crate) fn disarm(mut self) {
        if self.state == 0 {
            self.state = 2;
        }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        match self.state {
            0 => {
                self.state = 1;
                // SAFETY: armed: the closure is there and runs once.
                unsafe {
                    (self.call_fn)(
                        self.data.as_mut_ptr().cast::<u8>(),
                        Err(ClientError::Dropped),
                    )
                }
            }
            2 => {
                self.state = 1;
                // SAFETY: disarmed: the closure is there and is dropped once.
                unsafe { (self.drop_fn)(self.data.as_mut_ptr().cast::<u8>()) }
            }
            _ => {}
        }
    }
}

impl core::fmt::Debug for Callback {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Callback")
    }
}

/// Makes a call through `start` and waits for its outcome (retrying while the ring is full).
/// Shared by the blocking wrappers of backward calls and of [`crate::Client::call_blocking`].
pub(crate) fn blocking<S>(mut args: CallArgs, mut start: S) -> Result<Reply, ClientError>
where
    S: FnMut(CallArgs, Callback) -> Result<(), Refused>,
{
    type Slot = (Mutex<Option<Result<Reply, ClientError>>>, Condvar);
    let slot: Arc<Slot> = Arc::new((Mutex::new(None), Condvar::new()));
    loop {
        let s = Arc::clone(&slot);
        let cb = Callback::new(move |r| {
            let (m, c) = &*s;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            c.notify_one();
        });
        match start(args, cb) {
            Ok(()) => break,
            Err(Refused {
                error: ClientError::Busy,
                args: a,
            }) => {
                args = a;
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(r) => return Err(r.error),
        }
    }
    let (m, c) = &*slot;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(r) = g.take() {
            return r;
        }
        g = c.wait(g).unwrap_or_else(|e| e.into_inner());
    }
}

// ---------------------------------------------------------------------------------------------
// Pieces the backchannel (crate::backchannel) uses.

impl Reply {
    /// A backward call's reply (server side): `len` octets of results at `off` of `buf`.
    pub(crate) fn backward(buf: PoolBuf, off: usize, len: usize, xid: u32) -> Reply {
        Reply {
            buf,
            off: off as u32,
            len: len as u32,
            xid,
            receptacles: Default::default(),
        }
    }
}

impl CallArgs {
    /// The argument buffer and the octets written in it.
    pub(crate) fn written(&self) -> (&PoolBuf, usize) {
        (&self.buf, self.len)
    }

    /// The DDP argument items.
    pub(crate) fn ddp_items(&self) -> &DdpItems {
        &self.ddp
    }

    /// Receptacles offered.
    pub(crate) fn receptacle_count(&self) -> usize {
        self.nrec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn accepts_callback_runs_exactly_once() {
        let n = Arc::new(AtomicU32::new(0));
        let n2 = Arc::clone(&n);
        let cb = Callback::new(move |r| {
            assert_eq!(r.unwrap_err(), ClientError::Busy);
            n2.fetch_add(1, Ordering::SeqCst);
        });
        cb.call(Err(ClientError::Busy));
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn accepts_dropped_callback_completing_with_dropped() {
        let n = Arc::new(AtomicU32::new(0));
        let n2 = Arc::clone(&n);
        // A closure too large for the inline storage is boxed and still runs once.
        let big = [7u64; 16];
        let cb = Callback::new(move |r| {
            assert_eq!(r.unwrap_err(), ClientError::Dropped);
            assert_eq!(big[15], 7);
            n2.fetch_add(1, Ordering::SeqCst);
        });
        drop(cb);
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn rejects_running_disarmed_callback() {
        let n = Arc::new(AtomicU32::new(0));
        let n2 = Arc::clone(&n);
        let cb = Callback::new(move |_| {
            n2.fetch_add(1, Ordering::SeqCst);
        });
        cb.disarm();
        assert_eq!(n.load(Ordering::SeqCst), 0);
        // The captured Arc was dropped with the closure.
        assert_eq!(Arc::strong_count(&n), 1);
    }
}
