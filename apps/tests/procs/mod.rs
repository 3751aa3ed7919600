//! The applications as separate processes, as an operator runs them: a server process that
//! must say it is ready before its client starts, and clients run to their end. Every wait
//! has a deadline ([`LIMIT`]); a process still running past it, or when the test fails first,
//! is killed.
//!
//! Normal operation: [`Server::start`], run the client ([`run_to_end`]), [`Server::finish`] (or
//! [`Server::stop`] for a daemon that runs until told). Recovery: a server that ends before
//! its ready line fails the test with what it printed.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a process of these runs may take (the machine may be shared and slow).
pub const LIMIT: Duration = Duration::from_secs(120);

/// First port [`free_port`] hands out, and how many it cycles through: below the kernel's
/// ephemeral range (`net.ipv4.ip_local_port_range`, 32768-60999 by default) and above the
/// fixed ports the tests use.
const PORTS: (u16, u16) = (24_000, 8_000);

/// A loopback port nobody listens on now (bound, then released for the caller's server).
/// It lies outside the kernel's ephemeral range, so no other socket (a connection's local
/// port, a listener bound to port 0) takes it between this choice and the server's bind, as
/// happens to a port 0 answer; the calls of one process walk through the ports, so two never
/// get the same one, and processes start at different places.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id();
    for _ in 0..PORTS.1 {
        // Relaxed: a counter; only its distinct values matter.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = PORTS.0 + (start.wrapping_add(n) % u32::from(PORTS.1)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!(
        "no free loopback port in {}..{}",
        PORTS.0,
        PORTS.0 + PORTS.1
    );
}

/// A server process, killed when dropped if it has not exited.
pub struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// What it printed up to and including its ready line.
    pub banner: String,
}

impl Server {
    /// Starts `exe args` and waits until a line of its standard output contains `ready`.
    pub fn start(exe: &str, args: &[&str], ready: &str) -> Server {
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {exe}: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            lines,
            banner: String::new(),
        };
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match s.lines.recv_timeout(left) {
                Ok(l) => {
                    s.banner.push_str(&l);
                    s.banner.push('\n');
                    if l.contains(ready) {
                        return s;
                    }
                }
                Err(e) => panic!(
                    "{exe} did not say {ready:?}: {e}; it printed:\n{}",
                    s.banner
                ),
            }
        }
    }

    /// Waits for the server to exit on its own; whether it succeeded, and its remaining output.
    pub fn finish(mut self) -> (bool, String) {
        let ok = wait(&mut self.child).success();
        // The reader thread may still be passing on the last lines: take them until it has
        // seen the end of the output and dropped its sender.
        let mut rest = Vec::new();
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => rest.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the server's output never ended"),
            }
        }
        (ok, rest.join("\n"))
    }

    /// Sends the server SIGTERM, then as [`Server::finish`].
    pub fn stop(self) -> (bool, String) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid, which is not reaped before `finish` waits.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "SIGTERM");
        self.finish()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` at most [`LIMIT`], killing it after that.
pub fn wait(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a process took longer than {LIMIT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `exe args` to the end (at most [`LIMIT`]).
pub fn run_to_end(exe: &str, args: &[&str]) -> Output {
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {exe}: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let o = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = wait(&mut child);
    Output {
        status,
        stdout: o.join().expect("stdout reader"),
        stderr: e.join().expect("stderr reader"),
    }
}
