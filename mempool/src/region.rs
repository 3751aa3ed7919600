//! Memory regions: one anonymous mapping, preferably backed by hugepages, locked in memory, and
//! registered once for RDMA.
//!
//! Normal operation: [`Region::new`] maps `len` octets rounded up to the page size with
//! `MAP_HUGETLB | MAP_POPULATE` (2 MiB pages, or 1 GiB on request), then the region is registered
//! once with [`Region::register`]; the rkey of that registration is the region's persistent STag.
//! Pools carve disjoint, aligned ranges out of it with [`Region::carve`].
//!
//! Recovery: when the kernel has no hugepages reserved the mapping fails with `ENOMEM`. Under
//! [`HugePagePolicy::Prefer`] the region falls back to normal pages with transparent hugepages
//! advised and logs one warning (`tracing`, target `rpcrdma_mempool::region`) naming the fix
//! (`echo N > /proc/sys/vm/nr_hugepages`);
//! under [`HugePagePolicy::Require`] the same text comes back as [`RegionError::NoHugePages`].
//! A failed `mlock` is an error ([`RegionError::Lock`]) that names `RLIMIT_MEMLOCK`.

use crate::reg::{Access, Keys, Registrar};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use memmap2::{Advice, MmapOptions, MmapRaw};
use std::any::Any;
use std::sync::OnceLock;

/// What to do about hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HugePagePolicy {
    /// Hugepages or an error ([`RegionError::NoHugePages`]).
    Require,
    /// Hugepages when reserved; otherwise normal pages with transparent hugepages advised and one
    /// logged warning (`tracing`, once per process).
    #[default]
    Prefer,
    /// Normal pages, no hugepage advice.
    Never,
}

/// Hugepage size to ask the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HugePageSize {
    /// 2 MiB pages (`MAP_HUGE_2MB`).
    #[default]
    Size2MiB,
    /// 1 GiB pages (`MAP_HUGE_1GB`); these usually have to be reserved at boot.
    Size1GiB,
}

impl HugePageSize {
    /// log2 of the page size (21 or 30), as passed to `MmapOptions::huge`.
    pub const fn shift(self) -> u8 {
        match self {
            HugePageSize::Size2MiB => 21,
            HugePageSize::Size1GiB => 30,
        }
    }

    /// The page size in octets.
    pub const fn bytes(self) -> usize {
        1usize << self.shift()
    }

    /// The kernel's sysfs directory for this size.
    pub const fn sysfs_dir(self) -> &'static str {
        match self {
            HugePageSize::Size2MiB => "/sys/kernel/mm/hugepages/hugepages-2048kB",
            HugePageSize::Size1GiB => "/sys/kernel/mm/hugepages/hugepages-1048576kB",
        }
    }

    const fn label(self) -> &'static str {
        match self {
            HugePageSize::Size2MiB => "2 MiB",
            HugePageSize::Size1GiB => "1 GiB",
        }
    }
}

/// The kind of page that backs a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// hugetlbfs 2 MiB pages.
    Huge2MiB,
    /// hugetlbfs 1 GiB pages.
    Huge1GiB,
    /// Normal pages with `madvise(MADV_HUGEPAGE)`: the kernel may back them with transparent
    /// hugepages, but nothing guarantees it.
    TransparentHuge,
    /// Normal pages.
    Normal,
}

impl PageKind {
    /// True for hugetlbfs-backed regions (guaranteed hugepages).
    pub const fn is_huge(self) -> bool {
        matches!(self, PageKind::Huge2MiB | PageKind::Huge1GiB)
    }
}

impl fmt::Display for PageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageKind::Huge2MiB => "2 MiB hugepages",
            PageKind::Huge1GiB => "1 GiB hugepages",
            PageKind::TransparentHuge => "normal pages (transparent hugepages advised)",
            PageKind::Normal => "normal pages",
        })
    }
}

/// How a region is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionOptions {
    /// Hugepage policy (default [`HugePagePolicy::Prefer`]).
    pub hugepages: HugePagePolicy,
    /// Hugepage size (default 2 MiB).
    pub huge_size: HugePageSize,
    /// Lock the region in memory (default true). hugetlbfs pages are never swapped, so a
    /// hugepage-backed region counts as locked without calling `mlock` (which would charge
    /// `RLIMIT_MEMLOCK` for nothing); normal pages are `mlock`ed and a failure is an error.
    pub lock: bool,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            hugepages: HugePagePolicy::Prefer,
            huge_size: HugePageSize::Size2MiB,
            lock: true,
        }
    }
}

