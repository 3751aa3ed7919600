//! The ONC RPC server over TCP: one thread polling (poll(2)) the listener and every
//! connection, so no connection, however slow, holds a thread or stalls another.
//!
//! Normal operation: [`TcpRpcServer::start`] binds a non-blocking listener and starts the
//! loop. Each round waits for the listener, the connections ready for what they need (readable,
//! or writable while a reply is pending) and the nearest connection deadline; it serves the
//! ready connections ([`Conn::on_ready`]), closes those whose deadline passed, and accepts
//! newcomers. A newcomer whose address already holds `max_conns_per_peer` connections evicts
//! that address's connection that has gone longest without completing anything; one that
//! finds `max_conns` open evicts that connection of the address holding the most
//! ([`pick_victim`]). A newcomer is never refused: whoever holds many sockets loses its own,
//! so a client that connects to send one MNT is served.
//!
//! Recovery: a connection's failures close that connection only, counted in [`ConnStats`]. An
//! accept that fails for want of descriptors or memory pauses accepting for 10 ms instead of
//! spinning. [`TcpRpcServer::stop`] (also on drop) wakes the loop through a socket pair; the
//! loop shuts every connection down and returns.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::{pick_victim, poll_millis, Close, Conn};
use super::{canonical_peer, RpcService, ServerConfig};

/// How long accepting pauses after an accept failed for want of resources.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// Connections accepted per round before the open ones are served again.
const ACCEPTS_PER_TURN: usize = 64;

/// Longest poll(2) wait: the loop looks at its deadlines at least this often.
const MAX_WAIT_MS: i32 = 1000;

/// Counters of a [`TcpRpcServer`]'s connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Connections open now.
    pub open: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed to make room for a newcomer (per-address or server limit).
    pub evicted: u64,
    /// Connections closed for a record over the bound, one that is not a decodable CALL, or a
    /// service that failed on it.
    pub bad_records: u64,
    /// Connections closed because no record started within `first_record_timeout`.
    pub first_record_timeouts: u64,
    /// Connections closed because a started record was not complete within `record_timeout`.
    pub record_timeouts: u64,
    /// Connections closed after `idle_timeout` without a record.
    pub idle_timeouts: u64,
    /// Connections closed because a reply was not written within `write_timeout`.
    pub write_timeouts: u64,
}

#[derive(Default)]
struct Counters {
    open: AtomicU64,
    accepted: AtomicU64,
    evicted: AtomicU64,
    bad_records: AtomicU64,
    first_record_timeouts: AtomicU64,
    record_timeouts: AtomicU64,
    idle_timeouts: AtomicU64,
    write_timeouts: AtomicU64,
}

impl Counters {
    fn closed(&self, why: Close) {
        let c = match why {
            Close::Peer => return,
            Close::BadRecord => &self.bad_records,
            Close::FirstRecordTimeout => &self.first_record_timeouts,
            Close::RecordTimeout => &self.record_timeouts,
            Close::IdleTimeout => &self.idle_timeouts,
            Close::WriteTimeout => &self.write_timeouts,
            Close::Evicted => &self.evicted,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ConnStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConnStats {
            open: get(&self.open),
            accepted: get(&self.accepted),
            evicted: get(&self.evicted),
            bad_records: get(&self.bad_records),
            first_record_timeouts: get(&self.first_record_timeouts),
            record_timeouts: get(&self.record_timeouts),
            idle_timeouts: get(&self.idle_timeouts),
            write_timeouts: get(&self.write_timeouts),
        }
    }
}

struct Shared {
    stopping: AtomicBool,
    stats: Counters,
}

/// An ONC RPC server over TCP: one thread polls the listener and every connection. The
/// service runs on that thread and must not block (MOUNT's procedures are lookups in memory).
pub struct TcpRpcServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl TcpRpcServer {
    /// Binds `bind` (port 0: any free port) and starts serving `service` within `cfg`.
    pub fn start(
        bind: SocketAddr,
        service: Arc<dyn RpcService>,
        cfg: ServerConfig,
    ) -> io::Result<TcpRpcServer> {
        let listener = TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (wake, woken) = UnixStream::pair()?;
        woken.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            stopping: AtomicBool::new(false),
            stats: Counters::default(),
        });
        let mut lp = Loop {
            listener,
            woken,
            service,
            cfg,
            shared: Arc::clone(&shared),
            conns: Vec::new(),
            accept_paused_until: None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("rpc-tcp-{}", addr.port()))
            .spawn(move || lp.run())?;
        Ok(TcpRpcServer {
            addr,
            shared,
            wake,
            thread: Some(thread),
        })
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open right now.
    pub fn connections(&self) -> usize {
        usize::try_from(self.stats().open).unwrap_or(usize::MAX)
    }

    /// The connection counters.
    pub fn stats(&self) -> ConnStats {
        self.shared.stats.snapshot()
    }

    /// Stops the loop, shuts every connection down and closes the listener.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = (&self.wake).write(&[1]);
        let _ = thread.join();
    }
}

