//! The ONC RPC message header (RFC 5531, protocol version 2).
//!
//! Normal operation: [`decode`] borrows a CALL or REPLY header out of an RPC message and returns
//! it with the offset where the procedure arguments (CALL) or results (REPLY) begin; credential and
//! verifier bodies are sub-slices of the input. [`encode_call`] / [`encode_reply`] write a header
//! into a caller buffer and return its length; [`call_encoded_len`] / [`reply_encoded_len`] say
//! how much room that takes beforehand. [`msg_direction`] and [`peek_xid`] look at the two fixed
//! words only, which is how an RPC-over-RDMA endpoint tells a backchannel CALL from a REPLY
//! (RFC 8167) without decoding the rest. [`AuthSys::parse`] reads an AUTH_SYS credential body.
//!
//! Recovery: every length is checked against its XDR bound (opaque_auth bodies `<400>`, AUTH_SYS
//! machine name `<255>`, gids `<16>`) before anything is taken from the input. Errors carry the
//! XID whenever it was read, so a server can answer: [`RpcError::BadRpcVersion`] → MSG_DENIED /
//! RPC_MISMATCH{2,2}; [`RpcError::CredTooLong`] → AUTH_ERROR / AUTH_BADCRED;
//! [`RpcError::VerfTooLong`] → AUTH_ERROR / AUTH_BADVERF. Unknown auth flavors, accept_stat and
//! auth_stat values are preserved (open enums); unknown msg_type, reply_stat and reject_stat
//! values cannot be decoded further (their unions have no default arm) and are errors.

use crate::xdr::{roundup4, XdrError, XdrReader, XdrWriter};

/// The only RPC protocol version (the `rpcvers` field of a CALL).
pub const RPC_VERSION: u32 = 2;

/// Upper bound of an `opaque_auth` body (`opaque body<400>`).
pub const MAX_AUTH_BYTES: u32 = 400;

/// Upper bound of the AUTH_SYS machine name (`string machinename<255>`).
pub const MAX_MACHINENAME: u32 = 255;

/// Upper bound of the AUTH_SYS supplementary group list (`unsigned int gids<16>`).
pub const MAX_GIDS: u32 = 16;

/// Length of the fixed part every RPC message starts with: xid and msg_type.
pub const MSG_PREFIX_LEN: usize = 8;

/// Errors of the RPC header layer. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcError {
    /// The input ended inside the header.
    Truncated {
        /// Offset at which the item started.
        at: usize,
        /// Octets the item needed from `at`.
        needed: usize,
    },
    /// msg_type is neither CALL nor REPLY.
    BadMsgType {
        /// The message's XID.
        xid: u32,
        /// The value found.
        value: u32,
    },
    /// [`decode_call`] / [`decode_reply`] got the other kind of message.
    UnexpectedMsgType {
        /// The message's XID.
        xid: u32,
        /// The kind found.
        found: MsgType,
    },
    /// A CALL whose rpcvers is not 2; answer MSG_DENIED / RPC_MISMATCH{2, 2}.
    BadRpcVersion {
        /// The message's XID.
        xid: u32,
        /// The rpcvers found.
        rpcvers: u32,
    },
    /// The credential body is longer than 400 octets; answer AUTH_ERROR / AUTH_BADCRED.
    CredTooLong {
        /// The message's XID.
        xid: u32,
        /// The length found.
        len: u32,
    },
    /// The verifier body is longer than 400 octets; a server answers AUTH_ERROR / AUTH_BADVERF.
    VerfTooLong {
        /// The message's XID.
        xid: u32,
        /// The length found.
        len: u32,
    },
    /// reply_stat is neither MSG_ACCEPTED nor MSG_DENIED.
    BadReplyStat {
        /// The message's XID.
        xid: u32,
        /// The value found.
        value: u32,
    },
    /// reject_stat is neither RPC_MISMATCH nor AUTH_ERROR.
    BadRejectStat {
        /// The message's XID.
        xid: u32,
        /// The value found.
        value: u32,
    },
    /// A length inside an AUTH_SYS body above its bound (machine name 255, gids 16).
    TooLong {
        /// Offset of the length word within the body.
        at: usize,
        /// The value found.
        len: u32,
        /// The largest value accepted.
        max: u32,
    },
    /// An AUTH_SYS body with octets after the gids list.
    TrailingBytes {
        /// Offset of the first unexpected octet.
        at: usize,
    },
}

