//! Hostile clients against the MOUNT service's TCP connection layer (RFC 5531 §11 record
//! marking): each test is an attack that used to take the service away from legitimate
//! clients, and checks that the attacker's connections are closed or evicted and that an
//! ordinary MNT still gets its root handle.
//!
//! Normal operation: a [`MountServer`] on 127.0.0.1 with short, configurable deadlines; the
//! attackers connect from 127.0.0.0/8 source addresses of their own (Linux routes the whole
//! block to the loopback device), the legitimate client with [`mount::mnt`] or a hand-built MNT
//! from a chosen address. Recovery: the tests assert outcomes (closed, served), never durations:
//! every deadline is at least ten times shorter than the time a test waits for its effect.

use std::io::{self, Read, Write};
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs::mount::{
    self, decode_mountres3, Export, MountServer, MOUNTPROC3_EXPORT, MOUNTPROC3_MNT, MOUNT_PROG,
    MOUNT_V3,
};
use rpcrdma_apps::nfs::rpc_tcp::{
    encode_call_msg, read_record, write_record, ClientAuth, ServerConfig, XdrBuf,
};
use rpcrdma_apps::nfs::types::Fh;
use rpcrdma_engine::rpc::{decode_reply, AcceptStat, ReplyBody};

/// How long a test waits for an effect whose deadline is a few hundred milliseconds.
const PATIENCE: Duration = Duration::from_secs(10);

fn root() -> Fh {
    Fh::new(&[7, 7, 7, 7]).expect("handle")
}

fn export() -> Export {
    Export::to_everyone("/export", root())
}

/// Limits with the given deadlines in milliseconds and the default connection limits.
fn limits(first_ms: u64, record_ms: u64, idle_ms: u64, write_ms: u64) -> ServerConfig {
    ServerConfig {
        first_record_timeout: Duration::from_millis(first_ms),
        record_timeout: Duration::from_millis(record_ms),
        idle_timeout: Duration::from_millis(idle_ms),
        write_timeout: Duration::from_millis(write_ms),
        ..ServerConfig::default()
    }
}

/// Deadlines long enough that only the connection limits can free a slot during a test.
fn patient() -> ServerConfig {
    limits(60_000, 60_000, 60_000, 60_000)
}

fn start(exports: Vec<Export>, cfg: ServerConfig) -> MountServer {
    MountServer::start_with("127.0.0.1:0".parse().expect("addr"), exports, cfg).expect("start")
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// A TCP connection to `dst` from the source address `src` (any port).
fn connect_from(src: Ipv4Addr, dst: SocketAddr) -> io::Result<TcpStream> {
    let SocketAddr::V4(dst) = dst else {
        return Err(io::Error::other("IPv4 only"));
    };
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns; the addresses are valid
    // sockaddr_in values of the length given; the descriptor moves into the TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(SocketAddrV4::new(src, 0));
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(io::Error::last_os_error());
        }
        let remote = sockaddr(dst);
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(io::Error::last_os_error());
        }
        stream.set_read_timeout(Some(PATIENCE))?;
        stream.set_write_timeout(Some(PATIENCE))?;
        Ok(stream)
    }
}

fn record(msg: &[u8]) -> Vec<u8> {
    let mut wire = Vec::new();
    write_record(&mut wire, msg).expect("frame");
    wire
}

fn call(xid: u32, proc_num: u32, args: &[u8]) -> Vec<u8> {
    encode_call_msg(
        xid,
        MOUNT_PROG,
        MOUNT_V3,
        proc_num,
        ClientAuth::SysRoot,
        args,
    )
    .expect("call")
}

fn mnt_args(path: &str) -> Vec<u8> {
    let mut b = XdrBuf::new();
    b.put_str(path);
    b.0
}

/// MNT "/export" from source address `src`: the root handle, or why not.
fn mnt_from(src: Ipv4Addr, server: SocketAddr) -> io::Result<Fh> {
    let mut s = connect_from(src, server)?;
    s.write_all(&record(&call(
        0x4d4e_5400,
        MOUNTPROC3_MNT,
        &mnt_args("/export"),
    )))?;
    let reply = read_record(&mut s, 1 << 20)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before the reply"))?;
    let (h, off) = decode_reply(&reply).map_err(|e| io::Error::other(e.to_string()))?;
    match h.body {
        ReplyBody::Accepted {
            stat: AcceptStat::Success,
            ..
        } => {}
        other => return Err(io::Error::other(format!("{other:?}"))),
    }
    match decode_mountres3(&reply[off..]) {
        Ok(Ok((fh, _))) => Ok(fh),
        other => Err(io::Error::other(format!("{other:?}"))),
    }
}

/// MNT "/export" from 127.0.0.1 with the crate's client.
fn mnt_ok(server: SocketAddr) {
    let got = mount::mnt(server, "/export").expect("MNT served");
    assert_eq!(got.expect("MNT3_OK").0, root());
}

/// Whether the server closes `s` (end of stream or reset) within [`PATIENCE`]; what the
/// server sent before is read and dropped.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let until = Instant::now() + PATIENCE;
    let mut sink = [0u8; 4096];
    while Instant::now() < until {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}

