//! ONC RPC over TCP (RFC 5531 §11 record marking): a server that hands decoded calls to an
//! [`RpcService`] ([`TcpRpcServer`], one polling thread for every connection), and a small
//! blocking client ([`RpcClient`], [`tcp_call`]). MOUNT ([`super::mount`]) and the rpcbind
//! registration ([`super::rpcbind`]) are built on it; none of this runs on the RDMA reactors.
//!
//! Normal operation: [`TcpRpcServer::start`] binds a listener and runs one thread that polls
//! it and every connection (`server.rs`); each connection (`conn.rs`) reassembles records
//! ([`read_record`]'s parser, kept across reads that would block), decodes the call header with
//! [`rpcrdma_engine::rpc`], checks rpcvers, the credential, the program and the version, calls
//! the service and writes one reply record without blocking. The client sends one call record
//! with an AUTH_SYS (uid 0, gid 0) or AUTH_NONE credential and reads records until the reply
//! with its XID arrives.
//!
//! Recovery: the server closes one connection, never the listener, for a record longer than
//! [`ServerConfig::max_record`] (64 KiB by default), a record that is not a decodable CALL (no
//! XID to answer), a socket error, or a deadline passed: no first record within
//! [`ServerConfig::first_record_timeout`], a started record not complete within
//! [`ServerConfig::record_timeout`], a reply not written within
//! [`ServerConfig::write_timeout`], no record for [`ServerConfig::idle_timeout`]. Deadlines run
//! per record and per reply, not per read: trickling octets does not extend them. A newcomer
//! beyond [`ServerConfig::max_conns_per_peer`] for its address or [`ServerConfig::max_conns`]
//! in all evicts the connection that has gone longest without completing anything (of its own
//! address, or of the address holding the most) instead of being refused. rpcvers ≠ 2 is
//! answered MSG_DENIED/RPC_MISMATCH{2,2}, a bad credential or verifier AUTH_ERROR, an unknown
//! program PROG_UNAVAIL, another version PROG_MISMATCH, and the service answers PROC_UNAVAIL /
//! GARBAGE_ARGS itself. [`TcpRpcServer::stop`] (also on drop) shuts every connection down and
//! joins the thread.

mod conn;
mod server;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rpcrdma_engine::rpc::{
    decode_call, decode_reply, encode_call, encode_reply, reply_encoded_len, AcceptStat,
    AuthFlavor, AuthStat, AuthSys, AuthSysParams, CallHeader, OpaqueAuth, RejectedReply, ReplyBody,
    ReplyHeader, RpcError, MAX_AUTH_BYTES, RPC_VERSION,
};
use rpcrdma_engine::xdr::pad4;

pub use conn::RecordReader;
pub use server::{ConnStats, TcpRpcServer};

/// The last-fragment bit of a record mark.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;

/// Default bound of one reassembled call record on the server (64 KiB).
pub const DEFAULT_MAX_RECORD: usize = 64 * 1024;

/// Bound of one reply record the client accepts (4 MiB).
pub const CLIENT_MAX_REPLY: usize = 4 * 1024 * 1024;

/// Locks a mutex, taking the data over from a thread that panicked while holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads one record: fragments are reassembled until the one with the last-fragment bit.
/// `Ok(None)` at a clean end of stream before the first octet of a record. A record whose
/// fragments add up to more than `max` octets is an [`io::ErrorKind::InvalidData`] error before
/// its body is read; the end of stream inside a record is [`io::ErrorKind::UnexpectedEof`].
/// The record's buffer grows with the octets received, not with the lengths the marks claim.
pub fn read_record<R: Read>(r: &mut R, max: usize) -> io::Result<Option<Vec<u8>>> {
    RecordReader::new().read_from(r, max)
}

/// Writes `payload` as one record (a single last fragment). Payloads of 2^31 octets or more
/// are refused with [`io::ErrorKind::InvalidInput`].
pub fn write_record<W: Write>(w: &mut W, payload: &[u8]) -> io::Result<()> {
    w.write_all(&frame(payload)?)?;
    w.flush()
}