impl RpcError {
    /// The XID of the offending message when it was read, so the error can be answered.
    pub const fn xid(&self) -> Option<u32> {
        match *self {
            RpcError::BadMsgType { xid, .. }
            | RpcError::UnexpectedMsgType { xid, .. }
            | RpcError::BadRpcVersion { xid, .. }
            | RpcError::CredTooLong { xid, .. }
            | RpcError::VerfTooLong { xid, .. }
            | RpcError::BadReplyStat { xid, .. }
            | RpcError::BadRejectStat { xid, .. } => Some(xid),
            RpcError::Truncated { .. }
            | RpcError::TooLong { .. }
            | RpcError::TrailingBytes { .. } => None,
        }
    }
}

impl core::fmt::Display for RpcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RpcError::Truncated { at, needed } => {
                write!(f, "RPC header truncated: {needed} octets needed at {at}")
            }
            RpcError::BadMsgType { xid, value } => {
                write!(f, "RPC xid {xid:#x}: msg_type {value}")
            }
            RpcError::UnexpectedMsgType { xid, found } => {
                write!(f, "RPC xid {xid:#x}: unexpected {found:?}")
            }
            RpcError::BadRpcVersion { xid, rpcvers } => {
                write!(f, "RPC xid {xid:#x}: rpcvers {rpcvers}")
            }
            RpcError::CredTooLong { xid, len } => {
                write!(f, "RPC xid {xid:#x}: credential of {len} octets")
            }
            RpcError::VerfTooLong { xid, len } => {
                write!(f, "RPC xid {xid:#x}: verifier of {len} octets")
            }
            RpcError::BadReplyStat { xid, value } => {
                write!(f, "RPC xid {xid:#x}: reply_stat {value}")
            }
            RpcError::BadRejectStat { xid, value } => {
                write!(f, "RPC xid {xid:#x}: reject_stat {value}")
            }
            RpcError::TooLong { at, len, max } => {
                write!(f, "AUTH_SYS length {len} at {at} exceeds {max}")
            }
            RpcError::TrailingBytes { at } => write!(f, "AUTH_SYS body has extra octets at {at}"),
        }
    }
}

impl std::error::Error for RpcError {}

impl From<XdrError> for RpcError {
    fn from(e: XdrError) -> Self {
        match e {
            XdrError::Truncated { at, needed } => RpcError::Truncated { at, needed },
            XdrError::TooLong { at, len, max } => RpcError::TooLong { at, len, max },
            // The RPC header has no booleans and this layer never writes: both are unreachable
            // from `decode`; map them to something harmless rather than panic.
            XdrError::BadBool { at, .. } => RpcError::Truncated { at, needed: 4 },
            XdrError::NoSpace { needed, capacity } => RpcError::Truncated {
                at: capacity,
                needed,
            },
        }
    }
}

/// Declares an open enum over a `u32` wire value: named variants plus `Unknown(u32)`.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this code does not know, preserved.
            Unknown(u32),
        }

        impl $name {
            /// The variant for a wire value.
            #[inline]
            pub const fn from_u32(v: u32) -> Self {
                match v {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }

            /// The wire value.
            #[inline]
            pub const fn to_u32(self) -> u32 {
                match self {
                    $( $name::$variant => $value, )+
                    $name::Unknown(v) => v,
                }
            }
        }

        impl From<u32> for $name {
            #[inline]
            fn from(v: u32) -> Self {
                Self::from_u32(v)
            }
        }

        impl From<$name> for u32 {
            #[inline]
            fn from(v: $name) -> u32 {
                v.to_u32()
            }
        }
    };
}

