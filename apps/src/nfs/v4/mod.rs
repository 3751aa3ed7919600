//! A small NFSv4.0 (RFC 7530) and NFSv4.1 (RFC 8881) XDR codec: the COMPOUND operations
//! `rpcrdma-nfs-check` sends to the Linux kernel NFS server over RPC-over-RDMA, and the
//! test-file content both sides agree on. The callback side (CB_COMPOUND, served on the
//! RFC 8167 backchannel) is in [`cb`]; the NFSv4.1 server of `rpcrdma-nfsd` in [`server`]
//! (which shares the operation numbers and status values here, and whose tests use this
//! encoder and decoder as their client).
//!
//! Minor version 1 adds sessions: [`encode_compound_minor`] with 1 and a [`Op::Sequence`]
//! first; EXCHANGE_ID, CREATE_SESSION (with the backchannel's attributes and callback
//! program), RECLAIM_COMPLETE, OPEN (asking for a read delegation, or reclaiming with
//! CLAIM_PREVIOUS), LOCK (reclaiming or not), CLOSE, DELEGRETURN, DESTROY_SESSION and
//! DESTROY_CLIENTID are encoded and their results decoded.
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
//! Recovery: every decoder bounds-checks through
//! [`XdrReader`](rpcrdma_engine::xdr::XdrReader) and returns [`Nfs4Error`]; no input panics.
//!
//! This file holds the constants, the argument types and the encoder; the result types and
//! [`decode_compound`] are in `decode.rs` (re-exported here), the unit tests in `tests.rs`
//! (NFSv4.0) and `tests41.rs` (NFSv4.1).

pub mod cb;
mod decode;
pub mod harness;
pub mod server;

pub(crate) use decode::get_stateid;
pub use decode::{
    decode_compound, CompoundReply, CreateSessionRes, Delegation, DirEntry, ExchangeIdRes,
    Nfs4Error, OpReply, OpResult, OpenRes, ReadPlacement, SequenceRes,
};

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
    /// CREATE.
    pub const CREATE: u32 = 6;
    /// LINK.
    pub const LINK: u32 = 11;
    /// LOCK.
    pub const LOCK: u32 = 12;
    /// LOCKT.
    pub const LOCKT: u32 = 13;
    /// LOCKU.
    pub const LOCKU: u32 = 14;
    /// LOOKUPP.
    pub const LOOKUPP: u32 = 16;
    /// READLINK.
    pub const READLINK: u32 = 27;
    /// REMOVE.
    pub const REMOVE: u32 = 28;
    /// RENAME.
    pub const RENAME: u32 = 29;
    /// RESTOREFH.
    pub const RESTOREFH: u32 = 31;
    /// SAVEFH.
    pub const SAVEFH: u32 = 32;
    /// SETATTR.
    pub const SETATTR: u32 = 34;
    /// NVERIFY.
    pub const NVERIFY: u32 = 17;
    /// SECINFO.
    pub const SECINFO: u32 = 33;
    /// VERIFY.
    pub const VERIFY: u32 = 37;
    /// SECINFO_NO_NAME (minor version 1).
    pub const SECINFO_NO_NAME: u32 = 52;
    /// OP_ILLEGAL: the result of an unknown operation number.
    pub const ILLEGAL: u32 = 10044;
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
    /// OPEN_DOWNGRADE.
    pub const OPEN_DOWNGRADE: u32 = 21;
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
    /// BACKCHANNEL_CTL (minor version 1).
    pub const BACKCHANNEL_CTL: u32 = 40;
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
    /// FREE_STATEID (minor version 1).
    pub const FREE_STATEID: u32 = 45;
    /// TEST_STATEID (minor version 1).
    pub const TEST_STATEID: u32 = 55;
    /// DESTROY_CLIENTID (minor version 1).
    pub const DESTROY_CLIENTID: u32 = 57;
    /// RECLAIM_COMPLETE (minor version 1).
    pub const RECLAIM_COMPLETE: u32 = 58;
    /// ALLOCATE (minor version 2, RFC 7862).
    pub const ALLOCATE: u32 = 59;
    /// COPY (minor version 2).
    pub const COPY: u32 = 60;
    /// DEALLOCATE (minor version 2).
    pub const DEALLOCATE: u32 = 62;
    /// SEEK (minor version 2).
    pub const SEEK: u32 = 69;
    /// CLONE (minor version 2).
    pub const CLONE: u32 = 71;
    /// GETXATTR (minor version 2, RFC 8276).
    pub const GETXATTR: u32 = 72;
    /// SETXATTR (minor version 2, RFC 8276).
    pub const SETXATTR: u32 = 73;
    /// LISTXATTRS (minor version 2, RFC 8276).
    pub const LISTXATTRS: u32 = 74;
    /// REMOVEXATTR (minor version 2, RFC 8276).
    pub const REMOVEXATTR: u32 = 75;
    /// The last operation of minor version 2 (RFC 7862's 59..=71 and RFC 8276's extended
    /// attribute operations 72..=75).
    pub const LAST_V42: u32 = 75;
}

