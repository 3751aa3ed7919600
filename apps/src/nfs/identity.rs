//! Who a call acts as, and what that identity may do: the AUTH_SYS credential (RFC 5531
//! section 8.2) squashed by the export's options, and the POSIX permission rules both stores
//! and the ACCESS procedure answer by.
//!
//! Normal operation: the server turns each call's credential into a [`Cred`]
//! ([`Cred::from_call`]): AUTH_SYS uid, gid and up to 16 supplementary groups; AUTH_NONE is the
//! export's anonymous identity; `root_squash` maps uid 0, gid 0 and group 0 to the anonymous
//! ids, `all_squash` every caller, as Linux nfsd's `nfsd_setuser` does. Stores check every
//! access against it: the memory store with [`may`] and the ownership rules below, the
//! directory store by running the call under the identity (the host kernel applies the same
//! rules to the real files). Recovery: a credential that does not decode or names a flavor
//! the export does not accept never reaches a store: the server answers AUTH_ERROR.

use rpcrdma_engine::rpc::{AuthFlavor, AuthStat, AuthSys, OpaqueAuth};

use super::acl::Acl;
use super::exports::{ExportOptions, Squash};
use super::types::{Fattr3, Ftype3, NfsResult, Nfsstat3, Sattr3, SetTime};

/// The set-user-ID mode bit.
pub const S_ISUID: u32 = 0o4000;
/// The set-group-ID mode bit (on a directory: new entries take its group).
pub const S_ISGID: u32 = 0o2000;
/// The sticky bit (on a directory: only owners remove entries).
pub const S_ISVTX: u32 = 0o1000;
/// Group execute.
const S_IXGRP: u32 = 0o010;

/// Most supplementary groups an AUTH_SYS credential carries (RFC 5531 section 8.2).
pub const NGROUPS: usize = 16;

/// The identity a call acts as.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cred {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    n: u8,
    groups: [u32; NGROUPS],
}

impl core::fmt::Debug for Cred {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Cred({}:{} {:?})", self.uid, self.gid, self.groups())
    }
}

impl Cred {
    /// root with no supplementary groups.
    pub const ROOT: Cred = Cred::new(0, 0);

