//! Shared set-up of the NFS server tests: `rpcrdma-nfsd`'s daemon on the software provider
//! (MOUNT on 127.0.0.1), and our NFSv3 client over a second soft device of the same fabric.
#![allow(dead_code)]

pub mod v41;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use rpcrdma_apps::nfs::daemon::{Backend, Daemon, DaemonOptions};
use rpcrdma_apps::nfs::exports::Exports;
use rpcrdma_apps::nfs::mount;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Ftype3, Nfsstat3, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::client::{NfsClient, NfsError, NfsResult};
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_poller::{
    AuthSysCred, BackchannelService, BackoffConfig, Client, ClientOptions, Cores, Endpoint,
    EndpointConfig, PinPolicy, ReactorConfig, ReactorSet,
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
        // Our client sends AUTH_NONE, which acts as the export's anonymous identity: root
        // here (stores check permissions), unless a test says otherwise.
        exports: exports("/export:*(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0)"),
        // The daemon shares this process's two cores with the test's own client reactors:
        // raised above them it would spin through its idle phases while they wait. Its
        // priority is for other processes' work (poller/tests/reactor.rs checks it). Real-time
        // wake-ups likewise (poller/tests/reactor_realtime.rs); off, the system calls a test
        // counts are the daemon's own.
        reactor_nice: None,
        realtime_wakeups: None,
        ..DaemonOptions::default()
    }
}

/// The export list of `--export` specs.
pub fn exports(specs: &str) -> Exports {
    let mut e = Exports::default();
    for s in specs.split(';') {
        e.add_spec(s).expect("export spec");
    }
    e
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
        let client_ep =
            Endpoint::<SoftProvider>::new(&set, cdev, client_config()).expect("client ep");
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

    /// A counter of the daemon (`Daemon::counters` names); panics on an unknown name.
    pub fn counter(&self, name: &str) -> u64 {
        self.daemon
            .counters()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no counter {name}"))
    }

    /// Another client connection from another soft device of the fabric (address `ip`),
    /// with its endpoint (keep both alive).
    pub fn second_client(&self, ip: Ipv4Addr) -> (Endpoint<SoftProvider>, NfsClient) {
        self.client_as(ip, None)
    }

    /// A client connection from address `ip` whose calls carry `cred` (AUTH_SYS; `None`:
    /// AUTH_NONE), with its endpoint (keep both alive).
    pub fn client_as(
        &self,
        ip: Ipv4Addr,
        cred: Option<AuthSysCred>,
    ) -> (Endpoint<SoftProvider>, NfsClient) {
        let dev = self.fabric.open(IpAddr::V4(ip));
        let ep = Endpoint::<SoftProvider>::new(&self.set, dev, client_config()).expect("ep");
        let c = Client::connect(
            &ep,
            self.addr,
            ClientOptions {
                credits: 16,
                credential: cred,
                ..ClientOptions::default()
            },
        )
        .expect("connect");
        assert!(c.wait_connected(Duration::from_secs(5)));
        (ep, NfsClient::new(c))
    }

    /// A client connection from address `ip` serving `service` on its backchannel (RFC 8167),
    /// with its endpoint (keep both alive).
    pub fn serving_client(
        &self,
        ip: Ipv4Addr,
        service: BackchannelService,
    ) -> (Endpoint<SoftProvider>, NfsClient) {
        let dev = self.fabric.open(IpAddr::V4(ip));
        let ep = Endpoint::<SoftProvider>::new(&self.set, dev, client_config()).expect("ep");
        let opts = ClientOptions {
            credits: 16,
            ..ClientOptions::default()
        };
        let c = Client::connect_serving(&ep, self.addr, opts, service).expect("connect");
        assert!(c.wait_connected(Duration::from_secs(5)));
        (ep, NfsClient::new(c))
    }

    /// Stops everything.
    pub fn stop(self) {
        if let Some(d) = self.stop_keep() {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// Stops everything but keeps the exported directory (returned).
    pub fn stop_keep(mut self) -> Option<PathBuf> {
        self.nfs.rpc().close();
        let _ = self.set.stop();
        self.daemon.stop();
        self.dir.take()
    }
}

/// The client endpoint's configuration.
pub fn client_config() -> EndpointConfig {
    EndpointConfig {
        max_conns_per_reactor: 4,
        max_credits: 16,
        buffers: 64,
        reply_buffers: 32,
        buffer_size: 256 * 1024 + 4096,
        reply_buffer_size: 0,
        workers: 0,
        worker_ring: 64,
        hugepages: false,
        ..EndpointConfig::default()
    }
}

/// A small deterministic generator (xorshift64*) for hostile inputs.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `n` random octets.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The NFS3ERR_* status a call failed with (panics when it succeeded or failed otherwise).
#[track_caller]
pub fn status<T: std::fmt::Debug>(r: NfsResult<T>) -> Nfsstat3 {
    match r {
        Err(NfsError::Status(s)) => s,
        other => panic!("expected an NFS3ERR status, got {other:?}"),
    }
}

/// Runs `f` on a memory-backend rig, then stops it.
pub fn on_memory(f: impl FnOnce(&Rig)) {
    let r = Rig::memory();
    f(&r);
    r.stop();
}

/// Runs `f` on a dir-backend rig (a fresh directory tagged `tag`), then stops it.
pub fn on_dir(tag: &str, f: impl FnOnce(&Rig)) {
    let r = Rig::dir(tag);
    f(&r);
    r.stop();
}

/// The NFSv3 workload every transport of the server must carry: GETATTR and FSINFO of the
/// root; CREATE, a 200 001-octet WRITE and READ through DDP (Read and Write chunks) and a small
/// inline READ; LOOKUP; MKDIR with 300 entries, listed by READDIR and READDIRPLUS.
pub fn workload(nfs: &NfsClient, root: &Fh) {
    let root = *root;
    let a = nfs.getattr(&root).expect("getattr root");
    assert_eq!(a.ftype, Ftype3::Dir);
    let info = nfs.fsinfo(&root).expect("fsinfo");
    assert!(info.rtmax >= 64 * 1024, "{info:?}");
    let f = nfs
        .create(&root, b"hello", CreateHow::Unchecked(Sattr3::default()))
        .expect("create");
    let data: Vec<u8> = (0..200_001u32).map(|i| (i * 7 % 251) as u8).collect();
    let (n, _, _) = nfs
        .write(&f, 0, &data, StableHow::FileSync, true)
        .expect("write ddp");
    assert_eq!(n as usize, data.len());
    let (back, eof) = nfs.read(&f, 0, 250_000, true).expect("read ddp");
    assert!(eof);
    assert_eq!(back, data);
    let (small, _) = nfs.read(&f, 3, 101, false).expect("read inline");
    assert_eq!(small, &data[3..104]);
    assert_eq!(nfs.lookup(&root, b"hello").expect("lookup"), f);
    let d = nfs.mkdir(&root, b"d", Sattr3::default()).expect("mkdir");
    for i in 0..300 {
        nfs.create(
            &d,
            format!("f{i:04}").as_bytes(),
            CreateHow::Guarded(Sattr3::default()),
        )
        .expect("create in d");
    }
    for plus in [false, true] {
        let all = nfs.readdir_all(&d, 4096, plus).expect("readdir");
        let names: Vec<_> = all
            .iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| String::from_utf8_lossy(&e.name).to_string())
            .collect();
        assert_eq!(names.len(), 300, "plus={plus}");
    }
}
