//! Public configuration of a connection: the size limits (`MAX_*`, version constants), the
//! caller's memory ([`LocalBuf`], [`HostMemory`], [`Pools`], [`BackchannelPools`]), the
//! settings ([`Config`], [`Role`], [`StagMode`]) and why a configuration is refused
//! ([`ConfigError`], [`BackchannelError`]).
//!
//! Normal operation: plain data, validated once by [`super::Connection::with_backchannel`].
//! Recovery: nothing here fails at run time; a bad configuration is refused at creation.

use crate::proto::chunks::ChunkLimits;
use crate::proto::private_data;
use crate::verbs::Sge;

/// Most scatter/gather entries in one [`WorkRequest::Send`](super::WorkRequest::Send).
pub const MAX_SGE: usize = 8;
/// Most parts an RPC message may be given in ([`CallSpec::message`], [`ReplySpec::message`]).
///
/// [`CallSpec::message`]: super::CallSpec::message
/// [`ReplySpec::message`]: super::ReplySpec::message
pub const MAX_PARTS: usize = 8;
/// Most read segments in one call (all Read chunks together, Position Zero included). Also the
/// largest [`ChunkLimits::max_read_segments`] honoured.
pub const MAX_READ_SEGMENTS: usize = 16;
/// Most Write chunks in one call. Also the largest [`ChunkLimits::max_write_chunks`] honoured.
pub const MAX_WRITE_CHUNKS: usize = 4;
/// Most segments in one incoming Write chunk ([`ChunkLimits::max_write_segments`] cap).
pub const MAX_WRITE_SEGMENTS: usize = 16;
/// Most segments in an incoming Reply chunk ([`ChunkLimits::max_reply_segments`] cap).
pub const MAX_REPLY_SEGMENTS: usize = 16;
/// Most pieces a message is cut into for gathering (parts split around inline items and pads).
pub const MAX_PIECES: usize = 24;
/// Most dynamic STags (memory windows) one call uses.
pub const MAX_CALL_STAGS: usize = MAX_READ_SEGMENTS + MAX_WRITE_CHUNKS + 1;

/// RPC-over-RDMA Version One: what every connection speaks (ERR_VERS reports `1..=`
/// [`Config::max_version`]).
pub const VERSION: u32 = 1;
/// The highest RPC-over-RDMA version a connection can speak ([`Config::max_version`]): Version
/// Two of the draft.
pub const MAX_VERSION: u32 = 2;
/// The Version Two default inline threshold: every Version Two receiver takes 4096-octet
/// messages, and senders assume it of their peer (draft, "Default Values").
pub const V2_INLINE: u32 = 4096;
/// Version Two negotiation: a requester's first message is no larger than the Version One
/// default inline threshold, since the responder might speak only Version One.
pub const V2_FIRST_MESSAGE: u32 = 1024;
/// Most RDMA2_OPTIONAL handlers a connection holds ([`Connection::register_optional`]).
///
/// [`Connection::register_optional`]: super::Connection::register_optional
pub const MAX_OPTIONAL_HANDLERS: usize = 4;

// ---------------------------------------------------------------------------------------------
// Memory.

/// A piece of registered local memory: start address, length and the local key of the
/// registration containing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LocalBuf {
    /// Start address.
    pub addr: u64,
    /// Length in octets.
    pub len: u32,
    /// Local key of the registration.
    pub lkey: u32,
}

impl LocalBuf {
    /// The empty buffer.
    pub const EMPTY: LocalBuf = LocalBuf {
        addr: 0,
        len: 0,
        lkey: 0,
    };

    /// A buffer.
    #[inline]
    pub const fn new(addr: u64, len: u32, lkey: u32) -> Self {
        Self { addr, len, lkey }
    }

    /// The scatter/gather entry covering the buffer.
    #[inline]
    pub const fn sge(&self) -> Sge {
        Sge {
            addr: self.addr,
            len: self.len,
            lkey: self.lkey,
        }
    }

    /// `len` octets at `off`, or `None` when outside the buffer.
    #[inline]
    pub fn sub(&self, off: u32, len: u32) -> Option<LocalBuf> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        Some(LocalBuf {
            addr: self.addr.checked_add(u64::from(off))?,
            len,
            lkey: self.lkey,
        })
    }
}