    /// uid and gid with no supplementary groups.
    pub const fn new(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            n: 0,
            groups: [0; NGROUPS],
        }
    }

    /// uid, gid and the first [`NGROUPS`] of `groups`.
    pub fn with_groups(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        let mut c = Cred::new(uid, gid);
        for &g in groups.iter().take(NGROUPS) {
            c.groups[c.n as usize] = g;
            c.n += 1;
        }
        c
    }

    /// The supplementary groups.
    pub fn groups(&self) -> &[u32] {
        &self.groups[..self.n as usize]
    }

    /// True for uid 0 (after squashing: a squashed root is not root).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// True when `gid` is the primary group or a supplementary one.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups().contains(&gid)
    }

    /// The anonymous identity of an export (`anonuid` / `anongid`).
    pub fn anonymous(o: &ExportOptions) -> Cred {
        Cred::new(o.anon_uid, o.anon_gid)
    }

    /// This identity after the export's squashing. Ids no user can hold (`(uid_t)-1`) are
    /// the anonymous ones too, and such groups are dropped, as Linux nfsd's `nfsd_setuser`
    /// maps ids that are not valid: `setfsuid(-1)` would change nothing and leave the thread
    /// acting as whoever it acted as before.
    pub fn squashed(self, o: &ExportOptions) -> Cred {
        const INVALID: u32 = u32::MAX;
        let mut c = self;
        if c.uid == INVALID {
            c.uid = o.anon_uid;
        }
        if c.gid == INVALID {
            c.gid = o.anon_gid;
        }
        if c.groups().contains(&INVALID) {
            let mut kept = Cred::new(c.uid, c.gid);
            for &g in self.groups().iter().filter(|&&g| g != INVALID) {
                kept.groups[kept.n as usize] = g;
                kept.n += 1;
            }
            c = kept;
        }
        c.squash_only(o)
    }

    fn squash_only(self, o: &ExportOptions) -> Cred {
        match o.squash {
            Squash::None => self,
            Squash::All => Cred::anonymous(o),
            Squash::Root => {
                let mut c = self;
                let swap = |id: u32, anon: u32| if id == 0 { anon } else { id };
                c.uid = swap(c.uid, o.anon_uid);
                c.gid = swap(c.gid, o.anon_gid);
                for g in &mut c.groups[..c.n as usize] {
                    *g = swap(*g, o.anon_gid);
                }
                c
            }
        }
    }

    /// The identity a call with credential `cred` acts as on an export with options `o`, or
    /// the RFC 5531 AUTH_ERROR to answer: BADCRED for an AUTH_SYS body that does not decode
    /// and for flavors this server does not serve (RPCSEC_GSS, AUTH_DH: Linux's
    /// `svc_authenticate` answers the same), TOOWEAK for AUTH_SYS / AUTH_NONE when the export's
    /// `sec=` does not list it.
    pub fn from_call(cred: &OpaqueAuth<'_>, o: &ExportOptions) -> Result<Cred, AuthStat> {
        match cred.flavor {
            AuthFlavor::Sys => {
                let a = AuthSys::parse(cred.body).map_err(|_| AuthStat::BadCred)?;
                if !o.sec.sys {
                    return Err(AuthStat::TooWeak);
                }
                let mut groups = [0u32; NGROUPS];
                let mut n = 0;
                for g in a.gids.iter().take(NGROUPS) {
                    groups[n] = g;
                    n += 1;
                }
                Ok(Cred::with_groups(a.uid, a.gid, &groups[..n]).squashed(o))
            }
            AuthFlavor::None if o.sec.none => Ok(Cred::anonymous(o)),
            AuthFlavor::None => Err(AuthStat::TooWeak),
            _ => Err(AuthStat::BadCred),
        }
    }
}

/// What an access asks for: read, write, execute / search (the `rwx` bits' order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want(pub u32);

impl Want {
    /// Read (list a directory).
    pub const READ: Want = Want(4);
    /// Write (add or remove entries of a directory).
    pub const WRITE: Want = Want(2);
    /// Execute (search a directory).
    pub const EXEC: Want = Want(1);
    /// Write and search: what adding or removing an entry of a directory needs.
    pub const WRITE_EXEC: Want = Want(3);
}

/// Whether `c` holds every `rwx` bit of `want` on `a`, whose access ACL is `acl`: Linux's
/// `generic_permission`. The owner is decided by the mode's owner bits; the ACL's group-class
/// entries decide for the others when the mode has group bits (with none, the mask denies
/// every named entry and Linux goes straight to the mode); otherwise the group or other bits.
/// Root may read and write anything and execute a directory or a file with an execute bit
/// (CAP_DAC_OVERRIDE).
pub fn permits(c: &Cred, a: &Fattr3, acl: Option<&Acl>, want: u32) -> bool {
    let want = want & 7;
    if c.is_root() {
        return want & 1 == 0 || a.ftype == Ftype3::Dir || a.mode & 0o111 != 0;
    }
    let mode = a.mode;
    if c.uid == a.uid {
        return (mode >> 6) & want == want;
    }
    if let Some(acl) = acl.filter(|_| mode & 0o070 != 0) {
        if let Some(ok) = acl.group_class(c.uid, &|g| c.in_group(g), a.gid, want) {
            return ok;
        }
        return mode & want == want;
    }
    let bits = if c.in_group(a.gid) { mode >> 3 } else { mode };
    bits & want == want
}

/// The `rwx` bits `c` holds on `a` with access ACL `acl`, each checked alone (as Linux nfsd's
/// ACCESS asks one permission at a time).
pub fn granted(c: &Cred, a: &Fattr3, acl: Option<&Acl>) -> u32 {
    [4, 2, 1]
        .into_iter()
        .filter(|&b| permits(c, a, acl, b))
        .fold(0, |g, b| g | b)
}

