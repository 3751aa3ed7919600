//! READ data placed through the client's Write chunk (RFC 8267 §5.3, RFC 8166) from
//! registered memory: the store's own block when it can lend one (zero copy, as NFSv3 READ
//! does: [`Store::read_registered`](crate::nfs::store::Store::read_registered)), a registered
//! buffer of the endpoint's pool the store reads into otherwise (one copy).
//!
//! Normal operation: the NFS program's handler serves a COMPOUND whose call offered a Write
//! chunk with lending on ([`super::Compound::lend`]). The first READ that returns data then
//! writes its `eof` and the data's length word into the reply and leaves the data out (neither
//! the octets nor their XDR roundup: RFC 8166 has a Write chunk carry no roundup, and it is not
//! sent); [`send`] writes the reply with the data as one DDP item at that place. Only that one
//! READ's result goes through the Write chunk; later READs carry their data inline. The data
//! a slot keeps for a retry is copied in from the placed buffer ([`Placed::bytes`]), so a
//! retry answered from the slot carries it inline, with the octets of the first reply.
//! A block lent to a reply is not changed while the reply holds it: the memory store copies
//! it on the next write (copy on write), so the reply in flight keeps the old octets and later
//! READs see the new ones, as for NFSv3.
//!
//! Recovery: a store that keeps no registered blocks (the directory backend, a range across
//! two blocks, a hole, a small file on the heap) is read into a pool buffer; when the pool has
//! none free the READ falls back to its data inline in the reply (the handler copies it into a
//! DDP buffer if one frees up by then, [`send`]).

use std::sync::atomic::{AtomicU64, Ordering};

use rpcrdma_mempool::PoolBuf;
use rpcrdma_poller::{Reject, ReplyBuilder};

use crate::nfs::store::SharedRead;

use super::xdr::{io_error, Enc, Status};
use super::{Compound, Cur, DdpAt};

/// Where the first READ's data is, when it is not in the reply.
#[derive(Debug)]
pub enum Data {
    /// The store's registered block (zero copy).
    Store(SharedRead),
    /// A pool buffer the store read into: its first octets.
    Copy(PoolBuf, usize),
}

/// The first READ's data placed through the Write chunk: where it goes in the reply (the
/// offset right after its length word) and the registered memory that holds it.
#[derive(Debug)]
pub struct Placed {
    /// Offset in the reply of the data (which the reply does not hold).
    pub at: usize,
    /// The data.
    pub data: Data,
}

impl Placed {
    /// The data's octets.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Store(r) => r.buf.get(r.off..r.off + r.len).unwrap_or_default(),
            Data::Copy(b, n) => b.get(..*n).unwrap_or_default(),
        }
    }
}

/// How READ results went through a Write chunk.
#[derive(Debug, Default)]
pub struct ReadCounters {
    /// READ data sent as a DDP item (into the client's Write chunk).
    ddp: AtomicU64,
    /// Of those, data sent from the store's own registered block.
    zero_copy: AtomicU64,
}

impl ReadCounters {
    /// `nfs4_read_ddp` and `nfs4_read_zero_copy`.
    pub fn get(&self) -> [(&'static str, u64); 2] {
        // Relaxed: counters, read by `nfsd-stat` and the metrics port.
        [
            ("nfs4_read_ddp", self.ddp.load(Ordering::Relaxed)),
            (
                "nfs4_read_zero_copy",
                self.zero_copy.load(Ordering::Relaxed),
            ),
        ]
    }

    fn bump(&self, zero_copy: bool) {
        self.ddp.fetch_add(1, Ordering::Relaxed);
        if zero_copy {
            self.zero_copy.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// READ4resok (`eof`, then the data's length word) of at most `count` octets at `offset` with
/// the data left in registered memory, noted in `c.placed`. `None` when no registered memory
/// is at hand (no pool, or no buffer free): the caller writes the data inline.
pub fn read(
    c: &mut Compound<'_>,
    cur: &Cur,
    offset: u64,
    count: u32,
    out: &mut Enc,
) -> Option<Result<(), Status>> {
    let store = &cur.share.store;
    let count = count as usize;
    let (data, eof) = match store.read_registered(&cur.cred, &cur.fh, offset, count) {
        Some(Ok(r)) => {
            let eof = r.eof;
            (Data::Store(r), eof)
        }
        Some(Err(e)) => return Some(Err(io_error(&**store, &cur.fh, e))),
        None => {
            let mut buf = c.srv.config().pool.as_ref()?.get()?;
            let n = count.min(buf.len());
            match store.read(&cur.cred, &cur.fh, offset, &mut buf[..n]) {
                Ok((got, eof)) => (Data::Copy(buf, got), eof),
                Err(e) => return Some(Err(io_error(&**store, &cur.fh, e))),
            }
        }
    };
    out.u32(u32::from(eof));
    let placed = Placed {
        at: out.len() + 4,
        data,
    };
    let len = placed.bytes().len();
    out.u32(len as u32);
    // Nothing read (at or past the end): no DDP item; a later READ may use the Write chunk.
    if len > 0 {
        c.placed = Some(placed);
    }
    Some(Ok(()))
}

/// Writes `reply` into the RPC reply. The first READ's data goes as a DDP item: from
/// `placed` (registered memory, which the reply does not hold), or copied from the reply at
/// `read_at` into a registered buffer when one is free (inline otherwise). The data's XDR
/// roundup is not sent (RFC 8166).
pub fn send(
    counters: &ReadCounters,
    pool: Option<&rpcrdma_poller::BufPool>,
    out: &mut ReplyBuilder<'_>,
    reply: &[u8],
    read_at: Option<DdpAt>,
    placed: Option<Placed>,
) -> Result<(), Reject> {
    let sys = |_| Reject::SystemErr;
    if let Some(p) = placed {
        let (Some(head), Some(rest)) = (reply.get(..p.at), reply.get(p.at..)) else {
            return Err(Reject::SystemErr);
        };
        out.put(head).map_err(sys)?;
        let zero_copy = matches!(p.data, Data::Store(_));
        match p.data {
            Data::Store(r) => out
                .ddp_shared(r.buf, r.off, r.len)
                .map_err(|_| Reject::SystemErr),
            Data::Copy(b, n) => out.ddp(b, n).map_err(|_| Reject::SystemErr),
        }?;
        counters.bump(zero_copy);
        return out.put(rest).map_err(sys);
    }
    let (Some((at, n)), Some(pool)) = (read_at, pool) else {
        return out.put(reply).map_err(sys);
    };
    let Some(mut buf) = pool.get().filter(|b| b.len() >= n) else {
        return out.put(reply).map_err(sys);
    };
    let (Some(data), Some(rest)) = (reply.get(at..at + n), reply.get(at + n.div_ceil(4) * 4..))
    else {
        return Err(Reject::SystemErr);
    };
    buf[..n].copy_from_slice(data);
    out.put(&reply[..at]).map_err(sys)?;
    out.ddp(buf, n).map_err(|_| Reject::SystemErr)?;
    counters.bump(false);
    out.put(rest).map_err(sys)
}
