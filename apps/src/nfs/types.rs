//! NFSv3 values shared by the wire codec ([`crate::nfs::v3::proto`]), the stores ([`crate::nfs::store`]) and
//! the procedure handlers ([`crate::nfs::v3::server`]): status codes, file handles, attributes, times,
//! settable attributes, directory entries (RFC 1813 section 2).
//!
//! Normal operation: plain `Copy` data, no wire layout here. Recovery: values from the wire
//! that are not in RFC 1813 stay representable (open enums keep the raw number) so the codec
//! can answer them with the error RFC 1813 names instead of failing to parse.

/// Largest NFSv3 file handle (RFC 1813 `NFS3_FHSIZE`).
pub const FHSIZE: usize = 64;
/// Size of a cookie verifier, create verifier and write verifier (`NFS3_*VERFSIZE`).
pub const VERFSIZE: usize = 8;
/// Longest name component we accept (a longer one is NAMETOOLONG; PATHCONF says so).
pub const NAME_MAX: usize = 255;
/// Longest symbolic link target or path we accept (`MAXPATHLEN`).
pub const PATH_MAX: usize = 4096;

/// `nfsstat3` (RFC 1813 section 2.6). An open enum: any value round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nfsstat3(pub u32);

#[allow(missing_docs)]
impl Nfsstat3 {
    pub const OK: Nfsstat3 = Nfsstat3(0);
    pub const PERM: Nfsstat3 = Nfsstat3(1);
    pub const NOENT: Nfsstat3 = Nfsstat3(2);
    pub const IO: Nfsstat3 = Nfsstat3(5);
    pub const NXIO: Nfsstat3 = Nfsstat3(6);
    pub const ACCES: Nfsstat3 = Nfsstat3(13);
    pub const EXIST: Nfsstat3 = Nfsstat3(17);
    pub const XDEV: Nfsstat3 = Nfsstat3(18);
    pub const NODEV: Nfsstat3 = Nfsstat3(19);
    pub const NOTDIR: Nfsstat3 = Nfsstat3(20);
    pub const ISDIR: Nfsstat3 = Nfsstat3(21);
    pub const INVAL: Nfsstat3 = Nfsstat3(22);
    pub const FBIG: Nfsstat3 = Nfsstat3(27);
    pub const NOSPC: Nfsstat3 = Nfsstat3(28);
    pub const ROFS: Nfsstat3 = Nfsstat3(30);
    pub const MLINK: Nfsstat3 = Nfsstat3(31);
    pub const NAMETOOLONG: Nfsstat3 = Nfsstat3(63);
    pub const NOTEMPTY: Nfsstat3 = Nfsstat3(66);
    pub const DQUOT: Nfsstat3 = Nfsstat3(69);
    pub const STALE: Nfsstat3 = Nfsstat3(70);
    pub const REMOTE: Nfsstat3 = Nfsstat3(71);
    pub const BADHANDLE: Nfsstat3 = Nfsstat3(10001);
    pub const NOT_SYNC: Nfsstat3 = Nfsstat3(10002);
    pub const BAD_COOKIE: Nfsstat3 = Nfsstat3(10003);
    pub const NOTSUPP: Nfsstat3 = Nfsstat3(10004);
    pub const TOOSMALL: Nfsstat3 = Nfsstat3(10005);
    pub const SERVERFAULT: Nfsstat3 = Nfsstat3(10006);
    pub const BADTYPE: Nfsstat3 = Nfsstat3(10007);
    pub const JUKEBOX: Nfsstat3 = Nfsstat3(10008);
    /// NFSv4.2's NFS4ERR_NOXATTR (RFC 8276): no such extended attribute. Only the stores'
    /// extended attribute methods answer it, which only NFSv4.2 calls.
    pub const NOXATTR: Nfsstat3 = Nfsstat3(10095);
    /// NFSv4.2's NFS4ERR_XATTR2BIG (RFC 8276): an extended attribute value too large. As
    /// [`Nfsstat3::NOXATTR`], never sent to an NFSv3 client.
    pub const XATTR2BIG: Nfsstat3 = Nfsstat3(10096);

    /// The status an OS error maps to (as Linux nfsd's `nfserrno` maps them).
    pub fn from_errno(e: i32) -> Nfsstat3 {
        match e {
            libc::EPERM => Self::PERM,
            libc::ENOENT => Self::NOENT,
            libc::ENXIO => Self::NXIO,
            libc::EACCES => Self::ACCES,
            libc::EEXIST => Self::EXIST,
            libc::EXDEV => Self::XDEV,
            libc::ENODEV => Self::NODEV,
            libc::ENOTDIR => Self::NOTDIR,
            libc::EISDIR => Self::ISDIR,
            libc::EINVAL => Self::INVAL,
            libc::EFBIG => Self::FBIG,
            libc::ENOSPC => Self::NOSPC,
            libc::EROFS => Self::ROFS,
            libc::EMLINK => Self::MLINK,
            libc::ENAMETOOLONG => Self::NAMETOOLONG,
            libc::ENOTEMPTY => Self::NOTEMPTY,
            libc::EDQUOT => Self::DQUOT,
            libc::ESTALE => Self::STALE,
            libc::EOPNOTSUPP => Self::NOTSUPP,
            libc::EAGAIN => Self::JUKEBOX,
            _ => Self::IO,
        }
    }

