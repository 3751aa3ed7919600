//! Unit tests of the callback credential (RFC 8881 §18.36.3 `csa_sec_parms`, §18.33
//! BACKCHANNEL_CTL): callbacks carry a credential the client gave, AUTH_SYS octet for octet;
//! RPCSEC_GSS entries and AUTH_SYS bodies a call header has no room for are skipped; with
//! nothing usable left no callback is sent and SEQUENCE reports the path down until
//! BACKCHANNEL_CTL gives a usable one.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_cbsec`.
//! Recovery: a failure names the credential or flag seen.

use std::sync::{Arc, Mutex};

use rpcrdma_engine::rpc::AuthSysParams;
use rpcrdma_poller::CredBody;

use super::deleg::{Callbacks, Done, SEQ4_STATUS_CB_PATH_DOWN_SESSION};
use super::state::Limits;
use super::tests::{auth_sys, server_cb, A, H};
use super::xdr::st;
use crate::nfs::v4::{cb, op, Op};

/// Every backward call's procedure and credential (flavor, body); all answered.
#[derive(Default)]
struct Creds(Mutex<Vec<(u32, u32, Vec<u8>)>>);

impl Callbacks for Creds {
    fn call(&self, _: u64, _: u32, proc_: u32, cred: &CredBody, _: Vec<u8>, done: Done) {
        let a = cred.auth();
        let seen = (proc_, a.flavor.to_u32(), a.body.to_vec());
        self.0.lock().unwrap().push(seen);
        done(true);
    }
}

impl Creds {
    fn take(&self) -> Vec<(u32, u32, Vec<u8>)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// An AUTH_SYS body (RFC 5531 `authsys_parms`).
fn sys_body(machine: &[u8], uid: u32, gids: &[u32]) -> Vec<u8> {
    let p = AuthSysParams {
        stamp: 0x5eed,
        machinename: machine,
        uid,
        gid: 7,
        gids,
    };
    let mut b = vec![0u8; p.encoded_len()];
    let n = p.encode_into(&mut b).unwrap();
    b.truncate(n);
    b
}

/// `callback_sec_parms4` entries.
enum Sec<'a> {
    None,
    Sys(&'a [u8]),
    Gss,
}

fn sec_parms(mut a: A, parms: &[Sec<'_>]) -> A {
    a = a.u32(parms.len() as u32);
    for p in parms {
        a = match p {
            Sec::None => a.u32(0),
            Sec::Sys(body) => a.u32(1).fixed(body),
            Sec::Gss => a
                .u32(6)
                .u32(1)
                .opaque(b"server-handle")
                .opaque(b"client-handle"),
        };
    }
    a
}

/// A client (one codec session) on a server whose callbacks `creds` records, and a second
/// session of it made by a raw CREATE_SESSION (back channel on this connection) with `parms`;
/// the harness uses the second session.
fn second_session(creds: &Arc<Creds>, parms: &[Sec<'_>]) -> H {
    let cbs: Arc<dyn Callbacks> = Arc::clone(creds) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw,no_root_squash", Limits::default(), Some(cbs));
    let mut h = H::on(srv, now, store, b"client-a", auth_sys(0, 0));
    creds.take();
    let chan = |a: A| {
        a.u32(0)
            .u32(1 << 16)
            .u32(1 << 16)
            .u32(4096)
            .u32(8)
            .u32(4)
            .u32(0)
    };
    let mut cs = A::op(op::CREATE_SESSION).u64(h.clientid).u32(2).u32(2);
    cs = chan(chan(cs)).u32(0x4000_0000);
    let cs = sec_parms(cs, parms);
    let b = A::default().opaque(b"t").u32(1).u32(1).fixed(&cs.0);
    let out = h.send(&b.0);
    let r = super::tests::walk(&out);
    assert_eq!(r.status, st::OK, "CREATE_SESSION");
    h.sid = r.last[..16].try_into().unwrap();
    h.seq = 0;
    h
}

fn flags(h: &mut H) -> u32 {
    let r = h.raw(&[]);
    assert_eq!(r.status, st::OK);
    u32::from_be_bytes(r.last[32..36].try_into().unwrap())
}

#[test]
fn accepts_callbacks_with_the_clients_auth_sys_parameters() {
    let creds = Arc::new(Creds::default());
    let body = sys_body(b"client-host.example", 1234, &[5, 6]);
    let mut h = second_session(&creds, &[Sec::Gss, Sec::None, Sec::Sys(&body)]);
    assert_eq!(
        creds.take(),
        vec![(cb::PROC_NULL, 1, body.clone())],
        "CB_NULL carries the client's AUTH_SYS parameters, GSS skipped, AUTH_SYS preferred"
    );
    assert_eq!(flags(&mut h) & SEQ4_STATUS_CB_PATH_DOWN_SESSION, 0);
    // The codec's CREATE_SESSION offers AUTH_SYS as root, machine name "rpcrdma".
    let cbs: Arc<dyn Callbacks> = Arc::clone(&creds) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_cb("rw", Limits::default(), Some(cbs));
    let _ = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    let seen = creds.take();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].0, seen[0].1), (cb::PROC_NULL, 1));
    assert_eq!(seen[0].2, sys_body_of(b"rpcrdma", 0));
}

