//! The settings a client connection negotiated ([`Negotiated`], [`crate::Client::negotiated`]):
//! RPC-over-RDMA version, inline thresholds, remote invalidation, the server's RFC 8797 private
//! data and the credits it grants.
//!
//! Normal operation: the reactor that owns the connection is the only writer. It publishes a
//! snapshot when the connection is established and again whenever the version or the granted
//! credits change (Version Two confirmed or abandoned by the first reply, a new credit grant) —
//! a comparison of two integers per service round, a handful of atomic stores when something
//! changed, never a lock or an allocation. Readers (any thread) copy the snapshot under a
//! sequence counter (a seqlock): the writer never waits for them; a reader that overlaps a
//! publication retries.
//!
//! Recovery: the values of a lost connection stay readable while the client reconnects; the
//! next established connection replaces them. Nothing here reads wire input except the private
//! data octets, which are decoded with the codec (anything malformed reads as "no private
//! data").

use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use rpcrdma_engine::proto::private_data;

use crate::config::ProtocolVersion;

/// The RFC 8797 private data the server sent with its accept, as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerPrivateData {
    /// The eight octets as on the wire: format identifier `0xf6ab0e18`, version, flags, send
    /// size, receive size.
    pub raw: [u8; private_data::MSG_LEN],
    /// Message format version (1).
    pub version: u8,
    /// The R bit: the server supports remote invalidation.
    pub remote_invalidate: bool,
    /// Largest message the server sends with one Send (decoded: `(octet + 1) * 1024`).
    pub max_send_size: u32,
    /// Largest message the server receives with one Receive (decoded).
    pub max_recv_size: u32,
}

impl PeerPrivateData {
    /// Finds a well-formed version 1 message in `buf` (the private data of the accept, which a
    /// transport may prefix with its own octets).
    pub fn find(buf: &[u8]) -> Option<PeerPrivateData> {
        let (at, pd) = private_data::search(buf).ok()?;
        let raw: [u8; private_data::MSG_LEN] =
            buf.get(at..at + private_data::MSG_LEN)?.try_into().ok()?;
        Some(PeerPrivateData {
            raw,
            version: pd.version,
            remote_invalidate: pd.remote_invalidate,
            max_send_size: pd.max_send_size,
            max_recv_size: pd.max_recv_size,
        })
    }
}

/// What a client connection negotiated with its server ([`crate::Client::negotiated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// RPC-over-RDMA version the calls are sent in. A Version Two client reports
    /// [`ProtocolVersion::V2`] from the start of each connection while its first call probes
    /// the server, then keeps it (confirmed) or reports [`ProtocolVersion::V1`] (fallback).
    pub version: ProtocolVersion,
    /// Largest RPC-over-RDMA message the client sends with one Send (larger calls go as long
    /// messages through a Read chunk). At most 1024 while a Version Two probe is unanswered.
    pub send_inline: u32,
    /// Largest message the server sends the client with one Send (larger replies need a Reply
    /// chunk).
    pub recv_inline: u32,
    /// Remote invalidation is in effect: the client advertised the RFC 8797 R bit and the
    /// server's private data carries it too, so the server may answer with Send With
    /// Invalidate.
    pub remote_invalidate: bool,
    /// The server's RFC 8797 private data (`None`: it sent none, and the Version One defaults
    /// apply).
    pub peer_private_data: Option<PeerPrivateData>,
    /// Credits the server currently grants (1 until its first reply).
    pub credits: u32,
}

const F_RI: u32 = 1;
const F_PD: u32 = 2;

/// The published snapshot: one writer (the connection's reactor), readers anywhere.
#[derive(Debug, Default)]
pub(crate) struct NegotiatedCell {
    /// Sequence counter: odd while the writer updates the fields. Writer: Relaxed store of the
    /// odd value + Release fence before the field stores, Release store of the even value
    /// after them; pairs with the Acquire load / Acquire fence + Relaxed reload in `load`.
    seq: AtomicU32,
    /// Version number (0: never established). Relaxed; ordered by `seq` (see there).
    version: AtomicU32,
    /// Send threshold. Relaxed; ordered by `seq`.
    send_inline: AtomicU32,
    /// Receive threshold. Relaxed; ordered by `seq`.
    recv_inline: AtomicU32,
    /// `F_RI` | `F_PD`. Relaxed; ordered by `seq`.
    flags: AtomicU32,
    /// The peer's private data octets (big-endian in a u64). Relaxed; ordered by `seq`.
    pd: AtomicU64,
    /// Credits granted. Relaxed; ordered by `seq`.
    credits: AtomicU32,
}

