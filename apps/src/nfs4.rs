//! A small NFSv4.0 (RFC 7530) XDR codec: the COMPOUND operations `rpcrdma-nfs-check` sends to
//! the Linux kernel NFS server over RPC-over-RDMA, and the test-file content both sides agree
//! on.
//!
//! Normal operation: [`encode_compound`] turns a list of [`Op`]s into COMPOUND4args octets. A
//! WRITE whose data travels as a DDP item (a Read chunk) is encoded without its data: the
//! result says where the item belongs ([`Encoded::ddp_at`]: just after the data's length
//! word), so the caller appends the octets before it, the DDP item, then the octets after it.
//! [`decode_compound`] reads COMPOUND4res. A READ whose data came through a Write chunk has
//! only its length word in the inline reply (RFC 8166 §4.3: a DDP-eligible item is removed with
//! its XDR pad), so the caller says which READ results were placed directly
//! ([`ReadPlacement`]). [`pattern`] is the deterministic content of the test files
//! (SplitMix64), so the guest script and the check need not share any file.
//!
//! Recovery: every decoder bounds-checks through [`XdrReader`] and returns [`Nfs4Error`]; no
//! input panics.

use rpcrdma_engine::xdr::{XdrError, XdrReader};

/// NFS program number.
pub const PROGRAM: u32 = 100_003;
/// NFS version 4.
pub const VERSION: u32 = 4;
/// Procedure NULL.
pub const PROC_NULL: u32 = 0;
/// Procedure COMPOUND.
pub const PROC_COMPOUND: u32 = 1;

/// Operation numbers (RFC 7530 §16).
pub mod op {
    /// ACCESS.
    pub const ACCESS: u32 = 3;
    /// COMMIT.
    pub const COMMIT: u32 = 5;
    /// GETATTR.
    pub const GETATTR: u32 = 9;
    /// GETFH.
    pub const GETFH: u32 = 10;
    /// LOOKUP.
    pub const LOOKUP: u32 = 15;
    /// PUTFH.
    pub const PUTFH: u32 = 22;
    /// PUTROOTFH.
    pub const PUTROOTFH: u32 = 24;
    /// READ.
    pub const READ: u32 = 25;
    /// READDIR.
    pub const READDIR: u32 = 26;
    /// WRITE.
    pub const WRITE: u32 = 38;
}

/// `nfsstat4` NFS4_OK.
pub const NFS4_OK: u32 = 0;
/// `nfsstat4` NFS4ERR_GRACE.
pub const NFS4ERR_GRACE: u32 = 10013;

/// Attribute TYPE (bit 1 of word 0).
pub const FATTR4_TYPE: u32 = 1;
/// Attribute SIZE (bit 4 of word 0).
pub const FATTR4_SIZE: u32 = 4;
/// `nfs_ftype4` NF4REG.
pub const NF4REG: u32 = 1;
/// `nfs_ftype4` NF4DIR.
pub const NF4DIR: u32 = 2;

/// `stable_how4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stable {
    /// UNSTABLE4.
    Unstable = 0,
    /// DATA_SYNC4.
    DataSync = 1,
    /// FILE_SYNC4.
    FileSync = 2,
}

/// The anonymous stateid (all zeros, RFC 7530 §9.1.4.3).
pub const ANONYMOUS_STATEID: [u8; 16] = [0; 16];

