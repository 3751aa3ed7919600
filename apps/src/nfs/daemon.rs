//! `rpcrdma-nfsd` as a library: reactors, one endpoint on the RDMA device, the NFSv3
//! [`Server`] over RPC-over-RDMA, MOUNT v3 over TCP, and the optional rpcbind registration —
//! started together by [`Daemon::start`] and stopped together by [`Daemon::stop`]. The binary
//! runs it on the rdma provider; the tests run it on the software provider.
//!
//! Normal operation: the memory backend serves its handlers inline on the reactors (they
//! never block); the directory backend serves them on worker threads (file I/O blocks). READ
//! results are DDP items from the endpoint's payload pool, whose buffers are `max_io` octets;
//! the memory backend keeps its large blocks in buffers of that same pool and places READ
//! data straight from them (zero copy). Replies use a separate pool of small buffers sized for
//! the largest listing.
//!
//! Recovery: a failure to start any part stops what was started and is returned as text; a
//! missing rpcbind is only a warning (mount with `port=` and `mountport=`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::sched::RealtimeWake;
use rpcrdma_poller::{
    BackoffMode, CallbackMode, Cores, Endpoint, EndpointConfig, PinPolicy, ProtocolVersion,
    ReactorConfig, ReactorSet, Server, ServerOptions,
};

use super::admit::ExportTable;
use super::cross_locks::CrossLocks;
use super::drc::DrcConfig;
use super::exports::Exports;
use super::handle_mac::HandleKey;
use super::mount::{self, MountServer};
use super::nlm::{self as nlm_mod, ExportsFn, NlmConfig, NlmServer, NlmStats};
use super::rpcbind::{self, Registration, RpcbEntry};
use crate::nfs::store::dir::DirStore;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::Store;
use crate::nfs::v3::nfsacl::{self, NfsAcl};
use crate::nfs::v3::proto::{NFS_PROGRAM, NFS_V3};
use crate::nfs::v3::server::{Nfs3, NfsConfig};
use crate::nfs::v4::server::laundromat::Laundromat;
use crate::nfs::v4::server::{self as v4, Nfs41};

/// MOUNT program number (RFC 1813 Appendix I).
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The NFS/RDMA port (RFC 8267 section 6).
pub const NFS_RDMA_PORT: u16 = 20049;

/// Which stores serve the exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Files in memory, one store per export (handlers inline on the reactors).
    Memory,
    /// A real directory serving the one export, whatever its path (handlers on worker
    /// threads).
    Dir(PathBuf),
    /// Real directories: each export's path is the host directory it serves (`dir`, as
    /// Linux exports name them).
    Dirs,
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "memory" => Ok(Backend::Memory),
            "dir" => Ok(Backend::Dirs),
            _ => match s.strip_prefix("dir:") {
                Some(p) if !p.is_empty() => Ok(Backend::Dir(PathBuf::from(p))),
                _ => Err(format!(
                    "--backend must be memory, dir or dir:PATH, got {s:?}"
                )),
            },
        }
    }
}

/// What a daemon started with no export list exports: `/export` to every client,
/// read-write, AUTH_SYS, root squashed (docs/nfs-server.md, "Security").
pub const DEFAULT_EXPORT: &str = "/export:*(rw,root_squash,sec=sys)";

/// The export list of [`DEFAULT_EXPORT`].
pub fn default_exports() -> Exports {
    let mut e = Exports::default();
    // The constant parses (checked by a test).
    let _ = e.add_spec(DEFAULT_EXPORT);
    e
}

