//! Two-process tests: a test binary runs itself again as the other process. The other process
//! is an `#[ignore]`d test of the same binary, started with `--exact NAME --ignored` and the
//! environment variable [`ROLE`] set to NAME; it prints `LISTEN <port>` once it listens and a
//! line of its own choosing once it passed. The parent reads the port, plays its side, then
//! [`Peer::finish`] closes the child's standard input (a child that serves until its parent
//! is done waits for that: [`wait_for_parent`]) and waits for its exit status and that line.
//!
//! Normal operation: [`Peer::spawn`], connect to [`Peer::port`], [`Peer::finish`]. Recovery: a
//! child that ends before printing its port fails the parent at once; one still running when
//! [`WAIT`] is over, or when the parent fails first, is killed (`Drop`).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable naming the role (the ignored test) a child process plays.
pub const ROLE: &str = "RPCRDMA_TEST_ROLE";

/// How long a child may take to finish once the parent is done with it.
pub const WAIT: Duration = Duration::from_secs(30);

/// Whether this process is a child of a two-process test (its ordinary tests then return at
/// once instead of starting children of their own).
pub fn is_child() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// The guard of a child's test: panics unless this process was started to play `role`.
pub fn expect_role(role: &str) {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok(role),
        "run only as the child of a two-process test"
    );
}

/// What a child prints once it listens on `port`.
pub fn announce(port: u16) {
    println!("LISTEN {port}");
}

/// Blocks a child until its parent is done with it (its standard input closed).
pub fn wait_for_parent() {
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// The other process of a two-process test, killed when dropped if still running.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Option<BufReader<ChildStdout>>,
    port: u16,
    role: String,
}

impl Peer {
    /// Starts this test binary again running only its ignored test `role`, and waits until it
    /// announced the port it listens on.
    pub fn spawn(role: &str) -> Peer {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                role,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {role}: {e}"));
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let port = loop {
            line.clear();
            let n = out.read_line(&mut line).expect("read the child's output");
            assert!(n > 0, "{role} ended before it listened");
            // The harness may have printed the test's name on the same line.
            if let Some(at) = line.find("LISTEN ") {
                break line[at + 7..].trim().parse::<u16>().expect("port");
            }
        };
        let stdin = child.stdin.take();
        Peer {
            child,
            stdin,
            out: Some(out),
            port,
            role: role.to_string(),
        }
    }

    /// The port the child listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits for the child to exit (at most [`WAIT`]); fails unless it exited 0 having printed
    /// `ok`.
    pub fn finish(mut self, ok: &str) {
        drop(self.stdin.take());
        let mut out = self.out.take().expect("output");
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let end = Instant::now() + WAIT;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{} did not finish within {WAIT:?}: killed", self.role);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let rest = rest.join().expect("output reader");
        assert!(status.success(), "{} failed: {rest}", self.role);
        assert!(rest.contains(ok), "{} output: {rest}", self.role);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
