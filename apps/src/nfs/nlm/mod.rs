//! The Network Lock Manager, version 4 (program 100021; X/Open XNFS, RFC 1813 §6): the
//! byte-range locks and share reservations of NFSv3 clients, served over TCP as the Linux
//! client's lockd expects of a server it mounts without `nolock`.
//!
//! - [`proto`]: the `nlm4_*` wire format, both directions.
//! - [`locks`]: the lock table (POSIX ranges, blocked requests, shares, per-host bounds).
//! - [`mod@service`]: the procedures, with each handle admitted through the export rules.
//! - [`grant`]: the NLMPROC4_GRANTED calls to clients whose blocked requests got their lock.
//! - [`model`], [`detached`]: a reference model of the lock table and a call outside any
//!   connection, for the `nlm` fuzz target and the tests.
//!
//! Normal operation: [`NlmServer::start`] listens on a TCP port (registered with rpcbind by
//! the daemon as 100021 version 4 over "tcp", where the Linux client's lockd looks for it:
//! there is no mount option naming the port) and serves every connection on one thread
//! ([`crate::nfs::rpc_tcp`]). A lock request names the file by its NFSv3 handle; the locks
//! live in the server's memory, shared by every export and both stores, and no process on the
//! server host sees them.
//!
//! Recovery: a client that stops answering keeps its locks until it unlocks them, a FREE_ALL
//! names it, or the server stops; the server asks no status monitor (NSM) to watch its
//! clients and sends no SM_NOTIFY after a restart, so a client does not learn that its locks
//! were lost with a restart (a grace period, [`NlmConfig::grace`], can still be set for
//! clients that reclaim on their own). Wire and resource errors are answered as
//! [`mod@service`] and [`locks`] describe; a GRANTED call that fails is retried ([`grant`]).

pub mod detached;
pub mod grant;
pub mod locks;
pub mod model;
pub mod nsm;
pub mod proto;
pub mod records;
pub mod register;
pub mod service;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_poller::metrics::{Collector, Exposition, Kind};

use crate::nfs::cross_locks::{CrossLocks, Foreign, LockView};
use crate::nfs::rpc_tcp::{lock, RpcService, ServerConfig, TcpRpcServer};

pub use locks::Limits;
pub use service::{ExportsFn, NlmService, NlmStats};

/// Settings of an [`NlmServer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlmConfig {
    /// Bounds of the lock table.
    pub limits: Limits,
    /// A grace period from the start: only reclaims are served in it (`None`: only after a
    /// restart that told clients, for [`NlmConfig::restart_grace`]).
    pub grace: Option<Duration>,
    /// Where the hosts that take locks and the state number are kept ([`records`]): at the
    /// next start they are told with SM_NOTIFY and reclaim in a grace period (`None`: not
    /// kept, no one told).
    pub state_dir: Option<std::path::PathBuf>,
    /// The grace period after a restart that told clients (50 s, Linux lockd's default).
    pub restart_grace: Duration,
    /// The name SM_NOTIFY gives this server (the name clients mount it by; `None`: the host
    /// name).
    pub mon_name: Option<String>,
    /// Serve the status monitor's SM_NOTIFY (UDP and TCP), so clients that reboot free
    /// their locks.
    pub nsm: bool,
    /// The port of the clients' rpcbind, asked where their lockd listens (111).
    pub rpcbind_port: u16,
    /// The TCP server's limits (records are small: 8 KiB by default here).
    pub tcp: ServerConfig,
}

impl Default for NlmConfig {
    fn default() -> Self {
        NlmConfig {
            limits: Limits::default(),
            grace: None,
            state_dir: None,
            restart_grace: Duration::from_secs(50),
            mon_name: None,
            nsm: true,
            rpcbind_port: 111,
            tcp: ServerConfig {
                max_record: 8 * 1024,
                ..ServerConfig::default()
            },
        }
    }
}

