//! Finding the RDMA device to open (rdma provider, feature `rdma`): the provider opens a device
//! by one of its IP addresses, so a side that was given no address picks one: the source
//! address the kernel routes towards the peer (client), or the first local address that
//! belongs to an RDMA device (server), named `-d` when given.
//!
//! Normal operation: [`open`] tries the candidates in order and returns the first device that
//! opens (and has the requested name). Recovery: nothing to recover; when no candidate has a
//! device the last error says why (no device owns the address, a device of another name, a
//! verbs error).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use super::PerfError;
use rpcrdma_engine::verbs::rdma::RdmaDevice;

/// Addresses of the host's up interfaces: IPv4 first, loopback last.
pub fn local_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = core::ptr::null_mut();
    // SAFETY: on success getifaddrs stores a list in `list`, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_INET {
            // SAFETY: AF_INET: the sockaddr is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))));
        } else if family == libc::AF_INET6 {
            // SAFETY: AF_INET6: the sockaddr is a sockaddr_in6.
            let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    out.sort_by_key(|ip| (ip.is_loopback(), ip.is_ipv6()));
    out
}

/// The source address the kernel picks towards `peer` (no packet is sent).
pub fn route_to(peer: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if peer.is_ipv4() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(peer).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// Opens the device owning `ip`; when `ip` is unspecified, the device of the source
/// address towards `peer` (client) or of the first local address that has one (server),
/// named `name` when `-d` was given.
pub fn open(
    ip: IpAddr,
    peer: Option<SocketAddr>,
    name: Option<&str>,
) -> Result<RdmaDevice, PerfError> {
    let candidates = if !ip.is_unspecified() {
        vec![ip]
    } else if let Some(src) = peer.and_then(route_to) {
        vec![src]
    } else {
        local_addrs()
    };
    let mut last = None;
    for c in candidates {
        match RdmaDevice::open(c) {
            Ok(d) if name.map_or(true, |n| d.name() == n) => return Ok(d),
            Ok(d) => {
                last = Some(PerfError::Config(format!(
                    "{c} belongs to device {}, not {}",
                    d.name(),
                    name.unwrap_or("?")
                )))
            }
            Err(e) if e.errno == rpcrdma_engine::verbs::errno::ENODEV => {
                last = Some(PerfError::Config(format!(
                    "no RDMA device owns {c} (OpenDevice: errno {}); check `rdma link` / \
                     `ibv_devices`, or pick the address with --bind",
                    e.errno
                )))
            }
            Err(e) => last = Some(PerfError::Verbs(e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        PerfError::Config("no local address to open an RDMA device on (use --bind)".into())
    }))
}
