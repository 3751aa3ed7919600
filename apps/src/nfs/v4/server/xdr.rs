//! The server's side of the NFSv4.1 wire: the reply writer ([`Enc`]), the `nfsstat4` values
//! the server answers (RFC 8881 §15.1), and the mapping from the store's statuses.
//!
//! Normal operation: results are appended to a growing octet vector in XDR order; arguments
//! are read with the engine's bounds-checked `XdrReader`.
//! Recovery: an argument that does not decode is NFS4ERR_BADXDR for its operation
//! ([`bad_xdr`]); nothing here panics on any input.

use rpcrdma_engine::xdr::{XdrError, XdrReader};

use crate::nfs::store::Store;
use crate::nfs::types::{Fh, Ftype3, Nfsstat3, NAME_MAX, PATH_MAX};

/// An `nfsstat4` value (open: any number round-trips).
pub type Status = u32;

#[allow(missing_docs)]
pub mod st {
    pub const OK: u32 = 0;
    pub const PERM: u32 = 1;
    pub const NOENT: u32 = 2;
    pub const IO: u32 = 5;
    pub const NXIO: u32 = 6;
    pub const ACCESS: u32 = 13;
    pub const EXIST: u32 = 17;
    pub const NOTDIR: u32 = 20;
    pub const ISDIR: u32 = 21;
    pub const INVAL: u32 = 22;
    pub const ROFS: u32 = 30;
    pub const NAMETOOLONG: u32 = 63;
    pub const STALE: u32 = 70;
    pub const BADHANDLE: u32 = 10001;
    pub const BAD_COOKIE: u32 = 10003;
    pub const NOTSUPP: u32 = 10004;
    pub const TOOSMALL: u32 = 10005;
    pub const SERVERFAULT: u32 = 10006;
    pub const BADTYPE: u32 = 10007;
    pub const DELAY: u32 = 10008;
    pub const SAME: u32 = 10009;
    pub const NOFILEHANDLE: u32 = 10020;
    pub const MINOR_VERS_MISMATCH: u32 = 10021;
    pub const STALE_CLIENTID: u32 = 10022;
    pub const BAD_STATEID: u32 = 10025;
    pub const NOT_SAME: u32 = 10027;
    pub const RESOURCE: u32 = 10018;
    pub const SYMLINK: u32 = 10029;
    pub const RESTOREFH: u32 = 10030;
    pub const ATTRNOTSUPP: u32 = 10032;
    pub const WRONGSEC: u32 = 10016;
    pub const CLID_INUSE: u32 = 10017;
    pub const BADXDR: u32 = 10036;
    pub const BADCHAR: u32 = 10040;
    pub const BADNAME: u32 = 10041;
    pub const OP_ILLEGAL: u32 = 10044;
    pub const SHARE_DENIED: u32 = 10015;
    pub const OPENMODE: u32 = 10038;
    pub const BADSESSION: u32 = 10052;
    pub const BADSLOT: u32 = 10053;
    pub const COMPLETE_ALREADY: u32 = 10054;
    pub const NOT_ONLY_OP: u32 = 10081;
    pub const SEQ_MISORDERED: u32 = 10063;
    pub const SEQUENCE_POS: u32 = 10064;
    pub const REQ_TOO_BIG: u32 = 10065;
    pub const REP_TOO_BIG: u32 = 10066;
    pub const REP_TOO_BIG_TO_CACHE: u32 = 10067;
    pub const RETRY_UNCACHED_REP: u32 = 10068;
    pub const TOO_MANY_OPS: u32 = 10070;
    pub const OP_NOT_IN_SESSION: u32 = 10071;
    pub const CLIENTID_BUSY: u32 = 10074;
    pub const SEQ_FALSE_RETRY: u32 = 10076;
    pub const BAD_HIGH_SLOT: u32 = 10077;
    pub const ENCR_ALG_UNSUPP: u32 = 10079;
    pub const WRONG_TYPE: u32 = 10083;
}

/// The error of an operation that needs a regular file (OPEN, READ, WRITE, LOCK, LOCKT) on an
/// object of type `t` that is not one: NFS4ERR_ISDIR for a directory, NFS4ERR_SYMLINK for a
/// symbolic link, NFS4ERR_WRONG_TYPE for anything else (RFC 8881 §18.16.3, §18.22.3,
/// §18.32.3).
pub fn not_regular(t: Ftype3) -> Status {
    match t {
        Ftype3::Dir => st::ISDIR,
        Ftype3::Lnk => st::SYMLINK,
        _ => st::WRONG_TYPE,
    }
}

/// A READ's or WRITE's store error on `fh`: on an object that is not a regular file (the
/// store answers INVAL or ISDIR, NFSv3's words), the error RFC 8881 names for its type
/// ([`not_regular`]); the type is asked of the store only then.
pub fn io_error(store: &dyn Store, fh: &Fh, e: Nfsstat3) -> Status {
    if e == Nfsstat3::INVAL || e == Nfsstat3::ISDIR {
        if let Ok(a) = store.getattr(fh) {
            if a.ftype != Ftype3::Reg {
                return not_regular(a.ftype);
            }
        }
    }
    from_store(e)
}

