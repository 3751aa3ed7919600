//! MOUNT protocol version 3 (RFC 1813 Appendix I; program 100005) over TCP: the server the
//! kernel's `mount.nfs` asks for the root file handle of an export, and a small client for tests
//! and tools ([`mnt`], [`umnt`], [`export_list`], [`dump`]).
//!
//! Normal operation: [`MountServer::start`] serves NULL, MNT, DUMP, UMNT, UMNTALL and EXPORT on
//! a [`TcpRpcServer`] (one thread polling every connection, off the RDMA reactors). MNT of an
//! exported path (trailing slashes ignored: "/export/" is "/export") answers MNT3_OK with the
//! export's root handle and the flavors the export's `sec=` lists for that client, and records
//! (client address, export) in the mount list DUMP reports; UMNT removes one entry, UMNTALL all
//! of the caller's. A client the export's rules (exports(5) syntax, [`super::exports`]) do not
//! name gets MNT3ERR_ACCES. EXPORT lists every export with the clients its rules name as its
//! groups (`*` for everyone), as `showmount -e` prints them. Only version 3 is
//! served (Linux mountd serves 1 to 3; `mount.nfs -o vers=3` asks for MOUNT v3): versions 1
//! and 2 get PROG_MISMATCH{3,3}.
//!
//! Recovery: an unknown path is MNT3ERR_NOENT; a path above MNTPATHLEN (1024) or arguments
//! that do not decode are GARBAGE_ARGS; unknown procedures PROC_UNAVAIL; everything at the RPC
//! and record-marking level (RPC_MISMATCH, AUTH errors, PROG_UNAVAIL, oversized or undecodable
//! records closing their connection, the record, reply and idle deadlines, the per-address and
//! server connection limits with eviction) is [`crate::nfs::rpc_tcp`]'s. The
//! mount list is advisory, as in every mountd: it holds at most [`MAX_MOUNT_ENTRIES`] entries
//! and is lost when the server stops.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::xdr::{XdrError, XdrReader};

use super::exports::{self, ClientRule, ExportOptions, Exports};
use super::types::Fh;
use crate::nfs::rpc_tcp::{
    lock, tcp_call, CallCtx, ConnStats, Handled, RpcService, ServerConfig, TcpRpcServer, XdrBuf,
};

/// The MOUNT program number.
pub const MOUNT_PROG: u32 = 100_005;
/// The MOUNT version served.
pub const MOUNT_V3: u32 = 3;
/// Bound of a `dirpath` (`MNTPATHLEN`).
pub const MNTPATHLEN: u32 = 1024;
/// Bound of a `name` (`MNTNAMLEN`).
pub const MNTNAMLEN: u32 = 255;
/// Bound of an `fhandle3` (`FHSIZE3`).
pub const FHSIZE3: u32 = 64;
/// Most entries the mount list (DUMP) keeps; further mounts are served but not listed.
pub const MAX_MOUNT_ENTRIES: usize = 4096;

/// MOUNTPROC3_NULL.
pub const MOUNTPROC3_NULL: u32 = 0;
/// MOUNTPROC3_MNT.
pub const MOUNTPROC3_MNT: u32 = 1;
/// MOUNTPROC3_DUMP.
pub const MOUNTPROC3_DUMP: u32 = 2;
/// MOUNTPROC3_UMNT.
pub const MOUNTPROC3_UMNT: u32 = 3;
/// MOUNTPROC3_UMNTALL.
pub const MOUNTPROC3_UMNTALL: u32 = 4;
/// MOUNTPROC3_EXPORT.
pub const MOUNTPROC3_EXPORT: u32 = 5;

/// MNT3_OK.
pub const MNT3_OK: u32 = 0;
/// MNT3ERR_PERM: not owner.
pub const MNT3ERR_PERM: u32 = 1;
/// MNT3ERR_NOENT: no such file or directory.
pub const MNT3ERR_NOENT: u32 = 2;
/// MNT3ERR_IO.
pub const MNT3ERR_IO: u32 = 5;
/// MNT3ERR_ACCES: permission denied.
pub const MNT3ERR_ACCES: u32 = 13;
/// MNT3ERR_NOTDIR.
pub const MNT3ERR_NOTDIR: u32 = 20;
/// MNT3ERR_INVAL.
pub const MNT3ERR_INVAL: u32 = 22;
/// MNT3ERR_NAMETOOLONG.
pub const MNT3ERR_NAMETOOLONG: u32 = 63;
/// MNT3ERR_NOTSUPP.
pub const MNT3ERR_NOTSUPP: u32 = 10004;
/// MNT3ERR_SERVERFAULT.
pub const MNT3ERR_SERVERFAULT: u32 = 10006;

