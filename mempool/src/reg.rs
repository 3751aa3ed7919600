//! The registration interface between memory and whoever makes it reachable by RDMA.
//!
//! mempool knows memory, not RDMA: a region is handed to a [`Registrar`] (a verbs provider's
//! protection domain) once, and gets back a local key (lkey) and a remote key (rkey). The rkey of
//! a whole-region registration is the region's **persistent STag**.

/// Memory access rights, as ibverbs `IBV_ACCESS_*` (the same bit values, so a provider over
/// ibverbs passes them through unchanged). Local read is always allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// No remote access, no local write.
    pub const NONE: Access = Access(0);
    /// The local HCA may write (receive buffers, RDMA Read sinks). `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1);
    /// A peer may RDMA Write into the memory. `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// A peer may RDMA Read the memory. `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// Memory windows may be bound over this region. `IBV_ACCESS_MW_BIND`.
    pub const MW_BIND: Access = Access(1 << 4);

    /// True when every right in `other` is also in `self`.
    #[inline]
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union of two sets of rights.
    #[inline]
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// True when the rights include any remote access.
    #[inline]
    pub const fn is_remote(self) -> bool {
        self.0 & (Self::REMOTE_READ.0 | Self::REMOTE_WRITE.0) != 0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    #[inline]
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

/// The keys a registration hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Keys {
    /// Local key, used in scatter/gather entries of this side's work requests.
    pub lkey: u32,
    /// Remote key: the STag a peer uses in RDMA Read/Write to this memory.
    pub rkey: u32,
}

/// Something that can register memory for RDMA (a verbs protection domain).
pub trait Registrar {
    /// Keeps the registration alive; dropping it deregisters the memory.
    type Registration: Send + Sync + 'static;
    /// The registrar's error type.
    type Error: core::fmt::Debug + core::fmt::Display;

    /// Registers `len` octets at `addr` with `access` rights.
    ///
    /// # Safety
    /// The memory must stay mapped and valid for as long as the returned registration lives, and
    /// the caller must accept that the device (or a remote peer, with remote rights) reads and
    /// writes it concurrently.
    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<(Self::Registration, Keys), Self::Error>;
}