/// Sizes of the lock table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableSizes {
    /// Hosts holding or waiting for anything.
    pub hosts: usize,
    /// Files with locks, waiting requests or shares.
    pub files: usize,
    /// Lock ranges held.
    pub locks: usize,
    /// Requests waiting.
    pub waiting: usize,
}

/// A running NLM server.
pub struct NlmServer {
    rpc: Option<TcpRpcServer>,
    nsm: Option<(nsm::UdpServer, TcpRpcServer)>,
    granter: Option<grant::Granter>,
    shared: Arc<service::Shared>,
    /// The hosts of the run before, to tell once this server can be found
    /// ([`NlmServer::tell_restart`]).
    restart: Mutex<Option<Restart>>,
}

/// What [`NlmServer::tell_restart`] sends: to the hosts of the run before, this server's name
/// and new state number; their rpcbind's port.
struct Restart {
    hosts: Vec<locks::HostKey>,
    name: String,
    state: u32,
    rpcbind_port: u16,
}

/// The records of the run before (logged when unreadable), and this run's, kept with the next
/// state number.
fn restart_records(dir: &std::path::Path) -> (records::Records, Option<Mutex<service::Recorded>>) {
    let old = records::load(dir).unwrap_or_else(|e| {
        tracing::warn!(error = ?e, dir = %dir.display(), "NLM hosts unreadable: no client is told of the restart");
        records::Records::default()
    });
    let list = records::Records {
        state: records::next_state(old.state),
        hosts: Vec::new(),
    };
    // The hosts of the run before are told now: the file forgets them (and takes the new
    // state number). Otherwise it is first written when a host takes a lock.
    if !old.hosts.is_empty() {
        if let Err(e) = records::store(dir, &list) {
            tracing::warn!(error = %e, dir = %dir.display(), "NLM hosts not kept: a restart will not tell them");
        }
    }
    let kept = service::Recorded {
        dir: dir.to_path_buf(),
        list,
    };
    (old, Some(Mutex::new(kept)))
}

/// This host's name (`gethostname`), or "localhost".
fn host_name() -> String {
    let mut b = [0u8; 256];
    // SAFETY: `b` is writable for its length; the name is NUL-terminated within it or cut.
    let r = unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len() - 1) };
    let n = b.iter().position(|&c| c == 0).unwrap_or(0);
    match (r, std::str::from_utf8(&b[..n])) {
        (0, Ok(s)) if !s.is_empty() => s.to_string(),
        _ => "localhost".into(),
    }
}

fn shared(cfg: &NlmConfig, cross: Option<Arc<CrossLocks>>) -> Arc<service::Shared> {
    shared_with(cfg, cross, None, None)
}

fn shared_with(
    cfg: &NlmConfig,
    cross: Option<Arc<CrossLocks>>,
    records: Option<Mutex<service::Recorded>>,
    grace: Option<Duration>,
) -> Arc<service::Shared> {
    let mut table = locks::LockTable::new(cfg.limits);
    if let Some(c) = &cross {
        // Weak: the registry holds this side's view, which holds the table.
        let c = Arc::downgrade(c);
        table.set_foreign(Box::new(move |file, w| {
            let (export, fh) = split_key(file)?;
            let end = if w.end >= locks::OFFSET_MAX {
                u64::MAX
            } else {
                w.end
            };
            let f = c
                .upgrade()?
                .v4_conflict(export, fh, w.start, end, w.exclusive)?;
            Some(proto::Holder {
                exclusive: f.exclusive,
                svid: 0,
                oh: Vec::new(),
                offset: f.start,
                len: match f.end {
                    u64::MAX => 0,
                    e => e.saturating_sub(f.start).saturating_add(1),
                },
            })
        }));
    }
    Arc::new(service::Shared {
        table: Mutex::new(table),
        cross,
        stats: NlmStats::default(),
        grace_until: Mutex::new(cfg.grace.or(grace).map(|g| Instant::now() + g)),
        records,
    })
}

/// The NLM families of the metrics port.
struct Metrics(Arc<service::Shared>);