open_enum! {
    /// `enum msg_type`.
    MsgType {
        /// CALL = 0.
        Call = 0,
        /// REPLY = 1.
        Reply = 1,
    }
}

open_enum! {
    /// `enum auth_flavor` (RFC 5531 §8.2 and the IANA registry's common entries).
    AuthFlavor {
        /// AUTH_NONE = 0.
        None = 0,
        /// AUTH_SYS = 1.
        Sys = 1,
        /// AUTH_SHORT = 2.
        Short = 2,
        /// AUTH_DH = 3.
        Dh = 3,
        /// RPCSEC_GSS = 6.
        RpcsecGss = 6,
    }
}

open_enum! {
    /// `enum auth_stat`.
    AuthStat {
        /// AUTH_OK = 0.
        Ok = 0,
        /// AUTH_BADCRED = 1: bad credential (seal broken).
        BadCred = 1,
        /// AUTH_REJECTEDCRED = 2: client must begin a new session.
        RejectedCred = 2,
        /// AUTH_BADVERF = 3: bad verifier (seal broken).
        BadVerf = 3,
        /// AUTH_REJECTEDVERF = 4: verifier expired or replayed.
        RejectedVerf = 4,
        /// AUTH_TOOWEAK = 5: rejected for security reasons.
        TooWeak = 5,
        /// AUTH_INVALIDRESP = 6: bogus response verifier.
        InvalidResp = 6,
        /// AUTH_FAILED = 7: reason unknown.
        Failed = 7,
        /// AUTH_KERB_GENERIC = 8.
        KerbGeneric = 8,
        /// AUTH_TIMEEXPIRE = 9.
        TimeExpire = 9,
        /// AUTH_TKT_FILE = 10.
        TktFile = 10,
        /// AUTH_DECODE = 11.
        Decode = 11,
        /// AUTH_NET_ADDR = 12.
        NetAddr = 12,
        /// RPCSEC_GSS_CREDPROBLEM = 13.
        RpcsecGssCredProblem = 13,
        /// RPCSEC_GSS_CTXPROBLEM = 14.
        RpcsecGssCtxProblem = 14,
    }
}

/// `struct opaque_auth`: a flavor and up to 400 octets of body, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpaqueAuth<'a> {
    /// The authentication flavor.
    pub flavor: AuthFlavor,
    /// The flavor-specific body (at most [`MAX_AUTH_BYTES`] octets).
    pub body: &'a [u8],
}

impl<'a> OpaqueAuth<'a> {
    /// AUTH_NONE with an empty body (the usual verifier).
    pub const NONE: OpaqueAuth<'static> = OpaqueAuth {
        flavor: AuthFlavor::None,
        body: &[],
    };

    /// Encoded size: flavor, length word, body and pad.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        8 + roundup4(self.body.len())
    }

    fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
        w.put_u32(self.flavor.to_u32())?;
        w.put_opaque(self.body)
    }
}

/// Reads an opaque_auth; a body above the 400-octet bound is reported with its length.
fn get_auth<'a>(r: &mut XdrReader<'a>) -> Result<OpaqueAuth<'a>, AuthReadError> {
    let flavor = AuthFlavor::from_u32(r.get_u32()?);
    match r.get_opaque(MAX_AUTH_BYTES) {
        Ok(body) => Ok(OpaqueAuth { flavor, body }),
        Err(XdrError::TooLong { len, .. }) => Err(AuthReadError::TooLong(len)),
        Err(e) => Err(e.into()),
    }
}

enum AuthReadError {
    TooLong(u32),
    Other(RpcError),
}

impl From<XdrError> for AuthReadError {
    fn from(e: XdrError) -> Self {
        AuthReadError::Other(e.into())
    }
}

/// `struct authsys_parms` as a borrowed view over an AUTH_SYS credential body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSys<'a> {
    /// Arbitrary id the caller generates.
    pub stamp: u32,
    /// The caller's machine name (an XDR string: octets, not necessarily UTF-8).
    pub machinename: &'a [u8],
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary group ids.
    pub gids: Gids<'a>,
}