/// The AUTH_SYS body the client codec sends (stamp 0, no groups).
fn sys_body_of(machine: &[u8], uid: u32) -> Vec<u8> {
    let p = AuthSysParams {
        stamp: 0,
        machinename: machine,
        uid,
        gid: 0,
        gids: &[],
    };
    let mut b = vec![0u8; p.encoded_len()];
    let n = p.encode_into(&mut b).unwrap();
    b.truncate(n);
    b
}

#[test]
fn accepts_auth_none_when_the_client_offers_only_it() {
    let creds = Arc::new(Creds::default());
    let mut h = second_session(&creds, &[Sec::None]);
    assert_eq!(creds.take(), vec![(cb::PROC_NULL, 0, Vec::new())]);
    assert_eq!(flags(&mut h) & SEQ4_STATUS_CB_PATH_DOWN_SESSION, 0);
}

#[test]
fn rejects_callbacks_without_a_usable_flavor_until_backchannel_ctl_gives_one() {
    let creds = Arc::new(Creds::default());
    // RPCSEC_GSS only, and an AUTH_SYS body longer than a call header leaves room for.
    let long = sys_body(&[b'h'; 64], 0, &[9; 16]);
    let mut h = second_session(&creds, &[Sec::Gss, Sec::Sys(&long)]);
    assert!(creds.take().is_empty(), "no CB_NULL without a credential");
    assert_ne!(flags(&mut h) & SEQ4_STATUS_CB_PATH_DOWN_SESSION, 0);
    // Binding the connection again does not heal a path with no credential.
    let r = h.plain(&[Op::BindConnToSession {
        session: h.sid,
        dir: 3,
    }]);
    assert_eq!(r.status, st::OK);
    assert!(creds.take().is_empty());
    assert_ne!(flags(&mut h) & SEQ4_STATUS_CB_PATH_DOWN_SESSION, 0);
    // BACKCHANNEL_CTL with AUTH_SYS: probed with it, the path is up.
    let body = sys_body(b"other", 77, &[]);
    let ctl = sec_parms(
        A::op(op::BACKCHANNEL_CTL).u32(0x4000_0001),
        &[Sec::Sys(&body)],
    );
    assert_eq!(h.status(&[ctl]), st::OK);
    assert_eq!(creds.take(), vec![(cb::PROC_NULL, 1, body)]);
    assert_eq!(h.srv.state().sessions[&h.sid].cb_program, 0x4000_0001);
    assert_eq!(flags(&mut h) & SEQ4_STATUS_CB_PATH_DOWN_SESSION, 0);
    // BACKCHANNEL_CTL with RPCSEC_GSS only: callbacks stop again.
    let ctl = sec_parms(A::op(op::BACKCHANNEL_CTL).u32(0x4000_0001), &[Sec::Gss]);
    assert_eq!(h.status(&[ctl]), st::OK);
    assert!(creds.take().is_empty());
    assert_ne!(flags(&mut h) & SEQ4_STATUS_CB_PATH_DOWN_SESSION, 0);
}

#[test]
fn rejects_backchannel_ctl_with_bad_parameters_or_outside_a_session() {
    let creds = Arc::new(Creds::default());
    let mut h = second_session(&creds, &[Sec::None]);
    creds.take();
    // A flavor outside `callback_sec_parms4`: NFS4ERR_INVAL.
    let ctl = A::op(op::BACKCHANNEL_CTL).u32(1).u32(1).u32(3);
    assert_eq!(h.status(&[ctl]), st::INVAL);
    // More than 16 entries, or cut short: NFS4ERR_BADXDR.
    let ctl = A::op(op::BACKCHANNEL_CTL).u32(1).u32(17);
    assert_eq!(h.status(&[ctl]), st::BADXDR);
    let ctl = A::op(op::BACKCHANNEL_CTL).u32(1).u32(1).u32(1).u32(0);
    assert_eq!(h.status(&[ctl]), st::BADXDR);
    // Outside a session.
    let ctl = A::op(op::BACKCHANNEL_CTL).u32(1).u32(0);
    let b = A::default().opaque(b"t").u32(1).u32(1).fixed(&ctl.0);
    assert_eq!(
        super::tests::walk(&h.send(&b.0)).status,
        st::OP_NOT_IN_SESSION
    );
    // The session's credential is unchanged by the failures.
    assert_eq!(h.srv.state().sessions[&h.sid].cb_cred, Some(CredBody::NONE));
}
