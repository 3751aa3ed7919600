//! The NLM version 4 service: each procedure decoded, its file handle admitted through the
//! export rules NFSv3 uses, and the request applied to the [`LockTable`].
//!
//! Normal operation: TEST, LOCK, NM_LOCK, CANCEL, UNLOCK, SHARE, UNSHARE and FREE_ALL are
//! served with the results XNFS gives them; the file a request names is its NFSv3 handle,
//! opened as an NFSv3 call would be (the handle's seal, the export's client rules, the
//! credential squashed by the export's options) and checked as Linux nfsd's `nlm_fopen`
//! checks it: a regular file the caller may read, or write for an exclusive lock (the owner
//! always may). Locks a blocked request is given are handed to the [`super::grant`] thread,
//! which tells the client.
//!
//! Recovery: arguments that do not decode are GARBAGE_ARGS; a handle that does not open is
//! NLM4_STALE_FH, any other refusal (another client's export, a directory, no read
//! permission, a credential the export refuses) NLM4_FAILED; a range past the largest offset
//! NLM4_FBIG; during the grace period TEST, UNLOCK, CANCEL, UNSHARE and the requests that do
//! not reclaim are NLM4_DENIED_GRACE_PERIOD, and a reclaim outside it too (Linux lockd's
//! rules). The asynchronous `_MSG` / `_RES` procedures (6–15) and GRANTED, a client's
//! procedure, are PROC_UNAVAIL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rpcrdma_engine::rpc::AcceptStat;

use super::locks::{Grant, GrantArgs, HostKey, LockTable, Want};
use super::proto::{self, Lock, Stat};
use super::records;
use crate::nfs::admit::{ExportTable, Refusal};
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::rpc_tcp::{lock, CallCtx, Handled, RpcService, XdrBuf};
use crate::nfs::types::{access, Fh, Ftype3, Nfsstat3};

/// Where the service finds the export table in force (it changes on reload).
pub type ExportsFn = Arc<dyn Fn() -> Arc<ExportTable> + Send + Sync>;

/// Counters of an NLM service.
#[derive(Debug, Default)]
pub struct NlmStats {
    /// Calls served, by procedure (NULL to FREE_ALL; others counted in the last slot).
    pub calls: [AtomicU64; 24],
    /// Requests answered NLM4_GRANTED (LOCK and NM_LOCK).
    pub granted: AtomicU64,
    /// Requests answered NLM4_DENIED.
    pub denied: AtomicU64,
    /// Requests answered NLM4_BLOCKED.
    pub blocked: AtomicU64,
    /// Requests answered NLM4_DENIED_NOLOCKS (a bound reached).
    pub nolocks: AtomicU64,
    /// Reclaims granted (LOCK with `reclaim` in the grace period after a restart).
    pub reclaims: AtomicU64,
    /// Requests answered NLM4_DENIED_GRACE_PERIOD.
    pub grace_denied: AtomicU64,
    /// TEST and LOCK requests left unanswered while an NFSv4.1 delegation of their file was
    /// recalled (the client sends them again).
    pub deleg_drops: AtomicU64,
    /// NLMPROC4_GRANTED calls the client accepted.
    pub grants_sent: AtomicU64,
    /// NLMPROC4_GRANTED calls the client refused (the lock was released).
    pub grants_refused: AtomicU64,
    /// NLMPROC4_GRANTED calls that failed (no answer; tried again later).
    pub grants_failed: AtomicU64,
}

