//! The NFSv4.1 client records on stable storage (RFC 8881 §8.4.3): which clients may reclaim
//! state after a server restart, kept in one small file of the state directory, as Linux
//! nfsd keeps them through nfsdcld / nfsdcltrack.
//!
//! Normal operation: a record is a client's `co_ownerid` and the principal that made its
//! client id ([`principal`]). [`store`] writes the whole list atomically: a temporary file in
//! the same directory (mode 0600, not following a symbolic link), written, `fsync`ed, renamed
//! over the old one, and the directory `fsync`ed, so a crash leaves the old list or the new
//! one, never a mix. [`load`] reads it back at start-up.
//!
//! Recovery: the file is untrusted input. One larger than [`MAX_FILE`] is refused before it
//! is read; the magic, the record count (at most [`MAX_RECORDS`]), every length (an owner at
//! most [`OWNER_MAX`] octets, a principal at most [`PRINCIPAL_MAX`]), duplicate owners, octets
//! left over and the trailing checksum are checked, and any failure rejects the whole file
//! ([`DbError`]): no client may then reclaim, which is safe (their state is lost, nobody
//! else's is given away). A missing file is an empty list.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rpcrdma_engine::rpc::{AuthFlavor, AuthSys, OpaqueAuth};

use crate::nfs::handle_mac::siphash24;

/// The file's name in the state directory.
pub const FILE: &str = "nfs4-clients";
/// The temporary file [`store`] writes before renaming it.
const TMP: &str = "nfs4-clients.tmp";
/// The file's first eight octets (format version 1).
const MAGIC: &[u8; 8] = b"RNFS4CL1";
/// Most records in the file.
pub const MAX_RECORDS: usize = 4096;
/// Longest `co_ownerid` (`NFS4_OPAQUE_LIMIT`).
pub const OWNER_MAX: usize = 1024;
/// Longest principal ([`principal`] makes at most 12 octets).
pub const PRINCIPAL_MAX: usize = 64;
/// Largest file accepted: the magic, the count, every record at its longest, the checksum.
pub const MAX_FILE: u64 = (8 + 4 + MAX_RECORDS * (8 + OWNER_MAX + PRINCIPAL_MAX) + 8) as u64;
/// The checksum's key (a checksum against damage, not a seal: the directory is the
/// server's own).
const SUM_KEY: (u64, u64) = (0x6e66_7334_636c_6e74, 0x7270_6372_646d_6131);

/// One client that may reclaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `co_ownerid`.
    pub owner: Vec<u8>,
    /// The principal that made its client id ([`principal`]).
    pub principal: Vec<u8>,
}

/// Why a client record file was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbError {
    /// Reading it failed (the `errno`).
    Io(i32),
    /// Larger than [`MAX_FILE`].
    TooLarge,
    /// Not a client record file of this format.
    Magic,
    /// Shorter than its contents say.
    Short,
    /// More than [`MAX_RECORDS`] records.
    Count,
    /// An owner or principal longer than its bound, or an empty owner.
    Length,
    /// Two records of one owner.
    Duplicate,
    /// Octets after the last record.
    Trailing,
    /// The checksum does not match.
    Checksum,
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Io(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            DbError::TooLarge => write!(f, "larger than {MAX_FILE} octets"),
            DbError::Magic => write!(f, "not a client record file"),
            DbError::Short => write!(f, "truncated"),
            DbError::Count => write!(f, "more than {MAX_RECORDS} records"),
            DbError::Length => write!(f, "a record's owner or principal is out of bounds"),
            DbError::Duplicate => write!(f, "two records of one client owner"),
            DbError::Trailing => write!(f, "octets after the last record"),
            DbError::Checksum => write!(f, "checksum mismatch"),
        }
    }
}

fn io(e: std::io::Error) -> DbError {
    DbError::Io(e.raw_os_error().unwrap_or(libc::EIO))
}

/// The principal of a credential, as recorded: the flavor and, for AUTH_SYS, the uid and
/// gid (12 octets at most). A body that does not decode is its flavor and a marker.
pub fn principal(cred: &OpaqueAuth<'_>) -> Vec<u8> {
    let mut p = cred.flavor.to_u32().to_be_bytes().to_vec();
    if cred.flavor == AuthFlavor::Sys {
        match AuthSys::parse(cred.body) {
            Ok(a) => {
                p.extend_from_slice(&a.uid.to_be_bytes());
                p.extend_from_slice(&a.gid.to_be_bytes());
            }
            Err(_) => p.extend_from_slice(&u32::MAX.to_be_bytes()),
        }
    }
    p
}

