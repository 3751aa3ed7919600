//! The NLM version 4 wire format (the Network Lock Manager protocol; X/Open XNFS, with the
//! 64-bit `nlm4_*` types of RFC 1813 §6; program 100021): borrowed decoders of the arguments a
//! server receives, encoders of its results, and the client side of both (the server's
//! NLMPROC4_GRANTED callback, the tests, the fuzz target).
//!
//! Normal operation: a decoder reads the whole argument structure, every string and `netobj`
//! checked against its XDR bound before it is taken, and returns views into the call record.
//! Recovery: arguments that do not decode, exceed a bound or leave octets over are an error
//! (the service answers GARBAGE_ARGS); a file handle longer than `NFS_MAXFHSIZE` (128) is
//! refused while decoding, as Linux lockd's `nlm4_decode_fh` does.

use rpcrdma_engine::xdr::{XdrError, XdrReader};

use crate::nfs::rpc_tcp::XdrBuf;

/// The NLM program number.
pub const NLM_PROG: u32 = 100_021;
/// The version served: NLM4, the one the Linux client uses for NFSv3 mounts.
pub const NLM_V4: u32 = 4;

/// Bound of a `netobj` (`MAXNETOBJ_SZ`).
pub const MAXNETOBJ_SZ: u32 = 1024;
/// Bound of `caller_name` (`LM_MAXSTRLEN`).
pub const LM_MAXSTRLEN: u32 = 1024;
/// Bound of `nlm4_notify.name` (`LM_MAXNAMELEN`, one more than `LM_MAXSTRLEN`).
pub const LM_MAXNAMELEN: u32 = 1025;
/// Longest file handle accepted (`NFS_MAXFHSIZE`, Linux lockd's bound).
pub const MAX_FH: usize = 128;

/// NLMPROC4_NULL.
pub const NULL: u32 = 0;
/// NLMPROC4_TEST.
pub const TEST: u32 = 1;
/// NLMPROC4_LOCK.
pub const LOCK: u32 = 2;
/// NLMPROC4_CANCEL.
pub const CANCEL: u32 = 3;
/// NLMPROC4_UNLOCK.
pub const UNLOCK: u32 = 4;
/// NLMPROC4_GRANTED (server to client).
pub const GRANTED: u32 = 5;
/// NLMPROC4_SHARE.
pub const SHARE: u32 = 20;
/// NLMPROC4_UNSHARE.
pub const UNSHARE: u32 = 21;
/// NLMPROC4_NM_LOCK (a lock without status monitoring).
pub const NM_LOCK: u32 = 22;
/// NLMPROC4_FREE_ALL.
pub const FREE_ALL: u32 = 23;

/// `nlm4_stats`: the status of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stat(pub u32);

impl Stat {
    /// NLM4_GRANTED.
    pub const GRANTED: Stat = Stat(0);
    /// NLM4_DENIED: another owner holds a conflicting lock.
    pub const DENIED: Stat = Stat(1);
    /// NLM4_DENIED_NOLOCKS: out of resources (a per-client bound reached).
    pub const DENIED_NOLOCKS: Stat = Stat(2);
    /// NLM4_BLOCKED: queued; NLMPROC4_GRANTED follows when the lock is given.
    pub const BLOCKED: Stat = Stat(3);
    /// NLM4_DENIED_GRACE_PERIOD.
    pub const DENIED_GRACE_PERIOD: Stat = Stat(4);
    /// NLM4_DEADLCK.
    pub const DEADLCK: Stat = Stat(5);
    /// NLM4_ROFS.
    pub const ROFS: Stat = Stat(6);
    /// NLM4_STALE_FH.
    pub const STALE_FH: Stat = Stat(7);
    /// NLM4_FBIG: a range past the largest file offset.
    pub const FBIG: Stat = Stat(8);
    /// NLM4_FAILED.
    pub const FAILED: Stat = Stat(9);
}

