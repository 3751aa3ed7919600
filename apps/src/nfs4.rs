//! A small NFSv4.0 (RFC 7530) and NFSv4.1 (RFC 8881) XDR codec: the COMPOUND operations
//! `rpcrdma-nfs-check` sends to the Linux kernel NFS server over RPC-over-RDMA, and the
//! test-file content both sides agree on. The callback side (CB_COMPOUND, served on the
//! RFC 8167 backchannel) is in [`crate::nfs4cb`].
//!
//! Minor version 1 adds sessions: [`encode_compound_minor`] with 1 and a [`Op::Sequence`]
//! first; EXCHANGE_ID, CREATE_SESSION (with the backchannel's attributes and callback
//! program), RECLAIM_COMPLETE, OPEN (asking for a read delegation), CLOSE, DELEGRETURN,
//! DESTROY_SESSION and DESTROY_CLIENTID are encoded and their results decoded.
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
    /// CLOSE.
    pub const CLOSE: u32 = 4;
    /// COMMIT.
    pub const COMMIT: u32 = 5;
    /// DELEGRETURN.
    pub const DELEGRETURN: u32 = 8;
    /// GETATTR.
    pub const GETATTR: u32 = 9;
    /// GETFH.
    pub const GETFH: u32 = 10;
    /// LOOKUP.
    pub const LOOKUP: u32 = 15;
    /// OPEN.
    pub const OPEN: u32 = 18;
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
    /// BIND_CONN_TO_SESSION (minor version 1).
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    /// EXCHANGE_ID (minor version 1).
    pub const EXCHANGE_ID: u32 = 42;
    /// CREATE_SESSION (minor version 1).
    pub const CREATE_SESSION: u32 = 43;
    /// DESTROY_SESSION (minor version 1).
    pub const DESTROY_SESSION: u32 = 44;
    /// SEQUENCE (minor version 1).
    pub const SEQUENCE: u32 = 53;
    /// DESTROY_CLIENTID (minor version 1).
    pub const DESTROY_CLIENTID: u32 = 57;
    /// RECLAIM_COMPLETE (minor version 1).
    pub const RECLAIM_COMPLETE: u32 = 58;
}

/// `nfsstat4` NFS4_OK.
pub const NFS4_OK: u32 = 0;
/// `nfsstat4` NFS4ERR_NOTSUPP.
pub const NFS4ERR_NOTSUPP: u32 = 10004;
/// `nfsstat4` NFS4ERR_DELAY.
pub const NFS4ERR_DELAY: u32 = 10008;
/// `nfsstat4` NFS4ERR_GRACE.
pub const NFS4ERR_GRACE: u32 = 10013;
/// `nfsstat4` NFS4ERR_MINOR_VERS_MISMATCH.
pub const NFS4ERR_MINOR_VERS_MISMATCH: u32 = 10021;
/// `nfsstat4` NFS4ERR_OP_ILLEGAL.
pub const NFS4ERR_OP_ILLEGAL: u32 = 10044;
/// `nfsstat4` NFS4ERR_BADSESSION.
pub const NFS4ERR_BADSESSION: u32 = 10052;
/// `nfsstat4` NFS4ERR_BADSLOT.
pub const NFS4ERR_BADSLOT: u32 = 10053;
/// `nfsstat4` NFS4ERR_SEQ_MISORDERED.
pub const NFS4ERR_SEQ_MISORDERED: u32 = 10063;
/// `nfsstat4` NFS4ERR_SEQUENCE_POS.
pub const NFS4ERR_SEQUENCE_POS: u32 = 10064;
/// `nfsstat4` NFS4ERR_RETRY_UNCACHED_REP.
pub const NFS4ERR_RETRY_UNCACHED_REP: u32 = 10068;
/// `nfsstat4` NFS4ERR_OP_NOT_IN_SESSION.
pub const NFS4ERR_OP_NOT_IN_SESSION: u32 = 10071;

/// A session id (`sessionid4`).
pub type SessionId = [u8; 16];
/// A stateid (`stateid4`: seqid and 12 octets of `other`).
pub type StateId = [u8; 16];

