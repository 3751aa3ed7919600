//! Unit tests of the `change_info4` that OPEN, CREATE, REMOVE, RENAME and LINK return for a
//! directory (RFC 8881 §3.3.6) on a store whose clock did not tick during the operation, as a
//! host file system stamping times in timer ticks shows it to the `dir:` store: the change
//! must still read as a change (the Linux client decides from `before` != `after` whether its
//! OPEN created the file), and an operation that changed nothing must not read as one.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_cinfo`.
//! Recovery: a failure names the operation and the values seen.

use rpcrdma_engine::xdr::XdrReader;

use super::tests::{open_create, A, H};
use super::tests_view::View;
use super::xdr::st;
use crate::nfs::v4::op;

/// A client with a session on a server exporting a store whose clock does not tick.
fn coarse() -> H {
    View::frozen_clock().serve()
}

/// `change_info4` (atomic, before, after) at the start of `b`.
fn cinfo(b: &[u8]) -> (bool, u64, u64) {
    let mut r = XdrReader::new(b);
    let atomic = r.get_u32().expect("atomic") != 0;
    (
        atomic,
        r.get_u64().expect("before"),
        r.get_u64().expect("after"),
    )
}

/// The `change_info4` of an OPEN of `name` (created unless it exists) in the export's root.
fn open_cinfo(h: &mut H, name: &[u8]) -> (bool, u64, u64) {
    let root = h.root();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(h.clientid, name),
    ]);
    assert_eq!(r.status, st::OK, "OPEN of {name:?}: {:?}", r.results);
    cinfo(&r.last[16..])
}

#[test]
fn accepts_an_open_that_created_a_file_as_a_change_of_its_directory_on_a_coarse_clock() {
    let mut h = coarse();
    let (atomic, before, after) = open_cinfo(&mut h, b"new");
    assert_ne!(
        before, after,
        "the OPEN created the file: the directory changed"
    );
    assert!(
        !atomic,
        "the change values are not the directory's own: not atomic"
    );
}

#[test]
fn accepts_an_open_of_an_existing_file_as_no_change_of_its_directory() {
    let mut h = coarse();
    open_cinfo(&mut h, b"f");
    let (atomic, before, after) = open_cinfo(&mut h, b"f");
    assert_eq!(before, after, "the second OPEN created nothing");
    assert!(atomic);
}

#[test]
fn accepts_create_and_remove_as_changes_of_their_directory_on_a_coarse_clock() {
    let mut h = coarse();
    let root = h.root();
    let mkdir = A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0);
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), mkdir]);
    assert_eq!(r.status, st::OK, "CREATE");
    let (atomic, before, after) = cinfo(&r.last);
    assert!(before != after && !atomic, "CREATE: {before} {after}");
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::REMOVE).opaque(b"d"),
    ]);
    assert_eq!(r.status, st::OK, "REMOVE");
    let (atomic, before, after) = cinfo(&r.last);
    assert!(before != after && !atomic, "REMOVE: {before} {after}");
}

#[test]
fn accepts_a_clock_that_ticked_as_it_is() {
    // The memory store's own clock never repeats a stamp: its values go out unchanged, atomic.
    let mut h = H::new("rw,no_root_squash");
    let (atomic, before, after) = open_cinfo(&mut h, b"new");
    assert!(atomic && after > before, "{before} {after}");
}
