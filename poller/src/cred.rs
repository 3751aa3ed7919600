//! A connection's call credential (RFC 5531 `opaque_auth`), encoded once when the connection
//! (or a server's backchannel) is set up and copied into every call header it sends.
//!
//! Normal operation: [`CredBody::of`] encodes the AUTH_SYS credential a configuration asks for
//! (machine name `rpcrdma`, at most 16 groups), or AUTH_NONE.
//!
//! Recovery: nothing fails at run time; a body that could not be encoded (it always fits) would
//! leave AUTH_NONE.

use rpcrdma_engine::rpc::{AuthFlavor, AuthSysParams, OpaqueAuth};

use crate::config::AuthSysCred;

/// A connection's call credential, encoded once (RFC 5531 `opaque_auth`).
#[derive(Clone, Copy)]
pub(crate) struct CredBody {
    flavor: AuthFlavor,
    len: u8,
    body: [u8; CRED_MAX],
}

/// Largest AUTH_SYS body a client sends: stamp, the 7-octet machine name `rpcrdma` padded to
/// 8, uid, gid, 16 groups (fits `RPC_HEADER_SIZE` with the rest of the call header).
const CRED_MAX: usize = 4 + 4 + 8 + 4 + 4 + 4 + 16 * 4;

impl CredBody {
    /// AUTH_NONE.
    pub(crate) const NONE: CredBody = CredBody {
        flavor: AuthFlavor::None,
        len: 0,
        body: [0; CRED_MAX],
    };

    /// The credential `c` asks for (AUTH_NONE for `None`).
    pub(crate) fn of(c: Option<AuthSysCred>) -> CredBody {
        let Some(c) = c else {
            return CredBody::NONE;
        };
        let n = usize::from(c.ngids).min(16);
        let p = AuthSysParams {
            stamp: 0,
            machinename: b"rpcrdma",
            uid: c.uid,
            gid: c.gid,
            gids: &c.gids[..n],
        };
        let mut body = [0u8; CRED_MAX];
        match p.encode_into(&mut body) {
            Ok(len) => CredBody {
                flavor: AuthFlavor::Sys,
                len: len as u8,
                body,
            },
            // Unreachable: CRED_MAX holds the largest body.
            Err(_) => CredBody::NONE,
        }
    }

    /// The credential as it goes on the wire.
    pub(crate) fn auth(&self) -> OpaqueAuth<'_> {
        OpaqueAuth {
            flavor: self.flavor,
            body: &self.body[..usize::from(self.len)],
        }
    }
}