impl NlmStats {
    pub(super) fn bump(c: &AtomicU64) {
        // Relaxed: a statistic.
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The value of counter `c`.
    pub fn get(c: &AtomicU64) -> u64 {
        // Relaxed: a statistic.
        c.load(Ordering::Relaxed)
    }
}

/// What the service and the grant thread share.
pub(super) struct Shared {
    pub(super) table: Mutex<LockTable>,
    /// The NFSv4.1 lock manager beside this one, when there is one.
    pub(super) cross: Option<Arc<CrossLocks>>,
    pub(super) stats: NlmStats,
    /// Requests are refused until then, but reclaims (`None`: no grace period).
    pub(super) grace_until: Mutex<Option<Instant>>,
    /// Where the hosts that took locks are kept for the next start ([`super::records`]).
    pub(super) records: Option<Mutex<Recorded>>,
}

/// The hosts of this run kept on stable storage.
pub(super) struct Recorded {
    pub(super) dir: std::path::PathBuf,
    pub(super) list: records::Records,
}

impl Shared {
    /// Keeps `host` (which took a lock) for the next start, once per run.
    fn remember(&self, host: &HostKey) {
        let Some(r) = &self.records else { return };
        let mut r = lock(r);
        if r.list.hosts.contains(host) || r.list.hosts.len() >= records::MAX_HOSTS {
            return;
        }
        r.list.hosts.push(host.clone());
        if let Err(e) = records::store(&r.dir, &r.list) {
            tracing::warn!(error = %e, dir = %r.dir.display(), "NLM hosts not kept: a restart will not tell them");
        }
    }

    /// The table, for a decision that may ask the other lock manager: its ordering lock is
    /// taken first ([`crate::nfs::cross_locks`]).
    pub(super) fn deciding(&self) -> (Option<MutexGuard<'_, ()>>, MutexGuard<'_, LockTable>) {
        let order = self.cross.as_ref().map(|c| c.order());
        (order, lock(&self.table))
    }

    pub(super) fn in_grace(&self) -> bool {
        let mut g = lock(&self.grace_until);
        match *g {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *g = None;
                false
            }
            None => false,
        }
    }
}

/// The NLM version 4 program.
pub struct NlmService {
    pub(super) shared: Arc<Shared>,
    exports: ExportsFn,
    grants: Box<dyn Fn(Vec<Grant>) + Send + Sync>,
}

impl NlmService {
    pub(super) fn new(
        shared: Arc<Shared>,
        exports: ExportsFn,
        grants: Box<dyn Fn(Vec<Grant>) + Send + Sync>,
    ) -> NlmService {
        NlmService {
            shared,
            exports,
            grants,
        }
    }

    /// The table key of the file `fh` names, for a caller at `ctx` (NLM4_STALE_FH or
    /// NLM4_FAILED when it may not lock it: read permission, write permission for an
    /// `exclusive` lock, the owner's override either way, as Linux's `nlm_fopen` opens the
    /// file for reading or for writing).
    fn file(&self, ctx: &CallCtx, fh: &[u8], exclusive: bool) -> Result<Vec<u8>, Stat> {
        let fh = Fh::new(fh).ok_or(Stat::STALE_FH)?;
        let table = (self.exports)();
        let cred = ctx.cred.opaque();
        let (adm, inner) = match table.admit_handle(&fh, ctx.peer.ip(), &cred) {
            Ok(a) => a,
            Err(Refusal::Status(Nfsstat3::STALE | Nfsstat3::BADHANDLE)) => {
                return Err(Stat::STALE_FH)
            }
            Err(_) => return Err(Stat::FAILED),
        };
        // The store's ACCESS answer (mode bits and ACLs); reading is also allowed to whoever
        // may execute the file, as Linux nfsd's NFSD_MAY_READ_IF_EXEC.
        let want = match exclusive {
            true => access::MODIFY,
            false => access::READ | access::EXECUTE,
        };
        let (attr, got) = match adm.share.store.access(&adm.cred, &inner, want) {
            Ok(a) => a,
            Err(Nfsstat3::STALE) => return Err(Stat::STALE_FH),
            Err(_) => return Err(Stat::FAILED),
        };
        let owner = attr.uid == adm.cred.uid;
        if attr.ftype != Ftype3::Reg || (got == 0 && !owner) {
            return Err(Stat::FAILED);
        }
        let mut key = adm.share.id.to_vec();
        key.extend_from_slice(inner.as_bytes());
        Ok(key)
    }

    /// The host, file and range a request names.
    fn target(
        &self,
        ctx: &CallCtx,
        l: &Lock<'_>,
        exclusive: bool,
    ) -> Result<(HostKey, Vec<u8>, Want), Stat> {
        let file = self.file(ctx, l.fh, exclusive)?;
        let want = Want::of(l.svid, l.offset, l.len, exclusive)?;
        let host = HostKey {
            addr: ctx.peer.ip(),
            name: l.caller.to_vec(),
        };
        Ok((host, file, want))
    }

