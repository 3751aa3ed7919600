//! The replies of both stores against the Linux kernel nfsd's on one sequence of NFSv3 calls
//! (`rpcrdma_apps::nfs::v3::cachecheck`): every fact a client's caching depends on must have the
//! value the kernel nfsd's replies show. [`KERNEL`] is what `rpcrdma-nfs3-compare` recorded
//! for the kernel nfsd (Debian's Linux 6.1, an export on tmpfs) in the VM stage
//! (scripts/vm/nfs-cache.sh); the VM stage compares the live kernel nfsd too.

mod nfsd_common;

use nfsd_common::Rig;
use rpcrdma_apps::nfs::v3::cachecheck::{self, Fact};

/// The kernel nfsd's value of every fact that must match.
const KERNEL: &[(&str, &str)] = &[
    ("GETATTR.repeated=same", "yes"),
    ("MKDIR.obj_fh=present", "yes"),
    ("MKDIR.obj_attr=present", "yes"),
    ("MKDIR.obj_attr=current", "yes"),
    ("MKDIR.obj.type", "Dir"),
    ("MKDIR.obj.nlink", "2"),
    ("MKDIR.obj.fsid=export", "yes"),
    ("MKDIR.dir_wcc.before=present", "yes"),
    ("MKDIR.dir_wcc.before=prior", "yes"),
    ("MKDIR.dir_wcc.after=present", "yes"),
    ("MKDIR.dir_wcc.after=current", "yes"),
    ("MKDIR.dir_wcc.ctime=not_back", "yes"),
    ("MKDIR.dir_wcc.nlink=delta", "1"),
    ("CREATE.obj_fh=present", "yes"),
    ("CREATE.obj_attr=present", "yes"),
    ("CREATE.obj_attr=current", "yes"),
    ("CREATE.obj.type", "Reg"),
    ("CREATE.obj.nlink", "1"),
    ("CREATE.obj.fsid=export", "yes"),
    ("CREATE.dir_wcc.before=present", "yes"),
    ("CREATE.dir_wcc.before=prior", "yes"),
    ("CREATE.dir_wcc.after=present", "yes"),
    ("CREATE.dir_wcc.after=current", "yes"),
    ("CREATE.dir_wcc.ctime=not_back", "yes"),
    ("CREATE.dir_wcc.nlink=delta", "0"),
    ("WRITE.wcc.before=present", "no"),
    ("WRITE.wcc.after=present", "yes"),
    ("WRITE.wcc.after=current", "yes"),
    ("WRITE.wcc.ctime=not_back", "yes"),
    ("WRITE.wcc.nlink=delta", "0"),
    ("COMMIT.wcc.after=present", "yes"),
    ("COMMIT.wcc.after=current", "yes"),
    ("COMMIT.mtime=moved", "no"),
    ("COMMIT.ctime=moved", "no"),
    ("COMMIT.ctime=not_back", "yes"),
    ("COMMIT.nlink=delta", "0"),
    ("READ.count", "1000"),
    ("READ.attr=present", "yes"),
    ("READ.attr=current", "yes"),
    ("READ.attr.atime=current", "yes"),
    ("READ.mtime=moved", "no"),
    ("READ.ctime=moved", "no"),
    ("READ.ctime=not_back", "yes"),
    ("READ.nlink=delta", "0"),
    ("SETATTR-mode.wcc.before=present", "yes"),
    ("SETATTR-mode.wcc.before=prior", "yes"),
    ("SETATTR-mode.wcc.after=present", "yes"),
    ("SETATTR-mode.wcc.after=current", "yes"),
    ("SETATTR-mode.wcc.ctime=not_back", "yes"),
    ("SETATTR-mode.wcc.nlink=delta", "0"),
    ("SETATTR-times.wcc.before=present", "yes"),
    ("SETATTR-times.wcc.before=prior", "yes"),
    ("SETATTR-times.wcc.after=present", "yes"),
    ("SETATTR-times.wcc.after=current", "yes"),
    ("SETATTR-times.wcc.ctime=not_back", "yes"),
    ("SETATTR-times.wcc.nlink=delta", "0"),
    ("SETATTR-times.mtime=given", "yes"),
    ("READ-after-times.count", "1000"),
    ("READ-after-times.attr=present", "yes"),
    ("READ-after-times.attr=current", "yes"),
    ("READ-after-times.attr.atime=current", "yes"),
    ("READ-after-times.mtime=moved", "no"),
    ("READ-after-times.ctime=moved", "no"),
    ("READ-after-times.ctime=not_back", "yes"),
    ("READ-after-times.nlink=delta", "0"),
    ("SETATTR-size.wcc.before=present", "yes"),
    ("SETATTR-size.wcc.before=prior", "yes"),
    ("SETATTR-size.wcc.after=present", "yes"),
    ("SETATTR-size.wcc.after=current", "yes"),
    ("SETATTR-size.wcc.ctime=not_back", "yes"),
    ("SETATTR-size.wcc.nlink=delta", "0"),
    ("LOOKUP.fh=create_fh", "yes"),
    ("LOOKUP.obj_attr=present", "yes"),
    ("LOOKUP.obj_attr=current", "yes"),
    ("LOOKUP.dir_attr=present", "yes"),
    ("LOOKUP.dir_attr=current", "yes"),
    ("ACCESS.attr=present", "yes"),
    ("ACCESS.attr=current", "yes"),
    ("CREATE-excl.obj_fh=present", "yes"),
    ("CREATE-excl.obj_attr=present", "yes"),
    ("CREATE-excl.obj_attr=current", "yes"),
    ("CREATE-excl.obj.type", "Reg"),
    ("CREATE-excl.obj.nlink", "1"),
    ("CREATE-excl.obj.fsid=export", "yes"),
    ("CREATE-excl.dir_wcc.before=present", "yes"),
    ("CREATE-excl.dir_wcc.before=prior", "yes"),
    ("CREATE-excl.dir_wcc.after=present", "yes"),
    ("CREATE-excl.dir_wcc.after=current", "yes"),
    ("CREATE-excl.dir_wcc.ctime=not_back", "yes"),
    ("CREATE-excl.dir_wcc.nlink=delta", "0"),
    ("SETATTR-after-excl.wcc.before=present", "yes"),
    ("SETATTR-after-excl.wcc.before=prior", "yes"),
    ("SETATTR-after-excl.wcc.after=present", "yes"),
    ("SETATTR-after-excl.wcc.after=current", "yes"),
    ("SETATTR-after-excl.wcc.ctime=not_back", "yes"),
    ("SETATTR-after-excl.wcc.nlink=delta", "0"),
    ("MKDIR-sub.obj_fh=present", "yes"),
    ("MKDIR-sub.obj_attr=present", "yes"),
    ("MKDIR-sub.obj_attr=current", "yes"),
    ("MKDIR-sub.obj.type", "Dir"),
    ("MKDIR-sub.obj.nlink", "2"),
    ("MKDIR-sub.obj.fsid=export", "yes"),
    ("MKDIR-sub.dir_wcc.before=present", "yes"),
    ("MKDIR-sub.dir_wcc.before=prior", "yes"),
    ("MKDIR-sub.dir_wcc.after=present", "yes"),
    ("MKDIR-sub.dir_wcc.after=current", "yes"),
    ("MKDIR-sub.dir_wcc.ctime=not_back", "yes"),
    ("MKDIR-sub.dir_wcc.nlink=delta", "1"),
    ("SYMLINK.obj_fh=present", "yes"),
    ("SYMLINK.obj_attr=present", "yes"),
    ("SYMLINK.obj_attr=current", "yes"),
    ("SYMLINK.obj.type", "Lnk"),
    ("SYMLINK.obj.nlink", "1"),
    ("SYMLINK.obj.fsid=export", "yes"),
    ("SYMLINK.dir_wcc.before=present", "yes"),
    ("SYMLINK.dir_wcc.before=prior", "yes"),
    ("SYMLINK.dir_wcc.after=present", "yes"),
    ("SYMLINK.dir_wcc.after=current", "yes"),
    ("SYMLINK.dir_wcc.ctime=not_back", "yes"),
    ("SYMLINK.dir_wcc.nlink=delta", "0"),
    ("READLINK.attr=present", "yes"),
    ("READLINK.attr=current", "yes"),
    ("LINK.file_attr=present", "yes"),
    ("LINK.file_attr=current", "yes"),
    ("LINK.file.ctime=not_back", "yes"),
    ("LINK.file.nlink=delta", "1"),
    ("LINK.dir_wcc.before=present", "yes"),
    ("LINK.dir_wcc.before=prior", "yes"),
    ("LINK.dir_wcc.after=present", "yes"),
    ("LINK.dir_wcc.after=current", "yes"),
    ("LINK.dir_wcc.ctime=not_back", "yes"),
    ("LINK.dir_wcc.nlink=delta", "0"),
    ("READDIRPLUS.dir_attr=present", "yes"),
    ("READDIRPLUS.dir_attr=current", "yes"),
    ("READDIRPLUS.dir_attr.atime=current", "yes"),
    ("READDIRPLUS.dir.mtime=moved", "no"),
    ("READDIRPLUS.dir.ctime=moved", "no"),
    ("READDIRPLUS.dir.ctime=not_back", "yes"),
    ("READDIRPLUS.dir.nlink=delta", "0"),
    ("READDIRPLUS.eof", "yes"),
    ("READDIRPLUS.entries", "7"),
    ("READDIRPLUS[.].attr=present", "yes"),
    ("READDIRPLUS[.].fh=present", "yes"),
    ("READDIRPLUS[.].fh=lookup_fh", "yes"),
    ("READDIRPLUS[.].attr=current", "yes"),
    ("READDIRPLUS[.].fileid=attr_fileid", "yes"),
    ("READDIRPLUS[..].attr=present", "yes"),
    ("READDIRPLUS[..].fh=present", "yes"),
    ("READDIRPLUS[..].fh=lookup_fh", "yes"),
    ("READDIRPLUS[..].attr=current", "yes"),
    ("READDIRPLUS[..].fileid=attr_fileid", "yes"),
    ("READDIRPLUS[f2].attr=present", "yes"),
    ("READDIRPLUS[f2].fh=present", "yes"),
    ("READDIRPLUS[f2].fh=lookup_fh", "yes"),
    ("READDIRPLUS[f2].attr=current", "yes"),
    ("READDIRPLUS[f2].fileid=attr_fileid", "yes"),
    ("READDIRPLUS[l].attr=present", "yes"),
    ("READDIRPLUS[l].fh=present", "yes"),
    ("READDIRPLUS[l].fh=lookup_fh", "yes"),
    ("READDIRPLUS[l].attr=current", "yes"),
    ("READDIRPLUS[l].fileid=attr_fileid", "yes"),
    ("READDIRPLUS[sub].attr=present", "yes"),
    ("READDIRPLUS[sub].fh=present", "yes"),
    ("READDIRPLUS[sub].fh=lookup_fh", "yes"),
    ("READDIRPLUS[sub].attr=current", "yes"),
    ("READDIRPLUS[sub].fileid=attr_fileid", "yes"),
    ("READDIRPLUS[g].attr=present", "yes"),
    ("READDIRPLUS[g].fh=present", "yes"),
    ("READDIRPLUS[g].fh=lookup_fh", "yes"),
    ("READDIRPLUS[g].attr=current", "yes"),
    ("READDIRPLUS[g].fileid=attr_fileid", "yes"),
    ("READDIRPLUS[f].attr=present", "yes"),
    ("READDIRPLUS[f].fh=present", "yes"),
    ("READDIRPLUS[f].fh=lookup_fh", "yes"),
    ("READDIRPLUS[f].attr=current", "yes"),
    ("READDIRPLUS[f].fileid=attr_fileid", "yes"),
    ("READDIR.entries=readdirplus", "yes"),
    ("CREATE-h.obj_fh=present", "yes"),
    ("CREATE-h.obj_attr=present", "yes"),
    ("CREATE-h.obj_attr=current", "yes"),
    ("CREATE-h.obj.type", "Reg"),
    ("CREATE-h.obj.nlink", "1"),
    ("CREATE-h.obj.fsid=export", "yes"),
    ("CREATE-h.dir_wcc.before=present", "yes"),
    ("CREATE-h.dir_wcc.before=prior", "yes"),
    ("CREATE-h.dir_wcc.after=present", "yes"),
    ("CREATE-h.dir_wcc.after=current", "yes"),
    ("CREATE-h.dir_wcc.ctime=not_back", "yes"),
    ("CREATE-h.dir_wcc.nlink=delta", "0"),
    ("READDIRPLUS-continued.status", "NFS3_OK"),
    ("RENAME.from_wcc.before=present", "yes"),
    ("RENAME.from_wcc.before=prior", "yes"),
    ("RENAME.from_wcc.after=present", "yes"),
    ("RENAME.from_wcc.after=current", "yes"),
    ("RENAME.from_wcc.ctime=not_back", "yes"),
    ("RENAME.from_wcc.nlink=delta", "0"),
    ("RENAME.to_wcc.before=present", "yes"),
    ("RENAME.to_wcc.before=prior", "yes"),
    ("RENAME.to_wcc.after=present", "yes"),
    ("RENAME.to_wcc.after=current", "yes"),
    ("RENAME.to_wcc.ctime=not_back", "yes"),
    ("RENAME.to_wcc.nlink=delta", "0"),
    ("RENAME.file.ctime=not_back", "yes"),
    ("RENAME.file.nlink=delta", "0"),
    ("RENAME.fh=same", "yes"),
    ("RENAME.fileid=same", "yes"),
    ("REMOVE.wcc.before=present", "yes"),
    ("REMOVE.wcc.before=prior", "yes"),
    ("REMOVE.wcc.after=present", "yes"),
    ("REMOVE.wcc.after=current", "yes"),
    ("REMOVE.wcc.ctime=not_back", "yes"),
    ("REMOVE.wcc.nlink=delta", "0"),
    ("REMOVE.file.ctime=not_back", "yes"),
    ("REMOVE.file.nlink=delta", "-1"),
    ("RMDIR-sub.wcc.before=present", "yes"),
    ("RMDIR-sub.wcc.before=prior", "yes"),
    ("RMDIR-sub.wcc.after=present", "yes"),
    ("RMDIR-sub.wcc.after=current", "yes"),
    ("RMDIR-sub.wcc.ctime=not_back", "yes"),
    ("RMDIR-sub.wcc.nlink=delta", "-1"),
    ("RMDIR.wcc.before=present", "yes"),
    ("RMDIR.wcc.before=prior", "yes"),
    ("RMDIR.wcc.after=present", "yes"),
    ("RMDIR.wcc.after=current", "yes"),
    ("RMDIR.wcc.ctime=not_back", "yes"),
    ("RMDIR.wcc.nlink=delta", "-1"),
];