/// Everything the daemon is started with.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// NFS over RPC-over-RDMA listens here.
    pub nfs: SocketAddr,
    /// MOUNT over TCP listens here (`None`: no MOUNT service).
    pub mount: Option<SocketAddr>,
    /// The lock manager (NLM version 4) over TCP listens here (`None`: none; port 0: any
    /// free port, found through rpcbind); its status monitor on any free ports of the address.
    pub nlm: Option<SocketAddr>,
    /// The lock manager's grace period after a restart that told its clients (it keeps them
    /// in [`DaemonOptions::v4_state_dir`]).
    pub nlm_grace: std::time::Duration,
    /// The exports: paths clients mount, and who may mount each with which options.
    pub exports: Exports,
    /// The file keeping the handle key (created, mode 0600, when missing), so handles
    /// survive restarts; `None`: a new random key each start (handles of an earlier run are
    /// STALE).
    pub handle_key: Option<PathBuf>,
    /// The store.
    pub backend: Backend,
    /// Reactor threads.
    pub reactors: usize,
    /// Worker threads (directory backend).
    pub workers: usize,
    /// Pin reactors to cores.
    pub pin: bool,
    /// What idle reactors do (`--idle`): [`BackoffMode::Interrupt`] (default: poll while
    /// busy, sleep in `poll(2)` until a completion, a connection event or a timer when idle),
    /// [`BackoffMode::SharedCores`] (sleep on a timer) or [`BackoffMode::BusyPoll`] (spin).
    pub idle: BackoffMode,
    /// Idle iterations a reactor spins before it yields (`--idle-spins`), with `--idle
    /// shared_cores` or `interrupt` (`None`: the mode's own, 100).
    pub idle_spins: Option<u32>,
    /// Idle iterations a reactor yields before it sleeps (`--idle-yields`; `None`: the mode's
    /// own, 10).
    pub idle_yields: Option<u32>,
    /// The reactor threads' nice value (`--reactor-nice`, `ReactorConfig::nice`): -10 by
    /// default, so that a reactor beside busy processes gets its core back soon after the
    /// kernel's completion work preempts it; a daemon without the right keeps its priority
    /// and warns. `None` (`--reactor-nice inherit`): the process's.
    pub reactor_nice: Option<i32>,
    /// Real-time wake-ups of the reactors and the `dir:` workers (`--realtime-wakeups`,
    /// `rpcrdma_poller::sched`): each waits for work in `SCHED_FIFO` at this priority, so a
    /// completion or a job preempts whatever holds its core at once (a kernel that preempts
    /// lazily makes a fair-class thread wait for the tick), and returns to the fair class (at
    /// its nice value) after 2 ms busy. `None` (`off`, the default): the fair class only; on a
    /// kernel that preempts at once the real-time class measured slower beside busy processes
    /// (docs/performance-nfs.md, "The metadata workload on Linux 6.18").
    pub realtime_wakeups: Option<u8>,
    /// Credits granted to each client.
    pub credits: u32,
    /// Largest READ / WRITE (FSINFO rtmax / wtmax).
    pub max_io: u32,
    /// Payload buffers of `max_io` octets, registered at start-up: READ DDP results in flight
    /// (across connections) and, with the memory backend, the store's large blocks (its data
    /// is then read by DDP without a copy). The memory store leaves a quarter of them for
    /// READ results it cannot serve from a block; past that its blocks are ordinary heap
    /// memory (still within `memory_capacity`, READs then copied), so an exhausted pool never
    /// fails a write. Default 256 (256 MiB with 1 MiB `max_io`: the store holds up to 192 MiB
    /// in registered memory).
    pub buffers: usize,
    /// Connections each reactor holds at most.
    pub max_conns: usize,
    /// Drop the connection instead of answering every Nth non-idempotent call (0: never).
    pub drop_every: u64,
    /// Register with a local rpcbind.
    pub rpcbind: bool,
    /// Back pools with hugepages when possible.
    pub hugepages: bool,
    /// Memory backend: octets of memory per export for files, names and data (every
    /// inode, directory entry, symbolic link target and data block is charged).
    pub memory_capacity: u64,
    /// Memory backend: most files (inodes) per export.
    pub memory_files: u64,
    /// Directory backends: descriptors each export's store keeps open (a walk over this many
    /// objects reopens none of them). The daemon raises its open-file limit toward what this
    /// needs when it can, and clamps the cache to what the limit allows.
    pub dir_cache: usize,
    /// Directory backends: answer a GETATTR whose descriptor the store holds open on the
    /// reactor (one `fstat`, no hand-off to a worker and back); `false`
    /// (`--getattr-in-worker`): every call goes to a worker.
    pub getattr_on_reactor: bool,
    /// Directory backends: serve on the reactor every call whose caller acts as the daemon's
    /// own identity (root, its gid and groups: no identity switch, which a reactor may not
    /// make, as Linux lets only the credentials that opened the verbs device write to it),
    /// but COMMIT and WRITEs to stable storage unless the export is in memory (tmpfs: nothing
    /// waits for a device); other callers' calls go to a worker. `false` (`--dir-calls
    /// workers`): every call but a GETATTR [`DaemonOptions::getattr_on_reactor`] admits goes
    /// to a worker.
    pub dir_calls_on_reactor: bool,
    /// Serve the Prometheus metrics of the NFS/RDMA server here (`GET /metrics`; docs/
    /// observability.md). `None` (default): no metrics port.
    pub metrics: Option<SocketAddr>,
    /// Shared receive queue depth per reactor (`ServerOptions::shared_receive_queue`): the
    /// connections of a reactor take their receives from one SRQ of this many buffers, so
    /// receive memory stays bounded whatever the number of clients; each connection is
    /// granted at most `credits`, fewer when the SRQ cannot back more. `None` (default):
    /// each connection posts its own receives.
    pub srq: Option<u32>,
    /// Also serve NFSv4.1 and NFSv4.2 (program 100003 version 4, [`Nfs41`]) on the same port,
    /// over the same exports and stores. Off by default.
    pub nfs4: bool,
    /// NFSv4.1: the directory keeping the clients that may reclaim their state after a
    /// restart ([`Nfs41::start_recovery`]: a grace period when the previous run left any);
    /// the lock manager keeps its hosts there too (`nlm-hosts`: told with SM_NOTIFY after a
    /// restart, [`crate::nfs::nlm::records`]). `None` (default): nothing is recorded, no
    /// grace period.
    pub v4_state_dir: Option<PathBuf>,
    /// NFSv4.1: grant write delegations ([`Nfs41::set_write_delegations`]). Off by default.
    pub v4_write_delegations: bool,
    /// NFSv4.1: grant no delegation at all ([`Nfs41::set_delegations`]), for exports that
    /// other servers change (processes on this host recall them on a `dir:` export:
    /// [`Nfs41::watch_local_changes`]). Off by default (read delegations granted).
    pub v4_no_delegations: bool,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            nfs: SocketAddr::new(IpAddr::from([0, 0, 0, 0]), NFS_RDMA_PORT),
            mount: Some(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 20048)),
            nlm: Some(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 0)),
            nlm_grace: std::time::Duration::from_secs(50),
            exports: default_exports(),
            handle_key: None,
            backend: Backend::Memory,
            reactors: 1,
            workers: 2,
            pin: false,
            idle: BackoffMode::Interrupt,
            idle_spins: None,
            idle_yields: None,
            reactor_nice: Some(-10),
            realtime_wakeups: None,
            credits: 64,
            max_io: 1 << 20,
            buffers: 256,
            max_conns: 64,
            drop_every: 0,
            rpcbind: true,
            hugepages: true,
            memory_capacity: 1 << 30,
            memory_files: MemoryOptions::default().max_files,
            dir_cache: crate::nfs::store::dir::CACHE_CAP,
            getattr_on_reactor: true,
            dir_calls_on_reactor: true,
            metrics: None,
            srq: None,
            nfs4: false,
            v4_state_dir: None,
            v4_write_delegations: false,
            v4_no_delegations: false,
        }
    }
}

