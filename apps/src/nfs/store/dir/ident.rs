//! The identity a worker thread's file system calls run under: the caller's uid, gid and
//! supplementary groups as the thread's fsuid, fsgid and group list, so the host kernel
//! checks every call of the directory store by its own rules (mode bits, ACLs, the sticky
//! bit, ownership, set-group-ID directories), as Linux nfsd (`nfsd_setuser`) and NFS-Ganesha
//! do.
//!
//! Normal operation: [`act_as`] switches the calling thread with the raw `setgroups`,
//! `setfsgid` and `setfsuid` system calls (glibc's `setgroups` would change every thread of
//! the process) and only when the identity differs from the one the thread holds, which it
//! records; a worker serving one user keeps that identity across calls. With an fsuid other
//! than 0 the kernel clears the file system capabilities (CAP_DAC_OVERRIDE,
//! CAP_DAC_READ_SEARCH, CAP_CHOWN, CAP_FOWNER, CAP_FSETID, CAP_MKNOD, ...) from the effective
//! set, and sets them again when the fsuid returns to 0, so an unsquashed root keeps root's
//! powers and nobody else has them. [`as_server`] is root with no groups, for what only the
//! server may do (`open_by_handle_at`). On first use a thread also gets its own file system
//! context (`unshare(CLONE_FS)`) with umask 0, so a new object gets exactly the mode the client
//! asked for (or what a default ACL makes of it), as in Linux nfsd.
//!
//! On a reactor the thread may not switch at all: Linux lets only the credentials that opened
//! the verbs device write to it (`ib_safe_file_access` in include/rdma/ib.h compares the
//! file's `f_cred` with the thread's `current_cred()` by pointer), and every `setfsuid`,
//! `setfsgid` or `setgroups` that changes something gives the thread a new credential
//! structure for good: switching back does not restore the opener's, and the reactor's next
//! post of work requests to rxe or siw fails (EACCES). So [`pin_if_own`] admits a call on a
//! thread that never switched only when the caller's identity is the thread's own (the
//! process's: root, its gid and its groups, as sets), and while its guard [`Pinned`] lives,
//! [`act_as`] switches nothing: it answers for the thread's own identity (and the server's,
//! root) and refuses any other (SERVERFAULT) without a system call. Dropping the guard, on
//! return or while a panic unwinds, ends the pinned state; the thread's credentials were
//! never touched.
//!
//! [`DirStore::open`](super::DirStore::open) refuses to export when the process cannot switch
//! ([`can_switch`]). A caller with the id (uid_t) −1, or (in a user namespace) an id the
//! namespace does not map, which the kernel cannot hold, is refused (ACCES). Recovery: a failed switch forgets the recorded identity (the next call switches
//! again in full) and fails the call with SERVERFAULT; nothing runs under a wrong identity.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::nfs::identity::{Cred, NGROUPS};
use crate::nfs::types::{NfsResult, Nfsstat3};

thread_local! {
    /// The identity this thread's fs ids and groups hold now (`None`: the process's own).
    static HELD: Cell<Option<Cred>> = const { Cell::new(None) };
    /// Whether this thread has its own file system context with umask 0.
    static UMASK0: Cell<Option<bool>> = const { Cell::new(None) };
    /// Identity switches this thread made (each one `setgroups` + `setfsgid` + `setfsuid`).
    static SWITCHES: Cell<u64> = const { Cell::new(0) };
    /// Whether this thread serves a call it may not switch for ([`Pinned`]).
    static PINNED: Cell<bool> = const { Cell::new(false) };
    /// This thread's own identity, read once before it ever switched (`Some(None)`: it
    /// holds more groups than a [`Cred`] carries, or it had switched).
    static OWN: Cell<Option<Option<Cred>>> = const { Cell::new(None) };
}

/// A call served on a thread whose credentials must stay as they are (a reactor): while this
/// lives, [`act_as`] switches nothing. Dropping it (also while a panic unwinds) ends that.
pub(crate) struct Pinned {
    before: bool,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        PINNED.set(self.before);
    }
}

/// Pins the calling thread for a call acting as `cx` when that needs no switch: the thread
/// never switched and `cx` is its own identity (uid 0: the server's powers too, which
/// `open_by_handle_at` needs). `None`: the call must run on a thread that may switch.
pub(crate) fn pin_if_own(cx: &Cred) -> Option<Pinned> {
    let own = own()?;
    if own.uid != 0 || !same_identity(cx, &own) {
        return None;
    }
    umask_is_zero();
    Some(Pinned {
        before: PINNED.replace(true),
    })
}

