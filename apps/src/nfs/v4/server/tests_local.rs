//! Delegations of files on a `dir:` export against processes on the host ([`super::deleg_local`]):
//! another process's write, chmod, rename or removal recalls a read delegation, its open a
//! write delegation; this process's own accesses (the server's) recall nothing; the marks go
//! when the delegations do. Real fanotify on a real directory, so real time: each wait polls
//! for the recall, bounded by a deadline that only ends a hung run.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_local` as root
//! (the `dir:` store and fanotify need it; elsewhere the tests say they skipped). Recovery: a
//! failure names the step and what was seen.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::deleg::Callbacks;
use super::state::Limits;
use super::tests::{auth_sys, open_existing, server_on, A, H};
use super::xdr::st;
use crate::nfs::store::dir::DirStore;
use crate::nfs::store::Store;
use crate::nfs::v4::op;

use super::tests_deleg::{deleg_sid, deleg_type, Rec};

/// A directory of the test's own, removed on drop.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server exporting a fresh directory holding `f`, watching local changes, and a client of
/// it; `None` (after a message) where the test cannot run.
fn world(tag: &str, write_delegs: bool) -> Option<(Tmp, H, Vec<u8>, Arc<Rec>)> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the dir: store and fanotify need root");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("rpcrdma-local-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tmp = Tmp(dir);
    std::fs::write(tmp.0.join("f"), b"before\n").expect("f");
    let store: Arc<dyn Store> = Arc::new(DirStore::open(&tmp.0).expect("dir store"));
    let rec = Arc::new(Rec::default());
    let cbs = Arc::clone(&rec) as Arc<dyn Callbacks>;
    let (srv, now, store) = server_on("rw,no_root_squash", Limits::default(), Some(cbs), store);
    srv.set_write_delegations(write_delegs);
    if let Err(e) = srv.watch_local_changes() {
        assert_ne!(
            e.raw_os_error(),
            Some(libc::EINVAL),
            "fanotify_init's flags"
        );
        eprintln!("skipped: fanotify: {e}");
        return None;
    }
    let mut h = H::on(srv, now, store, b"client-b", auth_sys(0, 0));
    let root = h.root();
    Some((tmp, h, root, rec))
}

/// `h` opens `f` for `access`: its delegation type and stateid.
fn open_f(h: &mut H, root: &[u8], access: u32) -> (u32, [u8; 16]) {
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(root),
        open_existing(h.clientid, b"f", access),
    ]);
    assert_eq!(r.status, st::OK, "OPEN");
    (deleg_type(&r.last), deleg_sid(&r.last))
}

fn recalls(h: &H) -> u64 {
    let c = h.srv.counters();
    c.iter()
        .find(|(n, _)| *n == "nfs4_recalls")
        .map_or(0, |c| c.1)
}

/// Waits until `done` holds (true) or 10 s passed (false).
fn until(mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// Runs `script` in `sh` (another process) on file `f` of `dir` (`$1`).
fn sh(script: &str, tmp: &Tmp) {
    let ok = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(tmp.0.join("f"))
        .status()
        .expect("sh");
    assert!(ok.success(), "sh -c {script}");
}

#[test]
fn accepts_a_recall_when_another_process_changes_a_delegated_file() {
    for (tag, change) in [
        ("append", "echo x >> \"$1\""),
        ("truncate", ": > \"$1\""),
        ("chmod", "chmod 600 \"$1\""),
        ("rename", "mv \"$1\" \"$1.moved\""),
        ("remove", "rm \"$1\""),
    ] {
        let Some((tmp, mut h, root, rec)) = world(tag, false) else {
            return;
        };
        let (t, _) = open_f(&mut h, &root, 1);
        assert_eq!(t, 1, "{tag}: OPEN_DELEGATE_READ");
        assert_eq!(
            h.srv.local_watch().map(|w| w.marked()),
            Some(1),
            "{tag}: marked"
        );
        sh(change, &tmp);
        // The count moves under the state lock; the CB_RECALL goes out after it is let go,
        // from the watch's thread: wait for both.
        assert!(
            until(|| recalls(&h) == 1 && !rec.compounds().is_empty()),
            "{tag}: no recall after another process's change"
        );
        let recalled = rec.compounds().len();
        assert_eq!(recalled, 1, "{tag}: one CB_RECALL");
    }
}

#[test]
fn accepts_this_process_changing_a_delegated_file_without_a_recall() {
    // The server's own accesses (its NFS calls) recall through the NFS paths, which judge
    // the caller; so the watch skips every event of this process, a test's own write too.
    let Some((tmp, mut h, root, _rec)) = world("own", false) else {
        return;
    };
    let (t, _) = open_f(&mut h, &root, 1);
    assert_eq!(t, 1, "OPEN_DELEGATE_READ");
    let w = h.srv.local_watch().expect("watching");
    let before = w.events().0;
    std::fs::write(tmp.0.join("f"), b"ours\n").expect("write");
    assert!(
        until(|| w.events().0 > before),
        "no event read for our own write"
    );
    assert_eq!((w.events().1, recalls(&h)), (0, 0), "ours recalled nothing");
    sh("echo x >> \"$1\"", &tmp);
    assert!(
        until(|| recalls(&h) == 1),
        "the other process's change recalls"
    );
}

#[test]
fn accepts_a_write_delegation_recalled_by_another_processs_read_not_a_read_delegation() {
    let Some((tmp, mut h, root, _rec)) = world("read", true) else {
        return;
    };
    let (t, _) = open_f(&mut h, &root, 1);
    assert_eq!(t, 1, "a read open: OPEN_DELEGATE_READ");
    sh("cat \"$1\" > /dev/null", &tmp);
    let w = h.srv.local_watch().expect("watching");
    assert!(
        until(|| w.events().1 >= 1),
        "the other process's open is seen"
    );
    assert_eq!(recalls(&h), 0, "a local read leaves a read delegation");
    let Some((tmp, mut h, root, _)) = world("read-w", true) else {
        return;
    };
    let (t, _) = open_f(&mut h, &root, 3);
    assert_eq!(t, 2, "a read-write open: OPEN_DELEGATE_WRITE");
    sh("cat \"$1\" > /dev/null", &tmp);
    assert!(
        until(|| recalls(&h) == 1),
        "a local read recalls the write delegation"
    );
}

#[test]
fn accepts_marks_removed_when_the_delegation_is_returned() {
    let Some((tmp, mut h, root, _rec)) = world("returned", false) else {
        return;
    };
    let (_, sid) = open_f(&mut h, &root, 1);
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::LOOKUP).opaque(b"f"),
        A::op(op::DELEGRETURN).fixed(&sid),
    ]);
    assert_eq!(r.status, st::OK, "DELEGRETURN");
    let w = h.srv.local_watch().expect("watching");
    assert!(until(|| w.marked() == 0), "the mark stays: {}", w.marked());
    // The mark is gone: another process's change is not even an event.
    sh("echo x >> \"$1\"", &tmp);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        (w.events().1, recalls(&h)),
        (0, 0),
        "nothing held, nothing seen"
    );
}