/// The caller's memory, as the connection sees it. Implemented by the environment over its
/// registered regions (a poller over hugepage pools, the test harness over byte arrays).
pub trait HostMemory {
    /// The `len` octets at `addr`, or `None` when they are not all accessible.
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]>;
    /// The `len` octets at `addr` for writing, or `None`.
    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]>;
    /// Copies `len` octets from `src` to `dst` (ranges do not overlap); `false` when either is
    /// inaccessible. The default goes through a small stack buffer.
    fn copy(&mut self, dst: u64, src: u64, len: usize) -> bool {
        let mut tmp = [0u8; 256];
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(tmp.len());
            let Some(s) = self.bytes(src + done as u64, n) else {
                return false;
            };
            tmp[..n].copy_from_slice(s);
            let Some(d) = self.bytes_mut(dst + done as u64, n) else {
                return false;
            };
            d.copy_from_slice(&tmp[..n]);
            done += n;
        }
        true
    }
    /// The persistent STag (rkey of a registration with remote rights) of the registration
    /// whose local key is `lkey`, for [`StagMode::Persistent`]. Default: none.
    fn remote_key(&self, lkey: u32) -> Option<u32> {
        let _ = lkey;
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration.

/// Which end of the RPC exchange this connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The client: sends calls, receives replies.
    Requester,
    /// The server: receives calls, sends replies.
    Responder,
}

/// How the requester exposes chunk memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StagMode {
    /// A memory window bound per chunk with only the needed remote right, invalidated before the
    /// call completes (dynamic STags).
    MemoryWindows,
    /// The registration's own rkey ([`HostMemory::remote_key`]); nothing to bind or invalidate.
    /// Remote invalidation is then never advertised.
    Persistent,
}