/// `csa_flags` CREATE_SESSION4_FLAG_CONN_BACK_CHAN: the connection also carries the
/// backchannel.
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
/// `channel_dir_from_client4` CDFC4_FORE_OR_BOTH: bind the connection to the fore channel
/// and, if the server agrees, the backchannel.
pub const CDFC4_FORE_OR_BOTH: u32 = 3;
/// `channel_dir_from_server4` CDFS4_BOTH.
pub const CDFS4_BOTH: u32 = 3;
/// `sr_status_flags` SEQ4_STATUS_CB_PATH_DOWN: the server has no usable backchannel.
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;
/// `sr_status_flags` SEQ4_STATUS_RECALLABLE_STATE_REVOKED.
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x40;
/// `sr_status_flags` SEQ4_STATUS_CB_PATH_DOWN_SESSION.
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x200;
/// `sr_status_flags` SEQ4_STATUS_BACKCHANNEL_FAULT.
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x400;
/// `share_access` OPEN4_SHARE_ACCESS_READ.
pub const OPEN4_SHARE_ACCESS_READ: u32 = 1;
/// `share_access` OPEN4_SHARE_ACCESS_WANT_READ_DELEG (minor version 1).
pub const OPEN4_SHARE_ACCESS_WANT_READ_DELEG: u32 = 0x100;

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

/// `channel_attrs4` (CREATE_SESSION, RFC 8881 §18.36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelAttrs {
    /// `ca_headerpadsize`.
    pub header_pad: u32,
    /// `ca_maxrequestsize`.
    pub max_request: u32,
    /// `ca_maxresponsesize`.
    pub max_response: u32,
    /// `ca_maxresponsesize_cached`.
    pub max_response_cached: u32,
    /// `ca_maxoperations`.
    pub max_ops: u32,
    /// `ca_maxrequests` (the number of slots).
    pub max_requests: u32,
    /// `ca_rdma_ird<1>`.
    pub rdma_ird: Option<u32>,
}

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
    /// READ with a stateid (an open or delegation stateid).
    ReadStateid {
        /// The stateid.
        stateid: StateId,
        /// Offset.
        offset: u64,
        /// Count.
        count: u32,
    },
    /// SEQUENCE (minor version 1: the first operation of every COMPOUND in a session).
    Sequence {
        /// `sa_sessionid`.
        session: SessionId,
        /// `sa_sequenceid`.
        sequence: u32,
        /// `sa_slotid`.
        slot: u32,
        /// `sa_highest_slotid`.
        highest_slot: u32,
        /// `sa_cachethis`.
        cache_this: bool,
    },
    /// EXCHANGE_ID with SP4_NONE and no implementation id.
    ExchangeId {
        /// `co_verifier`.
        verifier: [u8; 8],
        /// `co_ownerid`.
        owner: &'a [u8],
        /// `eia_flags`.
        flags: u32,
    },
    /// CREATE_SESSION with an AUTH_NONE callback security parameter.
    CreateSession {
        /// `csa_clientid`.
        clientid: u64,
        /// `csa_sequence` (EXCHANGE_ID's `eir_sequenceid`).
        sequence: u32,
        /// `csa_flags`.
        flags: u32,
        /// Fore channel attributes.
        fore: ChannelAttrs,
        /// Backchannel attributes.
        back: ChannelAttrs,
        /// `csa_cb_program`: the RPC program of the callbacks.
        cb_program: u32,
    },
    /// RECLAIM_COMPLETE (`rca_one_fs` false).
    ReclaimComplete,
    /// OPEN of an existing file by name in the current (directory) file handle: CLAIM_NULL,
    /// no create, deny none.
    Open {
        /// `owner.clientid`.
        clientid: u64,
        /// `owner.owner`.
        owner: &'a [u8],
        /// `share_access` (with the minor version 1 delegation wants).
        access: u32,
        /// The file name.
        name: &'a str,
    },
    /// CLOSE of an open stateid.
    Close(StateId),
    /// DELEGRETURN of a delegation stateid (the current file handle is the file).
    DelegReturn(StateId),
    /// DESTROY_SESSION.
    DestroySession(SessionId),
    /// DESTROY_CLIENTID.
    DestroyClientId(u64),
    /// BIND_CONN_TO_SESSION (alone in its COMPOUND), not in RDMA mode.
    BindConnToSession {
        /// `bctsa_sessid`.
        session: SessionId,
        /// `bctsa_dir` (CDFC4_*).
        dir: u32,
    },
}