/// ACCES unless `c` holds every bit of `want` on `a`, whose access ACL is `acl` (`None`: the
/// mode alone decides; [`permits`]).
pub fn may(c: &Cred, a: &Fattr3, acl: Option<&Acl>, want: Want) -> NfsResult<()> {
    if permits(c, a, acl, want.0) {
        Ok(())
    } else {
        Err(Nfsstat3::ACCES)
    }
}

/// READ or WRITE of file data (COMMIT and SETATTR size count as WRITE): as [`may`], but the
/// owner may always read and write its own regular file (Linux nfsd's
/// NFSD_MAY_OWNER_OVERRIDE: a process may keep using a file it opened and then chmod-ed), and
/// a regular file one may execute may also be read (Linux nfsd: a client runs a binary of mode
/// 0711 by reading it).
pub fn may_io(c: &Cred, a: &Fattr3, acl: Option<&Acl>, want: Want) -> NfsResult<()> {
    if c.uid == a.uid && a.ftype == Ftype3::Reg {
        return Ok(());
    }
    match may(c, a, acl, want) {
        Err(_) if want == Want::READ && a.ftype == Ftype3::Reg => may(c, a, acl, Want::EXEC),
        r => r,
    }
}

/// Removing or renaming the entry for `victim` out of directory `dir`: write and search on
/// `dir`, and with the sticky bit on `dir` only the owner of `victim` or of `dir` (or root)
/// (POSIX; Linux `may_delete` / `check_sticky`). The sticky refusal is PERM, what Linux
/// answers locally and what its nfsd passes on (EPERM at the client, as programs expect),
/// although RFC 1813 does not list NFS3ERR_PERM for REMOVE, RMDIR, RENAME or LINK.
pub fn may_unlink(c: &Cred, dir: &Fattr3, dir_acl: Option<&Acl>, victim: &Fattr3) -> NfsResult<()> {
    may(c, dir, dir_acl, Want::WRITE_EXEC)?;
    if dir.mode & 0o1000 != 0 && !c.is_root() && c.uid != victim.uid && c.uid != dir.uid {
        return Err(Nfsstat3::PERM);
    }
    Ok(())
}

/// Changing mode or setting explicit times: only the owner or root (PERM otherwise; RFC 1813
/// NFS3ERR_PERM: "not owner").
pub fn may_own(c: &Cred, a: &Fattr3) -> NfsResult<()> {
    if c.is_root() || c.uid == a.uid {
        Ok(())
    } else {
        Err(Nfsstat3::PERM)
    }
}

/// Changing owner to `uid` and / or group to `gid`: root any; the owner may keep its uid and
/// change the group to one it belongs to (POSIX `_POSIX_CHOWN_RESTRICTED`, Linux
/// `chown_ok` / `chgrp_ok`). PERM otherwise.
pub fn may_chown(c: &Cred, a: &Fattr3, uid: Option<u32>, gid: Option<u32>) -> NfsResult<()> {
    if c.is_root() {
        return Ok(());
    }
    let uid_ok = uid.map_or(true, |u| u == a.uid && c.uid == a.uid);
    let gid_ok = gid.map_or(true, |g| c.uid == a.uid && (g == a.gid || c.in_group(g)));
    if uid_ok && gid_ok {
        Ok(())
    } else {
        Err(Nfsstat3::PERM)
    }
}

/// SETATTR of `set` on `a`, in Linux nfsd's order: ACCES first for what needs permission bits
/// (a size change: write as [`may_io`]; times set to the server's time: owner, or write
/// permission), then PERM for what needs ownership (mode and explicit times: [`may_own`];
/// owner and group: [`may_chown`]). A mode on a symbolic link is ignored (as Linux nfsd).
pub fn may_setattr(c: &Cred, a: &Fattr3, acl: Option<&Acl>, set: &Sattr3) -> NfsResult<()> {
    if set.size.is_some() {
        may_io(c, a, acl, Want::WRITE)?;
    }
    let explicit = |t: SetTime| matches!(t, SetTime::ClientTime(_));
    let now = |t: SetTime| t == SetTime::ServerTime;
    if !explicit(set.atime) && !explicit(set.mtime) && (now(set.atime) || now(set.mtime)) {
        may_own(c, a).or_else(|_| may(c, a, acl, Want::WRITE))?;
    }
    if (set.mode.is_some() && a.ftype != Ftype3::Lnk) || explicit(set.atime) || explicit(set.mtime)
    {
        may_own(c, a)?;
    }
    if set.uid.is_some() || set.gid.is_some() {
        may_chown(c, a, set.uid, set.gid)?;
    }
    Ok(())
}