/// The facts that must match on which `ours` differs from the kernel nfsd (or that only one
/// of them shows), as `key: kernel=.. ours=..` lines.
fn mismatches(ours: &[Fact]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in KERNEL {
        let o = ours.iter().find(|f| f.key == *k).map(|f| f.value.as_str());
        if o != Some(*v) {
            out.push(format!("{k}: kernel={v} ours={}", o.unwrap_or("-")));
        }
    }
    for f in ours.iter().filter(|f| f.must_match) {
        if !KERNEL.iter().any(|(k, _)| *k == f.key) {
            out.push(format!("{}: kernel=- ours={}", f.key, f.value));
        }
    }
    out
}

fn check(rig: Rig) {
    let fs = cachecheck::run(&rig.nfs, &rig.root, &cachecheck::scratch_name()).expect("sequence");
    rig.stop();
    let bad = mismatches(&fs);
    assert!(
        bad.is_empty(),
        "replies unlike the kernel nfsd's:\n{}",
        bad.join("\n")
    );
}

#[test]
fn accepts_memory_replies_as_the_kernel_nfsd_gives_them() {
    check(Rig::memory());
}

#[test]
fn accepts_dir_replies_as_the_kernel_nfsd_gives_them() {
    check(Rig::dir("cachecheck"));
}

#[test]
fn rejects_a_reply_unlike_the_kernel_nfsds() {
    let mut fs: Vec<Fact> = KERNEL
        .iter()
        .map(|(k, v)| Fact {
            key: k.to_string(),
            value: v.to_string(),
            must_match: true,
        })
        .collect();
    assert!(mismatches(&fs).is_empty());
    fs[0].value = "other".into();
    fs.push(Fact {
        key: "WRITE.wcc.before=prior".into(),
        value: "yes".into(),
        must_match: true,
    });
    assert_eq!(mismatches(&fs).len(), 2);
}