/// `nlm4_lock`: who locks which range of which file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lock<'a> {
    /// `caller_name`: the client's host name (octets).
    pub caller: &'a [u8],
    /// The NFS file handle.
    pub fh: &'a [u8],
    /// `oh`: the owner handle.
    pub oh: &'a [u8],
    /// `svid`: the process on the client.
    pub svid: i32,
    /// `l_offset`.
    pub offset: u64,
    /// `l_len` (0: to the end of the file).
    pub len: u64,
}

/// `nlm4_lockargs` (LOCK and NM_LOCK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockArgs<'a> {
    /// `cookie`, echoed in the result.
    pub cookie: &'a [u8],
    /// Wait for the lock (NLM4_BLOCKED, then NLMPROC4_GRANTED).
    pub block: bool,
    /// A write (exclusive) lock.
    pub exclusive: bool,
    /// The lock.
    pub lock: Lock<'a>,
    /// Reclaims a lock held before the server restarted.
    pub reclaim: bool,
    /// The client's status monitor state.
    pub state: i32,
}

/// `nlm4_testargs` (TEST, and GRANTED from server to client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestArgs<'a> {
    /// `cookie`.
    pub cookie: &'a [u8],
    /// A write lock.
    pub exclusive: bool,
    /// The lock.
    pub lock: Lock<'a>,
}

/// `nlm4_cancargs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancArgs<'a> {
    /// `cookie`.
    pub cookie: &'a [u8],
    /// The request cancelled was blocking.
    pub block: bool,
    /// A write lock.
    pub exclusive: bool,
    /// The lock.
    pub lock: Lock<'a>,
}

/// `nlm4_unlockargs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnlockArgs<'a> {
    /// `cookie`.
    pub cookie: &'a [u8],
    /// The lock.
    pub lock: Lock<'a>,
}

/// `nlm4_shareargs` (SHARE and UNSHARE): a DOS-style share reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareArgs<'a> {
    /// `cookie`.
    pub cookie: &'a [u8],
    /// `caller_name`.
    pub caller: &'a [u8],
    /// The NFS file handle.
    pub fh: &'a [u8],
    /// `oh`: the owner handle.
    pub oh: &'a [u8],
    /// `fsh4_mode`: what others are denied (bit 0 read, bit 1 write).
    pub mode: u32,
    /// `fsh4_access`: what this owner does (bit 0 read, bit 1 write).
    pub access: u32,
    /// Reclaims a share held before the server restarted.
    pub reclaim: bool,
}

/// `nlm4_notify` (FREE_ALL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notify<'a> {
    /// The host whose locks go.
    pub name: &'a [u8],
    /// Its status monitor state.
    pub state: i32,
}

/// `nlm4_holder`: the lock in the way of a TEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// A write lock.
    pub exclusive: bool,
    /// Its owner's `svid`.
    pub svid: i32,
    /// Its owner handle (Linux lockd returns none).
    pub oh: Vec<u8>,
    /// `l_offset`.
    pub offset: u64,
    /// `l_len` (0: to the end of the file).
    pub len: u64,
}

fn netobj<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], XdrError> {
    r.get_opaque(MAXNETOBJ_SZ)
}

fn i32_of(r: &mut XdrReader<'_>) -> Result<i32, XdrError> {
    r.get_u32().map(|v| v as i32)
}

/// Trailing octets after the arguments.
fn done(r: &XdrReader<'_>) -> Result<(), XdrError> {
    match r.remaining() {
        0 => Ok(()),
        n => Err(XdrError::Truncated {
            at: r.buffer().len() - n,
            needed: 0,
        }),
    }
}

fn get_fh<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], XdrError> {
    let at = r.buffer().len() - r.remaining();
    let fh = netobj(r)?;
    if fh.len() > MAX_FH {
        return Err(XdrError::TooLong {
            at,
            len: fh.len() as u32,
            max: MAX_FH as u32,
        });
    }
    Ok(fh)
}

fn get_lock<'a>(r: &mut XdrReader<'a>) -> Result<Lock<'a>, XdrError> {
    Ok(Lock {
        caller: r.get_opaque(LM_MAXSTRLEN)?,
        fh: get_fh(r)?,
        oh: netobj(r)?,
        svid: i32_of(r)?,
        offset: r.get_u64()?,
        len: r.get_u64()?,
    })
}