impl DaemonOptions {
    /// Why these options cannot serve, naming the option (`None`: they can). The daemon
    /// refuses them before it opens a device; the library would otherwise clamp them.
    pub fn check(&self) -> Option<String> {
        let bad = |what: &str, v: u64, lo: u64, hi: u64| {
            (!(lo..=hi).contains(&v))
                .then(|| format!("{what} {v}: must be a number in {lo}..={hi}"))
        };
        bad("--credits", self.credits.into(), 1, 1024)
            .or_else(|| bad("--max-io", self.max_io.into(), 4096, 1 << 24))
            .or_else(|| bad("--buffers", self.buffers as u64, 4, 1 << 20))
            .or_else(|| bad("--reactors", self.reactors as u64, 1, 256))
            .or_else(|| bad("--workers", self.workers as u64, 1, 1024))
            .or_else(|| bad("--memory-capacity", self.memory_capacity, 1 << 20, u64::MAX))
            .or_else(|| bad("--memory-files", self.memory_files, 1, u64::MAX))
            .or_else(|| bad("--dir-cache", self.dir_cache as u64, 16, 1 << 24))
            .or_else(|| bad("--srq", self.srq.map_or(1, u64::from), 1, 1 << 20))
            .or_else(|| {
                (self.max_io % 4096 != 0)
                    .then(|| format!("--max-io {}: must be a multiple of 4096", self.max_io))
            })
            .or_else(|| {
                self.exports
                    .is_empty()
                    .then(|| "nothing to export".to_string())
            })
            .or_else(|| match &self.backend {
                Backend::Dir(_) if self.exports.list().len() != 1 => Some(
                    "--backend dir:PATH serves one export; with several, use --backend dir"
                        .to_string(),
                ),
                Backend::Dir(p) if !p.is_dir() => {
                    Some(format!("--backend dir:{}: not a directory", p.display()))
                }
                Backend::Dirs => self
                    .exports
                    .list()
                    .iter()
                    .find(|e| !std::path::Path::new(&e.path).is_dir())
                    .map(|e| format!("--backend dir: export {} is not a directory", e.path)),
                _ => None,
            })
    }
}

