//! The NFSv4.1 grace period after a server restart (RFC 8881 §8.4.2, §9.6.2, §18.51): which
//! clients may reclaim, what is refused while they do, and when it ends.
//!
//! Normal operation: with a state directory ([`Nfs41::start_recovery`]) the server keeps its
//! clients on stable storage ([`super::clientdb`]): a client is recorded when it sends
//! RECLAIM_COMPLETE (as Linux nfsd records it), with its `co_ownerid` and the principal of
//! its EXCHANGE_ID, and its record goes when the client does (lease expiry,
//! DESTROY_CLIENTID, a new client verifier). At start-up the records of the previous run are
//! the clients that may reclaim; when there are any the server is in its grace period for
//! one lease time: OPEN with CLAIM_PREVIOUS and LOCK with `reclaim` set are accepted from a
//! recorded client (same owner, same principal) until its RECLAIM_COMPLETE; every other OPEN
//! and LOCK, LOCKT, I/O with the anonymous stateid, REMOVE and RENAME answer NFS4ERR_GRACE
//! (the state they would need, or the name a reclaim needs, may be about to be reclaimed; Linux
//! nfsd refuses the same). The grace period ends when the lease time has
//! passed or when every recorded client has sent RECLAIM_COMPLETE; the records of clients
//! that did not come back are then dropped from the file.
//!
//! Recovery: a reclaim outside the grace period, or from a client after its own
//! RECLAIM_COMPLETE, is NFS4ERR_NO_GRACE; a reclaim from a client the previous run did not
//! record NFS4ERR_RECLAIM_BAD. A client record file that does not load is rejected (no
//! client may reclaim, no grace period, the reason reported) and overwritten by the next
//! record. The file holds at most [`clientdb::MAX_RECORDS`] clients; a record past that is
//! not kept (that client cannot reclaim after the next restart) and counted, as are write
//! failures. Without a state directory nothing is recorded and there is no grace period.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::clientdb::{self, Record};
use super::xdr::{st, Status};
use super::Nfs41;

/// NFS4ERR_GRACE.
pub const GRACE: Status = 10013;
/// NFS4ERR_NO_GRACE.
pub const NO_GRACE: Status = 10033;
/// NFS4ERR_RECLAIM_BAD.
pub const RECLAIM_BAD: Status = 10034;

/// What the grace period counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GraceCounters {
    /// Reclaims accepted (OPEN CLAIM_PREVIOUS, LOCK reclaim).
    pub reclaims: u64,
    /// Reclaims refused (NFS4ERR_NO_GRACE, NFS4ERR_RECLAIM_BAD).
    pub reclaims_refused: u64,
    /// Operations answered NFS4ERR_GRACE.
    pub grace_refused: u64,
    /// Client records not kept because the file was full.
    pub records_full: u64,
    /// Writes of the client record file that failed.
    pub write_errors: u64,
}

/// The client records and the grace period of one server.
#[derive(Default)]
pub struct Recovery {
    inner: Mutex<Inner>,
    /// In the grace period (read without the lock on every I/O).
    active: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// The state directory; `None`: nothing is recorded.
    dir: Option<PathBuf>,
    /// The previous run's clients (owner -> principal), while the grace period lasts.
    reclaimable: HashMap<Vec<u8>, Vec<u8>>,
    /// Owners of `reclaimable` that sent RECLAIM_COMPLETE.
    completed: HashSet<Vec<u8>>,
    /// This run's recorded clients (owner -> principal).
    current: HashMap<Vec<u8>, Vec<u8>>,
    /// When the grace period ends (the server clock's milliseconds).
    ends_ms: u64,
    counters: GraceCounters,
}

impl Inner {
    /// Writes the records (this run's, and the previous run's while they may still reclaim).
    fn write(&mut self) {
        let Some(dir) = &self.dir else {
            return;
        };
        let mut all: Vec<Record> = self
            .current
            .iter()
            .map(|(o, p)| Record {
                owner: o.clone(),
                principal: p.clone(),
            })
            .collect();
        for (o, p) in &self.reclaimable {
            if !self.current.contains_key(o) {
                all.push(Record {
                    owner: o.clone(),
                    principal: p.clone(),
                });
            }
        }
        if let Err(e) = clientdb::store(dir, &all) {
            self.counters.write_errors += 1;
            tracing::warn!(dir = %dir.display(), error = %e, "NFSv4.1 client records not written");
        }
    }

    /// Records on the file, the previous run's included.
    fn records(&self) -> usize {
        self.current.len()
            + self
                .reclaimable
                .keys()
                .filter(|o| !self.current.contains_key(*o))
                .count()
    }

    /// Ends the grace period: the previous run's records that were not reclaimed go.
    fn end(&mut self, active: &AtomicBool) {
        active.store(false, Ordering::Release);
        if self.reclaimable.is_empty() {
            return;
        }
        self.reclaimable.clear();
        self.completed.clear();
        self.write();
    }
}