/// The file's octets for `records`.
pub fn encode(records: &[Record]) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for r in records {
        for part in [&r.owner, &r.principal] {
            b.extend_from_slice(&(part.len() as u32).to_be_bytes());
            b.extend_from_slice(part);
        }
    }
    let sum = checksum(&b);
    b.extend_from_slice(&sum);
    b
}

/// The trailing checksum of a file whose octets before it are `body` (the magic included).
pub fn checksum(body: &[u8]) -> [u8; 8] {
    siphash24(SUM_KEY.0, SUM_KEY.1, body).to_be_bytes()
}

/// Reads `n` octets at `*at`.
fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], DbError> {
    let end = at.checked_add(n).ok_or(DbError::Short)?;
    let s = b.get(*at..end).ok_or(DbError::Short)?;
    *at = end;
    Ok(s)
}

/// Reads a length word at `*at`, at most `max`.
fn len(b: &[u8], at: &mut usize, max: usize) -> Result<usize, DbError> {
    let w = take(b, at, 4)?;
    let n = u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as usize;
    if n > max {
        return Err(DbError::Length);
    }
    Ok(n)
}

/// The records of a file's octets, every value checked.
pub fn decode(b: &[u8]) -> Result<Vec<Record>, DbError> {
    if b.len() as u64 > MAX_FILE {
        return Err(DbError::TooLarge);
    }
    if b.len() < MAGIC.len() + 12 {
        return Err(if b.starts_with(MAGIC) {
            DbError::Short
        } else {
            DbError::Magic
        });
    }
    if &b[..8] != MAGIC {
        return Err(DbError::Magic);
    }
    let (body, sum) = b.split_at(b.len() - 8);
    let mut at = 8;
    let n = len(body, &mut at, MAX_RECORDS).map_err(|e| match e {
        DbError::Length => DbError::Count,
        e => e,
    })?;
    let mut out: Vec<Record> = Vec::with_capacity(n);
    for _ in 0..n {
        let k = len(body, &mut at, OWNER_MAX)?;
        let owner = take(body, &mut at, k)?.to_vec();
        let k = len(body, &mut at, PRINCIPAL_MAX)?;
        let principal = take(body, &mut at, k)?.to_vec();
        if owner.is_empty() {
            return Err(DbError::Length);
        }
        if out.iter().any(|r| r.owner == owner) {
            return Err(DbError::Duplicate);
        }
        out.push(Record { owner, principal });
    }
    if at != body.len() {
        return Err(DbError::Trailing);
    }
    if sum != checksum(body) {
        return Err(DbError::Checksum);
    }
    Ok(out)
}

/// The records kept in directory `dir` (none when there is no file yet).
pub fn load(dir: &Path) -> Result<Vec<Record>, DbError> {
    match read_bounded(&dir.join(FILE), MAX_FILE).map_err(io)? {
        Bounded::Data(b) => decode(&b),
        Bounded::Missing => Ok(Vec::new()),
        Bounded::TooLarge => Err(DbError::TooLarge),
    }
}

/// What [`read_bounded`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bounded {
    /// No such file.
    Missing,
    /// Larger than the bound (not read).
    TooLarge,
    /// The file's octets.
    Data(Vec<u8>),
}

/// The octets of file `path` (not following a symbolic link), unless it is missing or larger
/// than `max` octets (then not read).
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Bounded> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Bounded::Missing),
        Err(e) => return Err(e),
    };
    if f.metadata()?.len() > max {
        return Ok(Bounded::TooLarge);
    }
    let mut b = Vec::new();
    f.take(max + 1).read_to_end(&mut b)?;
    Ok(Bounded::Data(b))
}

/// Creates directory `dir` (mode 0700) when it is missing.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Replaces the records kept in `dir` with `records` (at most [`MAX_RECORDS`]), atomically
/// and durably.
pub fn store(dir: &Path, records: &[Record]) -> std::io::Result<()> {
    let records = &records[..records.len().min(MAX_RECORDS)];
    write_atomic(dir, FILE, TMP, &encode(records))
}

