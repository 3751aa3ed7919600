//! The duplicate request cache through `rpcrdma-nfsd` on the software provider, both
//! backends: with `drop_every`, the server executes every Nth non-idempotent call, caches its
//! reply and drops the connection instead of answering; our client reconnects and sends the
//! call again with the same XID, and the cache answers it. Every call of a workload of
//! CREATE (guarded and exclusive), WRITE (inline and DDP), SETATTR, RENAME, LINK, SYMLINK,
//! MKDIR, RMDIR and REMOVE must then succeed (no NOENT from a replayed REMOVE, no EXIST from
//! a replayed guarded CREATE) and the final tree must be what was intended. A second client
//! from another address reusing an XID is a new call (checked on the cache itself: our
//! client does not choose its XIDs).
//!
//! Normal operation: sequential blocking calls, so each drop is followed by exactly one
//! retransmission. Recovery: the point of the test.

mod nfsd_common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use nfsd_common::{options, scratch_dir, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::drc::{Drc, DrcConfig, DrcKey, Lookup};
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Ftype3, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::client::NfsClient;

/// What a name in the workload directory should be at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    /// A regular file with this content, mode and link count.
    File(Vec<u8>, u32, u32),
    Dir,
    Link(Vec<u8>),
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

/// A workload of every non-idempotent procedure in directory `name` under the root; every
/// call must succeed. Returns the directory and what it should hold.
fn workload(c: &NfsClient, root: &Fh, name: &str, rounds: usize) -> (Fh, BTreeMap<String, Want>) {
    let d = c.mkdir(root, name.as_bytes(), Sattr3::default()).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..rounds {
        let n = format!("f{i}");
        let f = c
            .create(&d, n.as_bytes(), CreateHow::Guarded(Sattr3::default()))
            .unwrap_or_else(|e| panic!("CREATE {n}: {e:?}"));
        let data: Vec<u8> = (0..(100 + i * 997)).map(|j| (j * 7 + i) as u8).collect();
        let (w, _, _) = c
            .write(&f, 0, &data, StableHow::FileSync, i % 2 == 0)
            .unwrap_or_else(|e| panic!("WRITE {n}: {e:?}"));
        assert_eq!(w as usize, data.len());
        let m = 0o600 | (i as u32 % 8) << 3;
        c.setattr(&f, &mode(m), None)
            .unwrap_or_else(|e| panic!("SETATTR {n}: {e:?}"));
        let mut links = 1;
        if i % 4 == 0 {
            let l = format!("hard{i}");
            c.link(&f, &d, l.as_bytes())
                .unwrap_or_else(|e| panic!("LINK {l}: {e:?}"));
            links = 2;
            want.insert(l, Want::File(data.clone(), m, 2));
        }
        let mut cur = n.clone();
        if i % 3 == 0 {
            let g = format!("g{i}");
            c.rename(&d, n.as_bytes(), &d, g.as_bytes())
                .unwrap_or_else(|e| panic!("RENAME {n}: {e:?}"));
            cur = g;
        }
        if i % 5 == 1 {
            c.remove(&d, cur.as_bytes())
                .unwrap_or_else(|e| panic!("REMOVE {cur}: {e:?}"));
            if let Some(Want::File(_, _, n)) = want.get_mut(&format!("hard{i}")) {
                *n = 1;
            }
        } else {
            want.insert(cur, Want::File(data, m, links));
        }
        let sub = format!("sub{i}");
        c.mkdir(&d, sub.as_bytes(), Sattr3::default())
            .unwrap_or_else(|e| panic!("MKDIR {sub}: {e:?}"));
        if i % 2 == 0 {
            c.rmdir(&d, sub.as_bytes())
                .unwrap_or_else(|e| panic!("RMDIR {sub}: {e:?}"));
        } else {
            want.insert(sub, Want::Dir);
        }
        let s = format!("s{i}");
        let target = format!("target/{i}").into_bytes();
        c.symlink(&d, s.as_bytes(), &target)
            .unwrap_or_else(|e| panic!("SYMLINK {s}: {e:?}"));
        want.insert(s, Want::Link(target));
        let x = format!("x{i}");
        let verf = (i as u64 + 1).to_be_bytes();
        c.create(&d, x.as_bytes(), CreateHow::Exclusive(verf))
            .unwrap_or_else(|e| panic!("CREATE EXCLUSIVE {x}: {e:?}"));
        want.insert(x, Want::File(Vec::new(), 0, 1));
    }
    (d, want)
}

/// The tree under `d` as the client sees it, in the shape of [`Want`] (exclusive-create
/// files keep whatever mode the store gives them: reported as 0).
fn observed(c: &NfsClient, d: &Fh) -> BTreeMap<String, Want> {
    let mut got = BTreeMap::new();
    for e in c.readdir_all(d, 4096, true).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let name = String::from_utf8(e.name.clone()).unwrap();
        let fh = c.lookup(d, &e.name).unwrap();
        let a = c.getattr(&fh).unwrap();
        let w = match a.ftype {
            Ftype3::Dir => Want::Dir,
            Ftype3::Lnk => Want::Link(c.readlink(&fh).unwrap()),
            _ => {
                let (data, _) = c.read(&fh, 0, 256 * 1024, true).unwrap();
                let m = if name.starts_with('x') {
                    0
                } else {
                    a.mode & 0o7777
                };
                Want::File(data, m, a.nlink)
            }
        };
        got.insert(name, w);
    }
    got
}

