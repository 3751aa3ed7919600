//! NFSv4.1 stateids on the wire (RFC 8881 §8.2): reading a `stateid4`, its seqid and `other`,
//! the special "current stateid", and the share access bits OPEN and the stateid checks use.
//! The tables the stateids name are in `state.rs`; open, lock and delegation state use these.
//!
//! Normal operation: a stateid is read as 16 octets, split into its seqid and `other`, and the
//! current-stateid form (seqid 1, `other` zero) is replaced by the COMPOUND's current stateid.
//!
//! Recovery: a stateid too short to read is NFS4ERR_BADXDR; the current-stateid form with no
//! current stateid set is NFS4ERR_BAD_STATEID.

use rpcrdma_engine::xdr::XdrReader;

use super::xdr::{bad_xdr, st, Status};
use super::Compound;

/// OPEN4_SHARE_ACCESS_READ.
pub const ACCESS_READ: u32 = 1;
/// OPEN4_SHARE_ACCESS_WRITE.
pub const ACCESS_WRITE: u32 = 2;
/// Reads a `stateid4`.
pub fn get_stateid(r: &mut XdrReader<'_>) -> Result<[u8; 16], Status> {
    let b = r.get_fixed_opaque(16).map_err(bad_xdr)?;
    let mut s = [0u8; 16];
    s.copy_from_slice(b);
    Ok(s)
}

/// The seqid and `other` of a stateid.
pub fn split(sid: &[u8; 16]) -> (u32, [u8; 12]) {
    let mut o = [0u8; 12];
    o.copy_from_slice(&sid[4..]);
    (u32::from_be_bytes([sid[0], sid[1], sid[2], sid[3]]), o)
}

/// The stateid meant: the COMPOUND's current stateid for the special "current" one (seqid 1,
/// `other` zero).
pub fn resolve(c: &Compound<'_>, sid: &[u8; 16]) -> Result<[u8; 16], Status> {
    let (seq, other) = split(sid);
    if seq == 1 && other == [0; 12] {
        return c.stateid.ok_or(st::BAD_STATEID);
    }
    Ok(*sid)
}
