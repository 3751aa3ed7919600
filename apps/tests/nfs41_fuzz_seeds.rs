//! The checked-in `nfs41_compound` fuzz seeds (`fuzz/seeds/nfs41_compound/`, laid out from
//! RFC 8881 and RFC 7862 in `fuzz/seeds/make.py`) framed as the target frames them (`nfs::v4::harness`):
//! the operation seeds after a valid SEQUENCE pass SEQUENCE and their first operation, so the
//! fuzzer starts inside the operations; the header seeds are answered (not GARBAGE_ARGS); the
//! `dir:` seeds run on the `dir:` store over the fixture of `nfs::v3::harness::fixture`, and
//! those that try to leave the export get the status Linux nfsd gives, change nothing beside
//! the export and disclose nothing of it. The `nfs4_clientdb` seeds
//! (`fuzz/seeds/nfs4_clientdb/`) decode, framed as that target frames them, to what their
//! names say.

use std::path::PathBuf;
use std::sync::Arc;

use rpcrdma_apps::nfs::store::dir::DirStore;
use rpcrdma_apps::nfs::store::Store;
use rpcrdma_apps::nfs::v3::harness::{fixture, Beside};
use rpcrdma_apps::nfs::v4::harness::Harness41;

/// The status of the COMPOUND (its last operation's) in reply `r`.
fn compound_status(r: &[u8]) -> u32 {
    u32::from_be_bytes([r[0], r[1], r[2], r[3]])
}

#[test]
fn accepts_every_nfs41_seed_past_sequence() {
    let base = std::env::temp_dir().join(format!("nfs41-seeds-{}", std::process::id()));
    let beside = Beside::new(base).unwrap();
    let store = Arc::new(DirStore::open(&beside.exp()).unwrap());
    fixture(&*store);
    let dir_xattrs = store.xattr_support();
    let dir_clones = host_clones(&beside.exp());
    let (memory, dir) = (Harness41::memory(), Harness41::new(store));
    let seeds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs41_compound");
    let mut names: Vec<_> = std::fs::read_dir(&seeds)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 30);
    for name in &names {
        let data = std::fs::read(seeds.join(name)).unwrap();
        let (&first, ops) = data.split_first().unwrap();
        let h = if first & 0x40 != 0 { &dir } else { &memory };
        assert_eq!(first & 0x40 != 0, name.starts_with("dir_"), "{name}");
        if first & 0x80 != 0 {
            let r = h.compound(ops);
            assert!(r.is_ok(), "{name}: header decodes");
            continue;
        }
        let (r, nops) = h.after_sequence(first, ops).expect(name);
        beside
            .check(ops, &r)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let n = u32::from_be_bytes([r[12], r[13], r[14], r[15]]);
        assert!(n >= 2 && n <= nops, "{name}: {n} results of {nops}");
        // SEQUENCE's status, then the first operation's (PUTROOTFH) status.
        assert_eq!(&r[20..24], &[0, 0, 0, 0], "{name}: SEQUENCE");
        let at = 24 + 36;
        assert_eq!(&r[at + 4..at + 8], &[0, 0, 0, 0], "{name}: first operation");
        if let Some((_, want)) = V42.iter().find(|(e, _)| name.ends_with(e)) {
            // Extended attributes on the `dir:` store only where the host file system keeps
            // them: NFS4ERR_NOTSUPP elsewhere.
            // CLONE likewise where the host file system shares extents (XFS, btrfs).
            let host_lacks = (name == "dir_v42_xattrs" && !dir_xattrs)
                || (name == "dir_v42_clone_within_file" && !dir_clones);
            let want = if host_lacks { 10_004 } else { *want };
            assert_eq!(compound_status(&r), want, "{name}");
            assert_eq!(n, nops, "{name}: every operation answered");
        }
        if let Some((_, want)) = ESCAPES.iter().find(|(e, _)| e == name) {
            assert_eq!(compound_status(&r), *want, "{name}");
            assert_eq!(n, nops, "{name}: every operation ran");
        }
    }
    let escapes = names
        .iter()
        .filter(|n| n.starts_with("dir_escape_"))
        .count();
    assert_eq!(escapes, ESCAPES.len(), "every escape seed checked");
}