/// Replaces file `name` of directory `dir` (made, mode 0700, when missing) with `bytes`,
/// atomically and durably: temporary file `tmp` there (mode 0600, not following a symbolic
/// link), written, `fsync`ed, renamed over `name`, the directory `fsync`ed.
pub fn write_atomic(dir: &Path, name: &str, tmp: &str, bytes: &[u8]) -> std::io::Result<()> {
    ensure_dir(dir)?;
    let tmp: PathBuf = dir.join(tmp);
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(o: &[u8]) -> Record {
        Record {
            owner: o.to_vec(),
            principal: vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("rpcrdma-clientdb-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn accepts_records_written_then_read_back() {
        let d = scratch("rt");
        assert_eq!(load(&d), Ok(Vec::new()), "no file: no records");
        let v = vec![rec(b"a"), rec(b"Linux NFSv4.1 host")];
        store(&d, &v).unwrap();
        assert_eq!(load(&d), Ok(v.clone()));
        store(&d, &v[..1]).unwrap();
        assert_eq!(load(&d), Ok(v[..1].to_vec()));
        assert!(!d.join(TMP).exists(), "the temporary file was renamed");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn rejects_damaged_and_hostile_files() {
        let good = encode(&[rec(b"a"), rec(b"b")]);
        assert_eq!(decode(&good).map(|v| v.len()), Ok(2));
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_err(), "prefix of {n} octets");
        }
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x40;
            assert!(decode(&b).is_err(), "octet {i} flipped");
        }
        // A count past the bound, before anything is allocated for it.
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&u32::MAX.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        assert_eq!(decode(&b), Err(DbError::Count));
        // Lengths past their bounds, an empty owner, a duplicate, trailing octets: each with a
        // valid checksum, so the check that refuses it is the one named.
        let seal = |mut b: Vec<u8>| {
            let s = siphash24(SUM_KEY.0, SUM_KEY.1, &b);
            b.extend_from_slice(&s.to_be_bytes());
            b
        };
        let body = |n: u32, recs: &[(&[u8], &[u8])], extra: &[u8]| {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&n.to_be_bytes());
            for (o, p) in recs {
                b.extend_from_slice(&(o.len() as u32).to_be_bytes());
                b.extend_from_slice(o);
                b.extend_from_slice(&(p.len() as u32).to_be_bytes());
                b.extend_from_slice(p);
            }
            b.extend_from_slice(extra);
            seal(b)
        };
        let long = vec![1u8; OWNER_MAX + 1];
        assert_eq!(decode(&body(1, &[(&long, b"")], b"")), Err(DbError::Length));
        let lp = vec![1u8; PRINCIPAL_MAX + 1];
        assert_eq!(decode(&body(1, &[(b"a", &lp)], b"")), Err(DbError::Length));
        assert_eq!(decode(&body(1, &[(b"", b"")], b"")), Err(DbError::Length));
        assert_eq!(
            decode(&body(2, &[(b"a", b""), (b"a", b"")], b"")),
            Err(DbError::Duplicate)
        );
        assert_eq!(
            decode(&body(1, &[(b"a", b"")], b"x")),
            Err(DbError::Trailing)
        );
        assert_eq!(decode(&body(2, &[(b"a", b"")], b"")), Err(DbError::Short));
        assert_eq!(
            decode(b"not a client record file at all"),
            Err(DbError::Magic)
        );
        // A file larger than the bound is refused before it is read.
        let d = scratch("big");
        ensure_dir(&d).unwrap();
        let f = File::create(d.join(FILE)).unwrap();
        f.set_len(MAX_FILE + 1).unwrap();
        assert_eq!(load(&d), Err(DbError::TooLarge));
        // A symbolic link in the file's place is not followed.
        fs::remove_file(d.join(FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join(FILE)).unwrap();
        assert_eq!(load(&d), Err(DbError::Io(libc::ELOOP)));
        store(&d, &[rec(b"a")]).unwrap();
        assert_eq!(
            load(&d).map(|v| v.len()),
            Ok(1),
            "the link replaced by the rename"
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn accepts_principals_of_each_flavor() {
        let none = OpaqueAuth {
            flavor: AuthFlavor::None,
            body: &[],
        };
        assert_eq!(principal(&none), vec![0, 0, 0, 0]);
        let bad = OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &[1, 2],
        };
        assert_eq!(principal(&bad), vec![0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert!(principal(&bad).len() <= PRINCIPAL_MAX);
    }
}