/// The AUTH_SYS supplementary group list, left in wire form (at most 16 big-endian words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gids<'a> {
    raw: &'a [u8],
}

impl<'a> Gids<'a> {
    /// Number of group ids.
    #[inline]
    pub const fn len(&self) -> usize {
        self.raw.len() / 4
    }

    /// True when the list is empty.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.raw.len() < 4
    }

    /// The `i`th group id, or `None` past the end.
    #[inline]
    pub fn get(&self, i: usize) -> Option<u32> {
        let at = i.checked_mul(4)?;
        let b = self.raw.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The group ids in order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        self.raw
            .chunks_exact(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

impl<'a> AuthSys<'a> {
    /// Parses an AUTH_SYS credential body (the `body` of an [`OpaqueAuth`] whose flavor is
    /// [`AuthFlavor::Sys`]). The body must hold exactly one `authsys_parms`.
    pub fn parse(body: &'a [u8]) -> Result<Self, RpcError> {
        let mut r = XdrReader::new(body);
        let stamp = r.get_u32()?;
        let machinename = r.get_opaque(MAX_MACHINENAME)?;
        let uid = r.get_u32()?;
        let gid = r.get_u32()?;
        let n = r.get_count(MAX_GIDS)?;
        // n <= 16, so n * 4 cannot overflow.
        let raw = r.take(n as usize * 4)?;
        if r.remaining() != 0 {
            return Err(RpcError::TrailingBytes { at: r.position() });
        }
        Ok(AuthSys {
            stamp,
            machinename,
            uid,
            gid,
            gids: Gids { raw },
        })
    }
}

/// The fields of an AUTH_SYS credential to be encoded (the writing counterpart of [`AuthSys`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSysParams<'a> {
    /// Arbitrary id the caller generates.
    pub stamp: u32,
    /// Machine name, at most 255 octets.
    pub machinename: &'a [u8],
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary group ids, at most 16.
    pub gids: &'a [u32],
}

impl AuthSysParams<'_> {
    /// Encoded size of the body.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        4 + 4 + roundup4(self.machinename.len()) + 4 + 4 + 4 + 4 * self.gids.len()
    }

    /// Encodes the body into `out` and returns its length. A machine name over 255 octets or more
    /// than 16 gids gives [`XdrError::TooLong`]; a short buffer gives [`XdrError::NoSpace`].
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, XdrError> {
        if self.machinename.len() > MAX_MACHINENAME as usize {
            return Err(XdrError::TooLong {
                at: 4,
                len: u32::try_from(self.machinename.len()).unwrap_or(u32::MAX),
                max: MAX_MACHINENAME,
            });
        }
        if self.gids.len() > MAX_GIDS as usize {
            return Err(XdrError::TooLong {
                at: 16 + roundup4(self.machinename.len()),
                len: u32::try_from(self.gids.len()).unwrap_or(u32::MAX),
                max: MAX_GIDS,
            });
        }
        check_space(self.encoded_len(), out.len())?;
        let mut w = XdrWriter::new(out);
        w.put_u32(self.stamp)?;
        w.put_opaque(self.machinename)?;
        w.put_u32(self.uid)?;
        w.put_u32(self.gid)?;
        // gids.len() <= 16 checked above.
        w.put_u32(self.gids.len() as u32)?;
        for &g in self.gids {
            w.put_u32(g)?;
        }
        Ok(w.finish())
    }
}

/// A CALL header (`rpc_msg` with `call_body`). rpcvers is implicitly [`RPC_VERSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallHeader<'a> {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
    /// Credential.
    pub cred: OpaqueAuth<'a>,
    /// Verifier.
    pub verf: OpaqueAuth<'a>,
}

impl CallHeader<'_> {
    /// Encoded size: xid, msg_type, rpcvers, prog, vers, proc, cred, verf.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        24 + self.cred.encoded_len() + self.verf.encoded_len()
    }
}

