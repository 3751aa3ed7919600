//! Counters of the NFS server: calls per procedure, the shapes of the calls' chunks, the
//! duplicate request cache, and errors by kind; printed as `nfsd-stat NAME VALUE` lines (at exit,
//! on SIGUSR1, on demand) and served on the metrics port as the `rpcrdma_nfsd_*` families
//! ([`Collector`]; docs/observability.md).
//!
//! Normal operation: every handler bumps a few relaxed atomic counters (several reactors or
//! workers write; `fetch_add` is the only read-modify-write, no lock). Readers take a
//! [`NfsStats::lines`] snapshot: each counter is exact, the set is not one atomic cut.
//! Recovery: nothing to recover; counters wrap at 2^64.

use core::sync::atomic::{AtomicU64, Ordering};

use rpcrdma_poller::metrics::{Collector, Exposition, Kind};
use rpcrdma_poller::CallTransport;

use crate::nfs::types::Nfsstat3;

/// Procedures of NFSv3 (0..=21).
pub const PROCS: usize = 22;

/// NFS3ERR_* statuses counted one by one (anything else is counted as `other`).
const ERRS: [Nfsstat3; 24] = [
    Nfsstat3::PERM,
    Nfsstat3::NOENT,
    Nfsstat3::IO,
    Nfsstat3::NXIO,
    Nfsstat3::ACCES,
    Nfsstat3::EXIST,
    Nfsstat3::XDEV,
    Nfsstat3::NOTDIR,
    Nfsstat3::ISDIR,
    Nfsstat3::INVAL,
    Nfsstat3::FBIG,
    Nfsstat3::NOSPC,
    Nfsstat3::ROFS,
    Nfsstat3::MLINK,
    Nfsstat3::NAMETOOLONG,
    Nfsstat3::NOTEMPTY,
    Nfsstat3::STALE,
    Nfsstat3::BADHANDLE,
    Nfsstat3::NOT_SYNC,
    Nfsstat3::BAD_COOKIE,
    Nfsstat3::NOTSUPP,
    Nfsstat3::TOOSMALL,
    Nfsstat3::BADTYPE,
    Nfsstat3::JUKEBOX,
];

/// The server's counters.
#[derive(Debug, Default)]
pub struct NfsStats {
    calls: [AtomicU64; PROCS],
    /// Calls that came with Read chunks (Position Zero included).
    pub chunk_read: AtomicU64,
    /// Calls that offered Write chunks.
    pub chunk_write: AtomicU64,
    /// Calls that offered a Reply chunk.
    pub chunk_reply: AtomicU64,
    /// Position-Zero long calls (RDMA_NOMSG).
    pub chunk_pz: AtomicU64,
    /// READ results placed by DDP (into a Write chunk).
    pub read_ddp: AtomicU64,
    /// READ results placed by DDP straight from the store's registered block (no copy; also
    /// counted in `read_ddp`).
    pub read_zero_copy: AtomicU64,
    /// READ results sent inline (no Write chunk offered).
    pub read_inline: AtomicU64,
    /// Retransmissions answered from the duplicate request cache.
    pub drc_hits: AtomicU64,
    /// Retransmissions that arrived while the first call was still running (JUKEBOX).
    pub drc_inprogress: AtomicU64,
    /// Replies the cache stored.
    pub drc_stored: AtomicU64,
    /// Replies the cache evicted to stay within its bounds.
    pub drc_evicted: AtomicU64,
    /// Connections dropped on purpose (`--drop-every`).
    pub dropped: AtomicU64,
    /// Calls of a worker-mode store served on the reactor ([`Store::run_on_reactor`]; a
    /// GETATTR answered by [`Store::getattr_now`] is not counted).
    ///
    /// [`Store::run_on_reactor`]: crate::nfs::store::Store::run_on_reactor
    /// [`Store::getattr_now`]: crate::nfs::store::Store::getattr_now
    pub on_reactor: AtomicU64,
    /// Calls answered NFS3ERR_JUKEBOX while an NFSv4.1 delegation of a file they read or
    /// change was being recalled (also counted as JUKEBOX).
    pub deleg_waits: AtomicU64,
    /// NFSACL GETACL calls (program 100227).
    pub acl_get: AtomicU64,
    /// NFSACL SETACL calls.
    pub acl_set: AtomicU64,
    /// Calls answered GARBAGE_ARGS.
    pub garbage_args: AtomicU64,
    /// Calls answered SYSTEM_ERR (no buffer for a result, encoding failed).
    pub system_err: AtomicU64,
    /// Calls answered MSG_DENIED / AUTH_ERROR (a credential flavor the export does not
    /// accept, or one that does not decode).
    pub auth_errors: AtomicU64,
    errs: [AtomicU64; ERRS.len()],
    err_other: AtomicU64,
}