/// AUTH_NULL / AUTH_NONE flavor number.
pub const AUTH_NULL: u32 = 0;
/// AUTH_UNIX / AUTH_SYS flavor number.
pub const AUTH_UNIX: u32 = 1;

/// Most flavors [`decode_mountres3`] accepts in a reply.
const MAX_FLAVORS: u32 = 64;

/// One exported tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The path clients mount, e.g. "/export" (a trailing "/" is ignored).
    pub path: String,
    /// The handle of its root directory.
    pub root: Fh,
    /// Which clients may mount it, with which credential flavors (exports(5) rules).
    pub clients: Vec<ClientRule>,
}

impl Export {
    /// `path` with root `root`, exported to everyone read-write with AUTH_SYS and AUTH_NONE.
    pub fn to_everyone(path: &str, root: Fh) -> Export {
        let mut e = Exports::default();
        let spec = format!("{path}:rw,no_root_squash,sec=sys:none");
        let clients = match e.add_spec(&spec) {
            Ok(()) => e.list()[0].clients.clone(),
            Err(_) => Vec::new(),
        };
        Export {
            path: path.to_string(),
            root,
            clients,
        }
    }

    /// The export of exports(5) entry `e` (its path and client rules) with root handle `root`.
    pub fn of(e: &exports::Export, root: Fh) -> Export {
        Export {
            path: e.path.clone(),
            root,
            clients: e.clients.clone(),
        }
    }

    /// The options client `ip` gets (`None`: not exported to it).
    fn options_for(&self, ip: std::net::IpAddr) -> Option<ExportOptions> {
        exports::options_for(&self.clients, ip)
    }
}

fn normalized(exports: Vec<Export>) -> Vec<Export> {
    exports
        .into_iter()
        .map(|e| Export {
            path: normalize_path(&e.path).to_string(),
            ..e
        })
        .collect()
}

/// A path without its trailing slashes ("/" stays "/").
pub fn normalize_path(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() && p.starts_with('/') {
        "/"
    } else {
        t
    }
}

struct MountService {
    /// Replaced whole on reload ([`MountServer::set_exports`]).
    exports: std::sync::RwLock<Vec<Export>>,
    mounts: Mutex<Vec<(String, String)>>,
}

/// The MOUNT v3 service a [`MountServer`] runs, without its TCP server: it answers call
/// records handed to [`crate::nfs::rpc_tcp::handle_record`] from any transport, with the
/// export rules and limits a [`MountServer`] applies (the `nfs_tcp_services` fuzz target
/// drives it so).
pub fn service(exports: Vec<Export>) -> Arc<dyn RpcService> {
    MountService::new(exports)
}

impl MountService {
    fn new(exports: Vec<Export>) -> Arc<MountService> {
        Arc::new(MountService {
            exports: std::sync::RwLock::new(normalized(exports)),
            mounts: Mutex::new(Vec::new()),
        })
    }

    fn find(&self, path: &[u8]) -> Option<Export> {
        let path = std::str::from_utf8(path).ok()?;
        let want = normalize_path(path);
        let list = self.exports.read().unwrap_or_else(|p| p.into_inner());
        list.iter().find(|e| e.path == want).cloned()
    }

    fn mnt(&self, ctx: &CallCtx, args: &[u8], out: &mut XdrBuf) -> AcceptStat {
        let Ok(path) = XdrReader::new(args).get_opaque(MNTPATHLEN) else {
            return AcceptStat::GarbageArgs;
        };
        let Some(export) = self.find(path) else {
            rpcrdma_poller::log_limited!(
                peer: ctx.peer;
                WARN,
                client = %ctx.peer,
                export = %String::from_utf8_lossy(path),
                reason = "no such export",
                "mount refused (MNT3ERR_NOENT)"
            );
            out.put_u32(MNT3ERR_NOENT);
            return AcceptStat::Success;
        };
        // A client the export's rules do not name is refused, as nfs-utils' mountd does.
        let Some(opts) = export.options_for(ctx.peer.ip()) else {
            rpcrdma_poller::log_limited!(
                peer: ctx.peer;
                WARN,
                client = %ctx.peer,
                export = %export.path,
                reason = "the export's rules do not name this client",
                "mount refused (MNT3ERR_ACCES)"
            );
            out.put_u32(MNT3ERR_ACCES);
            return AcceptStat::Success;
        };
        rpcrdma_poller::log_limited!(
            peer: ctx.peer;
            INFO,
            client = %ctx.peer,
            export = %export.path,
            flavor = ?ctx.flavor,
            "mount granted"
        );
        let entry = (ctx.peer.ip().to_string(), export.path.clone());
        {
            let mut mounts = lock(&self.mounts);
            if !mounts.contains(&entry) && mounts.len() < MAX_MOUNT_ENTRIES {
                mounts.push(entry);
            }
        }
        out.put_u32(MNT3_OK);
        out.put_opaque(export.root.as_bytes());
        let flavors = opts.sec.numbers();
        out.put_u32(flavors.len() as u32);
        for f in flavors {
            out.put_u32(f);
        }
        AcceptStat::Success
    }

