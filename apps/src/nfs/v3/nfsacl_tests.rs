//! NFSACL: golden vectors of the wire form Linux nfsd sends and takes (`fs/nfs_common/nfsacl.c`),
//! the decoder's refusals, and GETACL / SETACL through the server on the harness's memory store.

use super::*;
use crate::nfs::v3::harness::{Harness, MARK};

/// The words of `b` (big-endian).
fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn attrs(mode: u32) -> Fattr3 {
    let t = crate::nfs::types::Time3::default();
    Fattr3 {
        ftype: crate::nfs::types::Ftype3::Reg,
        mode,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 0,
        used: 0,
        rdev: (0, 0),
        fsid: 1,
        fileid: 2,
        atime: t,
        mtime: t,
        ctime: t,
    }
}

/// GETACL results' words after status and post_op_attr (1 + 1 + 21 words).
fn getacl_tail(r: &Result<(Fattr3, u32, Acls), (Nfsstat3, Option<Fattr3>)>) -> Vec<u32> {
    let mut buf = [0u8; 1024];
    let mut w = XdrWriter::new(&mut buf);
    encode_getacl_res(&mut w, r).expect("encode");
    let n = w.finish();
    words(&buf[..n])[23..].to_vec()
}

#[test]
fn accepts_golden_getacl_of_a_mode_as_four_entries_with_owner_ids() {
    // A 0640 file without an ACL, mask ACL|ACLCNT|DFACL|DFACLCNT: the access ACL from the
    // mode, sent as four entries (mask = group), the owner's and group's ids filled in; no
    // default ACL: count 0, no entries.
    let tail = getacl_tail(&Ok((attrs(0o640), 0xf, Acls::default())));
    #[rustfmt::skip]
    let want = [
        0xf,
        4, 4,
        0x01, 1000, 6,
        0x04, 100, 4,
        0x10, 0, 4,
        0x20, 0, 0,
        0, 0,
    ];
    assert_eq!(tail, want);
}

#[test]
fn accepts_golden_getacl_of_extended_and_default_acls() {
    let access = Acl::from_entries(vec![
        Ace::new(tag::USER_OBJ, 0, 6),
        Ace::new(tag::USER, 2000, 6),
        Ace::new(tag::GROUP_OBJ, 0, 4),
        Ace::new(tag::MASK, 0, 6),
        Ace::new(tag::OTHER, 0, 0),
    ])
    .expect("acl");
    let default = Some(Acl::from_mode(0o750));
    let acls = Acls { access, default };
    #[rustfmt::skip]
    let want = [
        0xf,
        5, 5,
        0x01, 1000, 6,
        0x02, 2000, 6,
        0x04, 100, 4,
        0x10, 0, 6,
        0x20, 0, 0,
        // The default ACL: tags flagged 0x1000, three entries sent as four.
        4, 4,
        0x1001, 1000, 7,
        0x1004, 100, 5,
        0x1010, 0, 5,
        0x1020, 0, 0,
    ];
    assert_eq!(getacl_tail(&Ok((attrs(0o660), 0xf, acls.clone()))), want);
    // Counts only (ACLCNT | DFACLCNT): the counts, no entries.
    assert_eq!(
        getacl_tail(&Ok((attrs(0o660), 0xa, acls.clone()))),
        [0xa, 5, 0, 4, 0]
    );
    // Neither asked: zero counts.
    assert_eq!(getacl_tail(&Ok((attrs(0o660), 0, acls))), [0, 0, 0, 0, 0]);
}

/// SETACL arguments: handle `fh`, mask, then raw ACL words.
fn setacl_args(fh: &[u8], mask: u32, acl_words: &[u32]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(fh.len() as u32).to_be_bytes());
    v.extend_from_slice(fh);
    v.resize(v.len() + (4 - fh.len() % 4) % 4, 0);
    v.extend_from_slice(&mask.to_be_bytes());
    for w in acl_words {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v
}

#[test]
fn accepts_setacl_arguments_sorted_with_the_minimal_mask_dropped() {
    // Unsorted, ids on unnamed entries, a mask equal to the group's: the minimal ACL.
    #[rustfmt::skip]
    let a = setacl_args(&[1; 8], 0x5, &[
        4, 4,
        0x20, 9, 4,
        0x10, 9, 5,
        0x04, 9, 5,
        0x01, 9, 7,
        0, 0,
    ]);
    let args = decode_setacl_args(&a).expect("decode");
    assert_eq!(args.access, Some(Acl::from_mode(0o754)));
    assert_eq!(args.default, None);
    // An ACL whose bit is not in the mask is skipped (and removed by the call).
    let b = setacl_args(&[1; 8], 0x4, &[2, 1, 0x20, 0, 4, 0, 0]);
    let args = decode_setacl_args(&b).expect("decode");
    assert_eq!((args.access, args.default), (None, None));
}

