//! Registration with the local rpcbind (RFC 1833, rpcbind protocol version 4, program 100000)
//! so clients can find the NFS/RDMA listener and the MOUNT server by asking port 111.
//!
//! Normal operation: [`register`] connects to 127.0.0.1:111 over TCP (record marking, see
//! [`crate::nfs::rpc_tcp`]) and, for every [`RpcbEntry`], first sends RPCBPROC_UNSET for the same
//! (program, version, netid) — so a registration left behind by a killed server does not make
//! the SET fail — then RPCBPROC_SET with the universal address of the entry
//! ([`universal_addr`], RFC 5665 §5.2.3) and, as libtirpc's `rpcb_set` does, the effective uid
//! in decimal as `r_owner`. The returned [`Registration`] unsets every entry when dropped (or on
//! [`Registration::unregister`]). [`getaddr`] asks rpcbind for an address (tests, tools).
//!
//! Recovery: with nothing listening on port 111, [`register`] fails at once with
//! [`io::ErrorKind::ConnectionRefused`] (connect timeout 1 s, I/O timeout 3 s) and the caller
//! only warns: the services run unregistered and clients name their ports. A SET that rpcbind
//! answers FALSE is an error, and what was already registered is unset again. Errors while
//! unsetting at drop are ignored.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use rpcrdma_engine::xdr::{XdrError, XdrReader};

use crate::nfs::rpc_tcp::{RpcClient, XdrBuf};

/// The rpcbind / portmapper program number.
pub const RPCBIND_PROG: u32 = 100_000;
/// The rpcbind protocol version used.
pub const RPCBVERS4: u32 = 4;
/// RPCBPROC_SET: `bool RPCBPROC_SET(rpcb)`.
pub const RPCBPROC_SET: u32 = 1;
/// RPCBPROC_UNSET: `bool RPCBPROC_UNSET(rpcb)`.
pub const RPCBPROC_UNSET: u32 = 2;
/// RPCBPROC_GETADDR: `string RPCBPROC_GETADDR(rpcb)`.
pub const RPCBPROC_GETADDR: u32 = 3;
/// RPCBPROC_DUMP: `rpcblist_ptr RPCBPROC_DUMP(void)`.
pub const RPCBPROC_DUMP: u32 = 4;
/// rpcbind's well-known port.
pub const RPCBIND_PORT: u16 = 111;

/// Longest universal address [`getaddr`] accepts in a reply.
const MAX_UADDR: u32 = 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// One (program, version, netid) → address mapping to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcbEntry {
    /// Program number (100003 for NFS, 100005 for MOUNT).
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Network id: "tcp", "udp", "tcp6", "rdma", "rdma6", ...
    pub netid: String,
    /// The service's address (a wildcard address is registered as given, as the kernel does).
    pub addr: SocketAddr,
}

/// The local rpcbind: 127.0.0.1:111.
pub fn local_rpcbind() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::LOCALHOST.into(), RPCBIND_PORT)
}

/// The RFC 5665 universal address of `addr`: the address in its usual text form ("10.0.2.15",
/// "fe80::1") followed by ".p1.p2", the port's high and low octets in decimal.
pub fn universal_addr(addr: &SocketAddr) -> String {
    let port = addr.port();
    format!("{}.{}.{}", addr.ip(), port >> 8, port & 0xff)
}

/// Parses a universal address back into a socket address; `None` when it is not one.
pub fn parse_universal_addr(s: &str) -> Option<SocketAddr> {
    let (rest, p2) = s.rsplit_once('.')?;
    let (ip, p1) = rest.rsplit_once('.')?;
    let p1: u8 = p1.parse().ok()?;
    let p2: u8 = p2.parse().ok()?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    Some(SocketAddr::new(ip, u16::from(p1) << 8 | u16::from(p2)))
}