/// `payload` with the mark of a single last fragment in front.
pub(crate) fn frame(payload: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l < LAST_FRAGMENT)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "RPC record too long"))?;
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    buf.extend_from_slice(payload);
    Ok(buf)
}

/// A growable XDR encoder for results and arguments whose size depends on data (lists,
/// strings); the engine's [`XdrWriter`](rpcrdma_engine::xdr::XdrWriter) writes into fixed
/// buffers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct XdrBuf(pub Vec<u8>);

impl XdrBuf {
    /// An empty buffer.
    pub fn new() -> XdrBuf {
        XdrBuf(Vec::new())
    }

    /// Appends an unsigned 32-bit integer.
    pub fn put_u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends an unsigned 64-bit integer (XDR unsigned hyper).
    pub fn put_u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends a boolean (also the optional-data discriminant of XDR lists).
    pub fn put_bool(&mut self, v: bool) {
        self.put_u32(u32::from(v));
    }

    /// Appends variable-length opaque data: length, octets, zero pad. Callers keep `b` within
    /// the item's XDR bound (all callers here pass at most a few KiB); a length that does not
    /// fit 32 bits is written saturated, which no decoder accepts.
    pub fn put_opaque(&mut self, b: &[u8]) {
        self.put_u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(b);
        self.0.extend(std::iter::repeat(0u8).take(pad4(b.len())));
    }

    /// Appends an XDR string.
    pub fn put_str(&mut self, s: &str) {
        self.put_opaque(s.as_bytes());
    }
}

/// What a service learns about a call besides its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallCtx {
    /// The peer's address (IPv4-mapped IPv6 addresses shown as IPv4).
    pub peer: SocketAddr,
    /// The program version called (within [`RpcService::versions`]).
    pub vers: u32,
    /// The credential's flavor (AUTH_NONE or AUTH_SYS; others are refused before the service).
    pub flavor: AuthFlavor,
    /// The AUTH_SYS uid and gid, when the credential is AUTH_SYS.
    pub unix: Option<(u32, u32)>,
    /// The whole credential (flavor and body), for services that map it through an export's
    /// rules ([`crate::nfs::admit::ExportTable::admit_handle`]).
    pub cred: CredCopy,
}

/// A call's credential copied out of its record: the flavor and at most
/// [`rpcrdma_engine::rpc::MAX_AUTH_BYTES`] octets of body.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CredCopy {
    flavor: AuthFlavor,
    len: u16,
    body: [u8; MAX_AUTH_BYTES as usize],
}

impl CredCopy {
    /// A copy of `c`; a body longer than the RPC bound (which no decoded call has) is cut.
    pub fn of(c: &OpaqueAuth<'_>) -> CredCopy {
        let mut body = [0u8; MAX_AUTH_BYTES as usize];
        let n = c.body.len().min(body.len());
        body[..n].copy_from_slice(&c.body[..n]);
        CredCopy {
            flavor: c.flavor,
            len: n as u16,
            body,
        }
    }

    /// The credential as the decoders give it.
    pub fn opaque(&self) -> OpaqueAuth<'_> {
        OpaqueAuth {
            flavor: self.flavor,
            body: &self.body[..usize::from(self.len)],
        }
    }
}

impl core::fmt::Debug for CredCopy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CredCopy")
            .field("flavor", &self.flavor)
            .field("len", &self.len)
            .finish()
    }
}

/// One ONC RPC program served by a [`TcpRpcServer`].
pub trait RpcService: Send + Sync + 'static {
    /// The program number.
    fn program(&self) -> u32;

    /// The lowest and highest version served; other versions get PROG_MISMATCH{low, high}.
    fn versions(&self) -> (u32, u32);

    /// Serves procedure `proc_num` with the encoded `args`. On [`AcceptStat::Success`] the
    /// results are what was appended to `out`; any other status is sent without results.
    fn call(&self, ctx: &CallCtx, proc_num: u32, args: &[u8], out: &mut XdrBuf) -> Handled;
}