/// Whether the file system of directory `d` clones (`cp --reflink=always` of a file works).
fn host_clones(d: &std::path::Path) -> bool {
    let (a, b) = (d.join(".clone-probe"), d.join(".clone-probe.copy"));
    std::fs::write(&a, b"probe").unwrap();
    let ok = std::process::Command::new("cp")
        .arg("--reflink=always")
        .args([&a, &b])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    ok
}

/// The minor version 2 seeds (on both stores), each with the status of its last operation.
const V42: [(&str, u32); 5] = [
    ("v42_allocate_seek_deallocate", 0),
    ("v42_copy_within_file", 0),
    ("v42_clone_within_file", 0),
    ("v42_xattrs", 0),
    ("v42_mode_umask", 0),
];

/// The `dir:` seeds that try to leave the export through the fixture's link `l` (to
/// `../outside/secret`) or through names, each with the status of its last operation, as
/// RFC 8881 and Linux nfsd answer: a link is not followed, read, opened or made a directory
/// of, `..` and `/` are no names, the export's root has no parent.
const ESCAPES: [(&str, u32); 8] = [
    ("dir_escape_create_slash", 10_041),        // NFS4ERR_BADNAME
    ("dir_escape_lookup_through_link", 10_029), // NFS4ERR_SYMLINK
    ("dir_escape_lookupp_root", 2),             // NFS4ERR_NOENT
    ("dir_escape_open_link", 10_029),
    ("dir_escape_read_link", 10_029),
    ("dir_escape_remove_dotdot", 10_041),
    ("dir_escape_rename_into_link", 10_029),
    ("dir_escape_setattr_mode_link", 0), // a link's mode is not set, and that is no error
];

#[test]
fn accepts_every_clientdb_seed_as_its_name_says() {
    use rpcrdma_apps::nfs::v4::server::clientdb::{checksum, decode, encode, DbError, Record};
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs4_clientdb");
    let want: &[(&str, Result<usize, DbError>)] = &[
        ("raw_bad_checksum", Err(DbError::Checksum)),
        ("raw_bad_magic", Err(DbError::Magic)),
        ("records_empty_owner", Err(DbError::Length)),
        ("records_two", Ok(2)),
        ("sealed_count_too_large", Err(DbError::Count)),
        ("sealed_duplicate", Err(DbError::Duplicate)),
        ("sealed_empty", Ok(0)),
        ("sealed_owner_too_long", Err(DbError::Length)),
        ("sealed_short", Err(DbError::Short)),
        ("sealed_trailing", Err(DbError::Trailing)),
        ("sealed_two", Ok(2)),
    ];
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), want.len());
    for (name, expect) in want {
        let data = std::fs::read(dir.join(name)).unwrap();
        let (&mode, rest) = data.split_first().unwrap();
        let file = if mode & 0x80 != 0 {
            rest.to_vec()
        } else if mode & 0x40 != 0 {
            let mut f = b"RNFS4CL1".to_vec();
            f.extend_from_slice(rest);
            let sum = checksum(&f);
            f.extend_from_slice(&sum);
            f
        } else {
            // (16-bit owner length, 8-bit principal length, owner, principal) per record.
            let (mut recs, mut b) = (Vec::new(), rest);
            while b.len() >= 3 {
                let (o, p) = (
                    usize::from(u16::from_be_bytes([b[0], b[1]])),
                    usize::from(b[2]),
                );
                let owner = b[3..3 + o].to_vec();
                let principal = b[3 + o..3 + o + p].to_vec();
                b = &b[3 + o + p..];
                recs.push(Record { owner, principal });
            }
            encode(&recs)
        };
        let got = decode(&file).map(|r| r.len());
        assert_eq!(&got, expect, "{name}");
    }
}
