//! COMPOUND4res decoding: the result types ([`OpResult`], [`CompoundReply`], the session and
//! OPEN results) and [`decode_compound`], which reads each result against the operation sent.
//!
//! Normal operation: results are read in order, each checked to answer the operation at its
//! place; a READ placed through a Write chunk has only its length word inline
//! ([`ReadPlacement`]). Recovery: every read is bounds-checked through [`XdrReader`]; a short,
//! malformed or mismatched reply is an [`Nfs4Error`], never a panic.

use super::{
    op, ChannelAttrs, Op, SessionId, StateId, FATTR4_SIZE, FATTR4_TYPE, NFS4ERR_DENIED, NFS4_OK,
    RPCSEC_GSS,
};
use rpcrdma_engine::xdr::{XdrError, XdrReader};

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

/// SEQUENCE4resok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceRes {
    /// `sr_sessionid`.
    pub session: SessionId,
    /// `sr_sequenceid`.
    pub sequence: u32,
    /// `sr_slotid`.
    pub slot: u32,
    /// `sr_highest_slotid`.
    pub highest_slot: u32,
    /// `sr_target_highest_slotid`.
    pub target_highest_slot: u32,
    /// `sr_status_flags` (SEQ4_STATUS_*).
    pub status_flags: u32,
}

/// EXCHANGE_ID4resok (with SP4_NONE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdRes {
    /// `eir_clientid`.
    pub clientid: u64,
    /// `eir_sequenceid`.
    pub sequence: u32,
    /// `eir_flags`.
    pub flags: u32,
    /// `eir_server_owner.so_minor_id`.
    pub server_minor_id: u64,
    /// `eir_server_owner.so_major_id`.
    pub server_major_id: Vec<u8>,
    /// `eir_server_scope`.
    pub server_scope: Vec<u8>,
    /// `eir_server_impl_id` (domain, name), when sent.
    pub impl_id: Option<(String, String)>,
}

/// CREATE_SESSION4resok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateSessionRes {
    /// `csr_sessionid`.
    pub session: SessionId,
    /// `csr_sequence`.
    pub sequence: u32,
    /// `csr_flags`.
    pub flags: u32,
    /// Fore channel attributes the server chose.
    pub fore: ChannelAttrs,
    /// Backchannel attributes the server chose.
    pub back: ChannelAttrs,
}

/// `open_delegation4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delegation {
    /// OPEN_DELEGATE_NONE.
    None,
    /// OPEN_DELEGATE_READ.
    Read {
        /// The delegation stateid.
        stateid: StateId,
        /// `recall`: the server is already recalling it.
        recall: bool,
    },
    /// OPEN_DELEGATE_WRITE.
    Write {
        /// The delegation stateid.
        stateid: StateId,
        /// `recall`.
        recall: bool,
    },
    /// OPEN_DELEGATE_NONE_EXT (minor version 1): why none was granted (WND4_*).
    NoneExt {
        /// `ond_why`.
        why: u32,
    },
}

/// OPEN4resok (what the check uses of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRes {
    /// The open stateid.
    pub stateid: StateId,
    /// `rflags`.
    pub rflags: u32,
    /// The delegation granted (or why none was).
    pub delegation: Delegation,
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
    /// SEQUENCE.
    Sequence(SequenceRes),
    /// EXCHANGE_ID.
    ExchangeId(ExchangeIdRes),
    /// CREATE_SESSION.
    CreateSession(CreateSessionRes),
    /// OPEN.
    Open(OpenRes),
    /// CLOSE: the (final) open stateid.
    Close(StateId),
    /// LOCK: the lock stateid.
    Lock(StateId),
    /// BIND_CONN_TO_SESSION.
    BindConn {
        /// `bctsr_sessid`.
        session: SessionId,
        /// `bctsr_dir` (CDFS4_*).
        dir: u32,
        /// `bctsr_use_conn_in_rdma_mode`.
        rdma_mode: bool,
    },
    /// SECINFO or SECINFO_NO_NAME: the flavor of each `secinfo4`, in the server's order (an
    /// RPCSEC_GSS entry's `rpcsec_gss_info` is read and left out).
    SecInfo(Vec<u32>),
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

fn get_session(r: &mut XdrReader<'_>) -> Result<SessionId, Nfs4Error> {
    let v = r.get_fixed_opaque(16)?;
    let mut out = [0u8; 16];
    out.copy_from_slice(v);
    Ok(out)
}

/// Reads a `stateid4` (seqid + other: 16 octets).
pub(crate) fn get_stateid(r: &mut XdrReader<'_>) -> Result<StateId, Nfs4Error> {
    get_session(r)
}

fn get_channel_attrs(r: &mut XdrReader<'_>) -> Result<ChannelAttrs, Nfs4Error> {
    let mut a = ChannelAttrs {
        header_pad: r.get_u32()?,
        max_request: r.get_u32()?,
        max_response: r.get_u32()?,
        max_response_cached: r.get_u32()?,
        max_ops: r.get_u32()?,
        max_requests: r.get_u32()?,
        rdma_ird: None,
    };
    if r.get_count(1)? == 1 {
        a.rdma_ird = Some(r.get_u32()?);
    }
    Ok(a)
}