#[inline]
fn inc(c: &AtomicU64) {
    // Relaxed: a statistic; several threads add, readers want some recent value.
    c.fetch_add(1, Ordering::Relaxed);
}

impl NfsStats {
    /// Counts a call of `proc_num` and the shape of its chunks.
    pub fn call(&self, proc_num: u32, t: &CallTransport, write_chunks: usize) {
        if let Some(c) = self.calls.get(proc_num as usize) {
            inc(c);
        }
        self.chunks(t, write_chunks);
    }

    /// Counts an NFSACL call (GETACL when `get`, else SETACL) and the shape of its chunks.
    pub fn acl_call(&self, get: bool, t: &CallTransport, write_chunks: usize) {
        inc(if get { &self.acl_get } else { &self.acl_set });
        self.chunks(t, write_chunks);
    }

    fn chunks(&self, t: &CallTransport, write_chunks: usize) {
        if t.read_segments > 0 {
            inc(&self.chunk_read);
        }
        if write_chunks > 0 {
            inc(&self.chunk_write);
        }
        if t.reply_chunk.is_some() {
            inc(&self.chunk_reply);
        }
        if t.position_zero {
            inc(&self.chunk_pz);
        }
    }

    /// Counts a status answered (NFS3_OK is not counted).
    pub fn status(&self, s: Nfsstat3) {
        if s == Nfsstat3::OK {
            return;
        }
        match ERRS.iter().position(|e| *e == s) {
            Some(i) => inc(&self.errs[i]),
            None => inc(&self.err_other),
        }
    }

    /// Bumps one of the public counters.
    pub fn bump(&self, c: &AtomicU64) {
        inc(c);
    }

    /// Calls of procedure `p` so far.
    pub fn calls(&self, p: u32) -> u64 {
        self.calls
            .get(p as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Answers of status `s` so far.
    pub fn errors(&self, s: Nfsstat3) -> u64 {
        ERRS.iter()
            .position(|e| *e == s)
            .map_or(0, |i| self.errs[i].load(Ordering::Relaxed))
    }

    /// Every counter as (name, value), in a stable order.
    pub fn lines(&self) -> Vec<(String, u64)> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut v = Vec::with_capacity(PROCS + ERRS.len() + 16);
        let total: u64 = self.calls.iter().map(g).sum();
        v.push(("calls.total".to_string(), total));
        for (i, c) in self.calls.iter().enumerate() {
            v.push((format!("calls.{}", super::proto::proc_name(i as u32)), g(c)));
        }
        for (n, c) in [
            ("chunks.read", &self.chunk_read),
            ("chunks.write", &self.chunk_write),
            ("chunks.reply", &self.chunk_reply),
            ("chunks.pz", &self.chunk_pz),
            ("read.ddp", &self.read_ddp),
            ("read.zero_copy", &self.read_zero_copy),
            ("read.inline", &self.read_inline),
            ("drc.hits", &self.drc_hits),
            ("drc.inprogress", &self.drc_inprogress),
            ("drc.stored", &self.drc_stored),
            ("drc.evicted", &self.drc_evicted),
            ("conn.dropped", &self.dropped),
            ("reactor.calls", &self.on_reactor),
            ("deleg.waits", &self.deleg_waits),
            ("nfsacl.GETACL", &self.acl_get),
            ("nfsacl.SETACL", &self.acl_set),
            ("errors.GARBAGE_ARGS", &self.garbage_args),
            ("errors.SYSTEM_ERR", &self.system_err),
            ("errors.AUTH_ERROR", &self.auth_errors),
        ] {
            v.push((n.to_string(), g(c)));
        }
        for (i, e) in ERRS.iter().enumerate() {
            let name = e.name().trim_start_matches("NFS3ERR_");
            v.push((format!("errors.{name}"), g(&self.errs[i])));
        }
        v.push(("errors.other".to_string(), g(&self.err_other)));
        v
    }
}

/// A counter family of labelled samples: (family, help, label name, [(label value, counter)]).
type Labelled<'a> = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(&'a str, &'a AtomicU64)>,
);