/// Connection settings. `Copy`; validated by [`Connection::new`](super::Connection::new).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Requester: the most calls it will have outstanding (and the credits it asks for).
    /// Responder: the credits it grants = receives it keeps posted.
    pub credits: u32,
    /// Largest message this side sends with one Send (advertised in the private data).
    pub inline_send: u32,
    /// Size of this side's receive buffers (advertised in the private data).
    pub inline_recv: u32,
    /// Send queue depth of the QP.
    pub sq_depth: u32,
    /// Receive queue depth of the QP.
    pub rq_depth: u32,
    /// Scatter/gather entries per send work request the QP allows (capped at [`MAX_SGE`]).
    pub max_send_sge: u32,
    /// RDMA Reads the responder keeps outstanding at once (the QP's initiator depth).
    pub max_rdma_reads: u32,
    /// Limits on incoming chunk lists (each capped at the `MAX_*` constants of this module).
    pub limits: ChunkLimits,
    /// Direct data placement: DDP items become Read / Write chunks. When off they travel inline
    /// (or in a long message) and no Write chunks are offered.
    pub ddp: bool,
    /// Requester: how chunk memory is exposed.
    pub stag: StagMode,
    /// Advertise the RFC 8797 R bit (remote invalidation). A requester advertises it only with
    /// [`StagMode::MemoryWindows`].
    pub remote_invalidate: bool,
    /// Requester: fail a call not answered within this many nanoseconds (0: never).
    pub call_timeout_ns: u64,
    /// Requester with [`Config::max_version`] 2: how long the first Version Two call (the
    /// probe) waits for an answer before the responder is taken for a Version One one that
    /// drops what it cannot read (draft, "Responder Does Not Support RPC-over-RDMA Version
    /// Two": "if the initial negotiation message is lost or dropped"). The call is then sent
    /// again in Version One, same XID, and the fallback remembered. Independent of
    /// [`Config::call_timeout_ns`]; 0: only the call timeout applies.
    pub probe_timeout_ns: u64,
    /// Send this side's RFC 8797 message at connection set-up ([`Connection::private_data_opt`]).
    /// When off, this side negotiates as a peer without private data: the Version One defaults
    /// (1024-octet thresholds both ways, no remote invalidation), which is what the other side
    /// assumes of it.
    ///
    /// [`Connection::private_data_opt`]: super::Connection::private_data_opt
    pub send_private_data: bool,
    /// Backward direction (RFC 8167), used only by a connection created with
    /// [`Connection::with_backchannel`]. Requester (client): the backward credits it grants the
    /// server (backward calls it serves at once). Responder (server): the backward credits it
    /// asks for, and the most backward calls it keeps outstanding. Never sent as 0.
    ///
    /// [`Connection::with_backchannel`]: super::Connection::with_backchannel
    pub backchannel_credits: u32,
    /// Highest RPC-over-RDMA version spoken: 1, or 2 (the draft's Version Two). A requester with
    /// 2 sends its first call in Version Two (at most 1024 octets) and falls back to Version One
    /// for the connection if the responder answers ERR_VERS; a responder with 2 answers each
    /// call in the version it came in. Version Two needs [`Config::inline_recv`] and
    /// [`Config::inline_send`] ≥ 4096.
    pub max_version: u32,
    /// Requester with [`StagMode::MemoryWindows`]: seed of the connection's key generator,
    /// which picks the consumer key byte (the low 8 bits) of every memory-window bind, never
    /// the window's previous byte. Keys are then not predictable from earlier ones as far as
    /// the seed is not: an embedder gives each connection a seed from the operating system's
    /// random source (the poller does); tests may fix it. The default, 0, is a valid but
    /// public seed.
    pub key_seed: u64,
    /// The connection's requester (a client's forward calls, a server's backward ones): when
    /// not 0, the caller names each call's slot, a number below this
    /// ([`Connection::start_call_in`]), normally the index of its own record of the call, so
    /// that the engine's transport state of a call and the caller's record share one index and
    /// no table joins them. A send buffer (`Pools::headers`, or `BackchannelPools::headers`
    /// for a server's backward calls) is then held only by a call on the wire, and at most
    /// 65 536 slots may be named. 0 (the default): the engine picks the slot, one per send
    /// buffer ([`Connection::start_call`]).
    ///
    /// [`Connection::start_call_in`]: super::Connection::start_call_in
    /// [`Connection::start_call`]: super::Connection::start_call
    pub call_slots: u32,
}

impl Config {
    /// Linux-like defaults: 64 credits, 4096-octet inline thresholds, memory windows, DDP on,
    /// remote invalidation advertised, no call timeout, a 5 s Version Two probe timeout.
    pub const DEFAULT: Config = Config {
        credits: 64,
        inline_send: 4096,
        inline_recv: 4096,
        sq_depth: 1024,
        rq_depth: 256,
        max_send_sge: 4,
        max_rdma_reads: 16,
        limits: ChunkLimits::DEFAULT,
        ddp: true,
        stag: StagMode::MemoryWindows,
        remote_invalidate: true,
        call_timeout_ns: 0,
        probe_timeout_ns: 5_000_000_000,
        send_private_data: true,
        backchannel_credits: 16,
        max_version: 1,
        key_seed: 0,
        call_slots: 0,
    };
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The memory the environment hands in at creation. Slices are copied; the memory they describe
/// must stay registered for the life of the connection.
#[derive(Debug, Clone, Copy)]
pub struct Pools<'a> {
    /// Send buffers, one per call slot (the number of call slots; for a requester whose caller
    /// names the slots, [`Config::call_slots`], one per call on the wire at once, held from a
    /// call's start to its completion). Each holds a transport header and, when an inline
    /// message has more pieces than SGEs, the message copied after it, so each must be at least
    /// [`Config::inline_send`] octets.
    pub headers: &'a [LocalBuf],
    /// Receive buffers, each at least the advertised [`Config::inline_recv`]. Requester: at least
    /// `credits`. Responder: at least `credits + headers.len()` (posted ones plus one held by each
    /// call in progress).
    pub recvs: &'a [LocalBuf],
    /// Responder: reassembly buffers for calls with Read chunks (their size bounds the largest
    /// such call). Requester: unused.
    pub data: &'a [LocalBuf],
    /// Requester with [`StagMode::MemoryWindows`]: the memory windows (type 2) allocated for this
    /// QP, given by their current rkeys. The slot index is what [`WorkRequest::BindMw`] names.
    ///
    /// [`WorkRequest::BindMw`]: super::WorkRequest::BindMw
    pub mws: &'a [u32],
    /// At least 4 octets the connection may keep zeroed: the source of XDR pad octets. A
    /// requester may expose it read-only in a long call, so (like every buffer a requester
    /// exposes with [`StagMode::MemoryWindows`]) its registration needs `MW_BIND`.
    pub zero: LocalBuf,
}