/// A running server.
pub struct Daemon<P: Provider> {
    set: Option<ReactorSet>,
    ep: Option<Endpoint<P>>,
    server: Option<Server>,
    nfs: Arc<Nfs3>,
    nfs4: Option<Arc<Nfs41>>,
    /// Sweeps the NFSv4.1 state every second, whether or not NFSv4.1 calls come.
    laundromat: Option<Laundromat>,
    mount: Option<MountServer>,
    nlm: Option<NlmServer>,
    /// NLM and NFSv4.1 locks: one file's conflict across the two; NFSv4.1 delegations as
    /// NFSv3 and NLM calls recall them.
    cross: Arc<CrossLocks>,
    /// How stores are made for exports added by a reload.
    backend: Backend,
    memory: MemoryOptions,
    /// Descriptors each directory store keeps open (after the open-file limit).
    dir_cache: usize,
    registration: Option<Registration>,
    /// The lock manager's registration, kept apart: it is skipped when another lock manager
    /// answers at the address rpcbind has for NLM.
    nlm_registration: Option<Registration>,
    nfs_addr: SocketAddr,
}

/// The reply buffers: the largest listing or inline reply plus headers.
const REPLY_BUFFER: usize = 64 * 1024 + 4096;
/// How often the NFSv4.1 state is swept (expired leases, delegations not returned).
const LAUNDROMAT_PERIOD: Duration = Duration::from_secs(1);
/// The server's inline threshold (what the kernel client uses too).
const INLINE: u32 = 4096;

/// The NFSv4.1 server beside `nfs`, over the same exports; with a state directory, the
/// client records found there start a grace period for their reclaims.
fn start_nfs41(
    nfs: &Nfs3,
    o: &DaemonOptions,
    max_io: u32,
    pool: &rpcrdma_poller::BufPool,
) -> Arc<Nfs41> {
    let cfg = v4::Config {
        max_io,
        pool: Some(pool.clone()),
        ..v4::Config::default()
    };
    let n = Nfs41::new(nfs.exports(), cfg);
    n.set_drop_every(o.drop_every);
    n.set_write_delegations(o.v4_write_delegations);
    n.set_delegations(!o.v4_no_delegations);
    let on_host = !matches!(o.backend, Backend::Memory);
    if on_host && !o.v4_no_delegations {
        // Processes on the host recall delegations too (v4::server::deleg_local).
        if let Err(e) = n.watch_local_changes() {
            tracing::warn!(
                error = %e,
                "NFSv4 delegations of dir: exports are not recalled when processes on this host \
                 change the files (fanotify needs CAP_SYS_ADMIN): --v4-no-delegations turns them off"
            );
        }
    }
    if let Some(dir) = &o.v4_state_dir {
        match n.start_recovery(dir) {
            Ok(0) => {}
            Ok(k) => tracing::info!(clients = k, "NFSv4.1 grace period: clients may reclaim"),
            Err(e) => {
                tracing::warn!(error = %e, "NFSv4.1 client records rejected: no grace period")
            }
        }
    }
    n
}

/// Where a backend's calls run. The `dir:` backend runs every call under the caller's
/// file-system identity (`setfsuid` / `setfsgid` on the serving thread), so it runs on
/// workers: a reactor with changed credentials may not post to the kernel's verbs device
/// (Linux's `ib_safe_file_access` refuses a write to the uverbs file from credentials other
/// than the opener's: EACCES, and the connection is lost; a switch back gives the thread
/// another credential structure, never the opener's again). What a reactor may serve of them
/// without switching it serves there ([`DaemonOptions::dir_calls_on_reactor`]).
fn callback_mode(backend: &Backend) -> CallbackMode {
    match backend {
        Backend::Memory => CallbackMode::Inline,
        Backend::Dir(_) | Backend::Dirs => CallbackMode::Worker,
    }
}