/// `accept_stat` with the data its union arm carries. Unknown values are preserved (the XDR
/// union's default arm is void).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    /// SUCCESS = 0: the results follow.
    Success,
    /// PROG_UNAVAIL = 1.
    ProgUnavail,
    /// PROG_MISMATCH = 2 with the supported version range.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL = 3.
    ProcUnavail,
    /// GARBAGE_ARGS = 4.
    GarbageArgs,
    /// SYSTEM_ERR = 5.
    SystemErr,
    /// A value this code does not know, preserved. [`decode`] only produces it for values above
    /// 5; `Unknown(0..=5)` is encoded as the named value (`Unknown(2)` with a 0..0 range), so it
    /// decodes back as the named variant.
    Unknown(u32),
}

impl AcceptStat {
    /// The accept_stat wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            AcceptStat::Success => 0,
            AcceptStat::ProgUnavail => 1,
            AcceptStat::ProgMismatch { .. } => 2,
            AcceptStat::ProcUnavail => 3,
            AcceptStat::GarbageArgs => 4,
            AcceptStat::SystemErr => 5,
            AcceptStat::Unknown(v) => v,
        }
    }

    const fn encoded_len(&self) -> usize {
        // PROG_MISMATCH carries its range, also when spelled `Unknown(2)`.
        if self.to_u32() == 2 {
            12
        } else {
            4
        }
    }
}

/// `rejected_reply`: why the call was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectedReply {
    /// RPC_MISMATCH = 0: the server's supported RPC version range.
    RpcMismatch {
        /// Lowest RPC version supported.
        low: u32,
        /// Highest RPC version supported.
        high: u32,
    },
    /// AUTH_ERROR = 1 with the reason.
    AuthError(AuthStat),
}

/// `reply_body`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyBody<'a> {
    /// MSG_ACCEPTED = 0.
    Accepted {
        /// The server's verifier.
        verf: OpaqueAuth<'a>,
        /// Outcome; with [`AcceptStat::Success`] the results follow the header.
        stat: AcceptStat,
    },
    /// MSG_DENIED = 1.
    Denied(RejectedReply),
}

/// A REPLY header (`rpc_msg` with `reply_body`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader<'a> {
    /// Transaction id of the call answered.
    pub xid: u32,
    /// The reply.
    pub body: ReplyBody<'a>,
}

impl<'a> ReplyHeader<'a> {
    /// An accepted reply with an AUTH_NONE verifier.
    #[inline]
    pub const fn accepted(xid: u32, stat: AcceptStat) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::NONE,
                stat,
            },
        }
    }

    /// A denied reply.
    #[inline]
    pub const fn denied(xid: u32, why: RejectedReply) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(why),
        }
    }

    /// Encoded size: xid, msg_type, reply_stat and the arm.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        12 + match &self.body {
            ReplyBody::Accepted { verf, stat } => verf.encoded_len() + stat.encoded_len(),
            ReplyBody::Denied(RejectedReply::RpcMismatch { .. }) => 12,
            ReplyBody::Denied(RejectedReply::AuthError(_)) => 8,
        }
    }
}

/// A decoded RPC message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcMsg<'a> {
    /// A CALL.
    Call(CallHeader<'a>),
    /// A REPLY.
    Reply(ReplyHeader<'a>),
}

impl RpcMsg<'_> {
    /// The transaction id.
    #[inline]
    pub const fn xid(&self) -> u32 {
        match self {
            RpcMsg::Call(c) => c.xid,
            RpcMsg::Reply(r) => r.xid,
        }
    }

    /// CALL or REPLY.
    #[inline]
    pub const fn msg_type(&self) -> MsgType {
        match self {
            RpcMsg::Call(_) => MsgType::Call,
            RpcMsg::Reply(_) => MsgType::Reply,
        }
    }
}

/// Reads the msg_type word at its fixed offset 4: `Some(Call)` or `Some(Reply)`, `None` when the
/// payload is shorter than 8 octets or the value is neither (so it is not an RPC message).
#[inline]
pub fn msg_direction(payload: &[u8]) -> Option<MsgType> {
    let b = payload.get(4..8)?;
    match MsgType::from_u32(u32::from_be_bytes([b[0], b[1], b[2], b[3]])) {
        MsgType::Unknown(_) => None,
        t => Some(t),
    }
}

