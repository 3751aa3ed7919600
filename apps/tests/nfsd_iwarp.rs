//! `rpcrdma-nfsd --provider iwarp` as a process of its own, as an operator starts it, and our
//! NFSv3 client in the test's process: the poller's `Client` over the user-space iWARP provider
//! (RDMAP/DDP/MPA over loopback TCP; the client's chunks exposed through memory windows).
//! MOUNT over TCP to the server's mount port, then the NFSv3 workload of `nfsd_smoke.rs`
//! (`nfsd_common::workload`: DDP both ways, 300 directory entries listed). On SIGTERM the
//! server prints its counters and exits 0: they must show the calls arrived with Read and
//! Write chunks, on one connection, with no RPC error.

mod nfsd_common;
mod procs;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use procs::{free_port, Server};
use rpcrdma_apps::nfs::mount;
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_engine::verbs::iwarp::IwarpProvider;
use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::{
    BackoffConfig, Client, ClientOptions, Cores, Endpoint, PinPolicy, ReactorConfig, ReactorSet,
};

const NFSD: &str = env!("CARGO_BIN_EXE_rpcrdma-nfsd");

/// The value of counter `name` in the server's `nfsd-stat NAME VALUE` lines.
fn counter(out: &str, name: &str) -> u64 {
    let prefix = format!("nfsd-stat {name} ");
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no counter {name} in:\n{out}"))
        .trim()
        .parse()
        .expect("a count")
}

#[test]
fn accepts_our_nfs_client_against_rpcrdma_nfsd_over_iwarp() {
    let (port, mport) = (free_port().to_string(), free_port().to_string());
    let server = Server::start(
        NFSD,
        &[
            "--provider",
            "iwarp",
            "--bind",
            "127.0.0.1",
            "--port",
            &port,
            "--mount-port",
            &mport,
            "--no-rpcbind",
            "--no-hugepages",
            "--handle-key",
            "none",
            "--backend",
            "memory",
            // Our client sends AUTH_NONE: the anonymous identity is root here.
            "--export",
            "/export:*(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0)",
        ],
        "rpcrdma-nfsd: ready",
    );
    assert!(
        server.banner.contains(&format!(
            "ready nfs=127.0.0.1:{port} mount=127.0.0.1:{mport}"
        )),
        "{}",
        server.banner
    );
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut rc = ReactorConfig::new(Cores::Count(1));
    rc.pin = PinPolicy::Off;
    rc.backoff = BackoffConfig::shared_cores();
    rc.drain_timeout = Duration::from_secs(2);
    rc.name = "nfsclient".into();
    let mut set = ReactorSet::start(&rc).expect("client reactors");
    let dev = IwarpProvider::open(lo).expect("iwarp device");
    let ecfg = nfsd_common::client_config();
    let ep = Endpoint::<IwarpProvider>::new(&set, dev, ecfg).expect("client endpoint");
    let nfs_addr = SocketAddr::new(lo, port.parse().expect("port"));
    let client = Client::connect(
        &ep,
        nfs_addr,
        ClientOptions {
            credits: 16,
            ..ClientOptions::default()
        },
    )
    .expect("connect");
    assert!(client.wait_connected(Duration::from_secs(10)), "connected");
    let m = SocketAddr::new(lo, mport.parse().expect("port"));
    let (root, flavors) = mount::mnt(m, "/export")
        .expect("mount call")
        .expect("MNT3_OK");
    assert!(flavors.contains(&1), "AUTH_SYS offered: {flavors:?}");
    let nfs = NfsClient::new(client);
    nfsd_common::workload(&nfs, &root);
    nfs.rpc().close();
    set.stop().expect("client reactors stop");
    let (ok, out) = server.stop();
    assert!(ok, "rpcrdma-nfsd failed: {out}");
    assert!(out.contains("rpcrdma-nfsd: stopped"), "{out}");
    assert!(counter(&out, "transport.read_chunk_calls") >= 1, "{out}");
    assert!(counter(&out, "transport.write_chunk_calls") >= 1, "{out}");
    assert_eq!(counter(&out, "conn.accepted"), 1, "{out}");
    assert_eq!(counter(&out, "rpc.errors"), 0, "{out}");
    assert!(counter(&out, "rpc.calls") >= 300, "{out}");
}