/// How a service answered one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// A reply with this status.
    Reply(AcceptStat),
    /// No reply at all: the client sends the call again after its timeout (Linux lockd's
    /// `nlm_drop_reply`, for a request that must wait for something it cannot queue on).
    Drop,
}

impl From<AcceptStat> for Handled {
    fn from(s: AcceptStat) -> Handled {
        Handled::Reply(s)
    }
}

/// What one call record gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// This reply (an RPC reply message, not framed).
    Reply(Vec<u8>),
    /// Nothing: the service dropped the call ([`Handled::Drop`]).
    Nothing,
    /// The record cannot be answered (not a decodable CALL with an XID): the caller closes
    /// the connection.
    Close,
}

impl Answer {
    /// The reply, when there is one.
    pub fn reply(self) -> Option<Vec<u8>> {
        match self {
            Answer::Reply(r) => Some(r),
            Answer::Nothing | Answer::Close => None,
        }
    }
}

/// Limits of a [`TcpRpcServer`]. Deadlines run per record and per reply, whatever the
/// octets trickling in or out meanwhile; a connection past one is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Bound of one reassembled call record; a longer one closes the connection before its
    /// body is read. A connection holds at most this much of a record, allocated as it
    /// arrives, and one reply.
    pub max_record: usize,
    /// Connections served at once; a newcomer beyond them evicts the connection that has gone
    /// longest without completing a record or reply, among those of the address holding the
    /// most (0 counts as 1).
    pub max_conns: usize,
    /// Connections one peer IP address may hold (IPv4-mapped IPv6 counted as IPv4); a
    /// newcomer beyond them evicts that address's connection that has gone longest without
    /// completing anything. 0: no per-address limit.
    pub max_conns_per_peer: usize,
    /// The first record must start (its first octet arrive) within this long of the accept.
    pub first_record_timeout: Duration,
    /// A record must be complete within this long of its first octet.
    pub record_timeout: Duration,
    /// Between records, a connection with no octet for this long is closed.
    pub idle_timeout: Duration,
    /// A reply must be written whole within this long (a client that does not read its
    /// replies is closed).
    pub write_timeout: Duration,
}

impl Default for ServerConfig {
    /// 64 KiB records, 64 connections, 8 per address, first record within 3 s, each record
    /// within 5 s, each reply within 5 s, 60 s idle.
    fn default() -> Self {
        ServerConfig {
            max_record: DEFAULT_MAX_RECORD,
            max_conns: 64,
            max_conns_per_peer: 8,
            first_record_timeout: Duration::from_secs(3),
            record_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(5),
        }
    }
}

/// Builds the answer to one call record: a reply, nothing (the service dropped the call), or
/// [`Answer::Close`] when the record cannot be answered.
pub fn handle_record(service: &dyn RpcService, peer: SocketAddr, record: &[u8]) -> Answer {
    let (xid, outcome) = match decode_call(record) {
        Ok((call, off)) => {
            let Some(args) = record.get(off..) else {
                return Answer::Close;
            };
            (call.xid, serve(service, peer, &call, args))
        }
        Err(RpcError::BadRpcVersion { xid, .. }) => (
            xid,
            Outcome::Denied(RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            }),
        ),
        Err(RpcError::CredTooLong { xid, .. }) => (xid, auth_error(AuthStat::BadCred)),
        Err(RpcError::VerfTooLong { xid, .. }) => (xid, auth_error(AuthStat::BadVerf)),
        Err(_) => return Answer::Close,
    };
    let (body, results) = match outcome {
        Outcome::Dropped => return Answer::Nothing,
        Outcome::Accepted(stat, results) => (
            ReplyBody::Accepted {
                verf: OpaqueAuth::NONE,
                stat,
            },
            results,
        ),
        Outcome::Denied(why) => (ReplyBody::Denied(why), Vec::new()),
    };
    let header = ReplyHeader { xid, body };
    let mut out = vec![0u8; reply_encoded_len(&header)];
    let Ok(n) = encode_reply(&mut out, &header) else {
        return Answer::Close;
    };
    out.truncate(n);
    out.extend_from_slice(&results);
    Answer::Reply(out)
}