/// Memory for the backward direction (RFC 8167), given to [`Connection::with_backchannel`].
/// Every buffer must stay registered for the life of the connection.
///
/// [`Connection::with_backchannel`]: super::Connection::with_backchannel
#[derive(Debug, Clone, Copy)]
pub struct BackchannelPools<'a> {
    /// Send buffers for backward messages, each at least [`Config::inline_send`] octets.
    /// Requester (client): one per backward call being served or whose reply Send has not
    /// completed yet, at least `2 × backchannel_credits`. Responder (server): one per backward
    /// call outstanding
    /// (at most `backchannel_credits` of them are used).
    pub headers: &'a [LocalBuf],
    /// Extra receive buffers, each at least the advertised [`Config::inline_recv`].
    /// Requester: at least `2 × backchannel_credits` (one per backward credit, plus one per
    /// backward call whose reply Send has not completed yet), all posted once the backchannel
    /// is enabled. Responder: at least `headers.len()` (one posted per backward call sent).
    pub recvs: &'a [LocalBuf],
}

impl BackchannelPools<'_> {
    /// No backchannel.
    pub const NONE: BackchannelPools<'static> = BackchannelPools {
        headers: &[],
        recvs: &[],
    };
}

/// Why [`Connection::enable_backchannel`](super::Connection::enable_backchannel) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackchannelError {
    /// The connection was created without backchannel memory ([`Connection::with_backchannel`]).
    ///
    /// [`Connection::with_backchannel`]: super::Connection::with_backchannel
    NoResources,
    /// The connection is closed.
    Closed,
}

impl core::fmt::Display for BackchannelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "backchannel not available: {self:?}")
    }
}

impl std::error::Error for BackchannelError {}

/// Why [`Connection::new`](super::Connection::new) refused a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// `credits` is zero.
    NoCredits,
    /// No header slots.
    NoHeaderSlots,
    /// Fewer receive slots than the role needs.
    TooFewRecvSlots {
        /// Slots needed.
        needed: usize,
        /// Slots given.
        have: usize,
    },
    /// A receive slot is smaller than the advertised receive size.
    RecvSlotTooSmall {
        /// Size needed.
        needed: u32,
        /// Size given.
        have: u32,
    },
    /// A header slot is smaller than the inline send size.
    HeaderSlotTooSmall {
        /// Size needed.
        needed: u32,
        /// Size given.
        have: u32,
    },
    /// The receive queue cannot hold the receives the role keeps posted.
    RecvQueueTooShallow,
    /// The send queue cannot hold one call's work requests.
    SendQueueTooShallow,
    /// The zero source is shorter than 4 octets.
    NoZeroSource,
    /// Memory windows were asked for but none were given.
    NoMemoryWindows,
    /// More slots than a work request id can index.
    TooManySlots,
    /// Backchannel memory was given with [`Config::backchannel_credits`] of 0.
    NoBackchannelCredits,
    /// Fewer backchannel send buffers than the role needs.
    TooFewBackchannelHeaders {
        /// Buffers needed.
        needed: usize,
        /// Buffers given.
        have: usize,
    },
    /// [`Config::max_version`] is neither 1 nor 2.
    UnsupportedVersion(u32),
    /// Version Two is enabled but the receive size is below 4096 octets, the size every
    /// Version Two receiver must take.
    InlineRecvTooSmallForV2 {
        /// The advertised receive size.
        have: u32,
    },
    /// Version Two is enabled but [`Config::inline_send`] is below 4096 octets: after a Version
    /// Two reply "both peers use the default inline threshold value for RPC-over-RDMA Version
    /// Two connections (4096 bytes)" (draft-cel-nfsv4-rpcrdma-version-two-02, "Responder Does
    /// Support RPC-over-RDMA Version Two"), so a peer offers no Reply chunk for a reply that
    /// fits 4096 octets, which this side could not send inline.
    InlineSendTooSmallForV2 {
        /// The send size configured.
        have: u32,
    },
    /// Fewer backchannel receive buffers than the role needs.
    TooFewBackchannelRecvs {
        /// Buffers needed.
        needed: usize,
        /// Buffers given.
        have: usize,
    },
    /// Shared receives ([`super::Connection::with_shared_receives`]) for a requester, or with
    /// no shared buffers.
    SharedReceivesUnsupported,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "connection configuration rejected: {self:?}")
    }
}