/// Decodes `nlm4_lockargs`.
pub fn decode_lock(b: &[u8]) -> Result<LockArgs<'_>, XdrError> {
    let mut r = XdrReader::new(b);
    let a = LockArgs {
        cookie: netobj(&mut r)?,
        block: r.get_bool()?,
        exclusive: r.get_bool()?,
        lock: get_lock(&mut r)?,
        reclaim: r.get_bool()?,
        state: i32_of(&mut r)?,
    };
    done(&r).map(|_| a)
}

/// Decodes `nlm4_testargs`.
pub fn decode_test(b: &[u8]) -> Result<TestArgs<'_>, XdrError> {
    let mut r = XdrReader::new(b);
    let a = TestArgs {
        cookie: netobj(&mut r)?,
        exclusive: r.get_bool()?,
        lock: get_lock(&mut r)?,
    };
    done(&r).map(|_| a)
}

/// Decodes `nlm4_cancargs`.
pub fn decode_cancel(b: &[u8]) -> Result<CancArgs<'_>, XdrError> {
    let mut r = XdrReader::new(b);
    let a = CancArgs {
        cookie: netobj(&mut r)?,
        block: r.get_bool()?,
        exclusive: r.get_bool()?,
        lock: get_lock(&mut r)?,
    };
    done(&r).map(|_| a)
}

/// Decodes `nlm4_unlockargs`.
pub fn decode_unlock(b: &[u8]) -> Result<UnlockArgs<'_>, XdrError> {
    let mut r = XdrReader::new(b);
    let a = UnlockArgs {
        cookie: netobj(&mut r)?,
        lock: get_lock(&mut r)?,
    };
    done(&r).map(|_| a)
}

/// Decodes `nlm4_shareargs`; a mode or access outside 0..=3 is an error.
pub fn decode_share(b: &[u8]) -> Result<ShareArgs<'_>, XdrError> {
    let mut r = XdrReader::new(b);
    let cookie = netobj(&mut r)?;
    let caller = r.get_opaque(LM_MAXSTRLEN)?;
    let fh = get_fh(&mut r)?;
    let oh = netobj(&mut r)?;
    let at = r.buffer().len() - r.remaining();
    let mode = r.get_u32()?;
    let access = r.get_u32()?;
    if mode > 3 || access > 3 {
        return Err(XdrError::TooLong {
            at,
            len: mode.max(access),
            max: 3,
        });
    }
    let a = ShareArgs {
        cookie,
        caller,
        fh,
        oh,
        mode,
        access,
        reclaim: r.get_bool()?,
    };
    done(&r).map(|_| a)
}

/// Decodes `nlm4_notify`.
pub fn decode_notify(b: &[u8]) -> Result<Notify<'_>, XdrError> {
    let mut r = XdrReader::new(b);
    let a = Notify {
        name: r.get_opaque(LM_MAXNAMELEN)?,
        state: i32_of(&mut r)?,
    };
    done(&r).map(|_| a)
}

/// Encodes `nlm4_res`.
pub fn put_res(out: &mut XdrBuf, cookie: &[u8], stat: Stat) {
    out.put_opaque(cookie);
    out.put_u32(stat.0);
}

/// Encodes `nlm4_testres`: the holder goes with NLM4_DENIED only.
pub fn put_testres(out: &mut XdrBuf, cookie: &[u8], stat: Stat, holder: Option<&Holder>) {
    out.put_opaque(cookie);
    out.put_u32(stat.0);
    if let (Stat::DENIED, Some(h)) = (stat, holder) {
        out.put_bool(h.exclusive);
        out.put_u32(h.svid as u32);
        out.put_opaque(&h.oh);
        out.put_u64(h.offset);
        out.put_u64(h.len);
    }
}

/// Encodes `nlm4_shareres` (`sequence` is 0, as Linux lockd sends it).
pub fn put_shareres(out: &mut XdrBuf, cookie: &[u8], stat: Stat) {
    out.put_opaque(cookie);
    out.put_u32(stat.0);
    out.put_u32(0);
}