enum Outcome {
    Accepted(AcceptStat, Vec<u8>),
    Denied(RejectedReply),
    Dropped,
}

fn auth_error(why: AuthStat) -> Outcome {
    Outcome::Denied(RejectedReply::AuthError(why))
}

/// Checks the credential, program and version, then calls the service.
fn serve(
    service: &dyn RpcService,
    peer: SocketAddr,
    call: &CallHeader<'_>,
    args: &[u8],
) -> Outcome {
    let unix = match call.cred.flavor {
        AuthFlavor::None if call.cred.body.is_empty() => None,
        AuthFlavor::Sys => match AuthSys::parse(call.cred.body) {
            Ok(a) => Some((a.uid, a.gid)),
            Err(_) => return auth_error(AuthStat::BadCred),
        },
        _ => return auth_error(AuthStat::BadCred),
    };
    if call.verf.flavor != AuthFlavor::None || !call.verf.body.is_empty() {
        return auth_error(AuthStat::BadVerf);
    }
    if call.prog != service.program() {
        return Outcome::Accepted(AcceptStat::ProgUnavail, Vec::new());
    }
    let (low, high) = service.versions();
    if call.vers < low || call.vers > high {
        return Outcome::Accepted(AcceptStat::ProgMismatch { low, high }, Vec::new());
    }
    let ctx = CallCtx {
        peer: canonical_peer(peer),
        vers: call.vers,
        flavor: call.cred.flavor,
        unix,
        cred: CredCopy::of(&call.cred),
    };
    let mut out = XdrBuf::new();
    match service.call(&ctx, call.proc_num, args, &mut out) {
        Handled::Reply(AcceptStat::Success) => Outcome::Accepted(AcceptStat::Success, out.0),
        Handled::Reply(stat) => Outcome::Accepted(stat, Vec::new()),
        Handled::Drop => Outcome::Dropped,
    }
}

/// An IPv4-mapped IPv6 peer shown as IPv4.
pub(crate) fn canonical_peer(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => peer,
        },
        v4 => v4,
    }
}

/// Why an RPC call did not return results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcReplyError {
    /// MSG_ACCEPTED with a status other than SUCCESS.
    Accepted(AcceptStat),
    /// MSG_DENIED.
    Denied(RejectedReply),
    /// The reply could not be decoded.
    Malformed(String),
}

impl core::fmt::Display for RpcReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RpcReplyError::Accepted(AcceptStat::ProgUnavail) => write!(f, "PROG_UNAVAIL"),
            RpcReplyError::Accepted(AcceptStat::ProgMismatch { low, high }) => {
                write!(f, "PROG_MISMATCH (server has versions {low}..={high})")
            }
            RpcReplyError::Accepted(AcceptStat::ProcUnavail) => write!(f, "PROC_UNAVAIL"),
            RpcReplyError::Accepted(AcceptStat::GarbageArgs) => write!(f, "GARBAGE_ARGS"),
            RpcReplyError::Accepted(AcceptStat::SystemErr) => write!(f, "SYSTEM_ERR"),
            RpcReplyError::Accepted(s) => write!(f, "accept_stat {}", s.to_u32()),
            RpcReplyError::Denied(RejectedReply::RpcMismatch { low, high }) => {
                write!(f, "denied: RPC_MISMATCH ({low}..={high})")
            }
            RpcReplyError::Denied(RejectedReply::AuthError(s)) => {
                write!(f, "denied: AUTH_ERROR {:?} ({})", s, s.to_u32())
            }
            RpcReplyError::Malformed(m) => write!(f, "malformed reply: {m}"),
        }
    }
}

impl std::error::Error for RpcReplyError {}

/// The credential a client call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// AUTH_NONE.
    None,
    /// AUTH_SYS with uid 0, gid 0, no supplementary groups, machine name "rpcrdma".
    SysRoot,
    /// AUTH_SYS with this uid and gid, no supplementary groups, machine name "rpcrdma".
    Sys(u32, u32),
}

