//! The provider conformance suite with its two ends in two processes: each side's device
//! lives in a process of its own (a device process, [`host`]), connected to the other by real
//! TCP, and the checks run unchanged in the test process, whose provider ([`proxy::Remote`])
//! forwards every verbs call to the process owning the object.
//!
//! Why this shape: the suite stays one piece of code. Splitting each check into two roles
//! would write every check twice (and its expectations on both ends); driving both ends'
//! objects from one place keeps each check's sequence and expectations as they are, while
//! everything the provider does (sockets, MPA/DDP/RDMAP, placement, completions, termination)
//! happens in the two device processes, each progressing only its own connections.
//!
//! The checks fill and read the buffers they register on both sides. Those buffers come from
//! memory mapped at the same address in the test process and both device processes
//! ([`Arena`], installed with `conformance::set_buf_memory`): a device process registers and
//! places into the very address the check gave, and the check sees what arrived there.
//!
//! Normal operation: [`ProcEnv::new`] starts the two device processes (this test binary run
//! again with `--exact xproc_host --ignored`, the channel's path and the arena in its
//! environment); dropping it closes their channels, which ends them. Recovery: a device process
//! that fails closes its channel, and the check's next call fails the test, as does one that
//! does not connect, or answer a request, within 30 s; one that does not end within 5 s of its
//! channel closing is killed.

#![allow(dead_code)]

pub mod host;
pub mod proxy;
pub mod wire;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::conformance::{self, BufMemory, Env};
use rpcrdma_engine::verbs::Provider;

use proxy::{Ctl, RDevice, Remote};

/// The name of the ignored test a device process runs.
pub const HOST_TEST: &str = "xproc_host";
/// Environment: the control channel's socket path.
const SOCK: &str = "RPCRDMA_XPROC_SOCK";
/// Environment: the arena's descriptor number.
const ARENA_FD: &str = "RPCRDMA_XPROC_ARENA_FD";
/// Environment: the device's address.
const IP: &str = "RPCRDMA_XPROC_IP";

/// Where the arena is mapped in every process of a run (far from where Linux puts heaps,
/// stacks and libraries on x86-64 and aarch64).
const ARENA_ADDR: usize = 0x2a00_0000_0000;
/// The arena's size (reserved, not committed: pages exist once touched).
const ARENA_LEN: usize = 1 << 30;
/// Allocation granule.
const PAGE: usize = 4096;
/// How long a device process may take to connect, or to answer one request.
const WAIT: Duration = Duration::from_secs(30);

/// Memory shared by the processes of a run, mapped at [`ARENA_ADDR`] in each: a `memfd` the
/// device processes inherit, with a first-fit free list.
pub struct Arena {
    fd: i32,
    /// Free ranges: offset → length, coalesced.
    free: Mutex<std::collections::BTreeMap<usize, usize>>,
}

