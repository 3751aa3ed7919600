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
use rpcrdma_poller::{
    BackoffConfig, CallbackMode, Cores, Endpoint, EndpointConfig, PinPolicy, ProtocolVersion,
    ReactorConfig, ReactorSet, Server, ServerOptions,
};

use super::dir::DirStore;
use super::drc::DrcConfig;
use super::fs::Store;
use super::memory::{MemoryOptions, MemoryStore};
use super::mount::{Export, MountServer};
use super::proto::{NFS_PROGRAM, NFS_V3};
use super::rpcbind::{self, Registration, RpcbEntry};
use super::server::{Nfs3, NfsConfig};

/// MOUNT program number (RFC 1813 Appendix I).
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The NFS/RDMA port (RFC 8267 section 6).
pub const NFS_RDMA_PORT: u16 = 20049;

/// Which store serves the export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Files in memory (handlers inline on the reactors).
    Memory,
    /// A real directory (handlers on worker threads).
    Dir(PathBuf),
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "memory" => Ok(Backend::Memory),
            _ => match s.strip_prefix("dir:") {
                Some(p) if !p.is_empty() => Ok(Backend::Dir(PathBuf::from(p))),
                _ => Err(format!("--backend must be memory or dir:PATH, got {s:?}")),
            },
        }
    }
}

/// Everything the daemon is started with.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// NFS over RPC-over-RDMA listens here.
    pub nfs: SocketAddr,
    /// MOUNT over TCP listens here (`None`: no MOUNT service).
    pub mount: Option<SocketAddr>,
    /// The exported path clients mount (`/export`).
    pub export: String,
    /// The store.
    pub backend: Backend,
    /// Reactor threads.
    pub reactors: usize,
    /// Worker threads (directory backend).
    pub workers: usize,
    /// Pin reactors to cores.
    pub pin: bool,
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
    /// Memory backend: octets of file data at most.
    pub memory_capacity: u64,
    /// Serve the Prometheus metrics of the NFS/RDMA server here (`GET /metrics`; docs/
    /// observability.md). `None` (default): no metrics port.
    pub metrics: Option<SocketAddr>,
    /// Shared receive queue depth per reactor (`ServerOptions::shared_receive_queue`): the
    /// connections of a reactor take their receives from one SRQ of this many buffers, so
    /// receive memory stays bounded whatever the number of clients; each connection is
    /// granted at most `credits`, fewer when the SRQ cannot back more. `None` (default):
    /// each connection posts its own receives.
    pub srq: Option<u32>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            nfs: SocketAddr::new(IpAddr::from([0, 0, 0, 0]), NFS_RDMA_PORT),
            mount: Some(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 20048)),
            export: "/export".into(),
            backend: Backend::Memory,
            reactors: 1,
            workers: 2,
            pin: false,
            credits: 64,
            max_io: 1 << 20,
            buffers: 256,
            max_conns: 64,
            drop_every: 0,
            rpcbind: true,
            hugepages: true,
            memory_capacity: 1 << 30,
            metrics: None,
            srq: None,
        }
    }
}

/// A running server.
pub struct Daemon<P: Provider> {
    set: Option<ReactorSet>,
    ep: Option<Endpoint<P>>,
    server: Option<Server>,
    nfs: Arc<Nfs3>,
    mount: Option<MountServer>,
    registration: Option<Registration>,
    nfs_addr: SocketAddr,
}

/// The reply buffers: the largest listing or inline reply plus headers.
const REPLY_BUFFER: usize = 64 * 1024 + 4096;
/// The server's inline threshold (what the kernel client uses too).
const INLINE: u32 = 4096;

impl<P: Provider> Daemon<P> {
    /// Starts everything on device `dev`.
    pub fn start(dev: P::Device, o: &DaemonOptions) -> Result<Daemon<P>, String> {
        let mode = match &o.backend {
            Backend::Memory => CallbackMode::Inline,
            Backend::Dir(_) => CallbackMode::Worker,
        };
        let dir_store: Option<Arc<dyn Store>> = match &o.backend {
            Backend::Memory => None,
            Backend::Dir(p) => Some(Arc::new(
                DirStore::open(p).map_err(|e| format!("{}: {e}", p.display()))?,
            )),
        };
        let mut rc = ReactorConfig::new(Cores::Count(o.reactors.max(1)));
        rc.pin = if o.pin {
            PinPolicy::AllowUnpinned
        } else {
            PinPolicy::Off
        };
        rc.backoff = BackoffConfig::shared_cores();
        rc.drain_timeout = Duration::from_secs(2);
        rc.name = "nfsd".into();
        let set = ReactorSet::start(&rc).map_err(|e| format!("reactors: {e}"))?;
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
            hugepages: o.hugepages,
            ..EndpointConfig::default()
        };
        let ep = Endpoint::<P>::new(&set, dev, ecfg).map_err(|e| format!("endpoint: {e}"))?;
        // The memory store's large blocks live in the endpoint's registered pool.
        let store = dir_store.unwrap_or_else(|| {
            Arc::new(MemoryStore::with_pool(
                MemoryOptions {
                    capacity: o.memory_capacity,
                    ..MemoryOptions::default()
                },
                ep.buffers().clone(),
            ))
        });
        let nfs = Nfs3::new(
            Arc::clone(&store),
            Some(ep.buffers().clone()),
            NfsConfig {
                max_io,
                dtpref: 32 << 10,
                inline_send: INLINE,
                drop_every: o.drop_every,
                drc: DrcConfig::default(),
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
            // NFSv3 has no backchannel.
            backchannel_credits: 0,
            metrics_addr: o.metrics,
            shared_receive_queue: o.srq,
            ..ServerOptions::default()
        };
        let server = Server::builder()
            .program(nfs.program())
            .options(sopts)
            .start(&ep, o.nfs)
            .map_err(|e| format!("NFS/RDMA listener on {}: {e}", o.nfs))?;
        let nfs_addr = server.local_addr();
        let mut d = Daemon {
            set: Some(set),
            ep: Some(ep),
            server: Some(server),
            nfs,
            mount: None,
            registration: None,
            nfs_addr,
        };
        if let Some(m) = o.mount {
            let exports = vec![Export {
                path: o.export.clone(),
                root: store.root(),
            }];
            match MountServer::start(m, exports) {
                Ok(s) => d.mount = Some(s),
                Err(e) => {
                    d.stop();
                    return Err(format!("MOUNT listener on {m}: {e}"));
                }
            }
        }
        if o.rpcbind {
            d.register();
        }
        Ok(d)
    }

    fn register(&mut self) {
        let mut entries = vec![RpcbEntry {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            netid: "rdma".into(),
            addr: self.nfs_addr,
        }];
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
            Err(e) => eprintln!(
                "rpcrdma-nfsd: warning: not registered with rpcbind ({e}); mount with \
                 port= and mountport="
            ),
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

    /// Where MOUNT listens.
    pub fn mount_addr(&self) -> Option<SocketAddr> {
        self.mount.as_ref().map(MountServer::local_addr)
    }

    /// The NFS service (store, counters, cache).
    pub fn nfs(&self) -> &Arc<Nfs3> {
        &self.nfs
    }

    /// The RPC server (transport counters).
    pub fn server(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// Every counter: the NFS service's and the transport's (`nfsd-stat` names).
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut v = self.nfs.stats().lines();
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