impl<P: Provider> Daemon<P> {
    /// Starts everything on device `dev`.
    pub fn start(dev: P::Device, o: &DaemonOptions) -> Result<Daemon<P>, String> {
        let mode = callback_mode(&o.backend);
        if o.exports.is_empty() {
            return Err("nothing to export".into());
        }
        if matches!(o.backend, Backend::Dir(_)) && o.exports.list().len() != 1 {
            return Err(
                "--backend dir:PATH serves one export; with several, use --backend dir and \
                 name each host directory in the export list"
                    .into(),
            );
        }
        let key = match &o.handle_key {
            Some(p) => HandleKey::load_or_create(p)
                .map_err(|e| format!("handle key {}: {e}", p.display()))?,
            None => HandleKey::random().map_err(|e| format!("handle key: {e}"))?,
        };
        let memory = MemoryOptions {
            capacity: o.memory_capacity,
            max_files: o.memory_files,
            ..MemoryOptions::default()
        };
        let set = start_reactors(o)?;
        let max_io = o.max_io.clamp(4096, 1 << 24);
        let credits = o.credits.clamp(1, 1024);
        let workers = if mode == CallbackMode::Worker {
            o.workers.max(1)
        } else {
            0
        };
        let ecfg = EndpointConfig {
            max_conns_per_reactor: o.max_conns.max(1),
            max_credits: credits,
            buffers: o.buffers.max(4),
            reply_buffers: (credits as usize * 2).max(64),
            // A READ's data plus room for nothing else: the header goes in the reply buffer.
            buffer_size: max_io as usize,
            reply_buffer_size: REPLY_BUFFER,
            workers,
            worker_ring: 256,
            worker_realtime: realtime_wake(o),
            hugepages: o.hugepages,
            ..EndpointConfig::default()
        };
        let ep = Endpoint::<P>::new(&set, dev, ecfg).map_err(|e| format!("endpoint: {e}"))?;
        let dir_cache = match o.backend {
            Backend::Memory => o.dir_cache,
            _ => descriptor_room(o.dir_cache, o.exports.list().len()),
        };
        let stores = Stores {
            backend: &o.backend,
            dir_cache,
            memory,
            pool: ep.buffers(),
        };
        let table = stores.table(key, &o.exports, None)?;
        let mount_list = mount_exports(&table);
        let nfs = Nfs3::new(
            table,
            Some(ep.buffers().clone()),
            NfsConfig {
                max_io,
                dtpref: 32 << 10,
                inline_send: INLINE,
                drop_every: o.drop_every,
                drc: DrcConfig::default(),
                getattr_on_reactor: o.getattr_on_reactor,
                calls_on_reactor: o.dir_calls_on_reactor,
            },
        );
        let sopts = ServerOptions {
            inline_send: INLINE,
            inline_recv: INLINE,
            credits,
            // WRITE data (a Read chunk) is reassembled with the call's inline part.
            max_call: max_io + 8192,
            data_buffers: (credits / 2).max(4),
            mode,
            version: ProtocolVersion::V1,
            // NFSv3 has no backchannel; NFSv4.1 callbacks (RFC 8167) use one.
            backchannel_credits: if o.nfs4 { 4 } else { 0 },
            // Callbacks carry the credential each client gave in CREATE_SESSION's
            // `csa_sec_parms` (RFC 8881 §18.36.3; `nfs::v4::server::session`), not a server one.
            metrics_addr: o.metrics,
            shared_receive_queue: o.srq,
            ..ServerOptions::default()
        };
        let nfs4 = o.nfs4.then(|| start_nfs41(&nfs, o, max_io, ep.buffers()));
        let acl = NfsAcl::new(Arc::clone(&nfs));
        let mut builder = Server::builder()
            .program(nfs.program())
            .program(acl.program());
        if let Some(n) = &nfs4 {
            builder = builder.program(n.program());
        }
        let server = builder
            .options(sopts)
            .start(&ep, o.nfs)
            .map_err(|e| format!("NFS/RDMA listener on {}: {e}", o.nfs))?;
        let nfs_addr = server.local_addr();
        if let Some(m) = server.metrics() {
            m.add_collector(nfs.stats().clone());
            if let Some(n) = &nfs4 {
                m.add_collector(n.clone());
            }
        }
        let mut d = Daemon {
            set: Some(set),
            ep: Some(ep),
            server: Some(server),
            nfs,
            laundromat: None,
            nfs4,
            mount: None,
            nlm: None,
            cross: CrossLocks::new(),
            backend: o.backend.clone(),
            memory,
            dir_cache,
            registration: None,
            nlm_registration: None,
            nfs_addr,
        };
        if let Some(m) = o.mount {
            match MountServer::start(m, mount_list) {
                Ok(s) => d.mount = Some(s),
                Err(e) => {
                    d.stop();
                    return Err(format!("MOUNT listener on {m}: {e}"));
                }
            }
        }
        if let Err(e) = d.start_nlm(o).and_then(|()| d.start_laundromat()) {
            d.stop();
            return Err(e);
        }
        if o.rpcbind {
            d.register();
        }
        // Once the lock manager can be found: its clients of the run before reclaim now.
        if let Some(n) = &d.nlm {
            n.tell_restart();
        }
        Ok(d)
    }

    /// The thread that sweeps the NFSv4.1 state (when NFSv4.1 is served).
    fn start_laundromat(&mut self) -> Result<(), String> {
        if let Some(n) = &self.nfs4 {
            let l = n
                .start_laundromat(LAUNDROMAT_PERIOD)
                .map_err(|e| format!("NFSv4.1 laundromat thread: {e}"))?;
            self.laundromat = Some(l);
        }
        Ok(())
    }