/// Whether `a` and `b` act alike in the kernel's checks: the same uid and gid, and the same
/// groups counting the gid (`in_group_p` looks at the fsgid, then the supplementary list, so a
/// supplementary group equal to the gid adds nothing).
/// Compared on the stack: this runs for every call a reactor serves.
fn same_identity(a: &Cred, b: &Cred) -> bool {
    fn set(c: &Cred, g: &mut [u32; NGROUPS + 1]) -> usize {
        let n = c.groups().len();
        g[..n].copy_from_slice(c.groups());
        g[n] = c.gid;
        let g = &mut g[..=n];
        g.sort_unstable();
        let mut kept = 0;
        for i in 0..g.len() {
            if i == 0 || g[i] != g[kept - 1] {
                g[kept] = g[i];
                kept += 1;
            }
        }
        kept
    }
    let (mut ga, mut gb) = ([0; NGROUPS + 1], [0; NGROUPS + 1]);
    let (na, nb) = (set(a, &mut ga), set(b, &mut gb));
    a.uid == b.uid && a.gid == b.gid && ga[..na] == gb[..nb]
}

/// The calling thread's own identity while it has never switched: its fs ids and its group
/// list (three system calls, once per thread); `None` once it switched, or with more groups
/// than a [`Cred`] holds.
fn own() -> Option<Cred> {
    if let Some(o) = OWN.get() {
        return o;
    }
    if HELD.get().is_some() || SWITCHES.get() > 0 {
        return None;
    }
    let (uid, gid) = held_ids();
    let mut groups = [0 as libc::gid_t; NGROUPS + 1];
    // SAFETY: `groups` has room for `NGROUPS + 1` ids; reading changes nothing.
    let n = unsafe { libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr()) };
    let o = usize::try_from(n)
        .ok()
        .filter(|&n| n <= NGROUPS)
        .map(|n| Cred::with_groups(uid, gid, &groups[..n]));
    OWN.set(Some(o));
    o
}

/// Identity switches the calling thread made so far.
#[cfg(test)]
pub(super) fn switches() -> u64 {
    SWITCHES.get()
}

/// Whether the calling thread is pinned ([`Pinned`]) now.
#[cfg(test)]
pub(super) fn pinned() -> bool {
    PINNED.get()
}

/// The fs ids the calling thread holds.
#[cfg(test)]
pub(super) fn fs_ids() -> (u32, u32) {
    held_ids()
}

/// Makes the calling thread's file system calls act as `cx` (a no-op when they already do).
pub(super) fn act_as(cx: &Cred) -> NfsResult<()> {
    if PINNED.get() {
        // A pinned thread's own identity is root's (`pin_if_own`): it acts as the server too.
        let own = own().ok_or(Nfsstat3::SERVERFAULT)?;
        let ok = same_identity(cx, &own) || *cx == Cred::ROOT;
        return if ok {
            Ok(())
        } else {
            Err(Nfsstat3::SERVERFAULT)
        };
    }
    if HELD.get() == Some(*cx) {
        return Ok(());
    }
    HELD.set(None);
    // (uid_t) -1 is no id: `setfsuid` / `setfsgid` ignore it (the thread would stay whoever
    // it was) and `setgroups` refuses it. Such a caller may do nothing.
    let invalid = |id: u32| id == u32::MAX;
    if invalid(cx.uid) || invalid(cx.gid) || cx.groups().iter().any(|&g| invalid(g)) {
        return Err(Nfsstat3::ACCES);
    }
    umask_is_zero();
    let groups = cx.groups();
    // SAFETY: raw system calls with a valid pointer to `groups.len()` gid_t values; they
    // change only the calling thread's credentials.
    let r = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            groups.len() as libc::c_long,
            groups.as_ptr(),
        )
    };
    if r < 0 {
        return Err(Nfsstat3::SERVERFAULT);
    }
    // SAFETY: as above; both return the previous id and cannot fault.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, cx.gid as libc::c_long);
        libc::syscall(libc::SYS_setfsuid, cx.uid as libc::c_long);
    }
    if !ids_all_mapped() && held_ids() != (cx.uid, cx.gid) {
        // An id the process's user namespace does not map: ignored like -1.
        return Err(Nfsstat3::ACCES);
    }
    SWITCHES.set(SWITCHES.get() + 1);
    HELD.set(Some(*cx));
    Ok(())
}