fn decode_exchange_id(r: &mut XdrReader<'_>) -> Result<ExchangeIdRes, Nfs4Error> {
    let clientid = r.get_u64()?;
    let sequence = r.get_u32()?;
    let flags = r.get_u32()?;
    // state_protect4_r: we ask for SP4_NONE, so that is what may come back.
    if r.get_u32()? != 0 {
        return Err(Nfs4Error::Bad(
            "EXCHANGE_ID: state protection other than SP4_NONE",
        ));
    }
    let server_minor_id = r.get_u64()?;
    let server_major_id = r.get_opaque(1024)?.to_vec();
    let server_scope = r.get_opaque(1024)?.to_vec();
    let impl_id = if r.get_count(1)? == 1 {
        let domain = String::from_utf8_lossy(r.get_opaque(1024)?).into_owned();
        let name = String::from_utf8_lossy(r.get_opaque(1024)?).into_owned();
        let _date_seconds = r.get_u64()?;
        let _date_nseconds = r.get_u32()?;
        Some((domain, name))
    } else {
        None
    };
    Ok(ExchangeIdRes {
        clientid,
        sequence,
        flags,
        server_minor_id,
        server_major_id,
        server_scope,
        impl_id,
    })
}

/// Skips an `nfsace4` (type, flag, access mask, who).
fn skip_nfsace(r: &mut XdrReader<'_>) -> Result<(), Nfs4Error> {
    r.get_u32()?;
    r.get_u32()?;
    r.get_u32()?;
    r.get_opaque(1024)?;
    Ok(())
}

fn decode_open(r: &mut XdrReader<'_>) -> Result<OpenRes, Nfs4Error> {
    let stateid = get_stateid(r)?;
    // change_info4: atomic, before, after.
    r.get_bool()?;
    r.get_u64()?;
    r.get_u64()?;
    let rflags = r.get_u32()?;
    let nwords = r.get_count(8)?;
    for _ in 0..nwords {
        r.get_u32()?;
    }
    let delegation = match r.get_u32()? {
        0 => Delegation::None,
        1 => {
            let stateid = get_stateid(r)?;
            let recall = r.get_bool()?;
            skip_nfsace(r)?;
            Delegation::Read { stateid, recall }
        }
        2 => {
            let stateid = get_stateid(r)?;
            let recall = r.get_bool()?;
            match r.get_u32()? {
                1 => {
                    r.get_u64()?;
                }
                2 => {
                    r.get_u32()?;
                    r.get_u32()?;
                }
                _ => return Err(Nfs4Error::Bad("OPEN: unknown space limit")),
            }
            skip_nfsace(r)?;
            Delegation::Write { stateid, recall }
        }
        3 => {
            let why = r.get_u32()?;
            // WND4_CONTENTION and WND4_RESOURCE carry a bool.
            if why == 1 || why == 2 {
                r.get_bool()?;
            }
            Delegation::NoneExt { why }
        }
        _ => return Err(Nfs4Error::Bad("OPEN: unknown delegation type")),
    };
    Ok(OpenRes {
        stateid,
        rflags,
        delegation,
    })
}

/// Reads SECINFO4resok (`secinfo4<>`): each entry's flavor; an RPCSEC_GSS entry's oid, qop
/// and service are read past.
fn decode_secinfo(r: &mut XdrReader<'_>) -> Result<OpResult, Nfs4Error> {
    let n = r.get_count(64)?;
    let mut flavors = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let f = r.get_u32()?;
        if f == RPCSEC_GSS {
            r.get_opaque(1024)?; // sec_oid4
            r.get_u32()?; // qop4
            r.get_u32()?; // rpc_gss_svc_t
        }
        flavors.push(f);
    }
    Ok(OpResult::SecInfo(flavors))
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
        let want = o.number();
        let got = r.get_u32()?;
        if got != want {
            return Err(Nfs4Error::WrongOp {
                index,
                sent: want,
                got,
            });
        }
        let st = r.get_u32()?;
        if got == op::LOCK && st == NFS4ERR_DENIED {
            // LOCK4denied: offset, length, type, owner (client id, opaque).
            r.skip(20)?;
            r.get_u64()?;
            r.get_opaque(1024)?;
        }
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
                op::SEQUENCE => OpResult::Sequence(SequenceRes {
                    session: get_session(&mut r)?,
                    sequence: r.get_u32()?,
                    slot: r.get_u32()?,
                    highest_slot: r.get_u32()?,
                    target_highest_slot: r.get_u32()?,
                    status_flags: r.get_u32()?,
                }),
                op::EXCHANGE_ID => OpResult::ExchangeId(decode_exchange_id(&mut r)?),
                op::CREATE_SESSION => OpResult::CreateSession(CreateSessionRes {
                    session: get_session(&mut r)?,
                    sequence: r.get_u32()?,
                    flags: r.get_u32()?,
                    fore: get_channel_attrs(&mut r)?,
                    back: get_channel_attrs(&mut r)?,
                }),
                op::OPEN => OpResult::Open(decode_open(&mut r)?),
                op::CLOSE => OpResult::Close(get_stateid(&mut r)?),
                op::LOCK => OpResult::Lock(get_stateid(&mut r)?),
                op::BIND_CONN_TO_SESSION => OpResult::BindConn {
                    session: get_session(&mut r)?,
                    dir: r.get_u32()?,
                    rdma_mode: r.get_bool()?,
                },
                op::SECINFO | op::SECINFO_NO_NAME => decode_secinfo(&mut r)?,
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