    fn umnt(&self, ctx: &CallCtx, args: &[u8]) -> AcceptStat {
        let Ok(path) = XdrReader::new(args).get_opaque(MNTPATHLEN) else {
            return AcceptStat::GarbageArgs;
        };
        let host = ctx.peer.ip().to_string();
        let path = String::from_utf8_lossy(path);
        let path = normalize_path(&path);
        rpcrdma_poller::log_limited!(
            peer: ctx.peer;
            INFO,
            client = %ctx.peer,
            export = %path,
            "unmount"
        );
        lock(&self.mounts).retain(|(h, p)| !(*h == host && p == path));
        AcceptStat::Success
    }

    fn dump(&self, out: &mut XdrBuf) -> AcceptStat {
        for (host, path) in lock(&self.mounts).iter() {
            out.put_bool(true);
            out.put_str(host);
            out.put_str(path);
        }
        out.put_bool(false);
        AcceptStat::Success
    }

    fn export(&self, out: &mut XdrBuf) -> AcceptStat {
        let list = self.exports.read().unwrap_or_else(|p| p.into_inner());
        for e in list.iter() {
            out.put_bool(true);
            out.put_str(&e.path);
            // ex_groups: the clients the rules name (`*` for everyone), as showmount -e prints.
            for c in &e.clients {
                out.put_bool(true);
                out.put_str(&c.who.to_string());
            }
            out.put_bool(false);
        }
        out.put_bool(false);
        AcceptStat::Success
    }
}

impl RpcService for MountService {
    fn program(&self) -> u32 {
        MOUNT_PROG
    }

    fn versions(&self) -> (u32, u32) {
        (MOUNT_V3, MOUNT_V3)
    }

    fn call(&self, ctx: &CallCtx, proc_num: u32, args: &[u8], out: &mut XdrBuf) -> Handled {
        let st = match proc_num {
            MOUNTPROC3_NULL => AcceptStat::Success,
            MOUNTPROC3_MNT => self.mnt(ctx, args, out),
            MOUNTPROC3_DUMP => self.dump(out),
            MOUNTPROC3_UMNT => self.umnt(ctx, args),
            MOUNTPROC3_UMNTALL => {
                let host = ctx.peer.ip().to_string();
                lock(&self.mounts).retain(|(h, _)| *h != host);
                AcceptStat::Success
            }
            MOUNTPROC3_EXPORT => self.export(out),
            _ => AcceptStat::ProcUnavail,
        };
        st.into()
    }
}

/// A running MOUNT v3 server over TCP.
pub struct MountServer {
    rpc: TcpRpcServer,
    service: Arc<MountService>,
}

impl MountServer {
    /// Listens on `bind` (port 0: any free port) and serves MOUNT v3 for `exports` with the
    /// default limits ([`ServerConfig::default`]: 64 KiB records, 64 connections, 8 per
    /// address, records within 5 s, 60 s idle). Only version 3 is
    /// served: versions 1 and 2 get PROG_MISMATCH{3,3}, other programs PROG_UNAVAIL.
    pub fn start(bind: SocketAddr, exports: Vec<Export>) -> io::Result<MountServer> {
        MountServer::start_with(bind, exports, ServerConfig::default())
    }

    /// [`MountServer::start`] with explicit limits.
    pub fn start_with(
        bind: SocketAddr,
        exports: Vec<Export>,
        cfg: ServerConfig,
    ) -> io::Result<MountServer> {
        let service = MountService::new(exports);
        let rpc = TcpRpcServer::start(bind, service.clone(), cfg)?;
        Ok(MountServer { rpc, service })
    }

    /// Serves `exports` from the next call on (a reload); connections stay.
    pub fn set_exports(&self, exports: Vec<Export>) {
        let mut g = self
            .service
            .exports
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *g = normalized(exports);
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.rpc.local_addr()
    }

    /// Stops the server thread and closes client connections.
    pub fn stop(self) {
        self.rpc.stop();
    }

    /// The counters of the MOUNT connections (accepted, evicted, closed by each deadline).
    pub fn conn_stats(&self) -> ConnStats {
        self.rpc.stats()
    }

    /// The mount list DUMP reports: (client address, export path), oldest first.
    pub fn mounts(&self) -> Vec<(String, String)> {
        lock(&self.service.mounts).clone()
    }
}

fn dirpath_args(path: &str) -> XdrBuf {
    let mut b = XdrBuf::new();
    b.put_str(path);
    b
}

fn bad_reply(e: XdrError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("MOUNT reply: {e}"))
}