impl Op<'_> {
    /// The operation number.
    pub fn number(&self) -> u32 {
        match self {
            Op::PutRootFh => op::PUTROOTFH,
            Op::PutFh(_) => op::PUTFH,
            Op::Lookup(_) => op::LOOKUP,
            Op::GetFh => op::GETFH,
            Op::GetAttrTypeSize => op::GETATTR,
            Op::Read { .. } | Op::ReadStateid { .. } => op::READ,
            Op::Write { .. } => op::WRITE,
            Op::Commit { .. } => op::COMMIT,
            Op::ReadDir { .. } => op::READDIR,
            Op::Sequence { .. } => op::SEQUENCE,
            Op::ExchangeId { .. } => op::EXCHANGE_ID,
            Op::CreateSession { .. } => op::CREATE_SESSION,
            Op::ReclaimComplete => op::RECLAIM_COMPLETE,
            Op::Open { .. } => op::OPEN,
            Op::Close(_) => op::CLOSE,
            Op::DelegReturn(_) => op::DELEGRETURN,
            Op::DestroySession(_) => op::DESTROY_SESSION,
            Op::DestroyClientId(_) => op::DESTROY_CLIENTID,
            Op::BindConnToSession { .. } => op::BIND_CONN_TO_SESSION,
        }
    }
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

fn put_channel_attrs(b: &mut Vec<u8>, a: &ChannelAttrs) {
    for v in [
        a.header_pad,
        a.max_request,
        a.max_response,
        a.max_response_cached,
        a.max_ops,
        a.max_requests,
    ] {
        put_u32(b, v);
    }
    match a.rdma_ird {
        Some(ird) => {
            put_u32(b, 1);
            put_u32(b, ird);
        }
        None => put_u32(b, 0),
    }
}