impl RegionOptions {
    /// Options with the given hugepage policy and the other defaults.
    pub fn with_policy(hugepages: HugePagePolicy) -> Self {
        RegionOptions {
            hugepages,
            ..Self::default()
        }
    }
}

/// Why hugepages could not back a region, with the numbers needed to fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HugePageShortfall {
    /// The hugepage size that was asked for.
    pub size: HugePageSize,
    /// Pages the request needed.
    pub needed: u64,
    /// Pages the kernel had reserved in total (`nr_hugepages`), when readable.
    pub reserved: Option<u64>,
    /// Pages free and not promised to other mappings (`free_hugepages - resv_hugepages`), when
    /// readable.
    pub available: Option<u64>,
    /// The value of `nr_hugepages` that would have satisfied this request.
    pub suggested_nr: u64,
    /// Whether `size` is the kernel's default hugepage size (then
    /// `/proc/sys/vm/nr_hugepages` controls it).
    pub is_default_size: bool,
    /// The `errno` of the failed mapping (`ENOMEM` when nothing is reserved).
    pub errno: i32,
    /// Length of the request in octets (rounded up to the hugepage size).
    pub len: usize,
}

impl HugePageShortfall {
    fn measure(size: HugePageSize, len: usize, errno: i32) -> Self {
        let needed = (len / size.bytes()) as u64;
        let dir = size.sysfs_dir();
        let read = |name: &str| -> Option<u64> {
            std::fs::read_to_string(format!("{dir}/{name}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let reserved = read("nr_hugepages");
        let available = match (read("free_hugepages"), read("resv_hugepages")) {
            (Some(f), Some(r)) => Some(f.saturating_sub(r)),
            (Some(f), None) => Some(f),
            _ => None,
        };
        let suggested_nr = match (reserved, available) {
            (Some(nr), Some(av)) if av < needed => nr + (needed - av),
            (Some(nr), _) => nr + needed,
            (None, _) => needed,
        };
        let is_default_size = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("Hugepagesize:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
            .map_or(size == HugePageSize::Size2MiB, |kb| {
                kb * 1024 == size.bytes() as u64
            });
        HugePageShortfall {
            size,
            needed,
            reserved,
            available,
            suggested_nr,
            is_default_size,
            errno,
            len,
        }
    }

    /// The command that reserves enough hugepages for this request.
    pub fn fix_command(&self) -> FixCommand {
        FixCommand(*self)
    }
}

/// Display helper for [`HugePageShortfall::fix_command`].
#[derive(Debug, Clone, Copy)]
pub struct FixCommand(HugePageShortfall);

impl fmt::Display for FixCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.0;
        if s.is_default_size {
            write!(f, "echo {} > /proc/sys/vm/nr_hugepages", s.suggested_nr)
        } else {
            write!(
                f,
                "echo {} > {}/nr_hugepages",
                s.suggested_nr,
                s.size.sysfs_dir()
            )
        }
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

impl fmt::Display for HugePageShortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no {} hugepages for a {}-octet region (pages needed: {}, available: {}, reserved: {}; \
             mmap(MAP_HUGETLB) failed: {}). Fix: `{}` (as root",
            self.size.label(),
            self.len,
            self.needed,
            opt(self.available),
            opt(self.reserved),
            std::io::Error::from_raw_os_error(self.errno),
            self.fix_command(),
        )?;
        if self.size == HugePageSize::Size1GiB {
            f.write_str("; 1 GiB pages usually need `hugepagesz=1G hugepages=N` at boot")?;
        }
        f.write_str(")")
    }
}

/// Errors creating or carving a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegionError {
    /// A zero-length region or carve was requested.
    ZeroLength,
    /// The length overflows when rounded up to the page size.
    TooLarge {
        /// Requested length.
        len: usize,
    },
    /// [`HugePagePolicy::Require`] and no hugepages could be mapped.
    NoHugePages(HugePageShortfall),
    /// `mmap` of normal pages failed.
    Map {
        /// `errno`.
        errno: i32,
        /// Length asked for.
        len: usize,
    },
    /// `mlock` failed (usually `RLIMIT_MEMLOCK`, 8 MiB by default for non-root users).
    Lock {
        /// `errno`.
        errno: i32,
        /// Length asked for.
        len: usize,
        /// The soft `RLIMIT_MEMLOCK` in octets (`None` = unlimited or unreadable).
        limit: Option<u64>,
    },
    /// A carve did not fit in what is left of the region.
    Full {
        /// Octets asked for, including alignment padding.
        requested: usize,
        /// Octets left.
        available: usize,
    },
    /// A carve alignment was zero or not a power of two.
    BadAlign {
        /// The alignment asked for.
        align: usize,
    },
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RegionError::ZeroLength => f.write_str("zero-length region or carve"),
            RegionError::TooLarge { len } => write!(f, "region length {len} is too large"),
            RegionError::NoHugePages(s) => write!(f, "hugepages required but {s}"),
            RegionError::Map { errno, len } => write!(
                f,
                "mmap of {len} octets failed: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
            RegionError::Lock { errno, len, limit } => {
                write!(
                    f,
                    "mlock of {len} octets failed: {}; RLIMIT_MEMLOCK is {}. Raise it \
                     (`ulimit -l unlimited`, `LimitMEMLOCK=infinity` in a systemd unit, or \
                     memlock in /etc/security/limits.conf), run with CAP_IPC_LOCK, use \
                     hugepages (not mlocked), or set RegionOptions::lock = false",
                    std::io::Error::from_raw_os_error(errno),
                    limit.map_or_else(
                        || "unlimited/unknown".to_string(),
                        |l| format!("{l} octets")
                    ),
                )
            }
            RegionError::Full {
                requested,
                available,
            } => write!(
                f,
                "region full: {requested} octets requested, {available} left"
            ),
            RegionError::BadAlign { align } => {
                write!(f, "alignment {align} is not a power of two")
            }
        }
    }
}