#[test]
fn rejects_setacl_arguments_linux_refuses_to_decode() {
    let bad = |mask: u32, w: &[u32]| decode_setacl_args(&setacl_args(&[1; 8], mask, w)).is_err();
    // Mask bits past the four defined.
    assert!(bad(0x11, &[0, 0, 0, 0]));
    // More than 1 024 entries counted.
    assert!(bad(0x1, &[1025, 0, 0, 0]));
    // An array longer than its count.
    assert!(bad(0x0, &[1, 2, 0x20, 0, 0, 0x20, 0, 0, 0, 0]));
    // A parsed ACL whose array is shorter than its count.
    assert!(bad(0x1, &[2, 1, 0x20, 0, 0, 0, 0]));
    // An unknown tag, permission bits past rwx.
    assert!(bad(0x1, &[1, 1, 0x40, 0, 0, 0, 0]));
    assert!(bad(0x1, &[1, 1, 0x20, 0, 8, 0, 0]));
    // Truncated.
    assert!(bad(0x1, &[1, 1, 0x20, 0]));
    // The mask's extra bits are dropped, not refused.
    assert!(!bad(0x1, &[1, 1, 0x10, 0, 0xff, 0, 0]));
}

/// A call's arguments with fixture handle `n` first.
fn with_fh(n: u8, rest: &[u32]) -> Vec<u8> {
    let mut v = MARK.to_vec();
    v.push(n);
    for w in rest {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v
}

/// The fixture's `f` (handle 2), `l` (3); first octets: root 0x00 / 0x01, uid 1000 0x20 / 0x21
/// (GETACL / SETACL).
const F: u8 = 2;

#[test]
fn accepts_getacl_and_setacl_through_the_server() {
    let h = Harness::new();
    // GETACL of `f`: OK, its mode's ACL.
    let (p, r) = h.call_acl(0x00, &with_fh(F, &[0x3]));
    assert_eq!(p, GETACL);
    let (st, a, acls) = decode_getacl_res(&r.expect("reply")).expect("decode");
    assert_eq!(st, Nfsstat3::OK);
    let a = a.expect("attributes");
    let (m, [(n, access), (dn, default)]) = acls.expect("acls");
    assert_eq!((m, n, access.len(), dn, default.len()), (3, 4, 4, 0, 0));
    assert_eq!(access[0], Ace::new(tag::USER_OBJ, a.uid, (a.mode >> 6) & 7));
    // SETACL by root: user 2000 may read; then GETACL shows it and the mode's mask.
    #[rustfmt::skip]
    let acl = [
        5, 5,
        0x01, 0, 6,
        0x02, 2000, 4,
        0x04, 0, 0,
        0x10, 0, 4,
        0x20, 0, 0,
        0, 0,
    ];
    let mut args = vec![0x1];
    args.extend_from_slice(&acl);
    let (p, r) = h.call_acl(0x01, &with_fh(F, &args));
    assert_eq!(p, SETACL);
    let r = r.expect("reply");
    assert_eq!(words(&r)[..2], [0, 1], "OK with attributes");
    let (_, a, acls) = decode_getacl_res(&h.call_acl(0x00, &with_fh(F, &[0x1])).1.expect("reply"))
        .expect("decode");
    assert_eq!(a.expect("attributes").mode & 0o777, 0o640);
    let (_, [(n, access), _]) = acls.expect("acls");
    assert_eq!(n, 5);
    assert_eq!(access[1], Ace::new(tag::USER, 2000, 4));
    // By uid 1000, who does not own `f`: PERM, the ACL unchanged.
    let (_, r) = h.call_acl(0x21, &with_fh(F, &[0x1, 0, 0, 0, 0]));
    assert_eq!(words(&r.expect("reply"))[0], Nfsstat3::PERM.0);
    // A GETACL mask with undefined bits: INVAL with the attributes.
    let (_, r) = h.call_acl(0x00, &with_fh(F, &[0x10]));
    assert_eq!(words(&r.expect("reply"))[..2], [Nfsstat3::INVAL.0, 1]);
    // A symbolic link: NOTSUPP.
    let (_, r) = h.call_acl(0x01, &with_fh(3, &[0x1, 0, 0, 0, 0]));
    assert_eq!(words(&r.expect("reply"))[0], Nfsstat3::NOTSUPP.0);
}

#[test]
fn rejects_bad_handles_and_garbage_through_the_server() {
    let h = Harness::new();
    // A removed file's handle: STALE; a broken MAC: BADHANDLE or STALE, no attributes.
    let (_, r) = h.call_acl(0x00, &with_fh(5, &[0xf]));
    assert_eq!(words(&r.expect("reply")), [Nfsstat3::STALE.0, 0]);
    let (_, r) = h.call_acl(0x00, &with_fh(6, &[0xf]));
    assert_ne!(words(&r.expect("reply"))[0], Nfsstat3::OK.0);
    // Truncated arguments and a SETACL mask past the four bits: GARBAGE_ARGS.
    let (_, r) = h.call_acl(0x00, &with_fh(F, &[]));
    assert!(matches!(r, Err(Reject::GarbageArgs)));
    let (_, r) = h.call_acl(0x01, &with_fh(F, &[0x10, 0, 0, 0, 0]));
    assert!(matches!(r, Err(Reject::GarbageArgs)));
}