/// `mode` without set-user-ID, and without set-group-ID when group execute is set (with it
/// clear the bit means mandatory locking, not privilege): what Linux's `should_remove_suid`
/// drops.
fn kill_suid(mode: u32) -> u32 {
    let mut m = mode & !S_ISUID;
    if m & S_IXGRP != 0 {
        m &= !S_ISGID;
    }
    m
}

/// The mode `a` has after SETATTR `set` by `c` (allowed by [`may_setattr`]): the new mode,
/// less set-group-ID when `c` is neither root nor in the (new) group; a change of owner or
/// group of anything but a directory then drops set-user-ID and set-group-ID (Linux nfsd,
/// also for root).
pub fn mode_after_setattr(c: &Cred, a: &Fattr3, set: &Sattr3) -> u32 {
    let mut m = a.mode & 0o7777;
    if let Some(new) = set.mode.filter(|_| a.ftype != Ftype3::Lnk) {
        m = new & 0o7777;
        let gid = set.gid.unwrap_or(a.gid);
        if m & S_ISGID != 0 && !c.is_root() && !c.in_group(gid) {
            m &= !S_ISGID;
        }
    }
    if (set.uid.is_some() || set.gid.is_some()) && a.ftype != Ftype3::Dir {
        m = kill_suid(m);
    }
    m
}

/// The mode of a regular file after `c` wrote data to it: set-user-ID and set-group-ID dropped
/// unless `c` is root (Linux `file_remove_privs`).
pub fn mode_after_write(c: &Cred, mode: u32) -> u32 {
    if c.is_root() {
        mode
    } else {
        kill_suid(mode)
    }
}

/// Owner, group and mode of an object of type `t` that `c` creates in directory `parent`
/// asking for `mode`: the caller's uid; the directory's group when it has set-group-ID, else
/// the caller's gid. A new directory keeps only permission and sticky bits and inherits
/// set-group-ID; another object loses set-group-ID (with group execute) when `c` is neither
/// root nor in its group (Linux `inode_init_owner`, `mode_strip_sgid`).
pub fn new_owner(c: &Cred, parent: &Fattr3, t: Ftype3, mode: u32) -> (u32, u32, u32) {
    let inherit = parent.mode & S_ISGID != 0;
    let gid = if inherit { parent.gid } else { c.gid };
    let mut m = mode & 0o7777;
    if t == Ftype3::Dir {
        m &= 0o1777;
        if inherit {
            m |= S_ISGID;
        }
    } else if m & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP && !c.is_root() && !c.in_group(gid) {
        m &= !S_ISGID;
    }
    (c.uid, gid, m)
}

/// Of the owner and group a create names for new object `new`, the ones that change it and
/// that [`may_chown`] allows `c` (the others are dropped, as Linux nfsd drops them rather than
/// failing the create); applying them is a change of owner ([`mode_after_setattr`]).
pub fn create_chown(
    c: &Cred,
    new: &Fattr3,
    uid: Option<u32>,
    gid: Option<u32>,
) -> (Option<u32>, Option<u32>) {
    let uid = uid.filter(|&u| u != new.uid && may_chown(c, new, Some(u), None).is_ok());
    let gid = gid.filter(|&g| g != new.gid && may_chown(c, new, None, Some(g)).is_ok());
    (uid, gid)
}