impl std::error::Error for RegionError {}

/// Errors from [`Region::register`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterError<E> {
    /// The region is already registered (registration happens once per region).
    AlreadyRegistered,
    /// The registrar failed.
    Registrar(E),
}

impl<E: fmt::Display> fmt::Display for RegisterError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::AlreadyRegistered => f.write_str("region is already registered"),
            RegisterError::Registrar(e) => write!(f, "registration failed: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RegisterError<E> {}

struct Registered {
    /// Dropping this deregisters; it is declared (and so dropped) before the mapping.
    handle: Box<dyn Any + Send + Sync>,
    keys: Keys,
    access: Access,
}

/// Set once the fallback warning has been logged (one per process).
static FALLBACK_WARNED: AtomicBool = AtomicBool::new(false);

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn base_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn memlock_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid out-parameter.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if rc != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(rl.rlim_cur)
    }
}

/// One anonymous mapping. Dropping it deregisters (if registered) and then unmaps.
///
/// The memory is reached through raw pointers only ([`Region::as_ptr`]); pools hand out
/// exclusive access to disjoint objects carved from it.
pub struct Region {
    // Field order matters: the registration drops before the mapping.
    registration: OnceLock<Registered>,
    registering: AtomicBool,
    map: MmapRaw,
    len: usize,
    page_kind: PageKind,
    page_size: usize,
    locked: bool,
    shortfall: Option<HugePageShortfall>,
    /// Carve cursor: octets from the start already handed out.
    cursor: AtomicUsize,
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("addr", &self.as_ptr())
            .field("len", &self.len)
            .field("page_kind", &self.page_kind)
            .field("locked", &self.locked)
            .field("keys", &self.keys())
            .finish()
    }
}