    /// Whether a request for `file` (exclusive or not) must go unanswered while the NFSv4.1
    /// delegations it conflicts with are recalled: Linux nfsd's `nlm_fopen` drops it (its
    /// open breaks the leases behind them), and the client sends it again after its timeout,
    /// by when the holder has returned them ([`crate::nfs::cross_locks::DelegView`]).
    fn recalling(&self, file: &[u8], exclusive: bool) -> bool {
        let (Some(cross), Some((export, fh))) = (&self.shared.cross, super::split_key(file)) else {
            return false;
        };
        // The caller's permission was checked with the handle ([`Self::file`]).
        let held = cross.foreign_access(export, fh, exclusive, &|| true);
        if held {
            NlmStats::bump(&self.shared.stats.deleg_drops);
        }
        held
    }

    fn send(&self, grants: Vec<Grant>) {
        if !grants.is_empty() {
            (self.grants)(grants);
        }
    }

    fn test(&self, ctx: &CallCtx, args: &[u8], out: &mut XdrBuf) -> Handled {
        let Ok(a) = proto::decode_test(args) else {
            return AcceptStat::GarbageArgs.into();
        };
        let (stat, holder) = match self.target(ctx, &a.lock, a.exclusive) {
            Err(st) => (st, None),
            Ok((_, file, _)) if self.recalling(&file, a.exclusive) => return Handled::Drop,
            Ok(_) if self.shared.in_grace() => (Stat::DENIED_GRACE_PERIOD, None),
            Ok((host, file, want)) => match self.shared.deciding().1.test(&host, &file, &want) {
                Some(h) => (Stat::DENIED, Some(h)),
                None => (Stat::GRANTED, None),
            },
        };
        proto::put_testres(out, a.cookie, stat, holder.as_ref());
        AcceptStat::Success.into()
    }

    fn lock(&self, ctx: &CallCtx, args: &[u8], out: &mut XdrBuf, monitored: bool) -> Handled {
        let Ok(a) = proto::decode_lock(args) else {
            return AcceptStat::GarbageArgs.into();
        };
        let mut grants = Vec::new();
        let stat = match self.target(ctx, &a.lock, a.exclusive) {
            Err(st) => st,
            Ok((_, file, _)) if self.recalling(&file, a.exclusive) => return Handled::Drop,
            Ok(_) if self.shared.in_grace() != a.reclaim => Stat::DENIED_GRACE_PERIOD,
            Ok((host, file, want)) => {
                let l = &a.lock;
                let args = || GrantArgs {
                    cookie: a.cookie.to_vec(),
                    caller: l.caller.to_vec(),
                    fh: l.fh.to_vec(),
                    oh: l.oh.to_vec(),
                    svid: l.svid,
                    offset: l.offset,
                    len: l.len,
                    exclusive: a.exclusive,
                };
                let st = {
                    let (_order, mut t) = self.shared.deciding();
                    t.lock(&host, &file, want, a.block, args, &mut grants)
                };
                // NM_LOCK asks for no monitoring: its host is not told of a restart.
                if monitored && matches!(st, Stat::GRANTED | Stat::BLOCKED) {
                    self.shared.remember(&host);
                }
                st
            }
        };
        let s = &self.shared.stats;
        match stat {
            Stat::GRANTED if a.reclaim => {
                NlmStats::bump(&s.granted);
                NlmStats::bump(&s.reclaims);
            }
            Stat::GRANTED => NlmStats::bump(&s.granted),
            Stat::DENIED_GRACE_PERIOD => NlmStats::bump(&s.grace_denied),
            Stat::DENIED => NlmStats::bump(&s.denied),
            Stat::BLOCKED => NlmStats::bump(&s.blocked),
            Stat::DENIED_NOLOCKS => NlmStats::bump(&s.nolocks),
            _ => {}
        }
        self.send(grants);
        proto::put_res(out, a.cookie, stat);
        AcceptStat::Success.into()
    }