    /// The lock manager beside NFS ([`DaemonOptions::nlm`]), its locks and NFSv4.1's made to
    /// conflict, and NFSv3 and NLM calls made to recall NFSv4.1 delegations.
    fn start_nlm(&mut self, o: &DaemonOptions) -> Result<(), String> {
        if let Some(n) = &self.nfs4 {
            n.set_cross(Arc::clone(&self.cross));
            self.nfs.set_cross(Arc::clone(&self.cross));
        }
        let Some(a) = o.nlm else { return Ok(()) };
        let nfs = Arc::clone(&self.nfs);
        let exports: ExportsFn = Arc::new(move || nfs.exports());
        let cfg = NlmConfig {
            state_dir: o.v4_state_dir.clone(),
            restart_grace: o.nlm_grace,
            // The name clients mount this server by, when it listens on one address.
            mon_name: (!a.ip().is_unspecified()).then(|| a.ip().to_string()),
            ..NlmConfig::default()
        };
        let s = NlmServer::start(a, exports, cfg, Some(Arc::clone(&self.cross)))
            .map_err(|e| format!("NLM listener on {a}: {e}"))?;
        if let Some(m) = self.server.as_ref().and_then(|x| x.metrics()) {
            m.add_collector(s.collector());
        }
        self.nlm = Some(s);
        Ok(())
    }

    /// Serves `exports` from the next call on (SIGHUP in `rpcrdma-nfsd`): exports whose path
    /// stays keep their store (and their clients' handles), new ones get a store, removed
    /// ones are gone (their handles STALE). Connections are not touched. On error nothing
    /// changes.
    pub fn reload(&self, exports: &Exports) -> Result<(), String> {
        let (Some(ep), false) = (&self.ep, exports.is_empty()) else {
            return Err("nothing to export".into());
        };
        if matches!(self.backend, Backend::Dir(_)) && exports.list().len() != 1 {
            return Err("--backend dir:PATH serves one export".into());
        }
        let old = self.nfs.exports();
        let stores = Stores {
            backend: &self.backend,
            dir_cache: self.dir_cache,
            memory: self.memory,
            pool: ep.buffers(),
        };
        let table = stores.table(old.key(), exports, Some(&old))?;
        if let Some(m) = &self.mount {
            m.set_exports(mount_exports(&table));
        }
        self.nfs.set_exports(table);
        if let Some(n) = &self.nfs4 {
            n.set_exports(self.nfs.exports());
        }
        Ok(())
    }

    fn register(&mut self) {
        // NFSACL beside NFS on the same transport, as Linux nfsd registers it.
        let mut entries: Vec<RpcbEntry> =
            [(NFS_PROGRAM, NFS_V3), (nfsacl::PROGRAM, nfsacl::VERSION)]
                .into_iter()
                .map(|(prog, vers)| RpcbEntry {
                    prog,
                    vers,
                    netid: "rdma".into(),
                    addr: self.nfs_addr,
                })
                .collect();
        if let Some(m) = &self.mount {
            entries.push(RpcbEntry {
                prog: MOUNT_PROGRAM,
                vers: 3,
                netid: "tcp".into(),
                addr: m.local_addr(),
            });
        }
        match rpcbind::register(&entries) {
            Ok(r) => self.registration = Some(r),
            Err(e) => tracing::warn!(
                error = %e,
                "not registered with rpcbind; mount with port= and mountport="
            ),
        }
        if let Some(n) = &self.nlm {
            self.nlm_registration = nlm_mod::register::register(n);
        }
    }

    /// Where NFS listens.
    pub fn nfs_addr(&self) -> SocketAddr {
        self.nfs_addr
    }