impl Region {
    /// Maps a region of at least `len` octets (rounded up to the page size) as `opts` says.
    ///
    /// Hugepage mappings are populated up front (`MAP_POPULATE`); normal-page mappings are
    /// populated by `mlock` or, without locking, by touching every page.
    pub fn new(len: usize, opts: &RegionOptions) -> Result<Region, RegionError> {
        if len == 0 {
            return Err(RegionError::ZeroLength);
        }
        if opts.hugepages != HugePagePolicy::Never {
            let hp = opts.huge_size.bytes();
            let rounded = round_up(len, hp).ok_or(RegionError::TooLarge { len })?;
            match MmapOptions::new()
                .len(rounded)
                .huge(Some(opts.huge_size.shift()))
                .populate()
                .map_anon()
            {
                Ok(m) => {
                    let kind = match opts.huge_size {
                        HugePageSize::Size2MiB => PageKind::Huge2MiB,
                        HugePageSize::Size1GiB => PageKind::Huge1GiB,
                    };
                    // hugetlbfs pages are never swapped: no mlock (it would only charge
                    // RLIMIT_MEMLOCK).
                    return Ok(Region::from_map(
                        MmapRaw::from(m),
                        rounded,
                        kind,
                        hp,
                        true,
                        None,
                    ));
                }
                Err(e) => {
                    let s = HugePageShortfall::measure(opts.huge_size, rounded, errno_of(&e));
                    if opts.hugepages == HugePagePolicy::Require {
                        return Err(RegionError::NoHugePages(s));
                    }
                    // Relaxed: the flag only elects the one caller that logs; it publishes
                    // no data.
                    if !FALLBACK_WARNED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            shortfall = %s,
                            "hugepages short: falling back to normal pages with transparent \
                             hugepages advised (more TLB misses, slower); set \
                             HugePagePolicy::Require to make this an error (logged once)"
                        );
                    } else {
                        tracing::debug!(shortfall = %s, "hugepage fallback");
                    }
                    return Region::map_normal(rounded, true, opts.lock, Some(s));
                }
            }
        }
        let rounded = round_up(len, base_page_size()).ok_or(RegionError::TooLarge { len })?;
        Region::map_normal(rounded, false, opts.lock, None)
    }

    fn map_normal(
        len: usize,
        advise_huge: bool,
        lock: bool,
        shortfall: Option<HugePageShortfall>,
    ) -> Result<Region, RegionError> {
        // Not MAP_POPULATE: pages faulted in before the madvise would all be small pages.
        let map = MmapOptions::new()
            .len(len)
            .map_anon()
            .map_err(|e| RegionError::Map {
                errno: errno_of(&e),
                len,
            })?;
        let map = MmapRaw::from(map);
        let kind = if advise_huge && map.advise(Advice::HugePage).is_ok() {
            PageKind::TransparentHuge
        } else {
            PageKind::Normal
        };
        if lock {
            // mlock faults every page in.
            map.lock().map_err(|e| RegionError::Lock {
                errno: errno_of(&e),
                len,
                limit: memlock_limit(),
            })?;
        } else {
            let p = map.as_mut_ptr();
            let step = base_page_size();
            let mut off = 0;
            while off < len {
                // SAFETY: `off < len` and the mapping is `len` octets, readable and writable.
                unsafe { p.add(off).write_volatile(0) };
                off += step;
            }
        }
        Ok(Region::from_map(
            map,
            len,
            kind,
            base_page_size(),
            lock,
            shortfall,
        ))
    }

    fn from_map(
        map: MmapRaw,
        len: usize,
        page_kind: PageKind,
        page_size: usize,
        locked: bool,
        shortfall: Option<HugePageShortfall>,
    ) -> Region {
        Region {
            registration: OnceLock::new(),
            registering: AtomicBool::new(false),
            map,
            len,
            page_kind,
            page_size,
            locked,
            shortfall,
            cursor: AtomicUsize::new(0),
        }
    }

    /// Start of the region.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Length in octets (the request rounded up to the page size).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (regions are never empty); present for symmetry with `len`.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Which kind of page backs the region.
    #[inline]
    pub fn page_kind(&self) -> PageKind {
        self.page_kind
    }

    /// Page size used for rounding (the hugepage size, or the base page size).
    #[inline]
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// True when the region cannot be swapped out (hugetlbfs pages, or `mlock` succeeded).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Why hugepages were not used, when the region fell back to normal pages under
    /// [`HugePagePolicy::Prefer`].
    #[inline]
    pub fn hugepage_shortfall(&self) -> Option<HugePageShortfall> {
        self.shortfall
    }

    /// True when `[addr, addr + len)` lies inside the region.
    pub fn contains(&self, addr: *const u8, len: usize) -> bool {
        let base = self.as_ptr() as usize;
        let a = addr as usize;
        a >= base && len <= self.len && a - base <= self.len - len
    }

    /// Reserves `len` octets aligned to `align` (a power of two) and returns their offset from
    /// the start. Carves never overlap; space is never given back.
    pub fn carve(&self, len: usize, align: usize) -> Result<usize, RegionError> {
        if len == 0 {
            return Err(RegionError::ZeroLength);
        }
        if align == 0 || !align.is_power_of_two() {
            return Err(RegionError::BadAlign { align });
        }
        let base = self.as_ptr() as usize;
        // Relaxed: the cursor is a plain counter; the CAS below is the only synchronisation
        // carves need (each gets a disjoint range), and no data is published through it.
        let mut cur = self.cursor.load(Ordering::Relaxed);
        loop {
            let full = RegionError::Full {
                requested: len,
                available: self.len - cur,
            };
            let start = round_up(base + cur, align).ok_or(full)? - base;
            let end = start.checked_add(len).ok_or(full)?;
            if end > self.len {
                return Err(RegionError::Full {
                    requested: end - cur,
                    available: self.len - cur,
                });
            }
            // Relaxed: see above.
            match self
                .cursor
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(start),
                Err(now) => cur = now,
            }
        }
    }

    /// Octets not yet carved.
    pub fn remaining(&self) -> usize {
        // Relaxed: reporting only.
        self.len - self.cursor.load(Ordering::Relaxed)
    }

    /// Registers the whole region once with `registrar`, keeping the registration (dropped with
    /// the region, before it is unmapped) and its keys. The rkey is the persistent STag.
    pub fn register<R: Registrar>(
        &self,
        registrar: &R,
        access: Access,
    ) -> Result<Keys, RegisterError<R::Error>> {
        // Acquire/Relaxed: elects the one registering caller; a loser returns at once. The
        // winner's result is published through the OnceLock.
        if self
            .registering
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(RegisterError::AlreadyRegistered);
        }
        // SAFETY: the mapping lives as long as `self`, and the registration is stored in
        // `self` and dropped before the mapping (field order).
        match unsafe { registrar.register(self.as_ptr(), self.len, access) } {
            Ok((handle, keys)) => {
                let _ = self.registration.set(Registered {
                    handle: Box::new(handle),
                    keys,
                    access,
                });
                Ok(keys)
            }
            Err(e) => {
                // Release: pairs with the Acquire CAS above so a retry sees a clean state.
                self.registering.store(false, Ordering::Release);
                Err(RegisterError::Registrar(e))
            }
        }
    }

    /// The keys of the registration, if registered.
    #[inline]
    pub fn keys(&self) -> Option<Keys> {
        self.registration.get().map(|r| r.keys)
    }

    /// The rkey of the whole-region registration: the region's persistent STag.
    #[inline]
    pub fn persistent_stag(&self) -> Option<u32> {
        self.keys().map(|k| k.rkey)
    }

    /// The access rights the region was registered with.
    #[inline]
    pub fn access(&self) -> Option<Access> {
        self.registration.get().map(|r| r.access)
    }

    /// The registrar's registration object, if registered and of type `T`.
    pub fn registration<T: 'static>(&self) -> Option<&T> {
        self.registration.get()?.handle.downcast_ref::<T>()
    }
}