/// The `nfsstat4` of a store status: RFC 8881 keeps the NFSv3 numbers for the errors both
/// versions have; NFSv3's NOT_SYNC and REMOTE have no NFSv4 counterpart and become INVAL and
/// IO.
pub fn from_store(s: Nfsstat3) -> Status {
    match s {
        Nfsstat3::NOT_SYNC => st::INVAL,
        Nfsstat3::REMOTE => st::IO,
        s => s.0,
    }
}

/// Any argument decoding failure: the operation's NFS4ERR_BADXDR.
pub fn bad_xdr(_: XdrError) -> Status {
    st::BADXDR
}

/// A COMPOUND4res under construction.
#[derive(Debug, Default)]
pub struct Enc {
    /// The octets so far.
    pub b: Vec<u8>,
}

impl Enc {
    /// Appends a word.
    pub fn u32(&mut self, v: u32) {
        self.b.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends a hyper.
    pub fn u64(&mut self, v: u64) {
        self.b.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends fixed-length opaque data (with its pad).
    pub fn fixed(&mut self, d: &[u8]) {
        self.b.extend_from_slice(d);
        self.b.resize(self.b.len() + (4 - d.len() % 4) % 4, 0);
    }

    /// Appends variable-length opaque data that `fill` writes in place: it is handed `room`
    /// zeroed octets and returns how many it wrote (at most `room`), or an error, which leaves
    /// the encoding as it was. The length word and the pad follow what it wrote.
    pub fn opaque_with<E>(
        &mut self,
        room: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let at = self.b.len();
        self.u32(0);
        self.b.resize(at + 4 + room, 0);
        let n = match fill(&mut self.b[at + 4..]) {
            Ok(n) => n.min(room),
            Err(e) => {
                self.b.truncate(at);
                return Err(e);
            }
        };
        self.b[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
        self.b.truncate(at + 4 + n);
        self.b.resize(self.b.len() + (4 - n % 4) % 4, 0);
        Ok(n)
    }

    /// Appends variable-length opaque data.
    pub fn opaque(&mut self, d: &[u8]) {
        self.u32(d.len() as u32);
        self.fixed(d);
    }

    /// Appends the decimal digits of `v` as variable-length opaque data (a numeric owner
    /// string), without formatting it on the heap.
    pub fn decimal(&mut self, v: u32) {
        let mut digits = [0u8; 10];
        let mut at = digits.len();
        let mut v = v;
        loop {
            at -= 1;
            digits[at] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.opaque(&digits[at..]);
    }

    /// Appends a bitmap4 of `words`, without trailing zero words.
    pub fn bitmap(&mut self, words: &[u32]) {
        let n = words.iter().rposition(|w| *w != 0).map_or(0, |i| i + 1);
        self.u32(n as u32);
        for w in &words[..n] {
            self.u32(*w);
        }
    }

    /// Octets so far.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

/// Reads a `component4` and checks it as Linux nfsd's `check_filename` does.
pub fn get_name<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], Status> {
    let n = r.get_opaque(PATH_MAX as u32).map_err(bad_xdr)?;
    if n.is_empty() {
        return Err(st::INVAL);
    }
    if n.len() > NAME_MAX {
        return Err(st::NAMETOOLONG);
    }
    if n == b"." || n == b".." || n.iter().any(|b| *b == b'/' || *b == 0) {
        return Err(st::BADNAME);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::Enc;

    #[test]
    fn accepts_opaque_written_in_place_with_its_length_and_pad() {
        let mut e = Enc { b: vec![9] };
        let n = e.opaque_with(8, |d| -> Result<usize, ()> {
            assert_eq!(d, [0u8; 8]);
            d[..5].copy_from_slice(b"hello");
            Ok(5)
        });
        assert_eq!(n, Ok(5));
        assert_eq!(e.b, [&[9u8, 0, 0, 0, 5][..], b"hello", &[0, 0, 0]].concat());
        // A fill claiming more than its room is held to the room.
        let mut e = Enc { b: Vec::new() };
        assert_eq!(e.opaque_with(4, |_| -> Result<usize, ()> { Ok(99) }), Ok(4));
        assert_eq!(e.b.len(), 8);
    }

    #[test]
    fn accepts_decimal_owner_strings() {
        for (v, text) in [
            (0u32, "0"),
            (7, "7"),
            (1000, "1000"),
            (u32::MAX, "4294967295"),
        ] {
            let mut e = Enc::default();
            e.decimal(v);
            let mut want = Enc::default();
            want.opaque(text.as_bytes());
            assert_eq!(e.b, want.b, "{v}");
        }
    }

    #[test]
    fn rejects_a_failed_fill_leaving_the_encoding_as_it_was() {
        let mut e = Enc {
            b: vec![1, 2, 3, 4],
        };
        assert_eq!(e.opaque_with(16, |_| Err::<usize, u8>(7)), Err(7));
        assert_eq!(e.b, [1, 2, 3, 4]);
    }
}