impl std::error::Error for ConfigError {}

/// Checks a configuration and its memory for a connection of `role` (the checks of
/// [`super::Connection::with_backchannel`], in order); the number of receives to keep posted.
pub(super) fn validate(
    role: Role,
    cfg: &Config,
    pools: &Pools<'_>,
    bc: &BackchannelPools<'_>,
) -> Result<u32, ConfigError> {
    check_settings(cfg)?;
    check_buffers(cfg, pools, bc)?;
    if !bc.headers.is_empty() || !bc.recvs.is_empty() {
        check_backchannel(role, cfg, bc)?;
    }
    check_queues(role, cfg, pools, bc)
}

/// Checks a configuration for a connection whose receives come from a shared receive queue
/// ([`super::srq`]; `shared`: its buffers): settings, send buffers, backchannel send buffers
/// and the shared buffers' size; `pools.recvs` and `bc.recvs` are not used. The number of holding slots: the credits
/// plus one per backward call the server may have outstanding.
pub(super) fn validate_shared(
    role: Role,
    cfg: &Config,
    pools: &Pools<'_>,
    bc: &BackchannelPools<'_>,
    shared: &[LocalBuf],
) -> Result<usize, ConfigError> {
    if role != Role::Responder || shared.is_empty() {
        return Err(ConfigError::SharedReceivesUnsupported);
    }
    check_settings(cfg)?;
    let none = BackchannelPools {
        headers: bc.headers,
        recvs: &[],
    };
    check_buffers(
        cfg,
        &Pools {
            recvs: &[],
            ..*pools
        },
        &none,
    )?;
    if !bc.headers.is_empty() && cfg.backchannel_credits == 0 {
        return Err(ConfigError::NoBackchannelCredits);
    }
    let recv_size = private_data::representable_size(cfg.inline_recv);
    if let Some(r) = shared.iter().find(|r| r.len < recv_size) {
        return Err(ConfigError::RecvSlotTooSmall {
            needed: recv_size,
            have: r.len,
        });
    }
    if shared.len() > u16::MAX as usize + 1 || cfg.sq_depth < 2 {
        return Err(if cfg.sq_depth < 2 {
            ConfigError::SendQueueTooShallow
        } else {
            ConfigError::TooManySlots
        });
    }
    let slots = cfg.credits as usize + bc.headers.len();
    if slots > u16::MAX as usize {
        return Err(ConfigError::TooManySlots);
    }
    Ok(slots)
}

/// Credits and version.
fn check_settings(cfg: &Config) -> Result<(), ConfigError> {
    if cfg.credits == 0 {
        return Err(ConfigError::NoCredits);
    }
    if !(VERSION..=MAX_VERSION).contains(&cfg.max_version) {
        return Err(ConfigError::UnsupportedVersion(cfg.max_version));
    }
    if cfg.call_slots > u32::from(u16::MAX) + 1 {
        return Err(ConfigError::TooManySlots);
    }
    if cfg.max_version >= 2 && private_data::representable_size(cfg.inline_recv) < V2_INLINE {
        return Err(ConfigError::InlineRecvTooSmallForV2 {
            have: private_data::representable_size(cfg.inline_recv),
        });
    }
    if cfg.max_version >= 2 && cfg.inline_send < V2_INLINE {
        return Err(ConfigError::InlineSendTooSmallForV2 {
            have: cfg.inline_send,
        });
    }
    Ok(())
}

