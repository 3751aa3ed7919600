//! The RDMA_ERROR / RDMA2_ERROR answers of a responder: which one a rejected or unusable call
//! gets, and its encoding.
//!
//! Normal operation: none is sent; a valid call is answered with its reply. Recovery: a header
//! the codec rejects is answered as the codec's response says (ERR_VERS with the range
//! 1..=`max_version`, ERR_CHUNK, RDMA2_ERR_BAD_XDR / _INVAL_PROC / _INVAL_OPTION) or dropped;
//! a call this side cannot use is answered ERR_CHUNK (Version Two: RDMA2_ERR_BAD_XDR).

use super::super::receive::AnyError;
use super::super::VERSION;
use crate::proto::v1::{self, Response};
use crate::proto::v2;

/// Which RDMA_ERROR to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrAnswer {
    /// ERR_VERS (any version's layout) with the range 1..=`max_version`.
    Vers,
    /// ERR_CHUNK.
    Chunk,
    /// A Version Two RDMA2_ERROR (other than RDMA2_ERR_VERS).
    V2(v2::RdmaError),
}

impl ErrAnswer {
    /// The answer to a header that cannot be used, in the call's version: ERR_CHUNK (v1) or
    /// RDMA2_ERR_BAD_XDR (v2).
    pub(crate) fn unusable(vers: u32) -> Self {
        if vers == v2::VERSION {
            ErrAnswer::V2(v2::RdmaError::BadXdr)
        } else {
            ErrAnswer::Chunk
        }
    }

    /// Encodes the answer to (`xid`, `vers`) into `out`.
    pub(crate) fn encode(
        &self,
        xid: u32,
        vers: u32,
        credits: u32,
        max_version: u32,
        out: &mut [u8],
    ) -> Option<usize> {
        match *self {
            ErrAnswer::Vers => {
                v1::encode_err_vers(xid, vers, credits, VERSION, max_version, out).ok()
            }
            ErrAnswer::Chunk => v1::encode_err_chunk(xid, vers, credits, out).ok(),
            ErrAnswer::V2(e) => v2::encode_error(xid, vers, credits, &e, out).ok(),
        }
    }

    /// The answer a rejected header calls for, if any.
    pub(crate) fn for_error(e: &AnyError) -> Option<(u32, u32, ErrAnswer)> {
        match e {
            AnyError::V1(e) => match e.response() {
                Response::Drop => None,
                Response::ErrVers { xid, vers } => Some((xid, vers, ErrAnswer::Vers)),
                Response::ErrChunk { xid, vers } => Some((xid, vers, ErrAnswer::Chunk)),
            },
            AnyError::V2(e) => match e.response() {
                v2::Response::Drop => None,
                v2::Response::Error { xid, vers, code } => Some((
                    xid,
                    vers,
                    match code {
                        v2::ErrCode::Vers => ErrAnswer::Vers,
                        v2::ErrCode::InvalProc => ErrAnswer::V2(v2::RdmaError::InvalProc),
                        v2::ErrCode::InvalOption => ErrAnswer::V2(v2::RdmaError::InvalOption),
                        _ => ErrAnswer::V2(v2::RdmaError::BadXdr),
                    },
                )),
            },
        }
    }
}