/// `nfsstat4` NFS4_OK.
pub const NFS4_OK: u32 = 0;
/// `nfsstat4` NFS4ERR_NOTSUPP.
pub const NFS4ERR_NOTSUPP: u32 = 10004;
/// `nfsstat4` NFS4ERR_DELAY.
pub const NFS4ERR_DELAY: u32 = 10008;
/// `nfsstat4` NFS4ERR_GRACE.
pub const NFS4ERR_GRACE: u32 = 10013;
/// `nfsstat4` NFS4ERR_DENIED (a conflicting lock: LOCK4denied follows).
pub const NFS4ERR_DENIED: u32 = 10010;
/// `nfsstat4` NFS4ERR_NO_GRACE.
pub const NFS4ERR_NO_GRACE: u32 = 10033;
/// `nfsstat4` NFS4ERR_RECLAIM_BAD.
pub const NFS4ERR_RECLAIM_BAD: u32 = 10034;
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

/// `secinfo_style4` SECINFO_STYLE4_CURRENT_FH: the current file handle's flavors.
pub const SECINFO_STYLE4_CURRENT_FH: u32 = 0;
/// `secinfo_style4` SECINFO_STYLE4_PARENT: its parent's flavors.
pub const SECINFO_STYLE4_PARENT: u32 = 1;
/// RPCSEC_GSS (RFC 2203): a `secinfo4` of this flavor carries `rpcsec_gss_info`.
pub const RPCSEC_GSS: u32 = 6;

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
    /// CREATE_SESSION with one callback security parameter, AUTH_SYS as root (machine name
    /// `rpcrdma`, stamp 0), as the Linux client offers (its callback service takes
    /// CB_COMPOUND only with AUTH_SYS).
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
    /// OPEN reclaiming the open of the current file handle after a server restart
    /// (CLAIM_PREVIOUS, no delegation held, no create, deny none).
    OpenReclaim {
        /// `owner.clientid`.
        clientid: u64,
        /// `owner.owner`.
        owner: &'a [u8],
        /// `share_access`.
        access: u32,
    },
    /// LOCK of a range for a new lock owner under an open stateid (`open_to_lock_owner4`).
    Lock {
        /// WRITE_LT (true) or READ_LT.
        write: bool,
        /// `reclaim`: reclaiming a lock held before a server restart.
        reclaim: bool,
        /// Offset.
        offset: u64,
        /// Length (`u64::MAX`: to the end of the file).
        length: u64,
        /// The open stateid the lock is taken under.
        open_stateid: StateId,
        /// `lock_owner.clientid`.
        clientid: u64,
        /// `lock_owner.owner`.
        owner: &'a [u8],
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
    /// SECINFO of one name in the current (directory) file handle (RFC 8881 §18.29).
    SecInfo(&'a str),
    /// SECINFO_NO_NAME (RFC 8881 §18.45) of style [`SECINFO_STYLE4_CURRENT_FH`] or
    /// [`SECINFO_STYLE4_PARENT`].
    SecInfoNoName(u32),
    /// VERIFY (RFC 8881 §18.31): the current file handle's attributes are `vals` (the
    /// `attrlist4` of `fattr4`, in bit order) for the attributes of bitmap `mask`.
    Verify {
        /// `attrmask`.
        mask: &'a [u32],
        /// `attr_vals`.
        vals: &'a [u8],
    },
    /// NVERIFY (RFC 8881 §18.15): the attributes differ from `vals`.
    Nverify {
        /// `attrmask`.
        mask: &'a [u32],
        /// `attr_vals`.
        vals: &'a [u8],
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
            Op::Open { .. } | Op::OpenReclaim { .. } => op::OPEN,
            Op::Lock { .. } => op::LOCK,
            Op::Close(_) => op::CLOSE,
            Op::DelegReturn(_) => op::DELEGRETURN,
            Op::DestroySession(_) => op::DESTROY_SESSION,
            Op::DestroyClientId(_) => op::DESTROY_CLIENTID,
            Op::BindConnToSession { .. } => op::BIND_CONN_TO_SESSION,
            Op::SecInfo(_) => op::SECINFO,
            Op::SecInfoNoName(_) => op::SECINFO_NO_NAME,
            Op::Verify { .. } => op::VERIFY,
            Op::Nverify { .. } => op::NVERIFY,
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

/// OPEN's arguments up to the claim: seqid, share access `access` denying nothing, the
/// owner (`clientid`, `owner`), OPEN4_NOCREATE.
fn put_open_head(b: &mut Vec<u8>, clientid: u64, owner: &[u8], access: u32) {
    put_u32(b, op::OPEN);
    put_u32(b, 0); // seqid (ignored in minor version 1)
    put_u32(b, access);
    put_u32(b, 0); // share_deny: none
    put_u64(b, clientid);
    put_opaque(b, owner);
    put_u32(b, 0); // openflag4: OPEN4_NOCREATE
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
        if let Some(at) = encode_op(&mut b, o) {
            ddp_at = Some(at);
        }
    }
    Encoded { bytes: b, ddp_at }
}

/// Appends one operation's arguments; returns where a DDP WRITE's data belongs. The NFSv4.1
/// session operations are in [`encode_op41`].
fn encode_op(b: &mut Vec<u8>, o: &Op<'_>) -> Option<usize> {
    let mut ddp_at = None;
    match *o {
        Op::PutRootFh => put_u32(b, op::PUTROOTFH),
        Op::PutFh(fh) => {
            put_u32(b, op::PUTFH);
            put_opaque(b, fh);
        }
        Op::Lookup(name) => {
            put_u32(b, op::LOOKUP);
            put_opaque(b, name.as_bytes());
        }
        Op::GetFh => put_u32(b, op::GETFH),
        Op::GetAttrTypeSize => {
            put_u32(b, op::GETATTR);
            put_u32(b, 1); // bitmap4 of one word
            put_u32(b, (1 << FATTR4_TYPE) | (1 << FATTR4_SIZE));
        }
        Op::Read { offset, count } => {
            put_u32(b, op::READ);
            b.extend_from_slice(&ANONYMOUS_STATEID);
            put_u64(b, offset);
            put_u32(b, count);
        }
        Op::Write {
            offset,
            stable,
            data,
        } => {
            put_u32(b, op::WRITE);
            b.extend_from_slice(&ANONYMOUS_STATEID);
            put_u64(b, offset);
            put_u32(b, stable as u32);
            match data {
                WriteData::Inline(d) => put_opaque(b, d),
                WriteData::Ddp(len) => {
                    put_u32(b, len);
                    ddp_at = Some(b.len());
                }
            }
        }
        Op::Commit { offset, count } => {
            put_u32(b, op::COMMIT);
            put_u64(b, offset);
            put_u32(b, count);
        }
        Op::ReadDir {
            cookie,
            verifier,
            dircount,
            maxcount,
        } => {
            put_u32(b, op::READDIR);
            put_u64(b, cookie);
            b.extend_from_slice(&verifier);
            put_u32(b, dircount);
            put_u32(b, maxcount);
            put_u32(b, 0); // attr_request: empty bitmap
        }
        Op::ReadStateid {
            stateid,
            offset,
            count,
        } => {
            put_u32(b, op::READ);
            b.extend_from_slice(&stateid);
            put_u64(b, offset);
            put_u32(b, count);
        }
        _ => encode_op41(b, o),
    }
    ddp_at
}

/// Appends the arguments of one NFSv4.1 session operation (RFC 8881); the other operations are
/// [`encode_op`]'s.
fn encode_op41(b: &mut Vec<u8>, o: &Op<'_>) {
    match *o {
        Op::Sequence {
            session,
            sequence,
            slot,
            highest_slot,
            cache_this,
        } => {
            put_u32(b, op::SEQUENCE);
            b.extend_from_slice(&session);
            put_u32(b, sequence);
            put_u32(b, slot);
            put_u32(b, highest_slot);
            put_u32(b, u32::from(cache_this));
        }
        Op::ExchangeId {
            verifier,
            owner,
            flags,
        } => {
            put_u32(b, op::EXCHANGE_ID);
            b.extend_from_slice(&verifier);
            put_opaque(b, owner);
            put_u32(b, flags);
            put_u32(b, 0); // state_protect4_a: SP4_NONE
            put_u32(b, 0); // eia_client_impl_id<1>: none
        }
        Op::CreateSession {
            clientid,
            sequence,
            flags,
            fore,
            back,
            cb_program,
        } => {
            put_u32(b, op::CREATE_SESSION);
            put_u64(b, clientid);
            put_u32(b, sequence);
            put_u32(b, flags);
            put_channel_attrs(b, &fore);
            put_channel_attrs(b, &back);
            put_u32(b, cb_program);
            put_u32(b, 1); // csa_sec_parms<>: one entry
            put_u32(b, 1); // cb_secflavor AUTH_SYS, then authsys_parms:
            put_u32(b, 0); // stamp
            put_u32(b, 7); // machinename<255>
            b.extend_from_slice(b"rpcrdma\0");
            put_u32(b, 0); // uid
            put_u32(b, 0); // gid
            put_u32(b, 0); // gids<16>: none
        }
        Op::ReclaimComplete => {
            put_u32(b, op::RECLAIM_COMPLETE);
            put_u32(b, 0); // rca_one_fs
        }
        Op::Open {
            clientid,
            owner,
            access,
            name,
        } => {
            put_open_head(b, clientid, owner, access);
            put_u32(b, 0); // open_claim4: CLAIM_NULL
            put_opaque(b, name.as_bytes());
        }
        Op::OpenReclaim {
            clientid,
            owner,
            access,
        } => {
            put_open_head(b, clientid, owner, access);
            put_u32(b, 1); // open_claim4: CLAIM_PREVIOUS
            put_u32(b, 0); // delegate_type: OPEN_DELEGATE_NONE
        }
        Op::Lock {
            write,
            reclaim,
            offset,
            length,
            open_stateid,
            clientid,
            owner,
        } => {
            put_u32(b, op::LOCK);
            put_u32(b, if write { 2 } else { 1 }); // WRITE_LT / READ_LT
            put_u32(b, u32::from(reclaim));
            put_u64(b, offset);
            put_u64(b, length);
            put_u32(b, 1); // new_lock_owner: open_to_lock_owner4
            put_u32(b, 0); // open_seqid (ignored in minor version 1)
            b.extend_from_slice(&open_stateid);
            put_u32(b, 0); // lock_seqid
            put_u64(b, clientid);
            put_opaque(b, owner);
        }
        Op::Close(stateid) => {
            put_u32(b, op::CLOSE);
            put_u32(b, 0); // seqid (ignored in minor version 1)
            b.extend_from_slice(&stateid);
        }
        Op::DelegReturn(stateid) => {
            put_u32(b, op::DELEGRETURN);
            b.extend_from_slice(&stateid);
        }
        Op::DestroySession(session) => {
            put_u32(b, op::DESTROY_SESSION);
            b.extend_from_slice(&session);
        }
        Op::DestroyClientId(clientid) => {
            put_u32(b, op::DESTROY_CLIENTID);
            put_u64(b, clientid);
        }
        Op::BindConnToSession { session, dir } => {
            put_u32(b, op::BIND_CONN_TO_SESSION);
            b.extend_from_slice(&session);
            put_u32(b, dir);
            put_u32(b, 0); // bctsa_use_conn_in_rdma_mode
        }
        Op::SecInfo(name) => {
            put_u32(b, op::SECINFO);
            put_opaque(b, name.as_bytes()); // component4
        }
        Op::SecInfoNoName(style) => {
            put_u32(b, op::SECINFO_NO_NAME);
            put_u32(b, style); // secinfo_style4
        }
        Op::Verify { mask, vals } | Op::Nverify { mask, vals } => {
            put_u32(b, o.number());
            put_u32(b, mask.len() as u32); // fattr4: bitmap4 attrmask
            for w in mask {
                put_u32(b, *w);
            }
            put_opaque(b, vals); // attrlist4 attr_vals
        }
        _ => {} // encoded by `encode_op`
    }
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
mod tests;

#[cfg(test)]
mod tests41;