/// Maps the arena `fd` at [`ARENA_ADDR`]; panics when the place is taken.
fn map_arena(fd: i32) {
    // SAFETY: a fresh shared mapping of our own memfd at an address nothing else uses
    // (MAP_FIXED_NOREPLACE fails instead of replacing a mapping).
    let p = unsafe {
        libc::mmap(
            ARENA_ADDR as *mut libc::c_void,
            ARENA_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    assert_eq!(
        p as usize, ARENA_ADDR,
        "mapping the shared buffer arena failed"
    );
}

impl Arena {
    /// The process's arena, created and installed as the suite's buffer memory on first use.
    pub fn get() -> &'static Arena {
        static ARENA: OnceLock<Arena> = OnceLock::new();
        ARENA.get_or_init(|| {
            // SAFETY: a C string literal; flags 0: inherited by the device processes.
            let fd = unsafe { libc::memfd_create(c"rpcrdma-xproc".as_ptr(), 0) };
            assert!(fd >= 0, "memfd_create failed");
            // SAFETY: our own descriptor.
            let r = unsafe { libc::ftruncate(fd, ARENA_LEN as libc::off_t) };
            assert_eq!(r, 0, "ftruncate of the arena failed");
            map_arena(fd);
            let mut free = std::collections::BTreeMap::new();
            free.insert(0, ARENA_LEN);
            Arena {
                fd,
                free: Mutex::new(free),
            }
        })
    }

    /// Installs the arena as the suite's buffer memory in this process.
    pub fn install() {
        let a: &'static Arena = Arena::get();
        conformance::set_buf_memory(a);
    }
}

impl BufMemory for Arena {
    fn alloc(&self, len: usize) -> Option<*mut u8> {
        let len = len.div_ceil(PAGE) * PAGE;
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (&off, &have) = free.iter().find(|(_, &l)| l >= len)?;
        free.remove(&off);
        if have > len {
            free.insert(off + len, have - len);
        }
        let p = (ARENA_ADDR + off) as *mut u8;
        // SAFETY: [off, off + len) is inside the mapping and was free.
        unsafe { p.write_bytes(0, len) };
        Some(p)
    }

    unsafe fn free(&self, ptr: *mut u8, len: usize) {
        let len = len.div_ceil(PAGE) * PAGE;
        let mut off = ptr as usize - ARENA_ADDR;
        let mut len = len;
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((&o, &l)) = free.range(..off).next_back() {
            if o + l == off {
                free.remove(&o);
                off = o;
                len += l;
            }
        }
        if let Some(l) = free.remove(&(off + len)) {
            len += l;
        }
        free.insert(off, len);
    }
}

/// Starts a device process for `ip` and connects its control channel.
pub(crate) fn spawn_host(ip: IpAddr) -> Ctl {
    static N: AtomicU32 = AtomicU32::new(0);
    let arena = Arena::get();
    // Relaxed: a unique-number counter.
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("rpcrdma-xproc-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).expect("control socket");
    let exe = std::env::current_exe().expect("test binary");
    let child = Command::new(exe)
        .args(["--exact", HOST_TEST, "--ignored", "--test-threads=1", "-q"])
        .env(SOCK, &path)
        .env(ARENA_FD, arena.fd.to_string())
        .env(IP, ip.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn a device process");
    let mut child = child;
    // The device process connects at once; one that fails first is reported, not waited for.
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let deadline = Instant::now() + WAIT;
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accepting the device process: {e}"),
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the device process ended before it connected: {st}");
        }
        assert!(
            Instant::now() < deadline,
            "the device process did not connect"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let _ = std::fs::remove_file(&path);
    stream.set_nonblocking(false).expect("a blocking channel");
    // A device process that stops answering fails the call instead of hanging the test.
    stream.set_read_timeout(Some(WAIT)).expect("a read timeout");
    Ctl::new(stream, child)
}

/// The body of the ignored test [`HOST_TEST`]: serves as a device process when started as one
/// (returns at once otherwise).
pub fn host_main() {
    let (Ok(path), Ok(fd), Ok(ip)) = (
        std::env::var(SOCK),
        std::env::var(ARENA_FD),
        std::env::var(IP),
    ) else {
        return;
    };
    map_arena(fd.parse().expect("arena descriptor"));
    let ch = std::os::unix::net::UnixStream::connect(path).expect("control channel");
    host::serve(ch, ip.parse().expect("device address"));
}

/// Whether this process is a device process (its other tests then return at once).
pub fn is_host() -> bool {
    std::env::var_os(SOCK).is_some()
}

/// Two device processes on `127.0.0.1`: the client's and the server's.
pub struct ProcEnv {
    client: RDevice,
    server: RDevice,
}

impl ProcEnv {
    /// Starts both device processes.
    pub fn new() -> ProcEnv {
        Arena::install();
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        ProcEnv {
            client: Remote::open(lo).expect("client device process"),
            server: Remote::open(lo).expect("server device process"),
        }
    }
}

impl Env for ProcEnv {
    type P = Remote;

    fn client(&self) -> &RDevice {
        &self.client
    }

    fn server(&self) -> &RDevice {
        &self.server
    }

    fn listen_addr(&mut self) -> SocketAddr {
        // A port the system reports free now (bound, read, released).
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        std::net::TcpListener::bind(any)
            .and_then(|l| l.local_addr())
            .unwrap_or(any)
    }

    fn idle(&mut self) {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }

    fn settle_iterations(&self) -> u32 {
        100
    }
}
