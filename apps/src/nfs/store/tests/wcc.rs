//! The weak cache consistency part of the store conformance suite, run against both stores:
//! every `*_wcc` method answers the changed object's attributes as they were before the change
//! (those a GETATTR just before answers: size, mtime and ctime) and as they are after it (a
//! GETATTR just after), and a new object's attributes as a GETATTR of it answers; a failed
//! change answers the unchanged attributes, a handle that names nothing none; and changes made
//! at once by two threads answer attributes taken atomically with each (`atomic`), a WRITE of
//! the file included (`atomic_with_writes`).
//!
//! Normal operation: each step works in the part's own directory. Recovery: the directory
//! store's temp directory is removed when its test ends.

use super::*;
use crate::nfs::store::NewObj;
use crate::nfs::types::{NfsResult, WccData};

/// Runs `f`, a change of `fh` (its ctime moves when `changed`, stays otherwise), and checks the
/// `wcc_data` it answers against GETATTR just before and just after; its result.
fn checked<T>(s: &dyn Store, fh: &Fh, changed: bool, f: impl FnOnce() -> (T, WccData)) -> T {
    let before = attr(s, fh);
    let (r, w) = f();
    let after = attr(s, fh);
    assert_eq!(w.before, Some(before.wcc()), "before");
    assert_eq!(w.after, Some(after), "after");
    match changed {
        true => assert!(after.ctime > before.ctime, "{before:?} -> {after:?}"),
        false => assert_eq!(after.ctime, before.ctime),
    }
    r
}

/// A new object's handle, its attributes checked against GETATTR.
fn made(s: &dyn Store, r: NfsResult<(Fh, Option<Fattr3>)>) -> Fh {
    let (fh, a) = r.expect("made");
    assert_eq!(a, Some(attr(s, &fh)));
    fh
}

pub(super) fn wcc(s: &dyn Store, d: &Fh) {
    let (dir_mode, no_attr, node_mode) = (mode(0o755), Sattr3::default(), mode(0o644));
    let new = |name: &str, what| checked(s, d, true, || s.create_wcc(&R, d, name.as_bytes(), what));
    let how = CreateHow::Guarded(mode(0o644));
    let f = made(s, new("f", NewObj::File(&how)));
    let sub = made(s, new("sub", NewObj::Dir(&dir_mode)));
    made(s, new("ln", NewObj::Symlink(b"f", &no_attr)));
    made(
        s,
        new(
            "p",
            NewObj::Node(crate::nfs::store::Special::Fifo, &node_mode),
        ),
    );
    let again = checked(s, d, false, || {
        s.create_wcc(&R, d, b"f", NewObj::File(&how))
    });
    assert_eq!(again.err(), Some(Nfsstat3::EXIST));

    // SETATTR: the size before is the old one, after the new one.
    let size = |n| Sattr3 {
        size: Some(n),
        ..Sattr3::default()
    };
    checked(s, &f, true, || s.setattr_wcc(&R, &f, &size(5), None)).expect("setattr");
    let w = s.setattr_wcc(&R, &f, &size(7), None).1;
    assert_eq!(
        (w.before.map(|b| b.size), w.after.map(|a| a.size)),
        (Some(5), Some(7))
    );
    let stale_guard = Some(Time3::default());
    let r = checked(s, &f, false, || {
        s.setattr_wcc(&R, &f, &mode(0o600), stale_guard)
    });
    assert_eq!(r.err(), Some(Nfsstat3::NOT_SYNC));

    // WRITE: the attributes after only.
    let (r, after) = s.write_wcc(&R, &f, 0, b"0123456789", StableHow::Unstable);
    assert_eq!(r, Ok(StableHow::Unstable));
    assert_eq!(after, Some(attr(s, &f)));
    assert_eq!(after.map(|a| a.size), Some(10));
    let (r, after) = s.write_wcc(&R, &sub, 0, b"x", StableHow::Unstable);
    assert_eq!(
        (r.err(), after),
        (Some(Nfsstat3::ISDIR), Some(attr(s, &sub)))
    );

    // LINK: the object's attributes after (one more link), the directory's wcc_data.
    let (r, a) = checked(s, d, true, || {
        let (r, a, w) = s.link_wcc(&R, &f, d, b"hard");
        ((r, a), w)
    });
    assert_eq!((r, a), (Ok(()), Some(attr(s, &f))));
    assert_eq!(a.map(|a| a.nlink), Some(2));

    // RENAME within one directory and into another: each directory's own wcc_data.
    let r = checked(s, d, true, || {
        let (r, fw, tw) = s.rename_wcc(&R, d, b"hard", d, b"hard2");
        assert_eq!(fw, tw);
        (r, fw)
    });
    assert_eq!(r, Ok(()));
    let (fb, tb) = (attr(s, d), attr(s, &sub));
    let (r, fw, tw) = s.rename_wcc(&R, d, b"hard2", &sub, b"moved");
    assert_eq!(r, Ok(()));
    assert_eq!((fw.before, tw.before), (Some(fb.wcc()), Some(tb.wcc())));
    assert_eq!(
        (fw.after, tw.after),
        (Some(attr(s, d)), Some(attr(s, &sub)))
    );

    // REMOVE and RMDIR; a missing name changes nothing.
    let r = checked(s, &sub, true, || s.remove_wcc(&R, &sub, b"moved", false));
    assert_eq!(r, Ok(()));
    checked(s, d, true, || s.remove_wcc(&R, d, b"sub", true)).expect("rmdir");
    let r = checked(s, d, false, || s.remove_wcc(&R, d, b"none", false));
    assert_eq!(r, Err(Nfsstat3::NOENT));

    // A handle of a removed object: STALE, no attributes.
    s.remove(&R, d, b"p").expect("remove");
    let gone = s.lookup(&R, d, b"ln").expect("lookup");
    s.remove(&R, d, b"ln").expect("remove");
    let (r, w) = s.setattr_wcc(&R, &gone, &mode(0o600), None);
    assert_eq!((r, w), (Err(Nfsstat3::STALE), WccData::default()));
    let (r, a, w) = s.link_wcc(&R, &gone, d, b"again");
    assert_eq!((r, a), (Err(Nfsstat3::STALE), None));
    assert_eq!(w.after, Some(attr(s, d)));
}