impl Recovery {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Nfs41 {
    /// Keeps client records in directory `dir` (created, mode 0700, when missing) and enters
    /// the grace period when the previous run left any: the number of clients that may
    /// reclaim. A record file that does not load is rejected: `Err` names why, and the server
    /// runs without a grace period (no client may reclaim).
    pub fn start_recovery(&self, dir: &Path) -> Result<usize, String> {
        let now = self.now_ms();
        let mut g = self.recovery.lock();
        g.dir = Some(dir.to_path_buf());
        clientdb::ensure_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let records = clientdb::load(dir)
            .map_err(|e| format!("{}: {e}", dir.join(clientdb::FILE).display()))?;
        let n = records.len();
        g.reclaimable = records
            .into_iter()
            .map(|r| (r.owner, r.principal))
            .collect();
        g.completed.clear();
        g.ends_ms = now.saturating_add(u64::from(self.config().limits.lease_secs) * 1000);
        self.recovery.active.store(n > 0, Ordering::Release);
        Ok(n)
    }

    /// Whether the server is in its grace period (ending it when the lease time has passed).
    pub fn in_grace(&self) -> bool {
        if !self.recovery.active.load(Ordering::Acquire) {
            return false;
        }
        let now = self.now_ms();
        let mut g = self.recovery.lock();
        if now >= g.ends_ms {
            g.end(&self.recovery.active);
        }
        self.recovery.active.load(Ordering::Acquire)
    }

    /// What the grace period allows an OPEN or LOCK of `client`: a reclaim (`reclaim`) only
    /// within it, from a recorded client that has not sent RECLAIM_COMPLETE; anything else
    /// only outside it.
    pub fn grace_check(&self, client: u64, reclaim: bool) -> Result<(), Status> {
        if !reclaim {
            return self.grace_io();
        }
        let grace = self.in_grace();
        let me = {
            let s = self.state();
            s.clients
                .get(&client)
                .map(|cl| (cl.owner.clone(), cl.principal.clone(), cl.reclaim_done))
        };
        let mut g = self.recovery.lock();
        let verdict = match me {
            _ if !grace => Err(NO_GRACE),
            Some((_, _, true)) => Err(NO_GRACE),
            Some((owner, principal, false)) if g.reclaimable.get(&owner) == Some(&principal) => {
                Ok(())
            }
            _ => Err(RECLAIM_BAD),
        };
        match verdict {
            Ok(()) => g.counters.reclaims += 1,
            Err(_) => g.counters.reclaims_refused += 1,
        }
        verdict
    }

    /// NFS4ERR_GRACE within the grace period (LOCKT, I/O with a special stateid, REMOVE,
    /// RENAME).
    pub fn grace_io(&self) -> Result<(), Status> {
        if self.in_grace() {
            self.recovery.lock().counters.grace_refused += 1;
            return Err(GRACE);
        }
        Ok(())
    }

    /// Client `client` sent RECLAIM_COMPLETE: it is recorded (it may reclaim after a
    /// restart), and the grace period ends when it was the last recorded client to finish.
    pub fn reclaim_completed(&self, client: u64) -> Result<(), Status> {
        let me = {
            let s = self.state();
            let cl = s.clients.get(&client).ok_or(st::STALE_CLIENTID)?;
            (cl.owner.clone(), cl.principal.clone())
        };
        let grace = self.in_grace();
        let mut g = self.recovery.lock();
        if g.dir.is_none() {
            return Ok(());
        }
        if grace && g.reclaimable.get(&me.0) == Some(&me.1) {
            g.completed.insert(me.0.clone());
        }
        if g.current.get(&me.0) != Some(&me.1) {
            if !g.current.contains_key(&me.0)
                && !g.reclaimable.contains_key(&me.0)
                && g.records() >= clientdb::MAX_RECORDS
            {
                g.counters.records_full += 1;
            } else {
                g.current.insert(me.0, me.1);
                g.write();
            }
        }
        if grace && g.completed.len() == g.reclaimable.len() {
            g.end(&self.recovery.active);
        }
        Ok(())
    }

    /// The clients of `owners` are gone (expired, destroyed, replaced): their records go.
    pub fn forget_clients(&self, owners: &[Vec<u8>]) {
        let mut g = self.recovery.lock();
        let before = g.current.len();
        for o in owners {
            g.current.remove(o);
        }
        if g.current.len() != before {
            g.write();
        }
    }

    /// What the state tables left to do outside their mutex since the last call: the
    /// stable-storage records of the clients removed are forgotten, and the NLM lock manager
    /// is told of the files whose NFSv4.1 locks went with their client.
    pub fn settle(&self) {
        let (gone, released) = {
            let mut s = self.state();
            (std::mem::take(&mut s.gone), std::mem::take(&mut s.released))
        };
        if !gone.is_empty() {
            self.forget_clients(&gone);
        }
        if let Some(x) = self.cross() {
            for (export, fh) in released {
                x.v4_released(export, fh.as_bytes());
            }
        }
    }

    /// The grace period's counters, as `nfsd-stat` names (`nfs4_grace` is 1 within it).
    pub fn recovery_counters(&self) -> Vec<(&'static str, u64)> {
        let grace = u64::from(self.in_grace());
        let g = self.recovery.lock();
        let c = g.counters;
        vec![
            ("nfs4_grace", grace),
            ("nfs4_client_records", g.records() as u64),
            ("nfs4_reclaims", c.reclaims),
            ("nfs4_reclaims_refused", c.reclaims_refused),
            ("nfs4_grace_refused", c.grace_refused),
            ("nfs4_client_records_full", c.records_full),
            ("nfs4_client_record_write_errors", c.write_errors),
        ]
    }
}