/// A blocking ONC RPC client over one TCP connection.
pub struct RpcClient {
    stream: TcpStream,
    xid: u32,
    auth: ClientAuth,
}

static XID_SEED: AtomicU32 = AtomicU32::new(0);

impl RpcClient {
    /// Connects within `connect_timeout`; reads and writes then wait at most `io_timeout`.
    pub fn connect(
        server: SocketAddr,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> io::Result<RpcClient> {
        let stream = TcpStream::connect_timeout(&server, connect_timeout)?;
        stream.set_read_timeout(Some(io_timeout))?;
        stream.set_write_timeout(Some(io_timeout))?;
        let _ = stream.set_nodelay(true);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let xid = nanos ^ XID_SEED.fetch_add(0x1000, Ordering::Relaxed) ^ std::process::id();
        Ok(RpcClient {
            stream,
            xid,
            auth: ClientAuth::SysRoot,
        })
    }

    /// Sets the credential of the following calls (AUTH_SYS root by default).
    pub fn set_auth(&mut self, auth: ClientAuth) {
        self.auth = auth;
    }

    /// Calls `prog`/`vers`/`proc_num` with encoded `args` and returns the encoded results. An
    /// RPC-level failure is an [`io::ErrorKind::Other`] error wrapping an [`RpcReplyError`].
    pub fn call(
        &mut self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: &[u8],
    ) -> io::Result<Vec<u8>> {
        self.xid = self.xid.wrapping_add(1);
        let msg = encode_call_msg(self.xid, prog, vers, proc_num, self.auth, args)?;
        write_record(&mut self.stream, &msg)?;
        loop {
            let reply = read_record(&mut self.stream, CLIENT_MAX_REPLY)?.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("RPC prog {prog} vers {vers} proc {proc_num}: connection closed"),
                )
            })?;
            match decode_reply(&reply) {
                Ok((h, _)) if h.xid != self.xid => continue,
                Ok((h, off)) => return results(&h, &reply, off, prog, vers, proc_num),
                Err(e) => {
                    return Err(rpc_err(
                        prog,
                        vers,
                        proc_num,
                        RpcReplyError::Malformed(e.to_string()),
                    ))
                }
            }
        }
    }
}

fn results(
    h: &ReplyHeader<'_>,
    reply: &[u8],
    off: usize,
    prog: u32,
    vers: u32,
    proc_num: u32,
) -> io::Result<Vec<u8>> {
    match h.body {
        ReplyBody::Accepted {
            stat: AcceptStat::Success,
            ..
        } => Ok(reply.get(off..).unwrap_or_default().to_vec()),
        ReplyBody::Accepted { stat, .. } => {
            Err(rpc_err(prog, vers, proc_num, RpcReplyError::Accepted(stat)))
        }
        ReplyBody::Denied(why) => Err(rpc_err(prog, vers, proc_num, RpcReplyError::Denied(why))),
    }
}

fn rpc_err(prog: u32, vers: u32, proc_num: u32, e: RpcReplyError) -> io::Error {
    io::Error::other(RpcCallError {
        prog,
        vers,
        proc_num,
        reply: e,
    })
}

/// The error inside the [`io::Error`] of a failed [`RpcClient::call`]: which call and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcCallError {
    /// Program called.
    pub prog: u32,
    /// Version called.
    pub vers: u32,
    /// Procedure called.
    pub proc_num: u32,
    /// What the server answered.
    pub reply: RpcReplyError,
}

impl core::fmt::Display for RpcCallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "RPC prog {} vers {} proc {}: {}",
            self.prog, self.vers, self.proc_num, self.reply
        )
    }
}

impl std::error::Error for RpcCallError {}

impl RpcCallError {
    /// The [`RpcReplyError`] inside an error returned by [`RpcClient::call`] / [`tcp_call`].
    pub fn of(e: &io::Error) -> Option<&RpcReplyError> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<RpcCallError>())
            .map(|c| &c.reply)
    }
}

