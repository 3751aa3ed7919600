//! Unit tests of security flavor negotiation (RFC 8881 §2.6.3.1.1): a put-filehandle
//! operation with a flavor the export does not take is NFS4ERR_WRONGSEC, except when
//! SECINFO_NO_NAME follows it, which then answers the export's flavors (§2.6.3.1.1.5: neither
//! operation returns NFS4ERR_WRONGSEC) and consumes the handle, so nothing else runs on it.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_sec`.
//! Recovery: a failure names the operations and the status seen.

use super::tests::{A, H};
use super::xdr::st;
use crate::nfs::v4::op;

#[test]
fn accepts_secinfo_no_name_after_a_put_filehandle_of_another_flavor() {
    let mut h = H::new("rw,sec=sys");
    let root = h.root();
    let secinfo = || A::op(op::SECINFO_NO_NAME).u32(0);
    for put in [A::op(op::PUTFH).opaque(&root), A::op(op::PUTROOTFH)] {
        let r = h.as_none(&[put.clone(), secinfo()]);
        assert_eq!(r.status, st::OK, "{:?}", r.results);
        assert_eq!(r.last, vec![0, 0, 0, 1, 0, 0, 0, 1], "AUTH_SYS only");
        // The handle is consumed: nothing runs on it.
        let r = h.as_none(&[put.clone(), secinfo(), A::op(op::GETFH)]);
        assert_eq!(r.status, st::NOFILEHANDLE);
    }
}

#[test]
fn rejects_a_put_filehandle_of_another_flavor_followed_by_anything_else() {
    let mut h = H::new("rw,sec=sys");
    let root = h.root();
    let getattr = A::op(op::GETATTR).u32(1).u32(1 << 1);
    for put in [A::op(op::PUTFH).opaque(&root), A::op(op::PUTROOTFH)] {
        for next in [getattr.clone(), A::op(op::GETFH), A::op(op::SAVEFH)] {
            let r = h.as_none(&[put.clone(), next]);
            assert_eq!(r.status, st::WRONGSEC);
            assert_eq!(r.results.last().map(|x| x.1), Some(st::WRONGSEC));
            assert_eq!(r.results.len(), 2, "the put-filehandle operation failed");
        }
        // Alone too.
        assert_eq!(h.as_none(std::slice::from_ref(&put)).status, st::WRONGSEC);
    }
    // A flavor the export takes: the same COMPOUND runs.
    assert_eq!(h.status(&[A::op(op::PUTFH).opaque(&root), getattr]), st::OK);
}