impl Collector for Metrics {
    fn collect(&self, e: &mut Exposition) {
        let (hosts, files, locks, waiting) = {
            let t = lock(&self.0.table);
            (t.hosts(), t.files(), t.locks(), t.waiting())
        };
        let name = "rpcrdma_nfsd_nlm_locks";
        e.family(
            name,
            "NFSv3 lock manager (NLM v4) table sizes: client hosts, files, lock ranges held, requests waiting.",
            Kind::Gauge,
        );
        for (table, n) in [
            ("hosts", hosts),
            ("files", files),
            ("locks", locks),
            ("waiting", waiting),
        ] {
            e.sample(name, &[("table", table)], n as u64);
        }
        let name = "rpcrdma_nfsd_nlm_events_total";
        e.family(
            name,
            "NFSv3 lock manager (NLM v4) events: LOCK answers (granted, denied, blocked, no resources), reclaims and grace-period refusals after a restart, requests left unanswered while an NFSv4.1 delegation was recalled, NLMPROC4_GRANTED calls accepted, refused and failed.",
            Kind::Counter,
        );
        let s = &self.0.stats;
        for (event, c) in [
            ("granted", &s.granted),
            ("denied", &s.denied),
            ("blocked", &s.blocked),
            ("nolocks", &s.nolocks),
            ("reclaims", &s.reclaims),
            ("grace_denied", &s.grace_denied),
            ("deleg_drops", &s.deleg_drops),
            ("grants_sent", &s.grants_sent),
            ("grants_refused", &s.grants_refused),
            ("grants_failed", &s.grants_failed),
        ] {
            e.sample(name, &[("event", event)], NlmStats::get(c));
        }
    }
}

/// A file's key in the lock table: the export's handle id and the store's handle.
fn split_key(file: &[u8]) -> Option<([u8; 4], &[u8])> {
    let (export, fh) = file.split_first_chunk::<4>()?;
    Some((*export, fh))
}

/// This lock manager's locks as the NFSv4.1 one asks about them.
struct NlmView {
    shared: Arc<service::Shared>,
    grants: Box<dyn Fn(Vec<locks::Grant>) + Send + Sync>,
}

impl LockView for NlmView {
    fn conflict(
        &self,
        export: [u8; 4],
        fh: &[u8],
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<Foreign> {
        let mut key = export.to_vec();
        key.extend_from_slice(fh);
        let h = lock(&self.shared.table).conflict_any(&key, start, end, exclusive)?;
        Some(Foreign {
            start: h.offset,
            end: match h.len {
                0 => u64::MAX,
                n => h.offset + n - 1,
            },
            exclusive: h.exclusive,
        })
    }

    fn released(&self, export: [u8; 4], fh: &[u8]) {
        let mut key = export.to_vec();
        key.extend_from_slice(fh);
        let mut grants = Vec::new();
        {
            let (_order, mut t) = self.shared.deciding();
            t.wake_file(&key, &mut grants);
        }
        if !grants.is_empty() {
            (self.grants)(grants);
        }
    }
}

impl NlmServer {
    /// Listens on `bind` (port 0: any free port) and serves NLM version 4 for the files of
    /// the export table `exports` returns (other versions get PROG_MISMATCH{4,4}).
    /// With `cross`, its locks and the NFSv4.1 server's registered there conflict with each
    /// other ([`crate::nfs::cross_locks`]).
    pub fn start(
        bind: SocketAddr,
        exports: ExportsFn,
        cfg: NlmConfig,
        cross: Option<Arc<CrossLocks>>,
    ) -> io::Result<NlmServer> {
        let (old, kept) = match &cfg.state_dir {
            Some(d) => restart_records(d),
            None => (records::Records::default(), None),
        };
        let state = kept.as_ref().map(|k| lock(k).list.state);
        let restarted = !old.hosts.is_empty();
        let grace = restarted.then_some(cfg.restart_grace);
        let shared = shared_with(&cfg, cross.clone(), kept, grace);
        let granter = grant::Granter::start(shared.clone(), cfg.rpcbind_port)?;
        if let Some(c) = &cross {
            c.set_nlm(Arc::new(NlmView {
                shared: shared.clone(),
                grants: granter.sink(),
            }));
        }
        let service = NlmService::new(shared.clone(), exports, granter.sink());
        let rpc = TcpRpcServer::start(bind, Arc::new(service), cfg.tcp)?;
        let nsm = if cfg.nsm {
            let svc: Arc<dyn RpcService> =
                Arc::new(nsm::NsmService::new(shared.clone(), granter.sink()));
            let udp = nsm::UdpServer::start(SocketAddr::new(bind.ip(), 0), Arc::clone(&svc))?;
            let tcp = TcpRpcServer::start(SocketAddr::new(bind.ip(), 0), svc, cfg.tcp)?;
            Some((udp, tcp))
        } else {
            None
        };
        let restart = match (restarted, state) {
            (true, Some(state)) => {
                let name = cfg.mon_name.clone().unwrap_or_else(host_name);
                Some(Restart {
                    hosts: old.hosts,
                    name,
                    state,
                    rpcbind_port: cfg.rpcbind_port,
                })
            }
            _ => None,
        };
        Ok(NlmServer {
            rpc: Some(rpc),
            nsm,
            granter: Some(granter),
            shared,
            restart: Mutex::new(restart),
        })
    }