/// Decodes `mountres3`: the handle and flavors on MNT3_OK, otherwise the mountstat3.
pub fn decode_mountres3(b: &[u8]) -> Result<Result<(Fh, Vec<u32>), u32>, XdrError> {
    let mut r = XdrReader::new(b);
    let status = r.get_u32()?;
    if status != MNT3_OK {
        return Ok(Err(status));
    }
    let at = r.position();
    let handle = r.get_opaque(FHSIZE3)?;
    let fh = Fh::new(handle).ok_or(XdrError::TooLong {
        at,
        len: FHSIZE3 + 1,
        max: FHSIZE3,
    })?;
    let n = r.get_count(MAX_FLAVORS)?;
    let mut flavors = Vec::new();
    for _ in 0..n {
        flavors.push(r.get_u32()?);
    }
    Ok(Ok((fh, flavors)))
}

/// MNT `path` on `server`: `Ok(Ok((root handle, flavors)))`, or `Ok(Err(mountstat3))`.
pub fn mnt(server: SocketAddr, path: &str) -> io::Result<Result<(Fh, Vec<u32>), u32>> {
    let res = tcp_call(
        server,
        MOUNT_PROG,
        MOUNT_V3,
        MOUNTPROC3_MNT,
        &dirpath_args(path).0,
    )?;
    decode_mountres3(&res).map_err(bad_reply)
}

/// UMNT `path` on `server`.
pub fn umnt(server: SocketAddr, path: &str) -> io::Result<()> {
    tcp_call(
        server,
        MOUNT_PROG,
        MOUNT_V3,
        MOUNTPROC3_UMNT,
        &dirpath_args(path).0,
    )
    .map(drop)
}

/// UMNTALL on `server`: forgets every mount of the calling host.
pub fn umntall(server: SocketAddr) -> io::Result<()> {
    tcp_call(server, MOUNT_PROG, MOUNT_V3, MOUNTPROC3_UMNTALL, &[]).map(drop)
}

/// Decodes `exports`: the exported paths (group lists skipped).
pub fn decode_exports(b: &[u8]) -> Result<Vec<String>, XdrError> {
    let mut r = XdrReader::new(b);
    let mut out = Vec::new();
    while r.get_optional()? {
        out.push(String::from_utf8_lossy(r.get_opaque(MNTPATHLEN)?).into_owned());
        while r.get_optional()? {
            r.get_opaque(MNTNAMLEN)?;
        }
    }
    Ok(out)
}

/// EXPORT on `server`: the exported paths.
pub fn export_list(server: SocketAddr) -> io::Result<Vec<String>> {
    let res = tcp_call(server, MOUNT_PROG, MOUNT_V3, MOUNTPROC3_EXPORT, &[])?;
    decode_exports(&res).map_err(bad_reply)
}

/// Decodes `mountlist`: (host, path) pairs.
pub fn decode_mountlist(b: &[u8]) -> Result<Vec<(String, String)>, XdrError> {
    let mut r = XdrReader::new(b);
    let mut out = Vec::new();
    while r.get_optional()? {
        let host = String::from_utf8_lossy(r.get_opaque(MNTNAMLEN)?).into_owned();
        let path = String::from_utf8_lossy(r.get_opaque(MNTPATHLEN)?).into_owned();
        out.push((host, path));
    }
    Ok(out)
}