/// Changes of one directory made at once by two threads, every one through a `*_wcc` method:
/// each answers the directory's attributes before and after taken atomically with its change
/// (RFC 1813 §2.6: "the pre-operation attributes ... atomically with the operation"), so
/// ordered by their ctimes after, each change's "before" is the one before it's "after": no
/// other change falls between them, and no two changes answer the same "before".
pub(super) fn atomic(s: &dyn Store, d: &Fh) {
    const ROUNDS: usize = 300;
    let start = attr(s, d).ctime;
    let how = CreateHow::Unchecked(Sattr3::default());
    let run = |t: usize| {
        let mut seen = Vec::new();
        let mut note = |w: WccData| {
            seen.push((
                w.before.expect("before").ctime,
                w.after.expect("after").ctime,
            ))
        };
        for i in 0..ROUNDS {
            let (a, b) = (format!("t{t}-{i}"), format!("u{t}-{i}"));
            let (r, w) = s.create_wcc(&R, d, a.as_bytes(), NewObj::File(&how));
            r.expect("create");
            note(w);
            let (r, fw, _) = s.rename_wcc(&R, d, a.as_bytes(), d, b.as_bytes());
            r.expect("rename");
            note(fw);
            let (r, w) = s.remove_wcc(&R, d, b.as_bytes(), false);
            r.expect("remove");
            note(w);
        }
        seen
    };
    let mut all: Vec<(Time3, Time3)> = std::thread::scope(|sc| {
        let h = [0, 1].map(|t| sc.spawn(move || run(t)));
        h.into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    all.sort_by_key(|&(_, after)| after);
    // Every change moves the ctime (the contract above): two "after"s alike were read after
    // both changes.
    let twice = all.windows(2).filter(|p| p[0].1 == p[1].1).count();
    assert_eq!(
        twice,
        0,
        "changes answering another's \"after\" of {}",
        all.len()
    );
    let mut prev = start;
    for (i, &(before, after)) in all.iter().enumerate() {
        assert_eq!(
            before,
            prev,
            "change {i} of {}: before {before:?}, after {after:?}",
            all.len()
        );
        prev = after;
    }
}

/// SETATTRs of a file's mode while another thread WRITEs to it: each SETATTR answers the file's
/// attributes before and after taken atomically with it (as Linux nfsd's, whose SETATTR holds
/// the inode lock a write takes too), so its size and mtime are the same before and after. A
/// WRITE falling between them would hand the client that asked for the SETATTR another
/// writer's change as its own, and it would keep pages that the WRITE made stale.
pub(super) fn atomic_with_writes(s: &dyn Store, d: &Fh) {
    const ROUNDS: usize = 400;
    let how = CreateHow::Guarded(mode(0o644));
    let f = made(s, s.create_wcc(&R, d, b"f", NewObj::File(&how)).0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let torn = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut at = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let (r, _) = s.write_wcc(&R, &f, at, b"w", StableHow::Unstable);
                r.expect("write");
                at += 1;
            }
        });
        let mut torn = Vec::new();
        for i in 0..ROUNDS {
            let m = if i % 2 == 0 { 0o600 } else { 0o644 };
            let (r, w) = s.setattr_wcc(&R, &f, &mode(m), None);
            r.expect("setattr");
            let (b, a) = (w.before.expect("before"), w.after.expect("after"));
            if (b.size, b.mtime) != (a.size, a.mtime) {
                torn.push((i, b.size, a.size));
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().expect("writer");
        torn
    });
    assert!(
        torn.is_empty(),
        "{} of {ROUNDS} SETATTRs answered a WRITE's change as theirs: {:?}",
        torn.len(),
        &torn[..torn.len().min(5)]
    );
}
