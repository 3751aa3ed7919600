//! Shared set-up of the NFS server tests: `rpcrdma-nfsd`'s daemon on the software provider
//! (MOUNT on 127.0.0.1), and our NFSv3 client over a second soft device of the same fabric.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use rpcrdma_apps::nfs3::client::NfsClient;
use rpcrdma_apps::nfs3::daemon::{Backend, Daemon, DaemonOptions};
use rpcrdma_apps::nfs3::mount;
use rpcrdma_apps::nfs3::types::Fh;
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_poller::{
    BackoffConfig, Client, ClientOptions, Cores, Endpoint, EndpointConfig, PinPolicy,
    ReactorConfig, ReactorSet,
};

static PORT: AtomicU16 = AtomicU16::new(41000);

/// A server and one client connection.
pub struct Rig {
    pub fabric: SoftFabric,
    pub daemon: Daemon<SoftProvider>,
    pub set: ReactorSet,
    pub client_ep: Endpoint<SoftProvider>,
    pub nfs: NfsClient,
    pub root: Fh,
    pub addr: SocketAddr,
    pub dir: Option<PathBuf>,
}

/// Options the tests start the daemon with.
pub fn options(backend: Backend) -> DaemonOptions {
    let port = PORT.fetch_add(1, Ordering::Relaxed);
    DaemonOptions {
        nfs: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), port),
        mount: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
        backend,
        reactors: 1,
        workers: 2,
        credits: 16,
        max_io: 256 * 1024,
        buffers: 32,
        max_conns: 8,
        rpcbind: false,
        hugepages: false,
        memory_capacity: 256 << 20,
        ..DaemonOptions::default()
    }
}

/// A fresh directory for the dir backend.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "rpcrdma-nfsd-{tag}-{}-{}",
        std::process::id(),
        PORT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("scratch dir");
    p
}

impl Rig {
    /// The memory backend.
    pub fn memory() -> Rig {
        Rig::with(options(Backend::Memory), None)
    }

    /// The directory backend on a fresh directory.
    pub fn dir(tag: &str) -> Rig {
        let d = scratch_dir(tag);
        Rig::with(options(Backend::Dir(d.clone())), Some(d))
    }

    /// A rig with these options.
    pub fn with(o: DaemonOptions, dir: Option<PathBuf>) -> Rig {
        let fabric = SoftFabric::new();
        let sdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        let cdev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        let daemon = Daemon::<SoftProvider>::start(sdev, &o).expect("daemon");
        let mut rc = ReactorConfig::new(Cores::Count(1));
        rc.pin = PinPolicy::Off;
        rc.backoff = BackoffConfig::shared_cores();
        rc.drain_timeout = Duration::from_secs(2);
        rc.name = "nfsclient".into();
        let set = ReactorSet::start(&rc).expect("client reactors");
        let ecfg = EndpointConfig {
            max_conns_per_reactor: 4,
            max_credits: 16,
            buffers: 64,
            reply_buffers: 32,
            buffer_size: 256 * 1024 + 4096,
            reply_buffer_size: 0,
            workers: 0,
            worker_ring: 64,
            hugepages: false,
        };
        let client_ep = Endpoint::<SoftProvider>::new(&set, cdev, ecfg).expect("client ep");
        let addr = daemon.nfs_addr();
        let client = Client::connect(
            &client_ep,
            addr,
            ClientOptions {
                credits: 16,
                ..ClientOptions::default()
            },
        )
        .expect("connect");
        assert!(client.wait_connected(Duration::from_secs(5)));
        let m = daemon.mount_addr().expect("mount");
        let (root, flavors) = mount::mnt(m, "/export")
            .expect("mount call")
            .expect("MNT3_OK");
        assert!(flavors.contains(&1));
        Rig {
            fabric,
            daemon,
            set,
            client_ep,
            nfs: NfsClient::new(client),
            root,
            addr,
            dir,
        }
    }

    /// Stops everything.
    pub fn stop(mut self) {
        self.nfs.rpc().close();
        let _ = self.set.stop();
        self.daemon.stop();
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