/// Slowloris: a record whose octets arrive one at a time, each well within the deadline of
/// the one before, never completes; the server closes it at the record deadline (it used to
/// reset its timeout on every read, so the connection lived as long as the trickle).
#[test]
fn rejects_slowloris_trickle_by_record_deadline() {
    let srv = start(vec![export()], limits(60_000, 300, 300, 300));
    let addr = srv.local_addr();
    let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 1), addr).expect("connect");
    // A last fragment of 1 000 octets, sent one octet every 50 ms: 20 s to complete.
    let mut wire = ((1000u32) | 0x8000_0000).to_be_bytes().to_vec();
    wire.extend_from_slice(&call(1, 0, &[]));
    wire.resize(4 + 1000, 0);
    let until = Instant::now() + PATIENCE;
    let mut closed = false;
    for octet in wire.chunks(1) {
        if Instant::now() > until {
            break;
        }
        if s.write_all(octet).is_err() {
            closed = true;
            break;
        }
        s.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        match s.read(&mut [0u8; 64]) {
            Ok(0) => closed = true,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            _ => closed = true,
        }
        if closed {
            break;
        }
    }
    assert!(
        closed,
        "a record trickled one octet at a time kept its connection"
    );
    assert_eq!(srv.conn_stats().record_timeouts, 1); // stats
    mnt_ok(addr);
}

/// A connection that never sends its first record is closed at the first-record deadline,
/// long before the idle timeout.
#[test]
fn rejects_silent_connection_by_first_record_deadline() {
    let srv = start(vec![export()], limits(300, 60_000, 60_000, 60_000));
    let addr = srv.local_addr();
    let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 1), addr).expect("connect");
    assert!(closed_by_server(&mut s), "a silent connection was kept");
    assert_eq!(srv.conn_stats().first_record_timeouts, 1); // stats
    mnt_ok(addr);
}

/// 70 idle connections from one address (more than the server's 64) and then an MNT from
/// that same address: the address's oldest idle connection makes room, the MNT is served.
#[test]
fn accepts_mnt_after_idle_connections_from_its_own_address() {
    let srv = start(vec![export()], patient());
    let addr = srv.local_addr();
    let idle: Vec<TcpStream> = (0..70)
        .map(|_| connect_from(Ipv4Addr::new(127, 0, 0, 1), addr).expect("connect"))
        .collect();
    mnt_ok(addr);
    let cfg = patient(); // stats
    assert!(srv.conn_stats().open <= cfg.max_conns_per_peer as u64); // stats
    drop(idle);
}

/// Eight addresses holding ten idle connections each (the server's 64 and more): an MNT from
/// a ninth address evicts one of them and is served, and so is one from a holder's address.
#[test]
fn accepts_mnt_from_new_address_when_many_addresses_fill_the_server() {
    let srv = start(vec![export()], patient());
    let addr = srv.local_addr();
    let mut idle = Vec::new();
    for round in 0..10 {
        for host in 10..18u8 {
            let s = connect_from(Ipv4Addr::new(127, 0, 0, host), addr);
            idle.push(s.unwrap_or_else(|e| panic!("round {round} host {host}: {e}")));
        }
    }
    let fh = mnt_from(Ipv4Addr::new(127, 0, 0, 30), addr).expect("MNT from a new address");
    assert_eq!(fh, root());
    let fh = mnt_from(Ipv4Addr::new(127, 0, 0, 12), addr).expect("MNT from a holder");
    assert_eq!(fh, root());
    assert!(srv.conn_stats().evicted >= 1); // stats
    drop(idle);
}

/// 70 connections from one address, each stopped in the middle of a record (the record
/// deadline is long): another address's MNT is served, and so is one from the attacker's.
#[test]
fn accepts_mnt_from_another_address_while_half_records_fill_the_server() {
    let srv = start(vec![export()], patient());
    let addr = srv.local_addr();
    let mut half = record(&call(9, 0, &[]));
    let cut = half.len() / 2;
    half.truncate(cut);
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let held: Vec<TcpStream> = (0..70)
        .map(|_| {
            let mut s = connect_from(attacker, addr).expect("connect");
            s.write_all(&half).expect("half a record");
            s
        })
        .collect();
    let fh = mnt_from(Ipv4Addr::new(127, 0, 0, 3), addr).expect("MNT from another address");
    assert_eq!(fh, root());
    let fh = mnt_from(attacker, addr).expect("MNT from the attacker's address");
    assert_eq!(fh, root());
    drop(held);
}

/// A client pipelines EXPORT calls whose replies (about 1 MiB each) it never reads: the
/// server goes on serving MNT to others, and closes the non-reader at the write deadline
/// instead of holding its reply (and its slot) for as long as the client likes.
#[test]
fn rejects_client_that_never_reads_replies_by_write_deadline() {
    let mut exports = vec![export()];
    let long = "x".repeat(1000);
    exports.extend((0..1000).map(|i| Export::to_everyone(&format!("/big{i:04}/{long}"), root())));
    let srv = start(exports, limits(60_000, 60_000, 60_000, 300));
    let addr = srv.local_addr();
    let mut stuck = connect_from(Ipv4Addr::new(127, 0, 0, 4), addr).expect("connect");
    let calls = 16u32;
    for xid in 0..calls {
        let wire = record(&call(xid, MOUNTPROC3_EXPORT, &[]));
        stuck.write_all(&wire).expect("pipelined EXPORT");
    }
    let full = calls as usize * 1_000_000;
    for _ in 0..3 {
        mnt_ok(addr);
    }
    // Ten write deadlines and more; then read what the server sent before it gave up.
    std::thread::sleep(Duration::from_secs(3));
    let mut got = 0usize;
    let mut sink = vec![0u8; 1 << 16];
    let until = Instant::now() + PATIENCE;
    let mut closed = false;
    stuck
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    while Instant::now() < until {
        match stuck.read(&mut sink) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "the non-reading client's connection was kept");
    assert!(
        got < full,
        "all {got} octets were sent to a client that did not read"
    );
    assert!(srv.conn_stats().write_timeouts >= 1); // stats
    mnt_ok(addr);
}
