//! Tests that run without RDMA hardware (this host has no kernel RDMA stack).

use std::net::{IpAddr, Ipv4Addr};

use super::Rdma;
use crate::verbs::{errno, Provider, VerbsCall};

/// Opening a device where there is none (no kernel RDMA, or an address of no RDMA device)
/// returns a clean `OpenDevice` error, never a panic.
#[test]
fn rejects_open_without_device() {
    // 192.0.2.1 (TEST-NET-1) is never a local address.
    let err = Rdma::open(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))).unwrap_err();
    assert_eq!(err.call, VerbsCall::OpenDevice);
    assert!(
        [
            errno::ENODEV,
            errno::EADDRNOTAVAIL,
            38, /* ENOSYS */
            errno::EINVAL
        ]
        .contains(&err.errno),
        "unexpected errno {}",
        err.errno
    );
}

/// The loopback address has no RDMA device either (on this host: no RDMA stack at all).
#[test]
fn rejects_open_of_loopback_without_rdma_device() {
    match Rdma::open(IpAddr::V4(Ipv4Addr::LOCALHOST)) {
        Err(e) => assert_eq!(e.call, VerbsCall::OpenDevice),
        // A host with an RDMA device on lo (siw/rxe on lo) may open it: that is fine too.
        Ok(dev) => drop(dev),
    }
}