impl NegotiatedCell {
    /// Publishes `n` (the connection's reactor only: a single writer).
    pub(crate) fn store(&self, n: &Negotiated) {
        // Relaxed: only this thread writes `seq`.
        let s = self.seq.load(Ordering::Relaxed);
        // Relaxed store of the odd value, then a Release fence: the field stores below cannot
        // become visible before it (pairs with the Acquire fence in `load`).
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let mut flags = 0;
        if n.remote_invalidate {
            flags |= F_RI;
        }
        let mut pd = 0u64;
        if let Some(p) = &n.peer_private_data {
            flags |= F_PD;
            pd = u64::from_be_bytes(p.raw);
        }
        // Relaxed (all fields): ordered by the fence above and the Release store below.
        self.version.store(n.version.number(), Ordering::Relaxed);
        self.send_inline.store(n.send_inline, Ordering::Relaxed);
        self.recv_inline.store(n.recv_inline, Ordering::Relaxed);
        self.flags.store(flags, Ordering::Relaxed);
        self.pd.store(pd, Ordering::Relaxed);
        self.credits.store(n.credits, Ordering::Relaxed);
        // Release: makes the field stores visible to a reader whose Acquire load of `seq`
        // sees this even value.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The snapshot (any thread); `None` before the first publication.
    pub(crate) fn load(&self) -> Option<Negotiated> {
        loop {
            // Acquire: pairs with the writer's final Release store of `seq`.
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            // Relaxed (all fields): validated by the sequence check below.
            let version = self.version.load(Ordering::Relaxed);
            let send_inline = self.send_inline.load(Ordering::Relaxed);
            let recv_inline = self.recv_inline.load(Ordering::Relaxed);
            let flags = self.flags.load(Ordering::Relaxed);
            let pd = self.pd.load(Ordering::Relaxed);
            let credits = self.credits.load(Ordering::Relaxed);
            // Acquire fence: the field loads above happen before the reload of `seq`; pairs
            // with the writer's Release fence after its odd store.
            fence(Ordering::Acquire);
            // Relaxed: ordered by the fence above.
            if self.seq.load(Ordering::Relaxed) != s1 {
                continue;
            }
            let version = ProtocolVersion::from_number(version)?;
            let peer_private_data = if flags & F_PD != 0 {
                PeerPrivateData::find(&pd.to_be_bytes())
            } else {
                None
            };
            return Some(Negotiated {
                version,
                send_inline,
                recv_inline,
                remote_invalidate: flags & F_RI != 0,
                peer_private_data,
                credits,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_snapshot_round_trip() {
        let c = NegotiatedCell::default();
        assert_eq!(c.load(), None);
        let raw = private_data::PrivateData::v1(true, 8192, 4096).encode();
        let n = Negotiated {
            version: ProtocolVersion::V2,
            send_inline: 4096,
            recv_inline: 8192,
            remote_invalidate: true,
            peer_private_data: PeerPrivateData::find(&raw),
            credits: 17,
        };
        let pd = n.peer_private_data.unwrap();
        assert_eq!(
            (
                pd.raw,
                pd.remote_invalidate,
                pd.max_send_size,
                pd.max_recv_size
            ),
            (raw, true, 8192, 4096)
        );
        c.store(&n);
        assert_eq!(c.load(), Some(n));
        let m = Negotiated {
            version: ProtocolVersion::V1,
            peer_private_data: None,
            remote_invalidate: false,
            ..n
        };
        c.store(&m);
        assert_eq!(c.load(), Some(m));
    }

    #[test]
    fn rejects_malformed_private_data() {
        assert_eq!(PeerPrivateData::find(&[]), None);
        assert_eq!(
            PeerPrivateData::find(&[0xf6, 0xab, 0x0e, 0x18, 9, 0, 0, 0]),
            None
        );
        // A transport prefix before the message is skipped.
        let mut b = vec![1, 2, 3];
        b.extend_from_slice(&private_data::PrivateData::v1(false, 1024, 2048).encode());
        let pd = PeerPrivateData::find(&b).unwrap();
        assert_eq!((pd.max_send_size, pd.max_recv_size), (1024, 2048));
    }
}