    /// After a restart whose state directory named hosts that held locks: sends them
    /// SM_NOTIFY (once; later calls do nothing), so that they reclaim in the grace period. Call
    /// it once clients can find this server (after its rpcbind registration, which their
    /// lockd asks for the new port).
    pub fn tell_restart(&self) {
        let Some(r) = lock(&self.restart).take() else {
            return;
        };
        tracing::info!(
            hosts = r.hosts.len(),
            state = r.state,
            "NLM restarted: telling the clients that held locks"
        );
        nsm::notify(r.hosts, r.name, r.state, r.rpcbind_port);
    }

    /// Where the status monitor's SM_NOTIFY is served: UDP and TCP (`None`: not served).
    pub fn nsm_addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.nsm
            .as_ref()
            .map(|(u, t)| (u.local_addr(), t.local_addr()))
    }

    /// True while the grace period runs (only reclaims are served).
    pub fn in_grace(&self) -> bool {
        self.shared.in_grace()
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.rpc
            .as_ref()
            .map(TcpRpcServer::local_addr)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Its counters.
    pub fn stats(&self) -> &NlmStats {
        &self.shared.stats
    }

    /// Its table sizes and counters as Prometheus families (`rpcrdma_nfsd_nlm_locks`,
    /// `rpcrdma_nfsd_nlm_events_total`), for the daemon's metrics port.
    pub fn collector(&self) -> Arc<dyn Collector> {
        Arc::new(Metrics(Arc::clone(&self.shared)))
    }

    /// The lock table's sizes now.
    pub fn sizes(&self) -> TableSizes {
        let t = lock(&self.shared.table);
        TableSizes {
            hosts: t.hosts(),
            files: t.files(),
            locks: t.locks(),
            waiting: t.waiting(),
        }
    }

    /// Stops listening and calling clients; the locks are gone.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(r) = self.rpc.take() {
            r.stop();
        }
        if let Some((udp, tcp)) = self.nsm.take() {
            drop(udp);
            tcp.stop();
        }
        self.granter.take();
    }
}

impl Drop for NlmServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The NLM version 4 service without its TCP server or grant thread (grants are dropped: the
/// client's own repeated request finds its lock): for [`crate::nfs::rpc_tcp::handle_record`]
/// from any transport (the `nfs_tcp_services` fuzz target drives it so).
pub fn service(exports: ExportsFn, cfg: NlmConfig) -> Arc<dyn RpcService> {
    Arc::new(NlmService::new(
        shared(&cfg, None),
        exports,
        Box::new(|_| {}),
    ))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_nsm;