/// Whether an id map (`/proc/self/uid_map` or `gid_map`) maps every id to itself: one
/// line `0 0 4294967295`, the initial user namespace.
fn is_identity_map(map: &str) -> bool {
    let lines: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    lines == [vec!["0", "0", "4294967295"]]
}

/// Whether this process's user namespace maps every uid and gid (but -1), so a switch to a
/// valid id always takes; otherwise each switch is checked.
fn ids_all_mapped() -> bool {
    static ALL: OnceLock<bool> = OnceLock::new();
    *ALL.get_or_init(|| {
        let map = |p: &str| std::fs::read_to_string(p).is_ok_and(|m| is_identity_map(&m));
        map("/proc/self/uid_map") && map("/proc/self/gid_map")
    })
}

/// The fs ids the calling thread holds (an invalid id, -1, changes nothing and returns the
/// one in force).
fn held_ids() -> (u32, u32) {
    // SAFETY: raw system calls that change nothing for an invalid id.
    unsafe {
        (
            libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) as u32,
            libc::syscall(libc::SYS_setfsgid, -1 as libc::c_long) as u32,
        )
    }
}

/// Whether this process may switch identities (CAP_SETUID and CAP_SETGID: without them
/// `setfsuid` silently changes nothing): tried on a thread of its own, so the caller's
/// thread keeps its identity and umask.
pub(super) fn can_switch() -> bool {
    let probe = || {
        let nobody = Cred::with_groups(65_534, 65_534, &[65_534]);
        let ok = act_as(&nobody).is_ok() && held_ids() == (nobody.uid, nobody.gid);
        ok && as_server().is_ok() && held_ids() == (0, 0)
    };
    let t = std::thread::Builder::new().name("nfsd-id-probe".into());
    t.spawn(probe)
        .ok()
        .and_then(|h| h.join().ok())
        .unwrap_or(false)
}

/// Makes the calling thread act as the server (root, no supplementary groups).
pub(super) fn as_server() -> NfsResult<()> {
    act_as(&Cred::ROOT)
}

/// Whether new objects created by this thread get exactly the mode asked for (the thread has
/// its own umask 0); when not (`unshare` refused), the caller sets the mode after creating.
pub(super) fn umask_is_zero() -> bool {
    if let Some(z) = UMASK0.get() {
        return z;
    }
    // SAFETY: plain system calls on the calling thread's own file system context.
    let z = unsafe { libc::unshare(libc::CLONE_FS) } == 0;
    if z {
        // SAFETY: as above; the context is this thread's alone now.
        unsafe { libc::umask(0) };
    }
    UMASK0.set(Some(z));
    z
}

/// Runs `make`, the system call that creates an object, with the client's `umask` (RFC 8275
/// `mode_umask`) as the thread's: the kernel takes it off the new object's mode unless the
/// directory has a default ACL, as for a local creation (Linux nfsd sets its thread's umask
/// the same way). The umask is 0 again after. Without a umask of its own (`unshare`
/// refused) the thread leaves it to the caller ([`umask_is_zero`]).
pub(super) fn creating<R>(umask: Option<u32>, make: impl FnOnce() -> R) -> R {
    let Some(u) = umask.filter(|_| umask_is_zero()) else {
        return make();
    };
    // SAFETY: the thread's own file system context (`umask_is_zero`); no other thread reads
    // its umask.
    unsafe { libc::umask((u & 0o777) as libc::mode_t) };
    let r = make();
    // SAFETY: as above.
    unsafe { libc::umask(0) };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_as_the_same_identity_only_the_same_ids_and_group_set() {
        let c = |uid, gid, g: &[u32]| Cred::with_groups(uid, gid, g);
        assert!(same_identity(&c(0, 0, &[]), &c(0, 0, &[0])));
        assert!(same_identity(&c(0, 0, &[4, 1]), &c(0, 0, &[1, 4, 4, 0])));
        assert!(!same_identity(&c(0, 0, &[]), &c(0, 0, &[1])));
        assert!(!same_identity(&c(0, 0, &[1]), &c(0, 1, &[0])));
        assert!(!same_identity(&c(0, 0, &[]), &c(1000, 0, &[])));
    }

    #[test]
    fn accepts_only_the_whole_identity_map_as_mapping_everything() {
        assert!(is_identity_map("         0          0 4294967295\n"));
        assert!(!is_identity_map("         0     100000      65536\n"));
        assert!(!is_identity_map("0 0 1000\n1000 1000 4294966295\n"));
        assert!(!is_identity_map(""));
    }
}