fn put_lock(out: &mut XdrBuf, l: &Lock<'_>) {
    out.put_opaque(l.caller);
    out.put_opaque(l.fh);
    out.put_opaque(l.oh);
    out.put_u32(l.svid as u32);
    out.put_u64(l.offset);
    out.put_u64(l.len);
}

/// Encodes `nlm4_lockargs` (a client's LOCK or NM_LOCK).
pub fn encode_lock(a: &LockArgs<'_>) -> Vec<u8> {
    let mut out = XdrBuf::new();
    out.put_opaque(a.cookie);
    out.put_bool(a.block);
    out.put_bool(a.exclusive);
    put_lock(&mut out, &a.lock);
    out.put_bool(a.reclaim);
    out.put_u32(a.state as u32);
    out.0
}

/// Encodes `nlm4_testargs` (a client's TEST; the server's GRANTED callback).
pub fn encode_test(a: &TestArgs<'_>) -> Vec<u8> {
    let mut out = XdrBuf::new();
    out.put_opaque(a.cookie);
    out.put_bool(a.exclusive);
    put_lock(&mut out, &a.lock);
    out.0
}

/// Encodes `nlm4_cancargs`.
pub fn encode_cancel(a: &CancArgs<'_>) -> Vec<u8> {
    let mut out = XdrBuf::new();
    out.put_opaque(a.cookie);
    out.put_bool(a.block);
    out.put_bool(a.exclusive);
    put_lock(&mut out, &a.lock);
    out.0
}

/// Encodes `nlm4_unlockargs`.
pub fn encode_unlock(a: &UnlockArgs<'_>) -> Vec<u8> {
    let mut out = XdrBuf::new();
    out.put_opaque(a.cookie);
    put_lock(&mut out, &a.lock);
    out.0
}

/// Encodes `nlm4_shareargs`.
pub fn encode_share(a: &ShareArgs<'_>) -> Vec<u8> {
    let mut out = XdrBuf::new();
    out.put_opaque(a.cookie);
    out.put_opaque(a.caller);
    out.put_opaque(a.fh);
    out.put_opaque(a.oh);
    out.put_u32(a.mode);
    out.put_u32(a.access);
    out.put_bool(a.reclaim);
    out.0
}

/// Encodes `nlm4_notify`.
pub fn encode_notify(a: &Notify<'_>) -> Vec<u8> {
    let mut out = XdrBuf::new();
    out.put_opaque(a.name);
    out.put_u32(a.state as u32);
    out.0
}

/// Decodes `nlm4_res`: the cookie and the status.
pub fn decode_res(b: &[u8]) -> Result<(&[u8], Stat), XdrError> {
    let mut r = XdrReader::new(b);
    let cookie = netobj(&mut r)?;
    let stat = Stat(r.get_u32()?);
    done(&r).map(|_| (cookie, stat))
}

/// Decodes `nlm4_testres`: the cookie, the status and, with NLM4_DENIED, the holder.
pub fn decode_testres(b: &[u8]) -> Result<(&[u8], Stat, Option<Holder>), XdrError> {
    let mut r = XdrReader::new(b);
    let cookie = netobj(&mut r)?;
    let stat = Stat(r.get_u32()?);
    let holder = match stat {
        Stat::DENIED => Some(Holder {
            exclusive: r.get_bool()?,
            svid: i32_of(&mut r)?,
            oh: netobj(&mut r)?.to_vec(),
            offset: r.get_u64()?,
            len: r.get_u64()?,
        }),
        _ => None,
    };
    done(&r).map(|_| (cookie, stat, holder))
}

/// Decodes `nlm4_shareres`: the cookie, the status and the sequence.
pub fn decode_shareres(b: &[u8]) -> Result<(&[u8], Stat, i32), XdrError> {
    let mut r = XdrReader::new(b);
    let cookie = netobj(&mut r)?;
    let stat = Stat(r.get_u32()?);
    let seq = i32_of(&mut r)?;
    done(&r).map(|_| (cookie, stat, seq))
}
