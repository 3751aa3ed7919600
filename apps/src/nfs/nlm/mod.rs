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
pub mod proto;
pub mod service;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::nfs::cross_locks::{CrossLocks, Foreign, LockView};
use crate::nfs::rpc_tcp::{lock, RpcService, ServerConfig, TcpRpcServer};

pub use locks::Limits;
pub use service::{ExportsFn, NlmService, NlmStats};

/// Settings of an [`NlmServer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NlmConfig {
    /// Bounds of the lock table.
    pub limits: Limits,
    /// A grace period from the start: only reclaims are served in it.
    pub grace: Option<Duration>,
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
    granter: Option<grant::Granter>,
    shared: Arc<service::Shared>,
}

fn shared(cfg: &NlmConfig, cross: Option<Arc<CrossLocks>>) -> Arc<service::Shared> {
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
        grace_until: Mutex::new(cfg.grace.map(|g| Instant::now() + g)),
    })
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
        let shared = shared(&cfg, cross.clone());
        let granter = grant::Granter::start(shared.clone(), cfg.rpcbind_port)?;
        if let Some(c) = &cross {
            c.set_nlm(Arc::new(NlmView {
                shared: shared.clone(),
                grants: granter.sink(),
            }));
        }
        let service = NlmService::new(shared.clone(), exports, granter.sink());
        let rpc = TcpRpcServer::start(bind, Arc::new(service), cfg.tcp)?;
        Ok(NlmServer {
            rpc: Some(rpc),
            granter: Some(granter),
            shared,
        })
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
