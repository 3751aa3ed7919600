//! Resource snapshots for the soak's leak checks: every endpoint's payload and reply pool
//! (free buffers against their count), every soft device's protection-table use (regions,
//! memory windows, bound windows: [`SoftDevice::key_usage`]), the fabric's count of windows
//! still bound when their QP was destroyed, the nodes' connection gauges, and the process's
//! resident set size.
//!
//! Normal operation: snapshots are taken with nothing in flight (before the first connection,
//! at the quiescent point after the drain, after teardown) and compared field by field.
//!
//! Recovery: reading `/proc` may fail (not Linux): the RSS is then `None` and its check is
//! skipped, which the report says.

use rpcrdma_engine::verbs::soft::{KeyUsage, SoftDevice, SoftFabric, SoftProvider};
use rpcrdma_poller::Endpoint;

/// One endpoint's pools: `(free, count)` of the payload pool and of the reply pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolCounts {
    /// Payload pool: free buffers.
    pub bufs_free: usize,
    /// Payload pool: buffers.
    pub bufs: usize,
    /// Reply pool: free buffers.
    pub replies_free: usize,
    /// Reply pool: buffers.
    pub replies: usize,
}

impl PoolCounts {
    /// Every buffer is free.
    pub fn all_free(&self) -> bool {
        self.bufs_free == self.bufs && self.replies_free == self.replies
    }
}

/// A snapshot of everything the leak checks compare.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resources {
    /// Per endpoint (in creation order).
    pub pools: Vec<PoolCounts>,
    /// Per device (in creation order).
    pub keys: Vec<KeyUsage>,
    /// [`SoftFabric::windows_bound_at_qp_destroy`].
    pub bound_at_destroy: u64,
    /// Connections in all nodes of all endpoints (the nodes' gauges).
    pub connections: u64,
}

impl Resources {
    /// Takes a snapshot.
    pub fn take(
        fabric: &SoftFabric,
        eps: &[Endpoint<SoftProvider>],
        devs: &[SoftDevice],
    ) -> Resources {
        Resources {
            pools: eps
                .iter()
                .map(|e| PoolCounts {
                    bufs_free: e.buffers().available(),
                    bufs: e.buffers().count(),
                    replies_free: e.reply_buffers().available(),
                    replies: e.reply_buffers().count(),
                })
                .collect(),
            keys: devs.iter().map(SoftDevice::key_usage).collect(),
            bound_at_destroy: fabric.windows_bound_at_qp_destroy(),
            connections: eps
                .iter()
                .flat_map(|e| (0..e.nodes()).filter_map(|i| e.node_stats(i)))
                .map(|s| s.connections)
                .sum(),
        }
    }

    /// Free buffers over all pools.
    pub fn free(&self) -> usize {
        self.pools
            .iter()
            .map(|p| p.bufs_free + p.replies_free)
            .sum()
    }

    /// Buffers over all pools.
    pub fn total(&self) -> usize {
        self.pools.iter().map(|p| p.bufs + p.replies).sum()
    }

    /// Sum of the devices' key usage.
    pub fn keys_total(&self) -> KeyUsage {
        let mut t = KeyUsage::default();
        for k in &self.keys {
            t.regions += k.regions;
            t.windows += k.windows;
            t.windows_bound += k.windows_bound;
        }
        t
    }
}

/// The process's resident set size in KiB (`VmRSS` of `/proc/self/status`).
pub fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The first line of `/proc/loadavg`, trimmed.
pub fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.trim().to_string())
}
