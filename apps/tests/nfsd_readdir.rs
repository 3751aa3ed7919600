//! READDIR and READDIRPLUS paging of a 5000-entry directory through `rpcrdma-nfsd` on the
//! software provider, on both backends, with small counts: the listing is complete and has
//! no duplicates, a cookie resumes exactly after its entry, READDIRPLUS entries carry handles
//! and attributes that match LOOKUP and GETATTR, and paging through a directory that changes
//! meanwhile lists every entry that stayed exactly once.
//!
//! Normal operation: the directory is filled through the store itself (no RPC: fast), then
//! listed over the wire. Recovery: nothing to recover.

mod nfsd_common;

use std::collections::HashSet;

use nfsd_common::{on_dir, on_memory, Rig};
use rpcrdma_apps::nfs::identity::Cred;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Sattr3};
use rpcrdma_apps::nfs::v3::proto::{OwnedDirEntry, ReaddirRes};

const N: usize = 5000;

fn name(i: usize) -> Vec<u8> {
    format!("file-{i:05}-{}", "x".repeat(i % 23)).into_bytes()
}

/// A directory `big` holding [`N`] files, made through the store.
fn fill(r: &Rig) -> Fh {
    let d = r.nfs.mkdir(&r.root, b"big", Sattr3::default()).unwrap();
    // The store sees its own handle, not the sealed one the client holds.
    let table = r.daemon.nfs().exports();
    let (_, inner) = table.key().open(&d).expect("a handle this server sealed");
    let store = &table.find("/export").expect("export").store;
    for i in 0..N {
        store
            .create(
                &Cred::ROOT,
                &inner,
                &name(i),
                &CreateHow::Guarded(Sattr3::default()),
            )
            .expect("store create");
    }
    d
}

/// The names of `entries` other than `.` and `..`, checked to be unique.
fn names(entries: &[OwnedDirEntry]) -> HashSet<Vec<u8>> {
    let mut seen = HashSet::new();
    for e in entries.iter().filter(|e| e.name != b"." && e.name != b"..") {
        assert!(
            seen.insert(e.name.clone()),
            "{} listed twice",
            String::from_utf8_lossy(&e.name)
        );
    }
    seen
}

/// Pages through `d` with `count`-octet replies; returns the entries and the page count.
fn page_through(r: &Rig, d: &Fh, count: u32, plus: bool) -> (Vec<OwnedDirEntry>, usize) {
    let (mut cookie, mut verf, mut all, mut pages) = (0, [0u8; 8], Vec::new(), 0);
    loop {
        let p: ReaddirRes = r.nfs.readdir_page(d, cookie, verf, count, plus).unwrap();
        pages += 1;
        assert!(
            !p.entries.is_empty() || p.eof,
            "an empty page before the end"
        );
        assert!(p.dir_attr.is_some());
        verf = p.verf;
        if let Some(e) = p.entries.last() {
            cookie = e.cookie;
        }
        all.extend(p.entries);
        if p.eof {
            return (all, pages);
        }
    }
}

fn paging(r: &Rig) {
    let d = fill(r);
    let want: HashSet<Vec<u8>> = (0..N).map(name).collect();
    for (plus, count) in [(false, 1024), (true, 2048)] {
        let (all, pages) = page_through(r, &d, count, plus);
        assert_eq!(names(&all), want, "plus={plus}");
        assert!(pages > 50, "small pages: {pages}");
        // Cookies: unique, and one resumes right after its entry.
        let cookies: HashSet<u64> = all.iter().map(|e| e.cookie).collect();
        assert_eq!(cookies.len(), all.len());
        let k = all.len() / 2;
        let verf = r.nfs.readdir_page(&d, 0, [0; 8], count, plus).unwrap().verf;
        let next = r
            .nfs
            .readdir_page(&d, all[k].cookie, verf, count, plus)
            .unwrap();
        assert!(!next.entries.is_empty());
        for (got, want) in next.entries.iter().zip(&all[k + 1..]) {
            assert_eq!((&got.name, got.cookie), (&want.name, want.cookie));
        }
        if plus {
            // Handles and attributes of a sample match LOOKUP and GETATTR.
            for e in all
                .iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .step_by(97)
            {
                let fh = e.fh.expect("READDIRPLUS handle");
                let attr = e.attr.expect("READDIRPLUS attributes");
                assert_eq!(r.nfs.lookup(&d, &e.name).unwrap(), fh);
                let now = r.nfs.getattr(&fh).unwrap();
                assert_eq!(attr, now, "{}", String::from_utf8_lossy(&e.name));
                assert_eq!(attr.fileid, e.fileid);
            }
        } else {
            assert!(all.iter().all(|e| e.fh.is_none() && e.attr.is_none()));
        }
    }
}

#[test]
fn accepts_readdir_and_readdirplus_paging_of_5000_entries_memory() {
    on_memory(paging);
}

#[test]
fn accepts_readdir_and_readdirplus_paging_of_5000_entries_dir() {
    on_dir("readdir", paging);
}

/// Removes and adds entries between pages: every entry that stayed is listed once.
fn paging_while_changing(r: &Rig) {
    let d = fill(r);
    let (mut cookie, mut verf, mut all, mut pages) = (0, [0u8; 8], Vec::new(), 0);
    let mut removed = HashSet::new();
    loop {
        let p = r.nfs.readdir_page(&d, cookie, verf, 1024, false).unwrap();
        pages += 1;
        verf = p.verf;
        if let Some(e) = p.entries.last() {
            cookie = e.cookie;
        }
        all.extend(p.entries);
        if p.eof {
            break;
        }
        if pages % 10 == 0 {
            // Remove a few entries (some listed already, some not), add a few new ones.
            for i in (pages * 37..N).step_by(601).take(4) {
                if removed.insert(name(i)) {
                    r.nfs.remove(&d, &name(i)).unwrap();
                }
            }
            for j in 0..3 {
                let n = format!("new-{pages}-{j}");
                r.nfs
                    .create(&d, n.as_bytes(), CreateHow::Guarded(Sattr3::default()))
                    .unwrap();
            }
        }
    }
    assert!(removed.len() > 20, "{}", removed.len());
    let listed = names(&all);
    for i in 0..N {
        if !removed.contains(&name(i)) {
            assert!(
                listed.contains(&name(i)),
                "{} missing",
                String::from_utf8_lossy(&name(i))
            );
        }
    }
}

#[test]
fn accepts_paging_through_a_changing_directory_memory() {
    on_memory(paging_while_changing);
}

#[test]
fn accepts_paging_through_a_changing_directory_dir() {
    on_dir("readdirchg", paging_while_changing);
}