/// Encodes an RFC 1833 `rpcb` (the arguments of SET, UNSET and GETADDR).
pub fn encode_rpcb(prog: u32, vers: u32, netid: &str, r_addr: &str, owner: &str) -> Vec<u8> {
    let mut b = XdrBuf::new();
    b.put_u32(prog);
    b.put_u32(vers);
    b.put_str(netid);
    b.put_str(r_addr);
    b.put_str(owner);
    b.0
}

/// The `r_owner` libtirpc sends: the effective uid in decimal.
pub fn owner() -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    uid.to_string()
}

fn bad_reply(what: &str, e: XdrError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("rpcbind {what}: {e}"))
}

fn call_bool(c: &mut RpcClient, proc_num: u32, args: &[u8]) -> io::Result<bool> {
    let res = c.call(RPCBIND_PROG, RPCBVERS4, proc_num, args)?;
    XdrReader::new(&res)
        .get_bool()
        .map_err(|e| bad_reply("bool reply", e))
}

fn unset(c: &mut RpcClient, e: &RpcbEntry) -> io::Result<bool> {
    let args = encode_rpcb(e.prog, e.vers, &e.netid, "", &owner());
    call_bool(c, RPCBPROC_UNSET, &args)
}

fn set(c: &mut RpcClient, e: &RpcbEntry) -> io::Result<bool> {
    let args = encode_rpcb(e.prog, e.vers, &e.netid, &universal_addr(&e.addr), &owner());
    call_bool(c, RPCBPROC_SET, &args)
}

/// Mappings registered with rpcbind; dropping it unsets them (errors ignored).
#[derive(Debug)]
pub struct Registration {
    rpcbind: SocketAddr,
    entries: Vec<RpcbEntry>,
}

impl Registration {
    /// The mappings registered.
    pub fn entries(&self) -> &[RpcbEntry] {
        &self.entries
    }

    /// Unsets every mapping now (what dropping does).
    pub fn unregister(self) {
        drop(self);
    }

    fn unset_all(&mut self) {
        if self.entries.is_empty() {
            return;
        }
        let entries = std::mem::take(&mut self.entries);
        let Ok(mut c) = RpcClient::connect(self.rpcbind, CONNECT_TIMEOUT, IO_TIMEOUT) else {
            return;
        };
        for e in &entries {
            let _ = unset(&mut c, e);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.unset_all();
    }
}

/// Registers `entries` with the local rpcbind (127.0.0.1:111); see [`register_at`].
pub fn register(entries: &[RpcbEntry]) -> io::Result<Registration> {
    register_at(local_rpcbind(), entries)
}

/// Registers `entries` with the rpcbind at `rpcbind`: UNSET then SET for each. Nothing listening
/// is [`io::ErrorKind::ConnectionRefused`] within a second; a SET answered FALSE is an
/// [`io::ErrorKind::AddrInUse`] error after the entries already set are unset again.
pub fn register_at(rpcbind: SocketAddr, entries: &[RpcbEntry]) -> io::Result<Registration> {
    let mut c = RpcClient::connect(rpcbind, CONNECT_TIMEOUT, IO_TIMEOUT)?;
    let mut reg = Registration {
        rpcbind,
        entries: Vec::new(),
    };
    for e in entries {
        // FALSE only says nothing was registered.
        unset(&mut c, e)?;
        if !set(&mut c, e)? {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "rpcbind refused SET of program {} version {} netid {} at {}",
                    e.prog,
                    e.vers,
                    e.netid,
                    universal_addr(&e.addr)
                ),
            ));
        }
        reg.entries.push(e.clone());
    }
    Ok(reg)
}

/// Asks the local rpcbind where (prog, vers, netid) is; see [`getaddr_at`].
pub fn getaddr(prog: u32, vers: u32, netid: &str) -> io::Result<Option<String>> {
    getaddr_at(local_rpcbind(), prog, vers, netid)
}