impl Drop for TcpRpcServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The loop's state: everything lives on its thread.
struct Loop {
    listener: TcpListener,
    woken: UnixStream,
    service: Arc<dyn RpcService>,
    cfg: ServerConfig,
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    accept_paused_until: Option<Instant>,
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

impl Loop {
    fn run(&mut self) {
        let mut fds = Vec::new();
        while !self.shared.stopping.load(Ordering::SeqCst) {
            let now = Instant::now();
            self.expire(now);
            let accepting = self.accept_paused_until.map_or(true, |t| now >= t);
            fds.clear();
            fds.push(pollfd(self.woken.as_raw_fd(), libc::POLLIN));
            let listen = if accepting { libc::POLLIN } else { 0 };
            fds.push(pollfd(self.listener.as_raw_fd(), listen));
            for c in &self.conns {
                let want = if c.wants_write() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                fds.push(pollfd(c.stream.as_raw_fd(), want));
            }
            let wait = self.wait_millis(now);
            // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd entries.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
            if rc < 0 {
                if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    std::thread::sleep(ACCEPT_PAUSE);
                }
                continue;
            }
            let now = Instant::now();
            self.serve_ready(&fds[2..], now);
            if fds[0].revents != 0 {
                let mut sink = [0u8; 16];
                while matches!((&self.woken).read(&mut sink), Ok(n) if n > 0) {}
            }
            if fds[1].revents != 0 {
                self.accept(now);
            }
            self.publish();
        }
        for c in self.conns.drain(..) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        self.publish();
    }

    /// Milliseconds poll(2) may wait: until the nearest deadline or the end of an accept
    /// pause, at most [`MAX_WAIT_MS`].
    fn wait_millis(&self, now: Instant) -> i32 {
        let deadlines = self.conns.iter().filter_map(|c| c.deadline(&self.cfg));
        let nearest = deadlines
            .map(|(at, _)| at)
            .chain(self.accept_paused_until)
            .min();
        nearest.map_or(MAX_WAIT_MS, |at| poll_millis(now, at).min(MAX_WAIT_MS))
    }

    /// Serves the connections poll(2) reported (`ready[i]` is `conns[i]`'s entry).
    fn serve_ready(&mut self, ready: &[libc::pollfd], now: Instant) {
        for (c, fd) in self.conns.iter_mut().zip(ready) {
            if fd.revents != 0 {
                c.closing = c.on_ready(self.service.as_ref(), &self.cfg, now);
            }
        }
        self.close_marked();
    }

    /// Closes the connections whose deadline has passed.
    fn expire(&mut self, now: Instant) {
        for c in &mut self.conns {
            if let Some((at, why)) = c.deadline(&self.cfg) {
                if at <= now {
                    c.closing = Some(why);
                }
            }
        }
        self.close_marked();
    }

    fn close_marked(&mut self) {
        let stats = &self.shared.stats;
        self.conns.retain(|c| match c.closing {
            Some(why) => {
                stats.closed(why);
                let _ = c.stream.shutdown(Shutdown::Both);
                false
            }
            None => true,
        });
    }

    /// Accepts what the listener has, up to [`ACCEPTS_PER_TURN`].
    fn accept(&mut self, now: Instant) {
        for _ in 0..ACCEPTS_PER_TURN {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if is_transient(&e) => {}
                Err(_) => {
                    // EMFILE, ENFILE, ENOBUFS: the pending connection stays queued.
                    self.accept_paused_until = now.checked_add(ACCEPT_PAUSE);
                    return;
                }
            }
        }
    }

    /// Takes a newcomer in, evicting a connection first when a limit is reached.
    fn admit(&mut self, stream: TcpStream, peer: SocketAddr, now: Instant) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = stream.set_nodelay(true);
        let ip = canonical_peer(peer).ip();
        let same = self.conns.iter().filter(|c| c.ip == ip).count();
        let per_peer = self.cfg.max_conns_per_peer;
        // Whose connection makes room: the newcomer's address's, or any address's.
        let scope = if per_peer > 0 && same >= per_peer {
            Some(Some(ip))
        } else if self.conns.len() >= self.cfg.max_conns.max(1) {
            Some(None)
        } else {
            None
        };
        if let Some(same_peer) = scope {
            let held: Vec<_> = self.conns.iter().map(|c| (c.ip, c.progress)).collect();
            if let Some(i) = pick_victim(&held, same_peer) {
                self.conns[i].closing = Some(Close::Evicted);
                self.close_marked();
            }
        }
        self.shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
        self.conns.push(Conn::new(stream, peer, ip, now));
    }

    fn publish(&self) {
        let open = u64::try_from(self.conns.len()).unwrap_or(u64::MAX);
        self.shared.stats.open.store(open, Ordering::Relaxed);
    }
}

/// Accept errors about one connection that went away before it was accepted.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) || e.raw_os_error() == Some(libc::EPROTO)
}