/// DUMP on `server`: its mount list.
pub fn dump(server: SocketAddr) -> io::Result<Vec<(String, String)>> {
    let res = tcp_call(server, MOUNT_PROG, MOUNT_V3, MOUNTPROC3_DUMP, &[])?;
    decode_mountlist(&res).map_err(bad_reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::rpc_tcp::{
        encode_call_msg, handle_record, read_record, ClientAuth, RpcCallError, RpcReplyError,
        LAST_FRAGMENT,
    };
    use rpcrdma_engine::rpc::{AuthStat, RejectedReply};
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    fn root() -> Fh {
        Fh::new(&[1, 2, 3, 4, 5]).unwrap()
    }

    fn exports() -> Vec<Export> {
        vec![
            Export::to_everyone("/export", root()),
            Export::to_everyone("/other/", Fh::new(&[9; 8]).unwrap()),
        ]
    }

    fn server() -> MountServer {
        MountServer::start("127.0.0.1:0".parse().unwrap(), exports()).unwrap()
    }

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    fn record(msg: &[u8]) -> Vec<u8> {
        let mut r = (msg.len() as u32 | LAST_FRAGMENT).to_be_bytes().to_vec();
        r.extend_from_slice(msg);
        r
    }

    fn call(xid: u32, vers: u32, proc_num: u32, args: &[u8]) -> Vec<u8> {
        encode_call_msg(xid, MOUNT_PROG, vers, proc_num, ClientAuth::SysRoot, args).unwrap()
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Writes `wire` on a fresh connection and reads one reply record (None: closed).
    fn exchange(addr: SocketAddr, wire: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let mut s = connect(addr);
        s.write_all(wire)?;
        read_record(&mut s, 1 << 20)
    }

    fn reply_err(e: &io::Error) -> RpcReplyError {
        RpcCallError::of(e).cloned().expect("an RPC-level error")
    }

    /// The server answers MNT after whatever a test did to it.
    fn still_serves(addr: SocketAddr) {
        assert_eq!(mnt(addr, "/export").unwrap().unwrap().0, root());
    }

    #[test]
    fn accepts_mnt_reply_golden() {
        let srv = server();
        let args = [0, 0, 0, 7, b'/', b'e', b'x', b'p', b'o', b'r', b't', 0];
        let reply = exchange(srv.local_addr(), &record(&call(0x1122_3344, 3, 1, &args)))
            .unwrap()
            .unwrap();
        // RFC 5531 reply header: xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS; then
        // RFC 1813 mountres3: MNT3_OK, fhandle3 <5 octets + pad>, auth_flavors <2> {1, 0}.
        let mut want = vec![0x11, 0x22, 0x33, 0x44];
        want.extend_from_slice(&words(&[1, 0, 0, 0, 0]));
        want.extend_from_slice(&words(&[0, 5]));
        want.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
        want.extend_from_slice(&words(&[2, 1, 0]));
        assert_eq!(reply, want);
        assert_eq!(
            mnt(srv.local_addr(), "/export").unwrap(),
            Ok((root(), vec![AUTH_UNIX, AUTH_NULL]))
        );
        srv.stop();
    }

    #[test]
    fn rejects_unknown_path_with_noent() {
        let srv = server();
        assert_eq!(mnt(srv.local_addr(), "/nope").unwrap(), Err(MNT3ERR_NOENT));
        assert_eq!(
            mnt(srv.local_addr(), "/exportx").unwrap(),
            Err(MNT3ERR_NOENT)
        );
        assert_eq!(mnt(srv.local_addr(), "").unwrap(), Err(MNT3ERR_NOENT));
        let res = tcp_call(srv.local_addr(), MOUNT_PROG, 3, 1, &dirpath_args("/x").0).unwrap();
        assert_eq!(res, words(&[MNT3ERR_NOENT]));
        assert!(srv.mounts().is_empty());
    }

    #[test]
    fn accepts_trailing_slash_paths() {
        let srv = server();
        assert_eq!(
            mnt(srv.local_addr(), "/export/").unwrap().unwrap().0,
            root()
        );
        assert_eq!(
            mnt(srv.local_addr(), "/export//").unwrap().unwrap().0,
            root()
        );
        let other = mnt(srv.local_addr(), "/other").unwrap().unwrap().0;
        assert_eq!(other.as_bytes(), &[9; 8]);
        assert_eq!(normalize_path("/"), "/");
        assert_eq!(normalize_path("///"), "/");
        assert_eq!(normalize_path(""), "");
    }

    #[test]
    fn accepts_export_list() {
        let srv = server();
        assert_eq!(
            export_list(srv.local_addr()).unwrap(),
            ["/export", "/other"]
        );
        let one = MountServer::start(
            "127.0.0.1:0".parse().unwrap(),
            vec![Export::to_everyone("/export", root())],
        )
        .unwrap();
        let res = tcp_call(one.local_addr(), MOUNT_PROG, 3, MOUNTPROC3_EXPORT, &[]).unwrap();
        // exports: entry follows, ex_dir "/export", one group "*", no more groups, no next
        // entry.
        let mut want = words(&[1, 7]);
        want.extend_from_slice(b"/export\0");
        want.extend_from_slice(&words(&[1, 1]));
        want.extend_from_slice(b"*\0\0\0");
        want.extend_from_slice(&words(&[0, 0]));
        assert_eq!(res, want);
    }

    #[test]
    fn rejects_mnt_from_a_client_the_rules_do_not_name() {
        let mut rules = Exports::default();
        rules
            .add_spec("/export:10.9.9.0/24(rw,sec=none) 127.0.0.1(ro,sec=sys)")
            .unwrap();
        rules.add_spec("/private:10.1.1.1(rw)").unwrap();
        let list = rules
            .list()
            .iter()
            .map(|e| Export {
                path: e.path.clone(),
                root: root(),
                clients: e.clients.clone(),
            })
            .collect();
        let srv = MountServer::start("127.0.0.1:0".parse().unwrap(), list).unwrap();
        // 127.0.0.1 is named for /export (AUTH_SYS only), not for /private.
        assert_eq!(
            mnt(srv.local_addr(), "/export").unwrap(),
            Ok((root(), vec![AUTH_UNIX]))
        );
        assert_eq!(
            mnt(srv.local_addr(), "/private").unwrap(),
            Err(MNT3ERR_ACCES)
        );
        assert!(srv.mounts().iter().all(|(_, p)| p != "/private"));
        // A reload that drops 127.0.0.1 from /export refuses the next MNT.
        srv.set_exports(vec![Export {
            path: "/export".into(),
            root: root(),
            clients: rules.list()[1].clients.clone(),
        }]);
        assert_eq!(
            mnt(srv.local_addr(), "/export").unwrap(),
            Err(MNT3ERR_ACCES)
        );
        srv.stop();
    }

    #[test]
    fn accepts_dump_umnt_and_umntall() {
        let srv = server();
        let addr = srv.local_addr();
        assert_eq!(dump(addr).unwrap(), []);
        mnt(addr, "/export/").unwrap().unwrap();
        mnt(addr, "/export").unwrap().unwrap();
        mnt(addr, "/other").unwrap().unwrap();
        let both = vec![
            ("127.0.0.1".to_string(), "/export".to_string()),
            ("127.0.0.1".to_string(), "/other".to_string()),
        ];
        assert_eq!(dump(addr).unwrap(), both);
        assert_eq!(srv.mounts(), both);
        let res = tcp_call(addr, MOUNT_PROG, 3, MOUNTPROC3_DUMP, &[]).unwrap();
        let mut want = words(&[1, 9]);
        want.extend_from_slice(b"127.0.0.1\0\0\0");
        want.extend_from_slice(&words(&[7]));
        want.extend_from_slice(b"/export\0");
        assert_eq!(&res[..want.len()], &want[..]);
        umnt(addr, "/export/").unwrap();
        assert_eq!(srv.mounts(), &both[1..]);
        mnt(addr, "/export").unwrap().unwrap();
        umntall(addr).unwrap();
        assert_eq!(dump(addr).unwrap(), []);
    }

    #[test]
    fn accepts_null_with_both_flavors() {
        let srv = server();
        assert_eq!(
            tcp_call(srv.local_addr(), MOUNT_PROG, 3, 0, &[]).unwrap(),
            Vec::<u8>::new()
        );
        let msg = encode_call_msg(5, MOUNT_PROG, 3, 0, ClientAuth::None, &[]).unwrap();
        let reply = exchange(srv.local_addr(), &record(&msg)).unwrap().unwrap();
        assert_eq!(reply, words(&[5, 1, 0, 0, 0, 0]));
    }

    #[test]
    fn accepts_call_in_three_fragments() {
        let srv = server();
        let msg = call(77, 3, MOUNTPROC3_MNT, &dirpath_args("/export").0);
        let (a, rest) = msg.split_at(10);
        let (b, c) = rest.split_at(21);
        let mut wire = (a.len() as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(a);
        wire.extend_from_slice(&(b.len() as u32).to_be_bytes());
        wire.extend_from_slice(b);
        wire.extend_from_slice(&(c.len() as u32 | LAST_FRAGMENT).to_be_bytes());
        wire.extend_from_slice(c);
        let reply = exchange(srv.local_addr(), &wire).unwrap().unwrap();
        assert_eq!(&reply[..4], &words(&[77])[..]);
        assert_eq!(decode_mountres3(&reply[24..]).unwrap().unwrap().0, root());
    }

    #[test]
    fn accepts_record_at_bound() {
        let srv = server();
        let mut msg = call(8, 3, MOUNTPROC3_NULL, &[]);
        msg.resize(crate::nfs::rpc_tcp::DEFAULT_MAX_RECORD, 0);
        let reply = exchange(srv.local_addr(), &record(&msg)).unwrap().unwrap();
        assert_eq!(reply, words(&[8, 1, 0, 0, 0, 0]));
    }

    #[test]
    fn rejects_record_over_bound_by_closing() {
        let srv = server();
        let mut msg = call(9, 3, MOUNTPROC3_NULL, &[]);
        msg.resize(crate::nfs::rpc_tcp::DEFAULT_MAX_RECORD + 1, 0);
        let mut s = connect(srv.local_addr());
        // The server may close before it has read everything: the write may fail too.
        let _ = s.write_all(&record(&msg));
        assert!(!matches!(read_record(&mut s, 1 << 20), Ok(Some(_))));
        still_serves(srv.local_addr());
    }

    #[test]
    fn rejects_bad_arguments_with_garbage_args() {
        let srv = server();
        let addr = srv.local_addr();
        let long = "/".repeat(MNTPATHLEN as usize + 1);
        for args in [
            dirpath_args(&long).0,
            words(&[0xffff_fff0]),
            words(&[8, 0x2f2f_2f2f]),
            vec![],
        ] {
            for p in [MOUNTPROC3_MNT, MOUNTPROC3_UMNT] {
                let e = tcp_call(addr, MOUNT_PROG, 3, p, &args).unwrap_err();
                assert_eq!(
                    reply_err(&e),
                    RpcReplyError::Accepted(AcceptStat::GarbageArgs)
                );
            }
        }
        let at_bound = "/".repeat(MNTPATHLEN as usize);
        assert_eq!(mnt(addr, &at_bound).unwrap(), Err(MNT3ERR_NOENT));
    }

    #[test]
    fn rejects_unknown_procedure_version_and_program() {
        let srv = server();
        let addr = srv.local_addr();
        let e = tcp_call(addr, MOUNT_PROG, 3, 6, &[]).unwrap_err();
        assert_eq!(
            reply_err(&e),
            RpcReplyError::Accepted(AcceptStat::ProcUnavail)
        );
        for vers in [1, 2, 4] {
            let e = tcp_call(addr, MOUNT_PROG, vers, 1, &dirpath_args("/export").0).unwrap_err();
            let mismatch = AcceptStat::ProgMismatch { low: 3, high: 3 };
            assert_eq!(reply_err(&e), RpcReplyError::Accepted(mismatch));
        }
        let reply = exchange(addr, &record(&call(3, 1, 0, &[])))
            .unwrap()
            .unwrap();
        assert_eq!(reply, words(&[3, 1, 0, 0, 0, 2, 3, 3]));
        let e = tcp_call(addr, 100_003, 3, 0, &[]).unwrap_err();
        assert_eq!(
            reply_err(&e),
            RpcReplyError::Accepted(AcceptStat::ProgUnavail)
        );
        assert!(e.to_string().contains("PROG_UNAVAIL"), "{e}");
    }

    #[test]
    fn rejects_rpc_version_and_bad_auth() {
        let srv = server();
        let addr = srv.local_addr();
        // rpcvers 3 → MSG_DENIED / RPC_MISMATCH {2, 2}.
        let msg = words(&[21, 0, 3, MOUNT_PROG, 3, 0, 0, 0, 0, 0]);
        let reply = exchange(addr, &record(&msg)).unwrap().unwrap();
        assert_eq!(reply, words(&[21, 1, 1, 0, 2, 2]));
        let bad = [
            // AUTH_DH credential: not served.
            (
                words(&[22, 0, 2, MOUNT_PROG, 3, 0, 3, 0, 0, 0]),
                AuthStat::BadCred,
            ),
            // AUTH_NONE with a body.
            (
                words(&[22, 0, 2, MOUNT_PROG, 3, 0, 0, 4, 1, 0, 0]),
                AuthStat::BadCred,
            ),
            // AUTH_SYS body that does not parse.
            (
                words(&[22, 0, 2, MOUNT_PROG, 3, 0, 1, 4, 1, 0, 0]),
                AuthStat::BadCred,
            ),
            // AUTH_SYS verifier.
            (
                words(&[22, 0, 2, MOUNT_PROG, 3, 0, 0, 0, 1, 0]),
                AuthStat::BadVerf,
            ),
            // credential longer than 400 octets.
            (
                words(&[22, 0, 2, MOUNT_PROG, 3, 0, 1, 401]),
                AuthStat::BadCred,
            ),
        ];
        for (msg, why) in bad {
            let reply = exchange(addr, &record(&msg)).unwrap().unwrap();
            assert_eq!(reply, words(&[22, 1, 1, 1, why.to_u32()]), "{why:?}");
        }
        let auth = RejectedReply::AuthError(AuthStat::BadCred);
        assert_eq!(
            handle_record_stat(&words(&[22, 0, 2, MOUNT_PROG, 3, 0, 3, 0, 0, 0])),
            Some(RpcReplyError::Denied(auth))
        );
        still_serves(addr);
    }

    fn handle_record_stat(msg: &[u8]) -> Option<RpcReplyError> {
        let svc = MountService {
            exports: exports().into(),
            mounts: Mutex::new(Vec::new()),
        };
        let reply = handle_record(&svc, "127.0.0.1:9".parse().unwrap(), msg).reply()?;
        match rpcrdma_engine::rpc::decode_reply(&reply).ok()?.0.body {
            rpcrdma_engine::rpc::ReplyBody::Denied(d) => Some(RpcReplyError::Denied(d)),
            rpcrdma_engine::rpc::ReplyBody::Accepted { stat, .. } => {
                Some(RpcReplyError::Accepted(stat))
            }
        }
    }

    #[test]
    fn rejects_truncated_header_by_closing() {
        let srv = server();
        let addr = srv.local_addr();
        let full = call(4, 3, 0, &[]);
        for cut in [0, 3, 7, 12, 23, full.len() - 1] {
            let r = exchange(addr, &record(&full[..cut]));
            assert!(!matches!(r, Ok(Some(_))), "cut {cut}: {r:?}");
        }
        // A REPLY where a CALL belongs, and an unknown msg_type, close too.
        let r = exchange(addr, &record(&words(&[4, 1, 0, 0, 0, 0])));
        assert!(!matches!(r, Ok(Some(_))));
        let r = exchange(addr, &record(&words(&[4, 7, 2, 0, 0, 0])));
        assert!(!matches!(r, Ok(Some(_))));
        still_serves(addr);
    }

    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) as u32
        }
    }

    #[test]
    fn survives_random_records_and_bytes() {
        let svc = MountService {
            exports: exports().into(),
            mounts: Mutex::new(Vec::new()),
        };
        let peer = "127.0.0.1:9".parse().unwrap();
        let mut rng = Lcg(0x5eed);
        let base = call(1, 3, 1, &dirpath_args("/export").0);
        for _ in 0..20_000 {
            let mut m = base.clone();
            let len = rng.next() as usize % (m.len() + 8);
            m.resize(len, 0);
            for _ in 0..rng.next() % 4 {
                if !m.is_empty() {
                    let i = rng.next() as usize % m.len();
                    m[i] = rng.next() as u8;
                }
            }
            // Small values in words keep procedure and flavor numbers in interesting ranges.
            if rng.next() % 2 == 0 && m.len() >= 24 {
                let i = 4 * (rng.next() as usize % (m.len() / 4));
                m[i..i + 4].copy_from_slice(&(rng.next() % 8).to_be_bytes());
            }
            let _ = handle_record(&svc, peer, &m);
        }
        let srv = server();
        for seed in 0..8 {
            let mut rng = Lcg(seed);
            let bytes: Vec<u8> = (0..2048).map(|_| rng.next() as u8).collect();
            let mut s = connect(srv.local_addr());
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        still_serves(srv.local_addr());
    }

    #[test]
    fn accepts_newcomer_by_evicting_the_oldest_when_full() {
        let cfg = ServerConfig {
            max_conns: 2,
            ..ServerConfig::default()
        };
        let srv = MountServer::start_with("127.0.0.1:0".parse().unwrap(), exports(), cfg).unwrap();
        let addr = srv.local_addr();
        let null = record(&call(6, 3, 0, &[]));
        let mut a = connect(addr);
        let mut b = connect(addr);
        for s in [&mut a, &mut b] {
            s.write_all(&null).unwrap();
            assert!(read_record(s, 1024).unwrap().is_some());
        }
        // b and a interleaved: b has completed something last.
        for s in [&mut a, &mut b] {
            s.write_all(&null).unwrap();
            assert!(read_record(s, 1024).unwrap().is_some());
        }
        // A third connection is served; a, the longest without progress, made room.
        assert!(matches!(exchange(addr, &null), Ok(Some(_))));
        assert!(!matches!(read_record(&mut a, 1024), Ok(Some(_))));
        b.write_all(&null).unwrap();
        assert!(read_record(&mut b, 1024).unwrap().is_some());
        assert!(srv.conn_stats().evicted >= 1);
    }

    #[test]
    fn closes_idle_connections() {
        let cfg = ServerConfig {
            idle_timeout: Duration::from_millis(200),
            ..ServerConfig::default()
        };
        let srv = MountServer::start_with("127.0.0.1:0".parse().unwrap(), exports(), cfg).unwrap();
        let mut s = connect(srv.local_addr());
        s.write_all(&record(&call(6, 3, 0, &[]))).unwrap();
        assert!(read_record(&mut s, 1024).unwrap().is_some());
        assert!(!matches!(read_record(&mut s, 1024), Ok(Some(_))));
        assert_eq!(srv.conn_stats().idle_timeouts, 1);
        still_serves(srv.local_addr());
    }

    #[test]
    fn stop_closes_connections_and_listener() {
        let srv = server();
        let addr = srv.local_addr();
        let mut s = connect(addr);
        s.write_all(&record(&call(6, 3, 0, &[]))).unwrap();
        assert!(read_record(&mut s, 1024).unwrap().is_some());
        let t0 = Instant::now();
        srv.stop();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(!matches!(read_record(&mut s, 1024), Ok(Some(_))));
        assert!(mnt(addr, "/export").is_err());
    }

    #[test]
    fn rejects_malformed_replies_in_client_decoders() {
        assert_eq!(decode_mountres3(&words(&[13])).unwrap(), Err(MNT3ERR_ACCES));
        assert!(decode_mountres3(&words(&[0, 65])).is_err());
        assert!(decode_mountres3(&words(&[0, 0, 1000])).is_err());
        assert!(decode_mountres3(&words(&[0, 0, 2, 1])).is_err());
        assert!(decode_exports(&words(&[1, 1])).is_err());
        assert!(decode_exports(&words(&[2])).is_err());
        assert!(decode_mountlist(&words(&[1, 0, 0])).is_err());
        assert_eq!(decode_mountlist(&words(&[0])).unwrap(), []);
    }
}