/// Asserts `got == want`, naming only the entries that differ (file data as length and sum).
#[track_caller]
fn same_tree(got: &BTreeMap<String, Want>, want: &BTreeMap<String, Want>) {
    let short = |w: Option<&Want>| match w {
        Some(Want::File(d, m, n)) => format!(
            "file len {} sum {} mode {m:o} nlink {n}",
            d.len(),
            d.iter().map(|&b| u64::from(b)).sum::<u64>()
        ),
        other => format!("{other:?}"),
    };
    let diff: Vec<String> = got
        .keys()
        .chain(want.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| format!("{k}: got {} want {}", short(got.get(k)), short(want.get(k))))
        .collect();
    assert!(diff.is_empty(), "{diff:#?}");
}

fn dropping(o: DaemonOptions, dir: Option<std::path::PathBuf>) {
    let r = Rig::with(DaemonOptions { drop_every: 3, ..o }, dir);
    let (d, want) = workload(&r.nfs, &r.root, "w", 24);
    same_tree(&observed(&r.nfs, &d), &want);
    let dropped = r.counter("conn.dropped");
    let hits = r.counter("drc.hits");
    assert!(dropped >= 50, "dropped {dropped}");
    assert!(hits >= dropped, "hits {hits} < dropped {dropped}");
    assert_eq!(r.counter("drc.inprogress"), 0);
    assert!(
        r.counter("conn.accepted") > dropped,
        "one connection per drop"
    );
    r.stop();
}

#[test]
fn accepts_every_call_of_a_workload_despite_dropped_replies_memory() {
    dropping(options(Backend::Memory), None);
}

#[test]
fn accepts_every_call_of_a_workload_despite_dropped_replies_dir() {
    let p = scratch_dir("drc");
    dropping(options(Backend::Dir(p.clone())), Some(p));
}

#[test]
fn accepts_two_clients_from_two_addresses_with_dropped_replies() {
    let r = Rig::with(
        DaemonOptions {
            drop_every: 4,
            ..options(Backend::Memory)
        },
        None,
    );
    let (_ep, other) = r.second_client(Ipv4Addr::new(10, 0, 0, 3));
    let root = r.root;
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| workload(&r.nfs, &root, "a", 12));
        let b = s.spawn(|| workload(&other, &root, "b", 12));
        (a.join().unwrap(), b.join().unwrap())
    });
    same_tree(&observed(&r.nfs, &a.0), &a.1);
    same_tree(&observed(&other, &b.0), &b.1);
    assert_eq!(a.1, b.1, "the same workload in both directories");
    let dropped = r.counter("conn.dropped");
    assert!(dropped > 10 && r.counter("drc.hits") >= dropped);
    other.rpc().close();
    r.stop();
}

/// The cache's key as the server builds it for a call (the peer's IP address only: RDMA-CM
/// gives every connection a new port).
fn key(ip: [u8; 4], xid: u32, proc_num: u32, args: &[u8]) -> DrcKey {
    DrcKey::new(IpAddr::V4(Ipv4Addr::from(ip)), xid, 3, proc_num, args)
}

#[test]
fn rejects_replaying_a_reused_xid_from_another_client_or_with_other_arguments() {
    let d = Drc::new(DrcConfig::default());
    let remove_a = b"\0\0\0\x10handle-of-16-oc\0\0\0\x01a\0\0\0";
    let remove_b = b"\0\0\0\x10handle-of-16-oc\0\0\0\x01b\0\0\0";
    let first = key([10, 0, 0, 1], 77, 12, remove_a);
    assert_eq!(d.begin(first).0, Lookup::New);
    d.finish(first, b"NFS3_OK reply");
    // The same client sending the call again (after a reconnection: another port, the same
    // address) gets the first reply.
    assert_eq!(
        d.begin(key([10, 0, 0, 1], 77, 12, remove_a)).0,
        Lookup::Replay(b"NFS3_OK reply".to_vec())
    );
    // Another client with the same XID is another call, whatever its arguments.
    assert_eq!(d.begin(key([10, 0, 0, 3], 77, 12, remove_b)).0, Lookup::New);
    assert_eq!(d.begin(key([10, 0, 0, 4], 77, 12, remove_a)).0, Lookup::New);
    // So is the same client reusing the XID for other arguments, another procedure or
    // another version.
    assert_eq!(d.begin(key([10, 0, 0, 1], 77, 12, remove_b)).0, Lookup::New);
    assert_eq!(d.begin(key([10, 0, 0, 1], 77, 13, remove_a)).0, Lookup::New);
    let v2 = DrcKey::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 77, 2, 12, remove_a);
    assert_eq!(d.begin(v2).0, Lookup::New);
}
