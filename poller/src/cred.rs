//! A connection's call credential (RFC 5531 `opaque_auth`), encoded once when the connection
//! (or a server's backchannel) is set up and copied into every call header it sends.
//!
//! Normal operation: [`CredBody::of`] encodes the AUTH_SYS credential a configuration asks for
//! (machine name `rpcrdma`, at most 16 groups), or AUTH_NONE; [`CredBody::sys_body`] takes
//! an AUTH_SYS body a peer gave (an NFSv4.1 client's `csa_sec_parms`, RFC 8881 §18.36.3), for
//! one backward call (`BackCallOptions::credential`).
//!
//! Recovery: nothing fails at run time; a body that could not be encoded (it always fits) would
//! leave AUTH_NONE. A peer's body that does not parse as RFC 5531 `authsys_parms`, or that is
//! longer than a call header leaves room for ([`CRED_MAX`]), is refused (`None`).

use rpcrdma_engine::rpc::{AuthFlavor, AuthSys, AuthSysParams, OpaqueAuth};

use crate::config::AuthSysCred;

/// A call credential, encoded once (RFC 5531 `opaque_auth`): AUTH_NONE or an AUTH_SYS body of
/// at most [`CRED_MAX`] octets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredBody {
    flavor: AuthFlavor,
    len: u8,
    body: [u8; CRED_MAX],
}

/// Largest credential body a call carries: what a call header buffer (`RPC_HEADER_SIZE`, 160
/// octets) leaves beside the call's other 40 octets (XID, message type, RPC version, program,
/// version, procedure, the credential's flavor and length, an AUTH_NONE verifier). It holds
/// this crate's own AUTH_SYS body (stamp, machine name `rpcrdma`, uid, gid, 16 groups: 92
/// octets) and the Linux client's `csa_sec_parms` (a host name of at most 64 octets, no
/// groups: 84).
pub const CRED_MAX: usize = 120;

impl CredBody {
    /// AUTH_NONE.
    pub const NONE: CredBody = CredBody {
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

    /// AUTH_SYS with `body` as a peer encoded it (RFC 5531 `authsys_parms`, kept octet for
    /// octet); `None` when it does not parse or is longer than [`CRED_MAX`].
    pub fn sys_body(body: &[u8]) -> Option<CredBody> {
        if body.len() > CRED_MAX || AuthSys::parse(body).is_err() {
            return None;
        }
        let mut b = [0u8; CRED_MAX];
        b[..body.len()].copy_from_slice(body);
        Some(CredBody {
            flavor: AuthFlavor::Sys,
            len: body.len() as u8,
            body: b,
        })
    }

    /// The credential as it goes on the wire.
    pub fn auth(&self) -> OpaqueAuth<'_> {
        OpaqueAuth {
            flavor: self.flavor,
            body: &self.body[..usize::from(self.len)],
        }
    }
}