/// Reads the XID (the first word), `None` when the payload is shorter than 4 octets.
#[inline]
pub fn peek_xid(payload: &[u8]) -> Option<u32> {
    let b = payload.get(..4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes the header of an RPC message at the start of `buf`. Returns the header and the offset
/// at which the procedure arguments (CALL) or results (REPLY) begin; for replies other than
/// SUCCESS nothing follows by protocol, and that offset is the end of the header.
pub fn decode(buf: &[u8]) -> Result<(RpcMsg<'_>, usize), RpcError> {
    let mut r = XdrReader::new(buf);
    let xid = r.get_u32()?;
    let mtype = r.get_u32()?;
    let msg = match MsgType::from_u32(mtype) {
        MsgType::Call => RpcMsg::Call(decode_call_body(&mut r, xid)?),
        MsgType::Reply => RpcMsg::Reply(decode_reply_body(&mut r, xid)?),
        MsgType::Unknown(value) => return Err(RpcError::BadMsgType { xid, value }),
    };
    Ok((msg, r.position()))
}

/// [`decode`] for a message that must be a CALL.
pub fn decode_call(buf: &[u8]) -> Result<(CallHeader<'_>, usize), RpcError> {
    match decode(buf)? {
        (RpcMsg::Call(c), off) => Ok((c, off)),
        (RpcMsg::Reply(r), _) => Err(RpcError::UnexpectedMsgType {
            xid: r.xid,
            found: MsgType::Reply,
        }),
    }
}

/// [`decode`] for a message that must be a REPLY.
pub fn decode_reply(buf: &[u8]) -> Result<(ReplyHeader<'_>, usize), RpcError> {
    match decode(buf)? {
        (RpcMsg::Reply(r), off) => Ok((r, off)),
        (RpcMsg::Call(c), _) => Err(RpcError::UnexpectedMsgType {
            xid: c.xid,
            found: MsgType::Call,
        }),
    }
}

fn decode_call_body<'a>(r: &mut XdrReader<'a>, xid: u32) -> Result<CallHeader<'a>, RpcError> {
    let rpcvers = r.get_u32()?;
    if rpcvers != RPC_VERSION {
        return Err(RpcError::BadRpcVersion { xid, rpcvers });
    }
    let prog = r.get_u32()?;
    let vers = r.get_u32()?;
    let proc_num = r.get_u32()?;
    let cred = match get_auth(r) {
        Ok(a) => a,
        Err(AuthReadError::TooLong(len)) => return Err(RpcError::CredTooLong { xid, len }),
        Err(AuthReadError::Other(e)) => return Err(e),
    };
    let verf = match get_auth(r) {
        Ok(a) => a,
        Err(AuthReadError::TooLong(len)) => return Err(RpcError::VerfTooLong { xid, len }),
        Err(AuthReadError::Other(e)) => return Err(e),
    };
    Ok(CallHeader {
        xid,
        prog,
        vers,
        proc_num,
        cred,
        verf,
    })
}

fn decode_reply_body<'a>(r: &mut XdrReader<'a>, xid: u32) -> Result<ReplyHeader<'a>, RpcError> {
    let body = match r.get_u32()? {
        0 => {
            let verf = match get_auth(r) {
                Ok(a) => a,
                Err(AuthReadError::TooLong(len)) => return Err(RpcError::VerfTooLong { xid, len }),
                Err(AuthReadError::Other(e)) => return Err(e),
            };
            let stat = match r.get_u32()? {
                0 => AcceptStat::Success,
                1 => AcceptStat::ProgUnavail,
                2 => {
                    let low = r.get_u32()?;
                    let high = r.get_u32()?;
                    AcceptStat::ProgMismatch { low, high }
                }
                3 => AcceptStat::ProcUnavail,
                4 => AcceptStat::GarbageArgs,
                5 => AcceptStat::SystemErr,
                v => AcceptStat::Unknown(v),
            };
            ReplyBody::Accepted { verf, stat }
        }
        1 => match r.get_u32()? {
            0 => {
                let low = r.get_u32()?;
                let high = r.get_u32()?;
                ReplyBody::Denied(RejectedReply::RpcMismatch { low, high })
            }
            1 => ReplyBody::Denied(RejectedReply::AuthError(AuthStat::from_u32(r.get_u32()?))),
            value => return Err(RpcError::BadRejectStat { xid, value }),
        },
        value => return Err(RpcError::BadReplyStat { xid, value }),
    };
    Ok(ReplyHeader { xid, body })
}