/// RPCBPROC_GETADDR (version 4) at `rpcbind`: the universal address, `None` when rpcbind answers
/// the empty string (not registered). Version 4 GETADDR may answer the address of another
/// version of the program when the one asked for is not registered (RFC 1833), and the Linux
/// rpcbind looks the program up under the netid of the transport the question came in on (here
/// "tcp"), not under `netid`: use [`dump_at`] to see registrations of other netids ("rdma").
pub fn getaddr_at(
    rpcbind: SocketAddr,
    prog: u32,
    vers: u32,
    netid: &str,
) -> io::Result<Option<String>> {
    let mut c = RpcClient::connect(rpcbind, CONNECT_TIMEOUT, IO_TIMEOUT)?;
    let args = encode_rpcb(prog, vers, netid, "", "");
    let res = c.call(RPCBIND_PROG, RPCBVERS4, RPCBPROC_GETADDR, &args)?;
    let a = XdrReader::new(&res)
        .get_opaque(MAX_UADDR)
        .map_err(|e| bad_reply("GETADDR reply", e))?;
    Ok((!a.is_empty()).then(|| String::from_utf8_lossy(a).into_owned()))
}

/// One mapping as RPCBPROC_DUMP lists it (an RFC 1833 `rpcb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcbMapping {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Network id.
    pub netid: String,
    /// Universal address.
    pub addr: String,
    /// Owner as rpcbind recorded it.
    pub owner: String,
}

/// Decodes an `rpcblist_ptr` (the result of RPCBPROC_DUMP). Strings above 1024 octets are
/// refused; the list's length is bounded by the input.
pub fn decode_rpcblist(b: &[u8]) -> Result<Vec<RpcbMapping>, XdrError> {
    let mut r = XdrReader::new(b);
    let mut out = Vec::new();
    while r.get_optional()? {
        let prog = r.get_u32()?;
        let vers = r.get_u32()?;
        let mut s = || -> Result<String, XdrError> {
            Ok(String::from_utf8_lossy(r.get_opaque(MAX_UADDR)?).into_owned())
        };
        let (netid, addr, owner) = (s()?, s()?, s()?);
        out.push(RpcbMapping {
            prog,
            vers,
            netid,
            addr,
            owner,
        });
    }
    Ok(out)
}

/// RPCBPROC_DUMP (version 4) at the local rpcbind; see [`dump_at`].
pub fn dump() -> io::Result<Vec<RpcbMapping>> {
    dump_at(local_rpcbind())
}