/// One COMPOUND operation to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// PUTROOTFH.
    PutRootFh,
    /// PUTFH of a file handle.
    PutFh(&'a [u8]),
    /// LOOKUP of one path component.
    Lookup(&'a str),
    /// GETFH.
    GetFh,
    /// GETATTR of TYPE and SIZE.
    GetAttrTypeSize,
    /// READ with the anonymous stateid.
    Read {
        /// Offset.
        offset: u64,
        /// Count.
        count: u32,
    },
    /// WRITE with the anonymous stateid.
    Write {
        /// Offset.
        offset: u64,
        /// Stability asked for.
        stable: Stable,
        /// The data, encoded inline.
        data: WriteData<'a>,
    },
    /// COMMIT.
    Commit {
        /// Offset.
        offset: u64,
        /// Count (0: to the end).
        count: u32,
    },
    /// READDIR asking for no attributes.
    ReadDir {
        /// Cookie to continue from (0: start).
        cookie: u64,
        /// The cookie verifier returned with `cookie`.
        verifier: [u8; 8],
        /// `dircount`.
        dircount: u32,
        /// `maxcount`.
        maxcount: u32,
    },
}

/// The data of a WRITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteData<'a> {
    /// Encoded inline (with its XDR pad).
    Inline(&'a [u8]),
    /// `len` octets the caller sends as a DDP item (only the length word is encoded).
    Ddp(u32),
}

/// COMPOUND4args octets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The arguments (with a DDP WRITE: without its data).
    pub bytes: Vec<u8>,
    /// Where a DDP WRITE's data belongs in `bytes` (after its length word), if any.
    pub ddp_at: Option<usize>,
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_opaque(b: &mut Vec<u8>, d: &[u8]) {
    put_u32(b, d.len() as u32);
    b.extend_from_slice(d);
    b.resize(b.len() + (4 - d.len() % 4) % 4, 0);
}

/// Encodes COMPOUND4args (minor version 0, `tag`) for `ops`. At most one WRITE may carry
/// [`WriteData::Ddp`].
pub fn encode_compound(tag: &str, ops: &[Op<'_>]) -> Encoded {
    let mut b = Vec::with_capacity(256);
    let mut ddp_at = None;
    put_opaque(&mut b, tag.as_bytes());
    put_u32(&mut b, 0); // minorversion
    put_u32(&mut b, ops.len() as u32);
    for o in ops {
        match *o {
            Op::PutRootFh => put_u32(&mut b, op::PUTROOTFH),
            Op::PutFh(fh) => {
                put_u32(&mut b, op::PUTFH);
                put_opaque(&mut b, fh);
            }
            Op::Lookup(name) => {
                put_u32(&mut b, op::LOOKUP);
                put_opaque(&mut b, name.as_bytes());
            }
            Op::GetFh => put_u32(&mut b, op::GETFH),
            Op::GetAttrTypeSize => {
                put_u32(&mut b, op::GETATTR);
                put_u32(&mut b, 1); // bitmap4 of one word
                put_u32(&mut b, (1 << FATTR4_TYPE) | (1 << FATTR4_SIZE));
            }
            Op::Read { offset, count } => {
                put_u32(&mut b, op::READ);
                b.extend_from_slice(&ANONYMOUS_STATEID);
                put_u64(&mut b, offset);
                put_u32(&mut b, count);
            }
            Op::Write {
                offset,
                stable,
                data,
            } => {
                put_u32(&mut b, op::WRITE);
                b.extend_from_slice(&ANONYMOUS_STATEID);
                put_u64(&mut b, offset);
                put_u32(&mut b, stable as u32);
                match data {
                    WriteData::Inline(d) => put_opaque(&mut b, d),
                    WriteData::Ddp(len) => {
                        put_u32(&mut b, len);
                        ddp_at = Some(b.len());
                    }
                }
            }
            Op::Commit { offset, count } => {
                put_u32(&mut b, op::COMMIT);
                put_u64(&mut b, offset);
                put_u32(&mut b, count);
            }
            Op::ReadDir {
                cookie,
                verifier,
                dircount,
                maxcount,
            } => {
                put_u32(&mut b, op::READDIR);
                put_u64(&mut b, cookie);
                b.extend_from_slice(&verifier);
                put_u32(&mut b, dircount);
                put_u32(&mut b, maxcount);
                put_u32(&mut b, 0); // attr_request: empty bitmap
            }
        }
    }
    Encoded { bytes: b, ddp_at }
}

/// Why a reply did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs4Error {
    /// The XDR ran short or a count was out of range.
    Xdr(XdrError),
    /// A result named another operation than the one sent at that place.
    WrongOp {
        /// Index of the result.
        index: usize,
        /// Operation sent.
        sent: u32,
        /// Operation in the result.
        got: u32,
    },
    /// More results than operations sent.
    TooManyResults,
    /// Something else (message).
    Bad(&'static str),
}

impl From<XdrError> for Nfs4Error {
    fn from(e: XdrError) -> Self {
        Nfs4Error::Xdr(e)
    }
}

impl core::fmt::Display for Nfs4Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Nfs4Error {}

/// A READDIR entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Cookie.
    pub cookie: u64,
    /// Name.
    pub name: String,
}

/// The result of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// An operation without a result body worth keeping (PUTROOTFH, PUTFH, LOOKUP), or one
    /// that failed.
    Done,
    /// GETFH.
    Fh(Vec<u8>),
    /// GETATTR of TYPE and SIZE (each `None` when not returned).
    Attrs {
        /// `nfs_ftype4`.
        ftype: Option<u32>,
        /// Size.
        size: Option<u64>,
    },
    /// READ.
    Read {
        /// `eof`.
        eof: bool,
        /// The data's XDR length.
        len: u32,
        /// The data, when it came inline (empty when placed directly).
        data: Vec<u8>,
    },
    /// WRITE.
    Write {
        /// Octets written.
        count: u32,
        /// `stable_how4` committed.
        committed: u32,
        /// Write verifier.
        verifier: [u8; 8],
    },
    /// COMMIT.
    Commit {
        /// Write verifier.
        verifier: [u8; 8],
    },
    /// READDIR.
    ReadDir {
        /// Cookie verifier.
        verifier: [u8; 8],
        /// Entries.
        entries: Vec<DirEntry>,
        /// `eof`.
        eof: bool,
    },
}