/// Slot counts and buffer sizes.
fn check_buffers(
    cfg: &Config,
    pools: &Pools<'_>,
    bc: &BackchannelPools<'_>,
) -> Result<(), ConfigError> {
    let nslots = pools.headers.len();
    if nslots == 0 {
        return Err(ConfigError::NoHeaderSlots);
    }
    if nslots > u16::MAX as usize
        || pools.recvs.len() + bc.recvs.len() > u16::MAX as usize
        || bc.headers.len() > u16::MAX as usize
        || pools.mws.len() > u16::MAX as usize
        || pools.data.len() > u16::MAX as usize
    {
        return Err(ConfigError::TooManySlots);
    }
    if pools.zero.len < 4 {
        return Err(ConfigError::NoZeroSource);
    }
    let recv_size = private_data::representable_size(cfg.inline_recv);
    if let Some(r) = pools.recvs.iter().find(|r| r.len < recv_size) {
        return Err(ConfigError::RecvSlotTooSmall {
            needed: recv_size,
            have: r.len,
        });
    }
    if let Some(h) = pools
        .headers
        .iter()
        .chain(bc.headers)
        .find(|h| h.len < cfg.inline_send)
    {
        return Err(ConfigError::HeaderSlotTooSmall {
            needed: cfg.inline_send,
            have: h.len,
        });
    }
    if let Some(r) = bc.recvs.iter().find(|r| r.len < recv_size) {
        return Err(ConfigError::RecvSlotTooSmall {
            needed: recv_size,
            have: r.len,
        });
    }
    Ok(())
}

/// Backchannel memory (when given) against the backward credits.
fn check_backchannel(
    role: Role,
    cfg: &Config,
    bc: &BackchannelPools<'_>,
) -> Result<(), ConfigError> {
    let c = cfg.backchannel_credits as usize;
    if c == 0 {
        return Err(ConfigError::NoBackchannelCredits);
    }
    let (need_h, need_r) = match role {
        // Requester: a send buffer per backward credit, plus one per backward call
        // whose reply Send has not completed yet (the server may send its next call
        // as soon as it has the reply), like the receives.
        Role::Requester => (2 * c, 2 * c),
        Role::Responder => (1, bc.headers.len().max(1)),
    };
    if bc.headers.len() < need_h {
        return Err(ConfigError::TooFewBackchannelHeaders {
            needed: need_h,
            have: bc.headers.len(),
        });
    }
    if bc.recvs.len() < need_r {
        return Err(ConfigError::TooFewBackchannelRecvs {
            needed: need_r,
            have: bc.recvs.len(),
        });
    }
    Ok(())
}

/// Receive slots and queue depths; the number of receives to keep posted.
fn check_queues(
    role: Role,
    cfg: &Config,
    pools: &Pools<'_>,
    bc: &BackchannelPools<'_>,
) -> Result<u32, ConfigError> {
    let nslots = pools.headers.len();
    let (rq_target, needed_recvs) = match role {
        Role::Requester => {
            let c = cfg.credits.min(nslots as u32) as usize;
            (pools.recvs.len().min(u32::MAX as usize) as u32, c)
        }
        Role::Responder => (cfg.credits, cfg.credits as usize + nslots),
    };
    if pools.recvs.len() < needed_recvs {
        return Err(ConfigError::TooFewRecvSlots {
            needed: needed_recvs,
            have: pools.recvs.len(),
        });
    }
    // The receive queue also holds the backchannel receives: all of them on a client, one
    // per backward call outstanding on a server.
    if (cfg.rq_depth as usize) < rq_target as usize + bc.recvs.len() {
        return Err(ConfigError::RecvQueueTooShallow);
    }
    if cfg.sq_depth < 2 {
        return Err(ConfigError::SendQueueTooShallow);
    }
    if role == Role::Requester && cfg.stag == StagMode::MemoryWindows && pools.mws.is_empty() {
        return Err(ConfigError::NoMemoryWindows);
    }
    Ok(rq_target)
}