#[inline]
fn round_up(v: usize, to: usize) -> Option<usize> {
    debug_assert!(to.is_power_of_two());
    Some(v.checked_add(to - 1)? & !(to - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_round_up() {
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(4097, 4096), Some(8192));
        assert_eq!(round_up(usize::MAX, 4096), None);
    }

    #[test]
    fn accepts_fix_command_for_default_and_other_sizes() {
        let mut s = HugePageShortfall {
            size: HugePageSize::Size2MiB,
            needed: 32,
            reserved: Some(0),
            available: Some(0),
            suggested_nr: 32,
            is_default_size: true,
            errno: libc::ENOMEM,
            len: 64 << 20,
        };
        assert_eq!(
            s.fix_command().to_string(),
            "echo 32 > /proc/sys/vm/nr_hugepages"
        );
        s.size = HugePageSize::Size1GiB;
        s.is_default_size = false;
        assert_eq!(
            s.fix_command().to_string(),
            "echo 32 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc and /sys, which Miri's isolation forbids")]
    fn accepts_shortfall_arithmetic() {
        // Whatever the machine has reserved, the suggestion covers the request.
        let s = HugePageShortfall::measure(HugePageSize::Size2MiB, 10 << 21, libc::ENOMEM);
        assert_eq!(s.needed, 10);
        if let (Some(nr), Some(av)) = (s.reserved, s.available) {
            assert!(s.suggested_nr >= nr);
            assert!(s.suggested_nr - nr + av >= 10);
        }
    }

    #[test]
    fn rejects_oversized_len() {
        assert_eq!(
            Region::new(usize::MAX - 10, &RegionOptions::default()).unwrap_err(),
            RegionError::TooLarge {
                len: usize::MAX - 10
            }
        );
    }
}