#[inline]
fn check_space(needed: usize, capacity: usize) -> Result<(), XdrError> {
    if needed > capacity {
        Err(XdrError::NoSpace { needed, capacity })
    } else {
        Ok(())
    }
}

#[inline]
fn check_auth(a: &OpaqueAuth<'_>, at: usize) -> Result<(), XdrError> {
    if a.body.len() > MAX_AUTH_BYTES as usize {
        return Err(XdrError::TooLong {
            at,
            len: u32::try_from(a.body.len()).unwrap_or(u32::MAX),
            max: MAX_AUTH_BYTES,
        });
    }
    Ok(())
}

/// Length [`encode_call`] will write for `h`.
#[inline]
pub const fn call_encoded_len(h: &CallHeader<'_>) -> usize {
    h.encoded_len()
}

/// Length [`encode_reply`] will write for `h`.
#[inline]
pub const fn reply_encoded_len(h: &ReplyHeader<'_>) -> usize {
    h.encoded_len()
}

/// Encodes a CALL header (rpcvers 2) into `out` and returns its length; arguments go at that
/// offset. Errors: [`XdrError::NoSpace`] when `out` is shorter than [`call_encoded_len`],
/// [`XdrError::TooLong`] for an auth body over 400 octets. `out` is untouched on error.
pub fn encode_call(out: &mut [u8], h: &CallHeader<'_>) -> Result<usize, XdrError> {
    check_auth(&h.cred, 24)?;
    check_auth(&h.verf, 24 + h.cred.encoded_len())?;
    check_space(h.encoded_len(), out.len())?;
    let mut w = XdrWriter::new(out);
    w.put_u32(h.xid)?;
    w.put_u32(MsgType::Call.to_u32())?;
    w.put_u32(RPC_VERSION)?;
    w.put_u32(h.prog)?;
    w.put_u32(h.vers)?;
    w.put_u32(h.proc_num)?;
    h.cred.put(&mut w)?;
    h.verf.put(&mut w)?;
    Ok(w.finish())
}

/// Encodes a REPLY header into `out` and returns its length; results (after SUCCESS) go at that
/// offset. Errors as for [`encode_call`]. `out` is untouched on error.
pub fn encode_reply(out: &mut [u8], h: &ReplyHeader<'_>) -> Result<usize, XdrError> {
    if let ReplyBody::Accepted { verf, .. } = &h.body {
        check_auth(verf, 12)?;
    }
    check_space(h.encoded_len(), out.len())?;
    let mut w = XdrWriter::new(out);
    w.put_u32(h.xid)?;
    w.put_u32(MsgType::Reply.to_u32())?;
    match &h.body {
        ReplyBody::Accepted { verf, stat } => {
            w.put_u32(0)?;
            verf.put(&mut w)?;
            w.put_u32(stat.to_u32())?;
            match *stat {
                AcceptStat::ProgMismatch { low, high } => {
                    w.put_u32(low)?;
                    w.put_u32(high)?;
                }
                AcceptStat::Unknown(2) => {
                    w.put_u32(0)?;
                    w.put_u32(0)?;
                }
                _ => {}
            }
        }
        ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }) => {
            w.put_u32(1)?;
            w.put_u32(0)?;
            w.put_u32(*low)?;
            w.put_u32(*high)?;
        }
        ReplyBody::Denied(RejectedReply::AuthError(s)) => {
            w.put_u32(1)?;
            w.put_u32(1)?;
            w.put_u32(s.to_u32())?;
        }
    }
    Ok(w.finish())
}