    /// Where the metrics port listens (`DaemonOptions::metrics`), if it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().and_then(|s| s.metrics_addr())
    }

    /// Where the lock manager listens.
    pub fn nlm_addr(&self) -> Option<SocketAddr> {
        self.nlm.as_ref().map(NlmServer::local_addr)
    }

    /// Where MOUNT listens.
    pub fn mount_addr(&self) -> Option<SocketAddr> {
        self.mount.as_ref().map(MountServer::local_addr)
    }

    /// The NFS service (store, counters, cache).
    pub fn nfs(&self) -> &Arc<Nfs3> {
        &self.nfs
    }

    /// The NFSv4.1 service, when [`DaemonOptions::nfs4`] asked for it.
    pub fn nfs4(&self) -> Option<&Arc<Nfs41>> {
        self.nfs4.as_ref()
    }

    /// The RPC server (transport counters).
    pub fn server(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// Every counter: the NFS service's and the transport's (`nfsd-stat` names).
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut v = self.nfs.stats().lines();
        if let Some(n) = &self.nfs4 {
            v.extend(n.counters().into_iter().map(|(k, x)| (k.to_string(), x)));
        }
        // The stores' own counters, summed over the exports.
        for share in self.nfs.exports().shares() {
            for (name, x) in share.store.counters() {
                match v.iter_mut().find(|(n, _)| n == name) {
                    Some(e) => e.1 += x,
                    None => v.push((name.to_string(), x)),
                }
            }
        }
        if let Some(s) = &self.server {
            let t = s.totals();
            for (n, x) in [
                ("conn.accepted", s.accepted()),
                ("conn.losses", t.connection_losses),
                ("conn.kicked", t.kicked),
                ("rpc.calls", t.calls),
                ("rpc.replies", t.replies),
                ("rpc.errors", t.errors),
                ("rpc.bytes_in", t.bytes_in),
                ("rpc.bytes_out", t.bytes_out),
                ("replies.send_inv", t.send_invalidates),
                ("credits.granted", t.credits_granted),
                ("credits.in_use", t.credits_in_use),
                ("transport.read_chunk_calls", t.read_chunk_calls),
                ("transport.write_chunk_calls", t.write_chunk_calls),
                ("transport.reply_chunk_calls", t.reply_chunk_calls),
                ("transport.long_calls", t.long_calls),
            ] {
                v.push((n.to_string(), x));
            }
        }
        if let Some(ep) = &self.ep {
            // The shared receive queues' gauges, summed over the reactors (0 without --srq).
            let mut srq = [0u64; 4];
            for n in (0..ep.nodes()).filter_map(|i| ep.node_stats(i)) {
                srq[0] += n.srq_depth;
                srq[1] += n.srq_held;
                srq[2] += n.srq_held_max;
                srq[3] += n.srq_low_water;
            }
            for (n, x) in ["srq.depth", "srq.held", "srq.held_max", "srq.low_water"]
                .iter()
                .zip(srq)
            {
                v.push((n.to_string(), x));
            }
        }
        if let Some(set) = &self.set {
            // The reactors' idle counters, summed (docs/architecture.md, "Idle reactors").
            let mut r = [0u64; 5];
            for st in (0..set.len()).filter_map(|i| set.stats(i)) {
                r[0] += st.iterations;
                r[1] += st.busy_iterations;
                r[2] += st.idle_yields;
                r[3] += st.idle_sleeps;
                r[4] += st.idle_wakeups;
            }
            for (n, x) in [
                "reactors.iterations",
                "reactors.busy_iterations",
                "reactors.idle_yields",
                "reactors.idle_sleeps",
                "reactors.idle_wakeups",
            ]
            .iter()
            .zip(r)
            {
                v.push((n.to_string(), x));
            }
        }
        if let Some(n) = &self.nlm {
            let (st, t) = (n.stats(), n.sizes());
            let get = NlmStats::get;
            for (k, x) in [
                ("nlm.lock_granted", get(&st.granted)),
                ("nlm.lock_denied", get(&st.denied)),
                ("nlm.lock_blocked", get(&st.blocked)),
                ("nlm.lock_nolocks", get(&st.nolocks)),
                ("nlm.reclaims", get(&st.reclaims)),
                ("nlm.grace_denied", get(&st.grace_denied)),
                ("nlm.deleg_drops", get(&st.deleg_drops)),
                ("nlm.grants_sent", get(&st.grants_sent)),
                ("nlm.grants_refused", get(&st.grants_refused)),
                ("nlm.grants_failed", get(&st.grants_failed)),
                ("nlm.hosts", t.hosts as u64),
                ("nlm.locks", t.locks as u64),
                ("nlm.waiting", t.waiting as u64),
            ] {
                v.push((k.to_string(), x));
            }
        }
        let (entries, bytes) = self.nfs.drc().usage();
        v.push(("drc.entries".into(), entries as u64));
        v.push(("drc.bytes".into(), bytes as u64));
        v
    }

    /// The counters as `nfsd-stat NAME VALUE` lines.
    pub fn counters_text(&self) -> String {
        let mut s = String::new();
        for (n, v) in self.counters() {
            s.push_str(&format!("nfsd-stat {n} {v}\n"));
        }
        s
    }

    /// Stops everything (unregisters first, so clients stop finding us).
    pub fn stop(&mut self) {
        if let Some(r) = self.registration.take() {
            r.unregister();
        }
        if let Some(r) = self.nlm_registration.take() {
            r.unregister();
        }
        self.laundromat = None;
        if let Some(n) = self.nlm.take() {
            n.stop();
        }
        if let Some(m) = self.mount.take() {
            m.stop();
        }
        if let Some(s) = &self.server {
            s.stop_listening();
        }
        if let Some(mut set) = self.set.take() {
            let _ = set.stop();
        }
        self.server = None;
        if let Some(ep) = self.ep.take() {
            ep.stop_workers();
        }
    }
}

impl<P: Provider> Drop for Daemon<P> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Descriptors left for RDMA, sockets and files besides the directory stores' caches.
const OTHER_FILES: u64 = 1024;