    /// The symbolic name (`NFS3ERR_NOENT`, ...), for counters and logs.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "NFS3_OK",
            1 => "NFS3ERR_PERM",
            2 => "NFS3ERR_NOENT",
            5 => "NFS3ERR_IO",
            6 => "NFS3ERR_NXIO",
            13 => "NFS3ERR_ACCES",
            17 => "NFS3ERR_EXIST",
            18 => "NFS3ERR_XDEV",
            19 => "NFS3ERR_NODEV",
            20 => "NFS3ERR_NOTDIR",
            21 => "NFS3ERR_ISDIR",
            22 => "NFS3ERR_INVAL",
            27 => "NFS3ERR_FBIG",
            28 => "NFS3ERR_NOSPC",
            30 => "NFS3ERR_ROFS",
            31 => "NFS3ERR_MLINK",
            63 => "NFS3ERR_NAMETOOLONG",
            66 => "NFS3ERR_NOTEMPTY",
            69 => "NFS3ERR_DQUOT",
            70 => "NFS3ERR_STALE",
            71 => "NFS3ERR_REMOTE",
            10001 => "NFS3ERR_BADHANDLE",
            10002 => "NFS3ERR_NOT_SYNC",
            10003 => "NFS3ERR_BAD_COOKIE",
            10004 => "NFS3ERR_NOTSUPP",
            10005 => "NFS3ERR_TOOSMALL",
            10006 => "NFS3ERR_SERVERFAULT",
            10007 => "NFS3ERR_BADTYPE",
            10008 => "NFS3ERR_JUKEBOX",
            _ => "NFS3ERR_(unknown)",
        }
    }
}

/// Result of a store operation: the value or the NFSv3 status to answer.
pub type NfsResult<T> = Result<T, Nfsstat3>;

/// An NFSv3 file handle (`nfs_fh3`: opaque, at most [`FHSIZE`] octets). Its content is the
/// store's business.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fh {
    len: u8,
    data: [u8; FHSIZE],
}

impl Fh {
    /// A handle holding `b`; `None` when longer than [`FHSIZE`].
    pub fn new(b: &[u8]) -> Option<Fh> {
        if b.len() > FHSIZE {
            return None;
        }
        let mut data = [0u8; FHSIZE];
        data[..b.len()].copy_from_slice(b);
        Some(Fh {
            len: b.len() as u8,
            data,
        })
    }

    /// The handle's octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data[..self.len as usize]
    }
}

impl core::fmt::Debug for Fh {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Fh(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// `ftype3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum Ftype3 {
    Reg = 1,
    Dir = 2,
    Blk = 3,
    Chr = 4,
    Lnk = 5,
    Sock = 6,
    Fifo = 7,
}

impl Ftype3 {
    /// From the wire value; `None` for anything else (BADTYPE).
    pub fn from_u32(v: u32) -> Option<Ftype3> {
        Some(match v {
            1 => Ftype3::Reg,
            2 => Ftype3::Dir,
            3 => Ftype3::Blk,
            4 => Ftype3::Chr,
            5 => Ftype3::Lnk,
            6 => Ftype3::Sock,
            7 => Ftype3::Fifo,
            _ => return None,
        })
    }
}

/// A time stamp as the stores keep it: seconds since the epoch as a signed 64-bit number (the
/// host's `time_t`, NFSv4's `nfstime4`) and nanoseconds. NFSv3's `nfstime3` carries unsigned
/// 32-bit seconds: its encoding sends the low 32 bits (as Linux nfsd does), its decoding gives
/// 0 to 2^32 - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time3 {
    /// Seconds since the epoch (negative before it).
    pub seconds: i64,
    /// Nanoseconds (below 10^9).
    pub nseconds: u32,
}

impl Time3 {
    /// The current time.
    pub fn now() -> Time3 {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Time3 {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nseconds: d.subsec_nanos(),
        }
    }
}

/// `fattr3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fattr3 {
    /// File type.
    pub ftype: Ftype3,
    /// Permission bits (the low 12 bits of `st_mode`).
    pub mode: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in octets.
    pub size: u64,
    /// Octets of storage used.
    pub used: u64,
    /// Device numbers (major, minor) of a device file.
    pub rdev: (u32, u32),
    /// File system id.
    pub fsid: u64,
    /// File id (inode number), unique within `fsid`.
    pub fileid: u64,
    /// Last access.
    pub atime: Time3,
    /// Last data change.
    pub mtime: Time3,
    /// Last attribute change.
    pub ctime: Time3,
}