    fn cancel(&self, ctx: &CallCtx, args: &[u8], out: &mut XdrBuf) -> AcceptStat {
        let Ok(a) = proto::decode_cancel(args) else {
            return AcceptStat::GarbageArgs;
        };
        let stat = if self.shared.in_grace() {
            Stat::DENIED_GRACE_PERIOD
        } else {
            match self.target(ctx, &a.lock, a.exclusive) {
                Err(st) => st,
                Ok((host, file, want)) => lock(&self.shared.table).cancel(&host, &file, &want),
            }
        };
        proto::put_res(out, a.cookie, stat);
        AcceptStat::Success
    }

    fn unlock(&self, ctx: &CallCtx, args: &[u8], out: &mut XdrBuf) -> AcceptStat {
        let Ok(a) = proto::decode_unlock(args) else {
            return AcceptStat::GarbageArgs;
        };
        let mut grants = Vec::new();
        let stat = if self.shared.in_grace() {
            Stat::DENIED_GRACE_PERIOD
        } else {
            // The type of an unlock does not matter (F_UNLCK).
            match self.target(ctx, &a.lock, false) {
                Err(st) => st,
                Ok((host, file, want)) => {
                    let (_order, mut t) = self.shared.deciding();
                    t.unlock(&host, &file, &want, &mut grants)
                }
            }
        };
        self.send(grants);
        proto::put_res(out, a.cookie, stat);
        AcceptStat::Success
    }

    fn share(&self, ctx: &CallCtx, args: &[u8], out: &mut XdrBuf, on: bool) -> AcceptStat {
        let Ok(a) = proto::decode_share(args) else {
            return AcceptStat::GarbageArgs;
        };
        let stat = if self.shared.in_grace() && !(on && a.reclaim) {
            Stat::DENIED_GRACE_PERIOD
        } else {
            match self.file(ctx, a.fh, false) {
                Err(st) => st,
                Ok(file) => {
                    let host = HostKey {
                        addr: ctx.peer.ip(),
                        name: a.caller.to_vec(),
                    };
                    let st = {
                        let mut t = lock(&self.shared.table);
                        if on {
                            t.share(&host, &file, a.oh, a.mode, a.access)
                        } else {
                            t.unshare(&host, &file, a.oh)
                        }
                    };
                    if on && st == Stat::GRANTED {
                        self.shared.remember(&host);
                    }
                    st
                }
            }
        };
        proto::put_shareres(out, a.cookie, stat);
        AcceptStat::Success
    }

    fn free_all(&self, ctx: &CallCtx, args: &[u8]) -> AcceptStat {
        let Ok(a) = proto::decode_notify(args) else {
            return AcceptStat::GarbageArgs;
        };
        let host = HostKey {
            addr: ctx.peer.ip(),
            name: a.name.to_vec(),
        };
        let mut grants = Vec::new();
        {
            let (_order, mut t) = self.shared.deciding();
            t.free_host(&host, &mut grants);
        }
        self.send(grants);
        AcceptStat::Success
    }
}

impl RpcService for NlmService {
    fn program(&self) -> u32 {
        proto::NLM_PROG
    }

    fn versions(&self) -> (u32, u32) {
        (proto::NLM_V4, proto::NLM_V4)
    }

    fn call(&self, ctx: &CallCtx, proc_num: u32, args: &[u8], out: &mut XdrBuf) -> Handled {
        let slot = (proc_num as usize).min(self.shared.stats.calls.len() - 1);
        NlmStats::bump(&self.shared.stats.calls[slot]);
        let st = match proc_num {
            proto::NULL => AcceptStat::Success,
            proto::TEST => return self.test(ctx, args, out),
            proto::LOCK => return self.lock(ctx, args, out, true),
            proto::NM_LOCK => return self.lock(ctx, args, out, false),
            proto::CANCEL => self.cancel(ctx, args, out),
            proto::UNLOCK => self.unlock(ctx, args, out),
            proto::SHARE => self.share(ctx, args, out, true),
            proto::UNSHARE => self.share(ctx, args, out, false),
            proto::FREE_ALL => self.free_all(ctx, args),
            _ => AcceptStat::ProcUnavail,
        };
        st.into()
    }
}