/// The descriptor cache each of `exports` directory stores may keep, at most `want`: the
/// soft open-file limit is raised toward what they need (up to the hard limit), and what it
/// then allows, less [`OTHER_FILES`], is shared among them.
fn descriptor_room(want: usize, exports: usize) -> usize {
    let n = exports.max(1) as u64;
    let need = (want as u64).saturating_mul(n).saturating_add(OTHER_FILES);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return want.min(256);
    }
    if lim.rlim_cur < need {
        let raised = libc::rlimit {
            rlim_cur: need.min(lim.rlim_max),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: a valid rlimit; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = raised.rlim_cur;
        }
    }
    let room = lim.rlim_cur.saturating_sub(OTHER_FILES) / n;
    (want as u64).min(room).max(16) as usize
}

/// How a store is made for an export.
struct Stores<'a> {
    backend: &'a Backend,
    /// Descriptors each directory store keeps open.
    dir_cache: usize,
    memory: MemoryOptions,
    pool: &'a rpcrdma_poller::BufPool,
}

impl Stores<'_> {
    /// The store for the export mounted as `path`.
    fn make(&self, path: &str) -> Result<Arc<dyn Store>, String> {
        let dir = match self.backend {
            // The memory store's large blocks live in the endpoint's registered pool.
            Backend::Memory => {
                let m = MemoryStore::with_pool(self.memory, self.pool.clone());
                return Ok(Arc::new(m));
            }
            Backend::Dir(p) => p.clone(),
            Backend::Dirs => PathBuf::from(path),
        };
        let s = DirStore::open_with(&dir, self.dir_cache)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Arc::new(s))
    }

    /// The table of `exports`, keeping the stores of `old`'s exports of the same path.
    fn table(
        &self,
        key: HandleKey,
        exports: &Exports,
        old: Option<&ExportTable>,
    ) -> Result<ExportTable, String> {
        let mut list = Vec::with_capacity(exports.list().len());
        for e in exports.list() {
            let store = match old.and_then(|t| t.find(&e.path)) {
                Some(s) => Arc::clone(&s.store),
                None => self.make(&e.path)?,
            };
            list.push((e.clone(), store));
        }
        ExportTable::new(key, list)
    }
}

/// What MOUNT serves of `table`: each export's path, sealed root handle and client rules.
fn mount_exports(table: &ExportTable) -> Vec<mount::Export> {
    table
        .shares()
        .iter()
        .filter_map(|s| Some(mount::Export::of(&s.export, s.root()?)))
        .collect()
}

/// Starts the daemon's reactors as the options say (cores, pinning, idle phases, priority);
/// a reactor that could not take the priority is reported, not refused.
fn start_reactors(o: &DaemonOptions) -> Result<ReactorSet, String> {
    let mut rc = ReactorConfig::new(Cores::Count(o.reactors.max(1)));
    rc.pin = if o.pin {
        PinPolicy::AllowUnpinned
    } else {
        PinPolicy::Off
    };
    rc.backoff = o.idle.config();
    rc.backoff.spin_polls = o.idle_spins.unwrap_or(rc.backoff.spin_polls);
    rc.backoff.yield_polls = o.idle_yields.unwrap_or(rc.backoff.yield_polls);
    rc.nice = o.reactor_nice;
    rc.realtime = realtime_wake(o);
    rc.drain_timeout = Duration::from_secs(2);
    rc.name = "nfsd".into();
    let set = ReactorSet::start(&rc).map_err(|e| format!("reactors: {e}"))?;
    if let Some(want) = rc.nice {
        for h in set.handles() {
            if h.nice() != Some(want.clamp(-20, 19)) {
                tracing::warn!(
                    reactor = h.index(),
                    wanted = want,
                    runs_at = h.nice(),
                    "reactor priority not raised (needs CAP_SYS_NICE): beside busy \
                     processes calls wait longer for the reactor's core"
                );
            }
        }
    }
    if let (Some(want), true) = (rc.realtime, rc.backoff.enabled) {
        for h in set.handles().iter().filter(|h| h.realtime().is_none()) {
            tracing::warn!(
                reactor = h.index(),
                wanted = want.priority,
                "reactor wake-ups not real-time (SCHED_FIFO refused: needs CAP_SYS_NICE or \
                 RLIMIT_RTPRIO): beside busy processes a woken reactor waits for the scheduler"
            );
        }
    }
    Ok(set)
}

/// The real-time wake-ups the options ask for (reactors and workers alike).
fn realtime_wake(o: &DaemonOptions) -> Option<RealtimeWake> {
    o.realtime_wakeups.map(|priority| RealtimeWake {
        priority,
        ..RealtimeWake::DEFAULT
    })
}