/// One decoded `nfs_resop4`: operation, status, result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpReply {
    /// Operation number.
    pub op: u32,
    /// `nfsstat4`.
    pub status: u32,
    /// The result (`Done` when the status is not NFS4_OK).
    pub result: OpResult,
}

/// A decoded COMPOUND4res.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundReply {
    /// Overall status (that of the last operation evaluated).
    pub status: u32,
    /// Results, one per operation evaluated (evaluation stops at the first failure).
    pub ops: Vec<OpReply>,
}

impl CompoundReply {
    /// The first result of operation `op`.
    pub fn find(&self, op: u32) -> Option<&OpReply> {
        self.ops.iter().find(|r| r.op == op)
    }
}

/// Which READ results came through a Write chunk (their data is not in the inline reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPlacement {
    /// Every READ's data is inline.
    Inline,
    /// The first READ's data was placed directly (the call offered one Write chunk).
    FirstDirect,
}

fn get_verifier(r: &mut XdrReader<'_>) -> Result<[u8; 8], Nfs4Error> {
    let v = r.get_fixed_opaque(8)?;
    let mut out = [0u8; 8];
    out.copy_from_slice(v);
    Ok(out)
}

fn decode_fattr(r: &mut XdrReader<'_>) -> Result<OpResult, Nfs4Error> {
    let nwords = r.get_count(8)?;
    let mut words = [0u32; 8];
    for w in words.iter_mut().take(nwords as usize) {
        *w = r.get_u32()?;
    }
    let vals = r.get_opaque(1 << 20)?;
    let mut v = XdrReader::new(vals);
    let mut ftype = None;
    let mut size = None;
    // Attributes come in bit order; only TYPE (1), CHANGE (3) and SIZE (4) can precede SIZE
    // in what we ask for, and we ask for TYPE and SIZE only.
    for bit in 0..32 {
        if words[0] & (1 << bit) == 0 {
            continue;
        }
        match bit {
            FATTR4_TYPE => ftype = Some(v.get_u32()?),
            FATTR4_SIZE => size = Some(v.get_u64()?),
            _ => return Err(Nfs4Error::Bad("attribute not asked for")),
        }
    }
    if nwords > 1 && words[1..nwords as usize].iter().any(|&w| w != 0) {
        return Err(Nfs4Error::Bad("attribute not asked for"));
    }
    Ok(OpResult::Attrs { ftype, size })
}