/// MKNOD of a device node: only root (Linux: CAP_MKNOD); FIFOs and sockets anyone who may
/// create in the directory.
pub fn may_mknod_device(c: &Cred, device: bool) -> NfsResult<()> {
    if device && !c.is_root() {
        Err(Nfsstat3::PERM)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::exports::Exports;
    use rpcrdma_engine::rpc::{AuthSysParams, OpaqueAuth};

    fn opts(spec: &str) -> ExportOptions {
        let mut e = Exports::default();
        e.add_spec(spec).unwrap();
        e.list()[0]
            .options_for("10.0.0.1".parse().unwrap())
            .unwrap()
    }

    fn sys(uid: u32, gid: u32, groups: &[u32]) -> Vec<u8> {
        let p = AuthSysParams {
            stamp: 1,
            machinename: b"m",
            uid,
            gid,
            gids: groups,
        };
        let mut b = vec![0u8; 128];
        let n = p.encode_into(&mut b).unwrap();
        b.truncate(n);
        b
    }

    fn attr(uid: u32, gid: u32, mode: u32, ftype: Ftype3) -> Fattr3 {
        let t = crate::nfs::types::Time3 {
            seconds: 0,
            nseconds: 0,
        };
        Fattr3 {
            ftype,
            mode,
            nlink: 1,
            uid,
            gid,
            size: 0,
            used: 0,
            rdev: (0, 0),
            fsid: 0,
            fileid: 1,
            atime: t,
            mtime: t,
            ctime: t,
        }
    }

    #[test]
    fn accepts_auth_sys_and_squashes_as_the_export_says() {
        let body = sys(0, 0, &[0, 5, 6]);
        let cred = OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &body,
        };
        let c = Cred::from_call(&cred, &opts("/x:rw,no_root_squash")).unwrap();
        assert_eq!((c.uid, c.gid, c.groups()), (0, 0, &[0, 5, 6][..]));
        let c = Cred::from_call(&cred, &opts("/x:rw")).unwrap();
        assert_eq!(
            (c.uid, c.gid, c.groups()),
            (65534, 65534, &[65534, 5, 6][..])
        );
        let c = Cred::from_call(&cred, &opts("/x:rw,all_squash,anonuid=7,anongid=8")).unwrap();
        assert_eq!((c.uid, c.gid, c.groups()), (7, 8, &[][..]));
        let body = sys(1000, 100, &[]);
        let cred = OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &body,
        };
        let c = Cred::from_call(&cred, &opts("/x:rw")).unwrap();
        assert_eq!((c.uid, c.gid), (1000, 100));
        // (uid_t)-1 and (gid_t)-1 act as the anonymous ids; such groups are dropped.
        let body = sys(u32::MAX, u32::MAX, &[5, u32::MAX]);
        let cred = OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &body,
        };
        let c = Cred::from_call(&cred, &opts("/x:rw,no_root_squash,anonuid=9,anongid=8")).unwrap();
        assert_eq!((c.uid, c.gid, c.groups()), (9, 8, &[5][..]));
    }

    #[test]
    fn rejects_flavors_the_export_does_not_accept() {
        let none = OpaqueAuth {
            flavor: AuthFlavor::None,
            body: &[],
        };
        assert_eq!(
            Cred::from_call(&none, &opts("/x:rw")),
            Err(AuthStat::TooWeak)
        );
        let c = Cred::from_call(&none, &opts("/x:rw,sec=none,anonuid=9,anongid=9")).unwrap();
        assert_eq!((c.uid, c.gid), (9, 9));
        let body = sys(1, 1, &[]);
        let s = OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &body,
        };
        assert_eq!(
            Cred::from_call(&s, &opts("/x:sec=none")),
            Err(AuthStat::TooWeak)
        );
        let gss = OpaqueAuth {
            flavor: AuthFlavor::from_u32(6),
            body: &[0; 8],
        };
        assert_eq!(
            Cred::from_call(&gss, &opts("/x:rw")),
            Err(AuthStat::BadCred)
        );
        let torn = OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: &body[..body.len() - 4],
        };
        assert_eq!(
            Cred::from_call(&torn, &opts("/x:rw")),
            Err(AuthStat::BadCred)
        );
    }

    #[test]
    fn accepts_posix_permission_classes() {
        let u = Cred::with_groups(1000, 100, &[200]);
        let f = attr(1000, 100, 0o640, Ftype3::Reg);
        assert_eq!(granted(&u, &f, None), 6);
        let g = Cred::with_groups(2000, 300, &[100]);
        assert_eq!(granted(&g, &f, None), 4, "supplementary group");
        assert_eq!(granted(&Cred::new(3000, 300), &f, None), 0);
        // The owner class decides even when other has more (POSIX).
        let odd = attr(1000, 100, 0o007, Ftype3::Reg);
        assert_eq!(granted(&u, &odd, None), 0);
        assert!(
            may_io(&u, &odd, None, Want::WRITE).is_ok(),
            "owner override"
        );
        assert_eq!(granted(&Cred::ROOT, &f, None), 6);
        assert_eq!(
            granted(&Cred::ROOT, &attr(5, 5, 0o100, Ftype3::Reg), None),
            7
        );
        assert_eq!(granted(&Cred::ROOT, &attr(5, 5, 0, Ftype3::Dir), None), 7);
    }

    #[test]
    fn accepts_and_rejects_with_an_acl_as_generic_permission() {
        use crate::nfs::acl::{tag, Ace, Acl};
        // user::rw-, user:2000:rw-, group::r--, mask::r--, other::--- on a 0640 file.
        let acl = Acl::from_entries(vec![
            Ace::new(tag::USER_OBJ, 0, 6),
            Ace::new(tag::USER, 2000, 6),
            Ace::new(tag::GROUP_OBJ, 0, 4),
            Ace::new(tag::MASK, 0, 4),
            Ace::new(tag::OTHER, 0, 0),
        ])
        .expect("acl");
        let acl = acl.as_ref();
        let f = attr(1000, 100, 0o640, Ftype3::Reg);
        let named = Cred::new(2000, 400);
        // The mask (group bits r--) limits the named entry's rw- to r--.
        assert_eq!(granted(&named, &f, acl), 4);
        assert_eq!(granted(&named, &f, None), 0, "without the ACL: other");
        assert_eq!(granted(&Cred::new(3000, 100), &f, acl), 4, "owning group");
        assert_eq!(granted(&Cred::new(3000, 400), &f, acl), 0, "other");
        assert_eq!(granted(&Cred::new(1000, 1), &f, acl), 6, "owner: the mode");
        // With no group bits in the mode Linux skips the ACL and the named user is other.
        let bare = attr(1000, 100, 0o604, Ftype3::Reg);
        assert_eq!(granted(&named, &bare, acl), 4);
        assert!(may(&named, &f, acl, Want::WRITE).is_err());
        assert!(may_io(&named, &f, acl, Want::READ).is_ok());
    }

    #[test]
    fn rejects_sticky_removal_and_foreign_chown() {
        let dir = attr(0, 0, 0o1777, Ftype3::Dir);
        let theirs = attr(1, 1, 0o644, Ftype3::Reg);
        let me = Cred::new(2, 2);
        assert_eq!(may_unlink(&me, &dir, None, &theirs), Err(Nfsstat3::PERM));
        assert!(may_unlink(&Cred::new(1, 1), &dir, None, &theirs).is_ok());
        assert!(may_unlink(&Cred::ROOT, &dir, None, &theirs).is_ok());
        assert_eq!(may_own(&me, &theirs), Err(Nfsstat3::PERM));
        assert_eq!(
            may_chown(&Cred::new(1, 1), &theirs, Some(2), None),
            Err(Nfsstat3::PERM)
        );
        assert_eq!(
            may_chown(&Cred::new(1, 1), &theirs, None, Some(9)),
            Err(Nfsstat3::PERM)
        );
        assert!(may_chown(&Cred::with_groups(1, 1, &[9]), &theirs, Some(1), Some(9)).is_ok());
        assert!(may_chown(&Cred::ROOT, &theirs, Some(7), Some(7)).is_ok());
    }
}