/// Encodes COMPOUND4args (minor version 0, `tag`) for `ops`. At most one WRITE may carry
/// [`WriteData::Ddp`].
pub fn encode_compound(tag: &str, ops: &[Op<'_>]) -> Encoded {
    encode_compound_minor(tag, 0, ops)
}

/// Encodes COMPOUND4args of minor version `minor` (0 or 1; in a session the first operation
/// is [`Op::Sequence`]). At most one WRITE may carry [`WriteData::Ddp`].
pub fn encode_compound_minor(tag: &str, minor: u32, ops: &[Op<'_>]) -> Encoded {
    let mut b = Vec::with_capacity(256);
    let mut ddp_at = None;
    put_opaque(&mut b, tag.as_bytes());
    put_u32(&mut b, minor);
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
            Op::ReadStateid {
                stateid,
                offset,
                count,
            } => {
                put_u32(&mut b, op::READ);
                b.extend_from_slice(&stateid);
                put_u64(&mut b, offset);
                put_u32(&mut b, count);
            }
            Op::Sequence {
                session,
                sequence,
                slot,
                highest_slot,
                cache_this,
            } => {
                put_u32(&mut b, op::SEQUENCE);
                b.extend_from_slice(&session);
                put_u32(&mut b, sequence);
                put_u32(&mut b, slot);
                put_u32(&mut b, highest_slot);
                put_u32(&mut b, u32::from(cache_this));
            }
            Op::ExchangeId {
                verifier,
                owner,
                flags,
            } => {
                put_u32(&mut b, op::EXCHANGE_ID);
                b.extend_from_slice(&verifier);
                put_opaque(&mut b, owner);
                put_u32(&mut b, flags);
                put_u32(&mut b, 0); // state_protect4_a: SP4_NONE
                put_u32(&mut b, 0); // eia_client_impl_id<1>: none
            }
            Op::CreateSession {
                clientid,
                sequence,
                flags,
                fore,
                back,
                cb_program,
            } => {
                put_u32(&mut b, op::CREATE_SESSION);
                put_u64(&mut b, clientid);
                put_u32(&mut b, sequence);
                put_u32(&mut b, flags);
                put_channel_attrs(&mut b, &fore);
                put_channel_attrs(&mut b, &back);
                put_u32(&mut b, cb_program);
                put_u32(&mut b, 1); // csa_sec_parms<>: one entry
                put_u32(&mut b, 0); // cb_secflavor AUTH_NONE (no body)
            }
            Op::ReclaimComplete => {
                put_u32(&mut b, op::RECLAIM_COMPLETE);
                put_u32(&mut b, 0); // rca_one_fs
            }
            Op::Open {
                clientid,
                owner,
                access,
                name,
            } => {
                put_u32(&mut b, op::OPEN);
                put_u32(&mut b, 0); // seqid (ignored in minor version 1)
                put_u32(&mut b, access);
                put_u32(&mut b, 0); // share_deny: none
                put_u64(&mut b, clientid);
                put_opaque(&mut b, owner);
                put_u32(&mut b, 0); // openflag4: OPEN4_NOCREATE
                put_u32(&mut b, 0); // open_claim4: CLAIM_NULL
                put_opaque(&mut b, name.as_bytes());
            }
            Op::Close(stateid) => {
                put_u32(&mut b, op::CLOSE);
                put_u32(&mut b, 0); // seqid (ignored in minor version 1)
                b.extend_from_slice(&stateid);
            }
            Op::DelegReturn(stateid) => {
                put_u32(&mut b, op::DELEGRETURN);
                b.extend_from_slice(&stateid);
            }
            Op::DestroySession(session) => {
                put_u32(&mut b, op::DESTROY_SESSION);
                b.extend_from_slice(&session);
            }
            Op::DestroyClientId(clientid) => {
                put_u32(&mut b, op::DESTROY_CLIENTID);
                put_u64(&mut b, clientid);
            }
            Op::BindConnToSession { session, dir } => {
                put_u32(&mut b, op::BIND_CONN_TO_SESSION);
                b.extend_from_slice(&session);
                put_u32(&mut b, dir);
                put_u32(&mut b, 0); // bctsa_use_conn_in_rdma_mode
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
    /// BIND_CONN_TO_SESSION.
    BindConn {
        /// `bctsr_sessid`.
        session: SessionId,
        /// `bctsr_dir` (CDFS4_*).
        dir: u32,
        /// `bctsr_use_conn_in_rdma_mode`.
        rdma_mode: bool,
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
                op::BIND_CONN_TO_SESSION => OpResult::BindConn {
                    session: get_session(&mut r)?,
                    dir: r.get_u32()?,
                    rdma_mode: r.get_bool()?,
                },
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

#[cfg(test)]
mod tests41 {
    use super::*;

    fn res_header(n: u32) -> Vec<u8> {
        let mut b = Vec::new();
        put_u32(&mut b, 0);
        put_opaque(&mut b, b"t");
        put_u32(&mut b, n);
        b
    }

    fn attrs(max_requests: u32) -> ChannelAttrs {
        ChannelAttrs {
            header_pad: 0,
            max_request: 4068,
            max_response: 4068,
            max_response_cached: 0,
            max_ops: 8,
            max_requests,
            rdma_ird: None,
        }
    }

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    }

    #[test]
    fn accepts_session_operations_encoded_as_rfc_8881() {
        let e = encode_compound_minor(
            "",
            1,
            &[
                Op::Sequence {
                    session: [1; 16],
                    sequence: 7,
                    slot: 1,
                    highest_slot: 3,
                    cache_this: true,
                },
                Op::CreateSession {
                    clientid: 0x0102_0304_0506_0708,
                    sequence: 9,
                    flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                    fore: attrs(4),
                    back: ChannelAttrs {
                        rdma_ird: Some(2),
                        ..attrs(1)
                    },
                    cb_program: 0x4000_0000,
                },
            ],
        );
        let w = words(&e.bytes);
        // tag "", minor version 1, two operations.
        assert_eq!(&w[..3], &[0, 1, 2]);
        // SEQUENCE: session (4 words), sequence, slot, highest slot, cachethis.
        assert_eq!(w[3], op::SEQUENCE);
        assert_eq!(&w[4..8], &[0x0101_0101; 4]);
        assert_eq!(&w[8..12], &[7, 1, 3, 1]);
        // CREATE_SESSION: clientid, sequence, flags, fore (6 + empty ird), back (6 + one ird),
        // program, one AUTH_NONE security parameter.
        assert_eq!(w[12], op::CREATE_SESSION);
        assert_eq!(&w[13..16], &[0x0102_0304, 0x0506_0708, 9]);
        assert_eq!(w[16], CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
        assert_eq!(&w[17..24], &[0, 4068, 4068, 0, 8, 4, 0]);
        assert_eq!(&w[24..32], &[0, 4068, 4068, 0, 8, 1, 1, 2]);
        assert_eq!(&w[32..], &[0x4000_0000, 1, 0]);
    }

    #[test]
    fn accepts_open_close_and_delegreturn_encoding() {
        let e = encode_compound_minor(
            "",
            1,
            &[
                Op::Open {
                    clientid: 5,
                    owner: b"abcde",
                    access: OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
                    name: "f",
                },
                Op::DelegReturn([2; 16]),
                Op::Close([3; 16]),
                Op::DestroySession([4; 16]),
                Op::DestroyClientId(6),
                Op::ExchangeId {
                    verifier: [9; 8],
                    owner: b"me",
                    flags: 0,
                },
                Op::BindConnToSession {
                    session: [1; 16],
                    dir: CDFC4_FORE_OR_BOTH,
                },
            ],
        );
        let w = words(&e.bytes);
        assert_eq!(&w[..3], &[0, 1, 7]);
        // OPEN: seqid, access, deny, owner (clientid, "abcde" padded), NOCREATE, CLAIM_NULL "f".
        assert_eq!(&w[3..8], &[op::OPEN, 0, 0x101, 0, 0]);
        assert_eq!(&w[8..10], &[5, 5]);
        assert_eq!(&w[12..16], &[0, 0, 1, u32::from_be_bytes([b'f', 0, 0, 0])]);
        assert_eq!(w[16], op::DELEGRETURN);
        assert_eq!(&w[21..23], &[op::CLOSE, 0]);
        assert_eq!(w[27], op::DESTROY_SESSION);
        assert_eq!(&w[32..35], &[op::DESTROY_CLIENTID, 0, 6]);
        // EXCHANGE_ID: verifier, owner, flags, SP4_NONE, no implementation id.
        assert_eq!(w[35], op::EXCHANGE_ID);
        assert_eq!(
            &w[38..43],
            &[2, u32::from_be_bytes([b'm', b'e', 0, 0]), 0, 0, 0]
        );
        // BIND_CONN_TO_SESSION: session, direction, not RDMA mode.
        assert_eq!(w[43], op::BIND_CONN_TO_SESSION);
        assert_eq!(&w[48..], &[CDFC4_FORE_OR_BOTH, 0]);
    }

    #[test]
    fn accepts_bind_conn_to_session_result() {
        let mut b = res_header(1);
        put_u32(&mut b, op::BIND_CONN_TO_SESSION);
        put_u32(&mut b, 0);
        b.extend_from_slice(&[3; 16]);
        put_u32(&mut b, CDFS4_BOTH);
        put_u32(&mut b, 0);
        let sent = [Op::BindConnToSession {
            session: [3; 16],
            dir: CDFC4_FORE_OR_BOTH,
        }];
        let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
        assert_eq!(
            r.ops[0].result,
            OpResult::BindConn {
                session: [3; 16],
                dir: CDFS4_BOTH,
                rdma_mode: false
            }
        );
        // A bool other than 0 or 1 is refused.
        let n = b.len();
        b[n - 1] = 2;
        assert!(decode_compound(&b, &sent, ReadPlacement::Inline).is_err());
    }

    #[test]
    fn accepts_session_results() {
        let mut b = res_header(4);
        // EXCHANGE_ID.
        put_u32(&mut b, op::EXCHANGE_ID);
        put_u32(&mut b, 0);
        put_u64(&mut b, 0xabcd);
        put_u32(&mut b, 1);
        put_u32(&mut b, 0x0001_0000);
        put_u32(&mut b, 0); // SP4_NONE
        put_u64(&mut b, 0);
        put_opaque(&mut b, b"major");
        put_opaque(&mut b, b"scope");
        put_u32(&mut b, 1);
        put_opaque(&mut b, b"kernel.org");
        put_opaque(&mut b, b"Linux");
        put_u64(&mut b, 0);
        put_u32(&mut b, 0);
        // CREATE_SESSION.
        put_u32(&mut b, op::CREATE_SESSION);
        put_u32(&mut b, 0);
        b.extend_from_slice(&[5; 16]);
        put_u32(&mut b, 1);
        put_u32(&mut b, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
        put_channel_attrs(&mut b, &attrs(4));
        put_channel_attrs(
            &mut b,
            &ChannelAttrs {
                rdma_ird: Some(0),
                ..attrs(1)
            },
        );
        // SEQUENCE.
        put_u32(&mut b, op::SEQUENCE);
        put_u32(&mut b, 0);
        b.extend_from_slice(&[5; 16]);
        for v in [1, 0, 3, 3, SEQ4_STATUS_CB_PATH_DOWN] {
            put_u32(&mut b, v);
        }
        // RECLAIM_COMPLETE.
        put_u32(&mut b, op::RECLAIM_COMPLETE);
        put_u32(&mut b, 0);
        let sent = [
            Op::ExchangeId {
                verifier: [0; 8],
                owner: b"x",
                flags: 0,
            },
            Op::CreateSession {
                clientid: 0xabcd,
                sequence: 1,
                flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                fore: attrs(4),
                back: attrs(1),
                cb_program: 1,
            },
            Op::Sequence {
                session: [5; 16],
                sequence: 1,
                slot: 0,
                highest_slot: 0,
                cache_this: false,
            },
            Op::ReclaimComplete,
        ];
        let r = decode_compound(&b, &sent, ReadPlacement::Inline).unwrap();
        match &r.ops[0].result {
            OpResult::ExchangeId(x) => {
                assert_eq!((x.clientid, x.sequence, x.flags), (0xabcd, 1, 0x0001_0000));
                assert_eq!(x.server_scope, b"scope");
                assert_eq!(x.impl_id, Some(("kernel.org".into(), "Linux".into())));
            }
            other => panic!("{other:?}"),
        }
        match &r.ops[1].result {
            OpResult::CreateSession(c) => {
                assert_eq!(c.session, [5; 16]);
                assert_eq!(c.flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
                assert_eq!(c.fore.max_requests, 4);
                assert_eq!(c.back.max_requests, 1);
                assert_eq!(c.back.rdma_ird, Some(0));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.ops[2].result,
            OpResult::Sequence(SequenceRes {
                session: [5; 16],
                sequence: 1,
                slot: 0,
                highest_slot: 3,
                target_highest_slot: 3,
                status_flags: SEQ4_STATUS_CB_PATH_DOWN,
            })
        );
        assert_eq!(r.ops[3].result, OpResult::Done);
        for cut in 0..b.len() {
            assert!(decode_compound(&b[..cut], &sent, ReadPlacement::Inline).is_err());
        }
    }

    fn open_res(deleg: &[u32], extra: &[u8]) -> Vec<u8> {
        let mut b = res_header(1);
        put_u32(&mut b, op::OPEN);
        put_u32(&mut b, 0);
        b.extend_from_slice(&[1; 16]); // open stateid
        put_u32(&mut b, 1); // cinfo.atomic
        put_u64(&mut b, 10);
        put_u64(&mut b, 11);
        put_u32(&mut b, 4); // rflags
        put_u32(&mut b, 0); // attrset
        for &w in deleg {
            put_u32(&mut b, w);
        }
        b.extend_from_slice(extra);
        b
    }

    #[test]
    fn accepts_open_with_each_delegation_type() {
        let sent = [Op::Open {
            clientid: 1,
            owner: b"o",
            access: 1,
            name: "f",
        }];
        let dec = |b: &[u8]| match decode_compound(b, &sent, ReadPlacement::Inline)
            .map(|r| r.ops[0].result.clone())
        {
            Ok(OpResult::Open(o)) => Ok(o),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        // READ: stateid, recall, nfsace4 (type, flag, mask, who "").
        let mut ace = vec![2u8; 16];
        ace.extend_from_slice(&[0, 0, 0, 0]); // recall false
        ace.extend_from_slice(&[0; 12]);
        ace.extend_from_slice(&[0, 0, 0, 0]);
        let o = dec(&open_res(&[1], &ace)).unwrap();
        assert_eq!(o.stateid, [1; 16]);
        assert_eq!(o.rflags, 4);
        assert_eq!(
            o.delegation,
            Delegation::Read {
                stateid: [2; 16],
                recall: false
            }
        );
        assert_eq!(
            dec(&open_res(&[0], &[])).unwrap().delegation,
            Delegation::None
        );
        // NONE_EXT: WND4_CONTENTION carries a bool, WND4_NOT_WANTED nothing.
        assert_eq!(
            dec(&open_res(&[3, 1, 0], &[])).unwrap().delegation,
            Delegation::NoneExt { why: 1 }
        );
        assert_eq!(
            dec(&open_res(&[3, 0], &[])).unwrap().delegation,
            Delegation::NoneExt { why: 0 }
        );
        assert!(dec(&open_res(&[3, 1], &[])).is_err(), "missing bool");
        assert!(dec(&open_res(&[9], &[])).is_err(), "unknown type");
        let full = open_res(&[1], &ace);
        for cut in 0..full.len() {
            assert!(dec(&full[..cut]).is_err());
        }
    }
}