impl Fattr3 {
    /// The `wcc_attr` subset (size, mtime, ctime).
    pub fn wcc(&self) -> WccAttr {
        WccAttr {
            size: self.size,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }
}

/// `wcc_attr`: the attributes a client compares before and after an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WccAttr {
    /// Size in octets.
    pub size: u64,
    /// Last data change.
    pub mtime: Time3,
    /// Last attribute change.
    pub ctime: Time3,
}

/// `wcc_data`: attributes before (optional) and after (optional) an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WccData {
    /// Before.
    pub before: Option<WccAttr>,
    /// After.
    pub after: Option<Fattr3>,
}

/// `set_atime` / `set_mtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// `DONT_CHANGE`.
    #[default]
    DontChange,
    /// `SET_TO_SERVER_TIME`.
    ServerTime,
    /// `SET_TO_CLIENT_TIME`.
    ClientTime(Time3),
}

/// `sattr3`: attributes to set (each optional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sattr3 {
    /// Permission bits.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate or extend).
    pub size: Option<u64>,
    /// Access time.
    pub atime: SetTime,
    /// Modification time.
    pub mtime: SetTime,
    /// The creating process's umask (NFSv4.2 `mode_umask`, RFC 8275; never from NFSv3): at
    /// creation `mode` loses these bits unless the directory has a default ACL, which then
    /// decides instead, as a local creation on Linux. Only a creation reads it.
    pub umask: Option<u32>,
}

/// `stable_how`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum StableHow {
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}

impl StableHow {
    /// From the wire value.
    pub fn from_u32(v: u32) -> Option<StableHow> {
        Some(match v {
            0 => StableHow::Unstable,
            1 => StableHow::DataSync,
            2 => StableHow::FileSync,
            _ => return None,
        })
    }
}

/// `createhow3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateHow {
    /// Create, or open an existing file (and apply the attributes).
    Unchecked(Sattr3),
    /// Create; EXIST when the name exists.
    Guarded(Sattr3),
    /// Exclusive create with the client's verifier (a retransmission that finds the file with
    /// the same verifier succeeds).
    Exclusive([u8; VERFSIZE]),
    /// NFSv4.1 EXCLUSIVE4_1 (RFC 8881 §18.16.3): as `Exclusive`, the file made with these
    /// attributes, as a creation of the other kinds is, so that a directory's default ACL and
    /// the umask apply alike. The NFSv4 server puts only the mode and umask of the client's
    /// `cva_attrs` here (the verifier takes the times) and sets the rest after.
    Exclusive41([u8; VERFSIZE], Sattr3),
}

/// What a caller is allowed to do (`ACCESS3_*` bits).
#[allow(missing_docs)]
pub mod access {
    pub const READ: u32 = 0x0001;
    pub const LOOKUP: u32 = 0x0002;
    pub const MODIFY: u32 = 0x0004;
    pub const EXTEND: u32 = 0x0008;
    pub const DELETE: u32 = 0x0010;
    pub const EXECUTE: u32 = 0x0020;
}

/// One directory entry as a store lists it.
#[derive(Debug, Clone, Copy)]
pub struct DirEntry<'a> {
    /// File id.
    pub fileid: u64,
    /// Name (one component, no `/`, no NUL).
    pub name: &'a [u8],
    /// Cookie that resumes the listing after this entry.
    pub cookie: u64,
    /// The entry's handle and attributes (READDIRPLUS; the store may leave them out).
    pub plus: Option<(Fh, Fattr3)>,
}

/// `FSSTAT3resok` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStat {
    /// Total octets.
    pub tbytes: u64,
    /// Free octets.
    pub fbytes: u64,
    /// Free octets for the caller.
    pub abytes: u64,
    /// Total file slots.
    pub tfiles: u64,
    /// Free file slots.
    pub ffiles: u64,
    /// Free file slots for the caller.
    pub afiles: u64,
}

/// True when `name` is a well-formed `filename3` as Linux nfsd decodes it: not empty, no `/`,
/// no NUL. Anything else is refused at decoding (GARBAGE_ARGS), as nfsd's
/// `svcxdr_decode_filename3` does.
pub fn name_is_wellformed(name: &[u8]) -> bool {
    !name.is_empty() && !name.iter().any(|&b| b == b'/' || b == 0)
}

/// NAMETOOLONG past [`NAME_MAX`] octets (RFC 1813 names it for every procedure taking a name).
pub fn check_name_len(name: &[u8]) -> NfsResult<()> {
    if name.len() > NAME_MAX {
        return Err(Nfsstat3::NAMETOOLONG);
    }
    Ok(())
}

/// True for `.` and `..`.
pub fn is_dot_entry(name: &[u8]) -> bool {
    name == b"." || name == b".."
}