/// Encodes a whole CALL message: header with the credential, then `args`.
pub fn encode_call_msg(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    auth: ClientAuth,
    args: &[u8],
) -> io::Result<Vec<u8>> {
    let mut cred_body = [0u8; 64];
    let cred = match auth {
        ClientAuth::None => OpaqueAuth::NONE,
        ClientAuth::SysRoot | ClientAuth::Sys(..) => {
            let (uid, gid) = match auth {
                ClientAuth::Sys(u, g) => (u, g),
                _ => (0, 0),
            };
            let params = AuthSysParams {
                stamp: 0,
                machinename: b"rpcrdma",
                uid,
                gid,
                gids: &[],
            };
            let n = params.encode_into(&mut cred_body).map_err(invalid)?;
            OpaqueAuth {
                flavor: AuthFlavor::Sys,
                body: &cred_body[..n],
            }
        }
    };
    let header = CallHeader {
        xid,
        prog,
        vers,
        proc_num,
        cred,
        verf: OpaqueAuth::NONE,
    };
    let mut msg = vec![0u8; header.encoded_len()];
    let n = encode_call(&mut msg, &header).map_err(invalid)?;
    msg.truncate(n);
    msg.extend_from_slice(args);
    Ok(msg)
}

fn invalid<E: std::error::Error + Send + Sync + 'static>(e: E) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// One call on a fresh connection (connect timeout 5 s, I/O timeout 10 s) with an AUTH_SYS
/// root credential; returns the encoded results of an accepted, successful call.
pub fn tcp_call(
    server: SocketAddr,
    prog: u32,
    vers: u32,
    proc_num: u32,
    args: &[u8],
) -> io::Result<Vec<u8>> {
    let mut c = RpcClient::connect(server, Duration::from_secs(5), Duration::from_secs(10))?;
    c.call(prog, vers, proc_num, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_fragmented_record() {
        // Three fragments "ab", "", "cde" (RFC 5531 §11: the last carries the high bit).
        let wire = [
            0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0x80, 0, 0, 3, b'c', b'd', b'e',
        ];
        let mut r = &wire[..];
        assert_eq!(read_record(&mut r, 16).unwrap().unwrap(), b"abcde");
        assert!(read_record(&mut r, 16).unwrap().is_none());
    }

    #[test]
    fn rejects_record_over_bound_before_reading_it() {
        let wire = [0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0x80, 0, 0, 9];
        let mut r = &wire[..];
        let e = read_record(&mut r, 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let huge = [0xff, 0xff, 0xff, 0xff];
        let e = read_record(&mut &huge[..], 1 << 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn rejects_torn_record() {
        let e = read_record(&mut &[0x80, 0][..], 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = read_record(&mut &[0x80, 0, 0, 4, 1][..], 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn accepts_written_record_golden() {
        let mut out = Vec::new();
        write_record(&mut out, b"xyz").unwrap();
        assert_eq!(out, [0x80, 0, 0, 3, b'x', b'y', b'z']);
    }

    #[test]
    fn accepts_xdr_buf_encoding() {
        let mut b = XdrBuf::new();
        b.put_u32(7);
        b.put_bool(true);
        b.put_str("abcde");
        assert_eq!(
            b.0,
            [0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]
        );
    }

    #[test]
    fn accepts_call_message_golden() {
        // RFC 5531 §9 call_body with an AUTH_SYS (§8.2 authsys_parms) credential.
        let m = encode_call_msg(
            0x0102_0304,
            100_005,
            3,
            1,
            ClientAuth::SysRoot,
            &[9, 9, 9, 9],
        )
        .unwrap();
        let mut want = vec![1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 2];
        want.extend_from_slice(&[0, 1, 0x86, 0xa5, 0, 0, 0, 3, 0, 0, 0, 1]);
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 28]); // AUTH_SYS, body length (4+4+8+4+4+4)
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]); // stamp, name length
        want.extend_from_slice(b"rpcrdma\0"); // name and pad
        want.extend_from_slice(&[0; 12]); // uid, gid, no gids
        want.extend_from_slice(&[0; 8]); // AUTH_NONE verifier
        want.extend_from_slice(&[9, 9, 9, 9]);
        assert_eq!(m, want);
    }
}
