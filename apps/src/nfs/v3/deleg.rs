//! NFSv3 calls against NFSv4.1 delegations of the same files: which file a call reads or
//! changes, reported before the store runs it so that the delegations it conflicts with are
//! recalled ([`crate::nfs::cross_locks::CrossLocks::foreign_access`]; RFC 8881 §10.4.6).
//!
//! Normal operation: as Linux nfsd breaks the leases behind its delegations, READ reads its
//! file (`nfsd_open_break_lease` with read access: write delegations are recalled); WRITE,
//! SETATTR and LINK change theirs, a CREATE UNCHECKED with a size truncates the file it finds,
//! REMOVE, RMDIR and RENAME change the objects they name, both for a RENAME (`notify_change`,
//! `vfs_link`, `vfs_unlink`, `vfs_rename`: every delegation is recalled). COMMIT recalls
//! nothing (Linux nfsd opens with `NFSD_MAY_NOT_BREAK_LEASE` there), nor do calls that only
//! look (GETATTR, LOOKUP, ACCESS, READDIR). While a delegation in the way is held, the call is
//! answered NFS3ERR_JUKEBOX and the store is not asked; the Linux client sends it again after
//! five seconds.
//!
//! Recovery: a name that does not resolve recalls nothing (the store answers the call as it
//! would). Without NFSv4.1 (no delegation view registered), or while no delegation is held
//! anywhere, nothing is looked up.

use super::ops::Call;
use super::proto::Args3;
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::types::{CreateHow, Fh};

/// Whether call `args` on `c`'s export must wait for a delegation being recalled.
pub(super) fn held_off(cross: &CrossLocks, c: &Call<'_>, args: &Args3<'_>) -> bool {
    let export = c.share.id;
    let touch = |fh: &Fh, write: bool| cross.foreign_access(export, fh.as_bytes(), write);
    // A name is resolved only while some delegation is held: the common case costs no
    // lookup.
    let named = |dir: &Fh, name: &[u8]| {
        cross.delegations_held() && c.s.lookup(c.cx, dir, name).is_ok_and(|fh| touch(&fh, true))
    };
    match args {
        Args3::Read { fh, .. } => touch(fh, false),
        Args3::Write { fh, .. } | Args3::Setattr { fh, .. } | Args3::Link { fh, .. } => {
            touch(fh, true)
        }
        Args3::Create {
            dir,
            name,
            how: CreateHow::Unchecked(a),
        } if a.size.is_some() => named(dir, name),
        Args3::Remove { dir, name } | Args3::Rmdir { dir, name } => named(dir, name),
        // Both names, whatever the first says: each holder is told at once.
        Args3::Rename {
            from_dir,
            from_name,
            to_dir,
            to_name,
        } => named(from_dir, from_name) | named(to_dir, to_name),
        _ => false,
    }
}