/// RPCBPROC_DUMP (version 4) at `rpcbind`: every registered mapping.
pub fn dump_at(rpcbind: SocketAddr) -> io::Result<Vec<RpcbMapping>> {
    let mut c = RpcClient::connect(rpcbind, CONNECT_TIMEOUT, IO_TIMEOUT)?;
    let res = c.call(RPCBIND_PROG, RPCBVERS4, RPCBPROC_DUMP, &[])?;
    decode_rpcblist(&res).map_err(|e| bad_reply("DUMP reply", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::rpc_tcp::{
        lock, CallCtx, Handled, RpcCallError, RpcReplyError, RpcService, ServerConfig, TcpRpcServer,
    };
    use rpcrdma_engine::rpc::AcceptStat;
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// (procedure, prog, vers, netid, r_addr, r_owner) as the fake received it.
    type Logged = (u32, u32, u32, String, String, String);

    /// (prog, vers, netid) → universal address.
    type Mapping = ((u32, u32, String), String);

    /// A tiny rpcbind: a map of (prog, vers, netid) → uaddr with rpcbind's SET rule (FALSE
    /// when the key is taken) and a log of every call.
    #[derive(Default)]
    struct FakeRpcbind {
        log: Mutex<Vec<Logged>>,
        map: Mutex<Vec<Mapping>>,
    }

    fn decode_rpcb(args: &[u8]) -> Result<(u32, u32, String, String, String), XdrError> {
        let mut r = XdrReader::new(args);
        let prog = r.get_u32()?;
        let vers = r.get_u32()?;
        let mut s = || -> Result<String, XdrError> {
            Ok(String::from_utf8_lossy(r.get_opaque(256)?).into_owned())
        };
        Ok((prog, vers, s()?, s()?, s()?))
    }

    impl RpcService for FakeRpcbind {
        fn program(&self) -> u32 {
            RPCBIND_PROG
        }

        fn versions(&self) -> (u32, u32) {
            (3, 4)
        }

        fn call(&self, _: &CallCtx, proc_num: u32, args: &[u8], out: &mut XdrBuf) -> Handled {
            if proc_num == RPCBPROC_DUMP {
                for ((prog, vers, netid), addr) in lock(&self.map).iter() {
                    out.put_bool(true);
                    out.0
                        .extend(encode_rpcb(*prog, *vers, netid, addr, "unknown"));
                }
                out.put_bool(false);
                return AcceptStat::Success.into();
            }
            let Ok((prog, vers, netid, addr, owner)) = decode_rpcb(args) else {
                return AcceptStat::GarbageArgs.into();
            };
            let entry = (proc_num, prog, vers, netid.clone(), addr.clone(), owner);
            lock(&self.log).push(entry);
            let key = (prog, vers, netid);
            let mut map = lock(&self.map);
            let found = map.iter().position(|(k, _)| *k == key);
            match proc_num {
                RPCBPROC_SET => {
                    out.put_bool(found.is_none());
                    if found.is_none() {
                        map.push((key, addr));
                    }
                }
                RPCBPROC_UNSET => {
                    out.put_bool(found.is_some());
                    map.retain(|(k, _)| *k != key);
                }
                RPCBPROC_GETADDR => out.put_str(found.map_or("", |i| map[i].1.as_str())),
                _ => return AcceptStat::ProcUnavail.into(),
            }
            AcceptStat::Success.into()
        }
    }

    fn fake() -> (Arc<FakeRpcbind>, TcpRpcServer) {
        let f = Arc::new(FakeRpcbind::default());
        let srv = TcpRpcServer::start(
            "127.0.0.1:0".parse().unwrap(),
            f.clone(),
            ServerConfig::default(),
        )
        .unwrap();
        (f, srv)
    }

    fn nfs_entry() -> RpcbEntry {
        RpcbEntry {
            prog: 100_003,
            vers: 3,
            netid: "rdma".into(),
            addr: "10.0.2.15:20049".parse().unwrap(),
        }
    }

    fn mount_entry() -> RpcbEntry {
        RpcbEntry {
            prog: 100_005,
            vers: 3,
            netid: "tcp".into(),
            addr: "0.0.0.0:20048".parse().unwrap(),
        }
    }

    #[test]
    fn accepts_set_args_golden() {
        // RFC 1833 rpcb: r_prog, r_vers, string r_netid, string r_addr, string r_owner.
        let got = encode_rpcb(100_003, 3, "rdma", "10.0.2.15.78.81", "0");
        let mut want = vec![0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0, 4];
        want.extend_from_slice(b"rdma");
        want.extend_from_slice(&[0, 0, 0, 15]);
        want.extend_from_slice(b"10.0.2.15.78.81\0");
        want.extend_from_slice(&[0, 0, 0, 1, b'0', 0, 0, 0]);
        assert_eq!(got, want);
    }

    #[test]
    fn accepts_universal_addresses() {
        let cases = [
            ("10.0.2.15:20049", "10.0.2.15.78.81"),
            ("0.0.0.0:111", "0.0.0.0.0.111"),
            ("127.0.0.1:2049", "127.0.0.1.8.1"),
            ("[::1]:2049", "::1.8.1"),
            ("[fe80::1:2]:20049", "fe80::1:2.78.81"),
            ("[2001:db8::]:65535", "2001:db8::.255.255"),
        ];
        for (sa, ua) in cases {
            let sa: SocketAddr = sa.parse().unwrap();
            assert_eq!(universal_addr(&sa), ua);
            assert_eq!(parse_universal_addr(ua), Some(sa));
        }
        for bad in [
            "",
            "1.2.3.4",
            "1.2.3.4.5",
            "1.2.3.4.256.1",
            "x.1.2",
            "::1.8",
        ] {
            assert_eq!(parse_universal_addr(bad), None, "{bad}");
        }
    }

    #[test]
    fn accepts_register_unset_set_then_unset_on_drop() {
        let (f, srv) = fake();
        // A stale registration from a killed server.
        lock(&f.map).push(((100_003, 3, "rdma".into()), "1.2.3.4.0.1".into()));
        let reg = register_at(srv.local_addr(), &[nfs_entry(), mount_entry()]).unwrap();
        assert_eq!(reg.entries(), [nfs_entry(), mount_entry()]);
        let me = owner();
        let l = |p: u32, prog: u32, netid: &str, addr: &str| -> Logged {
            (p, prog, 3, netid.into(), addr.into(), me.clone())
        };
        assert_eq!(
            *lock(&f.log),
            [
                l(RPCBPROC_UNSET, 100_003, "rdma", ""),
                l(RPCBPROC_SET, 100_003, "rdma", "10.0.2.15.78.81"),
                l(RPCBPROC_UNSET, 100_005, "tcp", ""),
                l(RPCBPROC_SET, 100_005, "tcp", "0.0.0.0.78.80"),
            ]
        );
        let got = getaddr_at(srv.local_addr(), 100_003, 3, "rdma").unwrap();
        assert_eq!(got.as_deref(), Some("10.0.2.15.78.81"));
        assert_eq!(
            getaddr_at(srv.local_addr(), 100_003, 3, "tcp").unwrap(),
            None
        );
        lock(&f.log).clear();
        drop(reg);
        assert_eq!(
            *lock(&f.log),
            [
                l(RPCBPROC_UNSET, 100_003, "rdma", ""),
                l(RPCBPROC_UNSET, 100_005, "tcp", ""),
            ]
        );
        assert!(lock(&f.map).is_empty());
    }

    #[test]
    fn accepts_explicit_unregister() {
        let (f, srv) = fake();
        let reg = register_at(srv.local_addr(), &[mount_entry()]).unwrap();
        assert_eq!(lock(&f.map).len(), 1);
        reg.unregister();
        assert!(lock(&f.map).is_empty());
    }

    /// A fake whose SET always fails (another owner holds the key, say).
    struct Refusing(FakeRpcbind);

    impl RpcService for Refusing {
        fn program(&self) -> u32 {
            RPCBIND_PROG
        }

        fn versions(&self) -> (u32, u32) {
            (4, 4)
        }

        fn call(&self, ctx: &CallCtx, proc_num: u32, args: &[u8], out: &mut XdrBuf) -> Handled {
            let refuse = proc_num == RPCBPROC_SET && args.get(..4) == Some(&[0, 1, 0x86, 0xa5]);
            if refuse {
                out.put_bool(false);
                return AcceptStat::Success.into();
            }
            self.0.call(ctx, proc_num, args, out)
        }
    }

    #[test]
    fn rejects_refused_set_and_unsets_the_rest() {
        let f = Arc::new(Refusing(FakeRpcbind::default()));
        let srv = TcpRpcServer::start(
            "127.0.0.1:0".parse().unwrap(),
            f.clone(),
            ServerConfig::default(),
        )
        .unwrap();
        let e = register_at(srv.local_addr(), &[nfs_entry(), mount_entry()]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("100005"), "{e}");
        assert!(
            lock(&f.0.map).is_empty(),
            "the NFS entry was not unset again"
        );
    }

    #[test]
    fn rejects_rpc_level_failures() {
        let (_f, srv) = fake();
        let mut c = RpcClient::connect(srv.local_addr(), CONNECT_TIMEOUT, IO_TIMEOUT).unwrap();
        let e = c.call(RPCBIND_PROG, 2, RPCBPROC_SET, &[]).unwrap_err();
        let mismatch = AcceptStat::ProgMismatch { low: 3, high: 4 };
        assert_eq!(
            RpcCallError::of(&e),
            Some(&RpcReplyError::Accepted(mismatch))
        );
        let e = c.call(RPCBIND_PROG, 4, RPCBPROC_SET, &[0, 0]).unwrap_err();
        let garbage = RpcReplyError::Accepted(AcceptStat::GarbageArgs);
        assert_eq!(RpcCallError::of(&e), Some(&garbage));
    }

    #[test]
    fn rejects_register_quickly_when_nothing_listens() {
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let t0 = Instant::now();
        let e = register_at(addr, &[nfs_entry()]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        assert!(t0.elapsed() < Duration::from_millis(1500));
        assert_eq!(
            getaddr_at(addr, 100_003, 3, "rdma").unwrap_err().kind(),
            io::ErrorKind::ConnectionRefused
        );
    }

    /// Against the machine's rpcbind when one listens on 127.0.0.1:111; otherwise `register`
    /// must fail fast with ConnectionRefused.
    #[test]
    fn accepts_system_rpcbind_when_running() {
        let prog = 0x2000_0000 + std::process::id() % 0x1000;
        let tcp = RpcbEntry {
            prog,
            vers: 3,
            netid: "tcp".into(),
            addr: "127.0.0.1:20048".parse().unwrap(),
        };
        let rdma = RpcbEntry {
            netid: "rdma".into(),
            addr: "10.0.2.15:20049".parse().unwrap(),
            ..tcp.clone()
        };
        let t0 = Instant::now();
        match register(&[tcp.clone(), rdma.clone()]) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                assert!(t0.elapsed() < Duration::from_millis(1500));
                eprintln!("skipped: no rpcbind listening on 127.0.0.1:111");
            }
            Err(e) => panic!("rpcbind on 127.0.0.1:111 refused the registration: {e}"),
            Ok(reg) => {
                let got = getaddr(prog, 3, "tcp").unwrap();
                assert_eq!(got.as_deref(), Some("127.0.0.1.78.80"));
                let mine = |d: Vec<RpcbMapping>| -> Vec<(String, String)> {
                    d.into_iter()
                        .filter(|m| m.prog == prog)
                        .map(|m| (m.netid, m.addr))
                        .collect()
                };
                let listed = mine(dump().unwrap());
                assert!(listed.contains(&("rdma".into(), "10.0.2.15.78.81".into())));
                assert_eq!(listed.len(), 2, "{listed:?}");
                // Registering again over a live registration works (UNSET first).
                let again = register(std::slice::from_ref(&rdma)).unwrap();
                std::mem::forget(again);
                reg.unregister();
                assert_eq!(getaddr(prog, 3, "tcp").unwrap(), None);
                assert_eq!(mine(dump().unwrap()), []);
            }
        }
    }

    #[test]
    fn rejects_malformed_dump_lists() {
        assert_eq!(decode_rpcblist(&[0, 0, 0, 0]).unwrap(), []);
        assert!(decode_rpcblist(&[0, 0, 0, 1, 0, 0, 0, 1]).is_err());
        assert!(decode_rpcblist(&[0, 0, 0, 2]).is_err());
        let mut b = vec![0, 0, 0, 1];
        b.extend(encode_rpcb(1, 2, "tcp", "a", "b"));
        assert!(decode_rpcblist(&b).is_err(), "list without its end");
        b.extend([0, 0, 0, 0]);
        assert_eq!(decode_rpcblist(&b).unwrap()[0].netid, "tcp");
    }
}