impl NfsStats {
    /// The labelled counter families, in exposition order.
    fn families(&self) -> [Labelled<'_>; 5] {
        [
            (
                "rpcrdma_nfsd_nfsacl_calls_total",
                "NFSACL calls by procedure (program 100227 version 3: POSIX ACLs of NFSv3 \
                 clients; their statuses count in rpcrdma_nfsd_status_total).",
                "proc",
                vec![("GETACL", &self.acl_get), ("SETACL", &self.acl_set)],
            ),
            (
                "rpcrdma_nfsd_chunk_calls_total",
                "NFS calls by the RPC-over-RDMA chunks they came with (RFC 8166): read (Read \
                 chunks, Position Zero included), write (Write list offered), reply (Reply \
                 chunk offered), position_zero (long calls, RDMA_NOMSG).",
                "chunk",
                vec![
                    ("read", &self.chunk_read),
                    ("write", &self.chunk_write),
                    ("reply", &self.chunk_reply),
                    ("position_zero", &self.chunk_pz),
                ],
            ),
            (
                "rpcrdma_nfsd_reads_total",
                "READ results by how they were sent: ddp (into the client's Write chunk), \
                 zero_copy (DDP straight from the store's registered block, also counted in \
                 ddp), inline.",
                "path",
                vec![
                    ("ddp", &self.read_ddp),
                    ("zero_copy", &self.read_zero_copy),
                    ("inline", &self.read_inline),
                ],
            ),
            (
                "rpcrdma_nfsd_reply_cache_total",
                "Duplicate request cache events: hit (a retransmission answered from the \
                 cache), in_progress (a retransmission of a call still running, answered \
                 NFS3ERR_JUKEBOX), stored, evicted.",
                "event",
                vec![
                    ("hit", &self.drc_hits),
                    ("in_progress", &self.drc_inprogress),
                    ("stored", &self.drc_stored),
                    ("evicted", &self.drc_evicted),
                ],
            ),
            (
                "rpcrdma_nfsd_rpc_errors_total",
                "Calls answered with an RPC-level error (RFC 5531): garbage_args, system_err, \
                 auth_error.",
                "error",
                vec![
                    ("garbage_args", &self.garbage_args),
                    ("system_err", &self.system_err),
                    ("auth_error", &self.auth_errors),
                ],
            ),
        ]
    }
}

impl Collector for NfsStats {
    fn collect(&self, e: &mut Exposition) {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let name = "rpcrdma_nfsd_calls_total";
        e.family(name, "NFSv3 calls by procedure (RFC 1813).", Kind::Counter);
        for (i, c) in self.calls.iter().enumerate() {
            let p = super::proto::proc_name(i as u32);
            e.sample(name, &[("proc", p)], g(c));
        }
        let name = "rpcrdma_nfsd_status_total";
        e.family(
            name,
            "NFSv3 replies by error status (NFS3ERR_*, RFC 1813; NFS3_OK not counted; \
             other: any status not listed).",
            Kind::Counter,
        );
        for (i, s) in ERRS.iter().enumerate() {
            e.sample(name, &[("status", s.name())], g(&self.errs[i]));
        }
        e.sample(name, &[("status", "other")], g(&self.err_other));
        for (name, help, label, rows) in self.families() {
            e.family(name, help, Kind::Counter);
            for (v, c) in rows {
                e.sample(name, &[(label, v)], g(c));
            }
        }
        let name = "rpcrdma_nfsd_dropped_connections_total";
        e.family(
            name,
            "Connections the server dropped on purpose (--drop-every, fault testing).",
            Kind::Counter,
        );
        e.sample(name, &[], g(&self.dropped));
        let name = "rpcrdma_nfsd_delegation_waits_total";
        e.family(
            name,
            "NFSv3 calls answered NFS3ERR_JUKEBOX while an NFSv4.1 delegation of a file they \
             read or change was recalled (RFC 8881 section 10.4.6).",
            Kind::Counter,
        );
        e.sample(name, &[], g(&self.deleg_waits));
    }
}
