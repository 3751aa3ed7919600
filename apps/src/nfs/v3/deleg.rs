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
//! would), nor does a caller who may not make the change (or the read) anyway: before a
//! delegation is recalled the caller's permission is asked of the store as ACCESS asks it
//! (the file's owner may read and write its own file, as Linux nfsd's owner override lets it;
//! a name's change needs write permission on its directory), as Linux nfsd checks it before
//! its open breaks a lease. Without NFSv4.1 (no delegation view registered), or while no
//! delegation is held anywhere, nothing is looked up.

use super::ops::Call;
use super::proto::Args3;
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::types::{access, CreateHow, Fh};

/// Whether call `args` on `c`'s export must wait for a delegation being recalled.
pub(super) fn held_off(cross: &CrossLocks, c: &Call<'_>, args: &Args3<'_>) -> bool {
    let export = c.share.id;
    // The caller's right to `want` on `fh`; on a file, its owner's always (owner override).
    let may = |fh: &Fh, want: u32, owner_too: bool| match c.s.access(c.cx, fh, want) {
        Ok((a, got)) => got & want == want || (owner_too && a.uid == c.cx.uid),
        Err(_) => false,
    };
    let file = |fh: &Fh, write: bool| {
        let want = if write { access::MODIFY } else { access::READ };
        cross.foreign_access(export, fh.as_bytes(), write, &|| may(fh, want, true))
    };
    // A name is resolved only while some delegation is held: the common case costs no
    // lookup. Changing the name takes write permission on its directory (`in_dir`), changing
    // the file it names (a truncating CREATE) write permission on the file.
    let named = |dir: &Fh, name: &[u8], in_dir: bool| {
        cross.delegations_held()
            && c.s.lookup(c.cx, dir, name).is_ok_and(|fh| {
                let allowed = || match in_dir {
                    true => may(dir, access::MODIFY, false),
                    false => may(&fh, access::MODIFY, true),
                };
                cross.foreign_access(export, fh.as_bytes(), true, &allowed)
            })
    };
    match args {
        Args3::Read { fh, .. } => file(fh, false),
        Args3::Write { fh, .. } | Args3::Setattr { fh, .. } => file(fh, true),
        Args3::Link { fh, dir, .. } => {
            let allowed = || may(dir, access::MODIFY, false);
            cross.foreign_access(export, fh.as_bytes(), true, &allowed)
        }
        Args3::Create {
            dir,
            name,
            how: CreateHow::Unchecked(a),
        } if a.size.is_some() => named(dir, name, false),
        Args3::Remove { dir, name } | Args3::Rmdir { dir, name } => named(dir, name, true),
        // Both names, whatever the first says: each holder is told at once.
        Args3::Rename {
            from_dir,
            from_name,
            to_dir,
            to_name,
        } => named(from_dir, from_name, true) | named(to_dir, to_name, true),
        _ => false,
    }
}