/// Decodes COMPOUND4res (the RPC results) for the operations `sent`.
pub fn decode_compound(
    res: &[u8],
    sent: &[Op<'_>],
    placement: ReadPlacement,
) -> Result<CompoundReply, Nfs4Error> {
    let mut r = XdrReader::new(res);
    let status = r.get_u32()?;
    let _tag = r.get_opaque(1024)?;
    let n = r.get_count(sent.len() as u32)? as usize;
    let mut ops = Vec::with_capacity(n);
    let mut direct_left = placement == ReadPlacement::FirstDirect;
    for (index, o) in sent.iter().enumerate().take(n) {
        let want = match o {
            Op::PutRootFh => op::PUTROOTFH,
            Op::PutFh(_) => op::PUTFH,
            Op::Lookup(_) => op::LOOKUP,
            Op::GetFh => op::GETFH,
            Op::GetAttrTypeSize => op::GETATTR,
            Op::Read { .. } => op::READ,
            Op::Write { .. } => op::WRITE,
            Op::Commit { .. } => op::COMMIT,
            Op::ReadDir { .. } => op::READDIR,
        };
        let got = r.get_u32()?;
        if got != want {
            return Err(Nfs4Error::WrongOp {
                index,
                sent: want,
                got,
            });
        }
        let st = r.get_u32()?;
        let result = if st != NFS4_OK {
            OpResult::Done
        } else {
            match got {
                op::GETFH => OpResult::Fh(r.get_opaque(128)?.to_vec()),
                op::GETATTR => decode_fattr(&mut r)?,
                op::READ => {
                    let eof = r.get_bool()?;
                    if direct_left {
                        direct_left = false;
                        // Only the length word: the data and its pad went to the Write chunk.
                        let len = r.get_u32()?;
                        OpResult::Read {
                            eof,
                            len,
                            data: Vec::new(),
                        }
                    } else {
                        let d = r.get_opaque(u32::MAX)?;
                        OpResult::Read {
                            eof,
                            len: d.len() as u32,
                            data: d.to_vec(),
                        }
                    }
                }
                op::WRITE => {
                    let count = r.get_u32()?;
                    let committed = r.get_u32()?;
                    let verifier = get_verifier(&mut r)?;
                    OpResult::Write {
                        count,
                        committed,
                        verifier,
                    }
                }
                op::COMMIT => OpResult::Commit {
                    verifier: get_verifier(&mut r)?,
                },
                op::READDIR => {
                    let verifier = get_verifier(&mut r)?;
                    let mut entries = Vec::new();
                    while r.get_optional()? {
                        let cookie = r.get_u64()?;
                        let name = r.get_opaque(1024)?;
                        let _attrs = decode_fattr(&mut r)?;
                        entries.push(DirEntry {
                            cookie,
                            name: String::from_utf8_lossy(name).into_owned(),
                        });
                        if entries.len() > 1 << 20 {
                            return Err(Nfs4Error::Bad("too many directory entries"));
                        }
                    }
                    let eof = r.get_bool()?;
                    OpResult::ReadDir {
                        verifier,
                        entries,
                        eof,
                    }
                }
                _ => OpResult::Done,
            }
        };
        ops.push(OpReply {
            op: got,
            status: st,
            result,
        });
        if st != NFS4_OK {
            break;
        }
    }
    if ops.len() < n {
        // A failed operation ends the array; anything after it is garbage.
        return Ok(CompoundReply { status, ops });
    }
    if !r.rest().is_empty() {
        return Err(Nfs4Error::Bad("octets after the last result"));
    }
    Ok(CompoundReply { status, ops })
}

/// Fills `out` with the test pattern of `seed` starting at file offset `offset`: the bytes of
/// a SplitMix64 stream (8 little-endian bytes per step), so any range can be produced without
/// the ones before it.
pub fn pattern(seed: u64, offset: u64, out: &mut [u8]) {
    let mut pos = offset;
    let mut i = 0;
    while i < out.len() {
        let word = splitmix64(seed.wrapping_add((pos / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        let bytes = word.to_le_bytes();
        let k = (pos % 8) as usize;
        let n = (8 - k).min(out.len() - i);
        out[i..i + n].copy_from_slice(&bytes[k..k + n]);
        i += n;
        pos += n as u64;
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_pattern_ranges_consistent_with_the_whole() {
        let mut whole = vec![0u8; 1000];
        pattern(7, 0, &mut whole);
        for (off, len) in [(0usize, 1usize), (3, 17), (8, 8), (13, 500), (999, 1)] {
            let mut part = vec![0u8; len];
            pattern(7, off as u64, &mut part);
            assert_eq!(part, whole[off..off + len], "range {off}+{len}");
        }
        let mut other = vec![0u8; 1000];
        pattern(8, 0, &mut other);
        assert_ne!(whole, other, "seeds differ");
    }

    #[test]
    fn accepts_write_with_ddp_item_cut_after_length_word() {
        let e = encode_compound(
            "t",
            &[
                Op::PutFh(&[1, 2, 3]),
                Op::Write {
                    offset: 5,
                    stable: Stable::FileSync,
                    data: WriteData::Ddp(4097),
                },
                Op::GetAttrTypeSize,
            ],
        );
        let at = e.ddp_at.expect("cut");
        assert_eq!(at % 4, 0);
        assert_eq!(&e.bytes[at - 4..at], &4097u32.to_be_bytes());
        // GETATTR follows right after the cut: no data, no pad.
        assert_eq!(&e.bytes[at..at + 4], &op::GETATTR.to_be_bytes());
        let inline = encode_compound(
            "t",
            &[Op::Write {
                offset: 5,
                stable: Stable::FileSync,
                data: WriteData::Inline(&[9; 5]),
            }],
        );
        assert!(inline.ddp_at.is_none());
        assert_eq!(inline.bytes.len() % 4, 0);
    }

    fn res_header(n: u32) -> Vec<u8> {
        let mut b = Vec::new();
        put_u32(&mut b, 0);
        put_opaque(&mut b, b"t");
        put_u32(&mut b, n);
        b
    }

    #[test]
    fn accepts_read_result_placed_directly_or_inline() {
        let sent = [Op::Read {
            offset: 0,
            count: 4096,
        }];
        let mut direct = res_header(1);
        put_u32(&mut direct, op::READ);
        put_u32(&mut direct, 0);
        put_u32(&mut direct, 1); // eof
        put_u32(&mut direct, 4095); // length only
        let r = decode_compound(&direct, &sent, ReadPlacement::FirstDirect).unwrap();
        assert_eq!(
            r.ops[0].result,
            OpResult::Read {
                eof: true,
                len: 4095,
                data: vec![]
            }
        );
        let mut inline = res_header(1);
        put_u32(&mut inline, op::READ);
        put_u32(&mut inline, 0);
        put_u32(&mut inline, 0);
        put_opaque(&mut inline, &[1, 2, 3]);
        let r = decode_compound(&inline, &sent, ReadPlacement::Inline).unwrap();
        assert_eq!(
            r.ops[0].result,
            OpResult::Read {
                eof: false,
                len: 3,
                data: vec![1, 2, 3]
            }
        );
        // The same octets read as direct placement leave the data behind: refused.
        assert!(decode_compound(&inline, &sent, ReadPlacement::FirstDirect).is_err());
    }

    #[test]
    fn rejects_result_of_another_operation() {
        let mut b = res_header(1);
        put_u32(&mut b, op::GETFH);
        put_u32(&mut b, 0);
        put_opaque(&mut b, &[0; 8]);
        let e = decode_compound(&b, &[Op::PutRootFh], ReadPlacement::Inline).unwrap_err();
        assert!(matches!(e, Nfs4Error::WrongOp { index: 0, .. }));
    }

    #[test]
    fn accepts_readdir_and_attrs() {
        let mut b = res_header(2);
        put_u32(&mut b, op::GETATTR);
        put_u32(&mut b, 0);
        put_u32(&mut b, 1);
        put_u32(&mut b, (1 << FATTR4_TYPE) | (1 << FATTR4_SIZE));
        let mut vals = Vec::new();
        put_u32(&mut vals, NF4DIR);
        put_u64(&mut vals, 4096);
        put_opaque(&mut b, &vals);
        put_u32(&mut b, op::READDIR);
        put_u32(&mut b, 0);
        b.extend_from_slice(&[7; 8]);
        for (c, n) in [(3u64, "a"), (4, "bcdef")] {
            put_u32(&mut b, 1);
            put_u64(&mut b, c);
            put_opaque(&mut b, n.as_bytes());
            put_u32(&mut b, 0); // empty bitmap
            put_u32(&mut b, 0); // no values
        }
        put_u32(&mut b, 0);
        put_u32(&mut b, 1);
        let sent = [
            Op::GetAttrTypeSize,
            Op::ReadDir {
                cookie: 0,
                verifier: [0; 8],
                dircount: 1000,
                maxcount: 2000,
            },
        ];
        let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
        assert_eq!(
            r.ops[0].result,
            OpResult::Attrs {
                ftype: Some(NF4DIR),
                size: Some(4096)
            }
        );
        match &r.ops[1].result {
            OpResult::ReadDir { entries, eof, .. } => {
                assert!(*eof);
                assert_eq!(entries.len(), 2);
                assert_eq!(entries[1].name, "bcdef");
                assert_eq!(entries[1].cookie, 4);
            }
            other => panic!("{other:?}"),
        }
        // Truncated: an error, not a panic.
        for cut in 0..b.len() {
            let _ = decode_compound(&b[..cut], &sent, ReadPlacement::Inline);
        }
    }
}
