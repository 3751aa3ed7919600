//! What a server's replies let a client cache: one fixed sequence of NFSv3 calls, and the
//! facts its replies show ([`Fact`]) — which optional parts are present (`pre_op_attr`,
//! `post_op_attr`, `post_op_fh3`, READDIRPLUS `name_attributes` / `name_handle`) and what the
//! attributes mean (weak cache consistency data equal to the attributes just before and just
//! after the call, times that move only when the object changed, stable file ids, one fsid,
//! link counts, handles that are the same whichever procedure returned them). The Linux client
//! decides from exactly these whether its cached pages, attributes and dentries are still
//! good (fs/nfs/inode.c `nfs_wcc_update_inode`, `nfs_update_inode`; fs/nfs/dir.c
//! `nfs_prime_dcache`), so a server that differs from the kernel nfsd in one of them makes the
//! client send READs, GETATTRs and LOOKUPs it would not send otherwise. `rpcrdma-nfs3-compare`
//! runs [`run`] against the kernel nfsd and against ours and prints [`differences`].
//!
//! Normal operation: [`run`] makes a scratch directory under the export root, works in it
//! (MKDIR, CREATE, WRITE, COMMIT, READ, SETATTR, LOOKUP, ACCESS, exclusive CREATE, SYMLINK,
//! READLINK, LINK, READDIRPLUS, READDIR, a listing continued after a change, RENAME, REMOVE,
//! RMDIR, NFSACL's GETACL and SETACL: `acl.rs`), taking a GETATTR before and after each call that changes something, and removes
//! the directory again. Facts are named `PROCEDURE.what`; `must_match` marks those a client's
//! caching depends on. Recovery: a call that fails ends the run with a message naming it
//! (the scratch directory may stay behind).

mod acl;

use std::fmt::Display;

use rpcrdma_poller::ClientError;

use super::client::{NfsClient, NfsError};
use super::proto::{Args3, Res3};
use crate::nfs::types::{
    CreateHow, Fattr3, Fh, Ftype3, Nfsstat3, Sattr3, SetTime, StableHow, Time3, WccData,
};

/// One thing a reply showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// `PROCEDURE.what`, e.g. `WRITE.wcc.before=prior`.
    pub key: String,
    /// What was seen (`yes` / `no`, a number, a type).
    pub value: String,
    /// True when a client's caching depends on it: a server must show what the kernel nfsd
    /// shows.
    pub must_match: bool,
}

/// A fact two servers disagree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The fact's key.
    pub key: String,
    /// The reference server's value (`-` when it has no such fact).
    pub reference: String,
    /// The other server's value.
    pub subject: String,
    /// True when the fact must match.
    pub must_match: bool,
}

/// The facts on which `subject` differs from `reference`, in the reference's order (then the
/// subject's extra facts).
pub fn differences(reference: &[Fact], subject: &[Fact]) -> Vec<Difference> {
    let find = |fs: &[Fact], k: &str| fs.iter().find(|f| f.key == k).map(|f| f.value.clone());
    let mut out = Vec::new();
    for f in reference {
        let s = find(subject, &f.key).unwrap_or_else(|| "-".into());
        if s != f.value {
            out.push(Difference {
                key: f.key.clone(),
                reference: f.value.clone(),
                subject: s,
                must_match: f.must_match,
            });
        }
    }
    for f in subject {
        if find(reference, &f.key).is_none() {
            out.push(Difference {
                key: f.key.clone(),
                reference: "-".into(),
                subject: f.value.clone(),
                must_match: f.must_match,
            });
        }
    }
    out
}

/// Why a run stopped.
pub type RunError = String;

fn call_err(what: &str, e: NfsError) -> RunError {
    format!("{what}: {e:?}")
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Attributes equal but for the access time (which a READ or a listing may move).
fn same_but_atime(a: &Fattr3, b: &Fattr3) -> bool {
    Fattr3 {
        atime: b.atime,
        ..*a
    } == *b
}

/// The facts of one run.
struct Probe<'a> {
    c: &'a NfsClient,
    facts: Vec<Fact>,
    fsid: u64,
}

impl Probe<'_> {
    fn fact(&mut self, key: &str, value: impl Display, must_match: bool) {
        self.facts.push(Fact {
            key: key.to_string(),
            value: value.to_string(),
            must_match,
        });
    }

    fn ga(&self, fh: &Fh) -> Result<Fattr3, RunError> {
        self.c.getattr(fh).map_err(|e| call_err("GETATTR", e))
    }

    /// The facts of one `post_op_attr`: present, and equal (but for atime) to `now`.
    fn post_op(&mut self, key: &str, a: Option<&Fattr3>, now: &Fattr3) {
        self.fact(&format!("{key}=present"), yes(a.is_some()), true);
        if let Some(a) = a {
            self.fact(&format!("{key}=current"), yes(same_but_atime(a, now)), true);
        }
    }

    /// The facts of one `wcc_data`: the `pre_op_attr` present and equal to `prior` (size,
    /// mtime, ctime), the `post_op_attr` present and equal to `now`; and how the object
    /// changed from `prior` to `now`.
    fn wcc(&mut self, key: &str, w: &WccData, prior: &Fattr3, now: &Fattr3) {
        self.fact(
            &format!("{key}.before=present"),
            yes(w.before.is_some()),
            true,
        );
        if let Some(b) = w.before {
            self.fact(&format!("{key}.before=prior"), yes(b == prior.wcc()), true);
        }
        self.post_op(&format!("{key}.after"), w.after.as_ref(), now);
        self.moved(key, prior, now, true);
    }

    /// Which of mtime, ctime, size, nlink changed from `a` to `b`, over a call that changed
    /// the object or not (`changing`). Times that move over a call that changed nothing must
    /// match; over a change, whether they moved depends on the file system's clock (tmpfs
    /// keeps the kernel's coarse clock: two changes within one tick leave ctime where it
    /// was), so only that ctime (which no client sets) did not go back must match.
    fn moved(&mut self, key: &str, a: &Fattr3, b: &Fattr3, changing: bool) {
        let m = !changing;
        self.fact(&format!("{key}.mtime=moved"), yes(a.mtime != b.mtime), m);
        self.fact(&format!("{key}.ctime=moved"), yes(a.ctime != b.ctime), m);
        let back = b.ctime < a.ctime;
        self.fact(&format!("{key}.ctime=not_back"), yes(!back), true);
        let dn = i64::from(b.nlink) - i64::from(a.nlink);
        self.fact(&format!("{key}.nlink=delta"), dn, true);
        self.fact(
            &format!("{key}.atime=moved"),
            yes(a.atime != b.atime),
            false,
        );
        self.fact(&format!("{key}.size=moved"), yes(a.size != b.size), false);
    }

    /// The facts of a new object's attributes.
    fn object(&mut self, key: &str, a: &Fattr3) {
        self.fact(&format!("{key}.type"), format!("{:?}", a.ftype), true);
        // The mode the client asked for; one created without a mode has mode 0, as with Linux
        // nfsd. Not compared: the client's caching does not depend on it.
        self.fact(&format!("{key}.mode"), format!("{:o}", a.mode), false);
        self.fact(&format!("{key}.nlink"), a.nlink, true);
        self.fact(
            &format!("{key}.fsid=export"),
            yes(a.fsid == self.fsid),
            true,
        );
        self.fact(&format!("{key}.used>=size"), yes(a.used >= a.size), false);
        let same = a.atime == a.mtime && a.mtime == a.ctime;
        self.fact(&format!("{key}.times=equal"), yes(same), false);
    }

    fn res<T>(
        &self,
        what: &str,
        args: &Args3<'_>,
        f: impl FnOnce(Res3<'_>) -> T,
    ) -> Result<T, RunError> {
        self.c.with_res(args, f).map_err(|e| call_err(what, e))
    }

    /// A CREATE, MKDIR or SYMLINK in `dir` (attributes `prior` before): the new handle.
    fn make(&mut self, key: &str, dir: &Fh, args: &Args3<'_>) -> Result<Fh, RunError> {
        let prior = self.ga(dir)?;
        let r = self.res(key, args, |r| match r {
            Res3::Create(Ok(x)) => Ok(x),
            Res3::Create(Err((s, _))) => Err(s),
            _ => Err(Nfsstat3::SERVERFAULT),
        })?;
        let (fh, attr, w) = r.map_err(|s| format!("{key}: {}", s.name()))?;
        self.fact(&format!("{key}.obj_fh=present"), yes(fh.is_some()), true);
        let fh = fh.ok_or_else(|| format!("{key}: no handle"))?;
        let now = self.ga(&fh)?;
        self.post_op(&format!("{key}.obj_attr"), attr.as_ref(), &now);
        self.object(&format!("{key}.obj"), &now);
        let dnow = self.ga(dir)?;
        self.wcc(&format!("{key}.dir_wcc"), &w, &prior, &dnow);
        Ok(fh)
    }

    /// A call whose result is a status and one `wcc_data` of `obj` (SETATTR, REMOVE, RMDIR).
    fn status_wcc(&mut self, key: &str, obj: &Fh, args: &Args3<'_>) -> Result<(), RunError> {
        let prior = self.ga(obj)?;
        let (s, w) = self.res(key, args, |r| match r {
            Res3::Setattr(s, w) | Res3::Remove(s, w) => (s, w),
            _ => (Nfsstat3::SERVERFAULT, WccData::default()),
        })?;
        if s != Nfsstat3::OK {
            return Err(format!("{key}: {}", s.name()));
        }
        let now = self.ga(obj)?;
        self.wcc(&format!("{key}.wcc"), &w, &prior, &now);
        Ok(())
    }

    fn setattr(&mut self, key: &str, fh: &Fh, attr: Sattr3) -> Result<(), RunError> {
        let a = Args3::Setattr {
            fh: *fh,
            attr,
            guard: None,
        };
        self.status_wcc(key, fh, &a)
    }
}

/// A name for the scratch directory that no other run uses.
pub fn scratch_name() -> String {
    let t = Time3::now();
    format!(
        "cachecheck-{}-{}-{}",
        std::process::id(),
        t.seconds,
        t.nseconds
    )
}

/// Runs the sequence in a new directory `scratch` under `root` and returns its facts.
pub fn run(c: &NfsClient, root: &Fh, scratch: &str) -> Result<Vec<Fact>, RunError> {
    let r0 = c.getattr(root).map_err(|e| call_err("GETATTR root", e))?;
    let mut p = Probe {
        c,
        facts: Vec::new(),
        fsid: r0.fsid,
    };
    let again = p.ga(root)?;
    p.fact("GETATTR.repeated=same", yes(again == r0), true);
    let mode = |m| Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    };
    let name = scratch.as_bytes();
    let mk = Args3::Mkdir {
        dir: *root,
        name,
        attr: mode(0o755),
    };
    let s = p.make("MKDIR", root, &mk)?;
    files(&mut p, &s, mode(0o644))?;
    listing(&mut p, root, &s)?;
    wrong_types(&mut p, &s)?;
    bad_names(&mut p, &s)?;
    names(&mut p, &s)?;
    acl::acls(&mut p, &s)?;
    let rm = Args3::Rmdir { dir: *root, name };
    p.status_wcc("RMDIR", root, &rm)?;
    Ok(p.facts)
}

/// CREATE, WRITE, COMMIT, READ, SETATTR, LOOKUP, ACCESS, exclusive CREATE in `s`.
fn files(p: &mut Probe<'_>, s: &Fh, m644: Sattr3) -> Result<(), RunError> {
    let cr = Args3::Create {
        dir: *s,
        name: b"f",
        how: CreateHow::Unchecked(m644),
    };
    let f = p.make("CREATE", s, &cr)?;
    let data = [0x5au8; 3000];
    let prior = p.ga(&f)?;
    let (w, ..) =
        p.c.write_wcc(&f, 0, &data, StableHow::Unstable, false)
            .map_err(|e| call_err("WRITE", e))?;
    let now = p.ga(&f)?;
    p.wcc("WRITE.wcc", &w, &prior, &now);
    p.fact("WRITE.used>=size", yes(now.used >= now.size), false);
    let prior = now;
    let cm = Args3::Commit {
        fh: f,
        offset: 0,
        count: 0,
    };
    let w = p.res("COMMIT", &cm, |r| match r {
        Res3::Commit(Ok((w, _))) => Ok(w),
        _ => Err(()),
    })?;
    let w = w.map_err(|()| "COMMIT failed".to_string())?;
    let now = p.ga(&f)?;
    p.fact("COMMIT.wcc.before=present", yes(w.before.is_some()), false);
    p.post_op("COMMIT.wcc.after", w.after.as_ref(), &now);
    p.moved("COMMIT", &prior, &now, false);
    read(p, "READ", &f, &now)?;
    p.setattr(
        "SETATTR-mode",
        &f,
        Sattr3 {
            mode: Some(0o600),
            ..Sattr3::default()
        },
    )?;
    let t = Time3 {
        seconds: 1_000_000_000,
        nseconds: 123_456_789,
    };
    let times = Sattr3 {
        atime: SetTime::ClientTime(t),
        mtime: SetTime::ClientTime(t),
        ..Sattr3::default()
    };
    p.setattr("SETATTR-times", &f, times)?;
    let got = p.ga(&f)?;
    p.fact("SETATTR-times.mtime=given", yes(got.mtime == t), true);
    // An access time at or before the modification time: a store that keeps access times
    // (relatime) moves it on this READ.
    read(p, "READ-after-times", &f, &got)?;
    let trunc = Sattr3 {
        size: Some(100),
        ..Sattr3::default()
    };
    p.setattr("SETATTR-size", &f, trunc)?;
    lookup(p, s, &f)?;
    let ex = Args3::Create {
        dir: *s,
        name: b"g",
        how: CreateHow::Exclusive(*b"verf0001"),
    };
    let g = p.make("CREATE-excl", s, &ex)?;
    // What the Linux client sends after an exclusive create: the mode, and both times set to
    // the server's time (the verifier took their place).
    let now = Sattr3 {
        atime: SetTime::ServerTime,
        mtime: SetTime::ServerTime,
        ..m644
    };
    p.setattr("SETATTR-after-excl", &g, now)
}

/// A READ of `f` (attributes `prior` before): its count, its attributes against a GETATTR
/// after it, access time included.
fn read(p: &mut Probe<'_>, key: &str, f: &Fh, prior: &Fattr3) -> Result<(), RunError> {
    let rd = Args3::Read {
        fh: *f,
        offset: 0,
        count: 1000,
    };
    let a = p.res(key, &rd, |r| match r {
        Res3::Read(Ok((a, n, ..))) => Ok((a, n)),
        _ => Err(()),
    })?;
    let (a, n) = a.map_err(|()| format!("{key} failed"))?;
    let after = p.ga(f)?;
    p.fact(&format!("{key}.count"), n, true);
    p.post_op(&format!("{key}.attr"), a.as_ref(), &after);
    if let Some(a) = a {
        p.fact(
            &format!("{key}.attr.atime=current"),
            yes(a.atime == after.atime),
            true,
        );
    }
    p.moved(key, prior, &after, false);
    Ok(())
}

/// LOOKUP and ACCESS of `f` in `s`.
fn lookup(p: &mut Probe<'_>, s: &Fh, f: &Fh) -> Result<(), RunError> {
    let (fh, oa, da) =
        p.c.lookup_attr(s, b"f")
            .map_err(|e| call_err("LOOKUP", e))?;
    let (fnow, snow) = (p.ga(f)?, p.ga(s)?);
    p.fact("LOOKUP.fh=create_fh", yes(fh == *f), true);
    p.post_op("LOOKUP.obj_attr", oa.as_ref(), &fnow);
    p.post_op("LOOKUP.dir_attr", da.as_ref(), &snow);
    let ac = Args3::Access {
        fh: *f,
        access: 0x3f,
    };
    let a = p.res("ACCESS", &ac, |r| match r {
        Res3::Access(Ok((a, _))) => Ok(a),
        _ => Err(()),
    })?;
    let a = a.map_err(|()| "ACCESS failed".to_string())?;
    p.post_op("ACCESS.attr", a.as_ref(), &fnow);
    Ok(())
}

/// MKDIR, SYMLINK, READLINK, LINK in `s`, then READDIRPLUS and READDIR of `s` (in `root`),
/// and a listing continued with its cookie and verifier after an entry was added.
fn listing(p: &mut Probe<'_>, root: &Fh, s: &Fh) -> Result<(), RunError> {
    let md = Args3::Mkdir {
        dir: *s,
        name: b"sub",
        attr: Sattr3::default(),
    };
    p.make("MKDIR-sub", s, &md)?;
    let sl = Args3::Symlink {
        dir: *s,
        name: b"l",
        attr: Sattr3::default(),
        target: b"f",
    };
    let l = p.make("SYMLINK", s, &sl)?;
    let a = p.res("READLINK", &Args3::Readlink { fh: l }, |r| match r {
        Res3::Readlink(Ok((a, _))) => Ok(a),
        _ => Err(()),
    })?;
    let a = a.map_err(|()| "READLINK failed".to_string())?;
    let lnow = p.ga(&l)?;
    p.post_op("READLINK.attr", a.as_ref(), &lnow);
    let f = p.c.lookup(s, b"f").map_err(|e| call_err("LOOKUP", e))?;
    let (fprior, sprior) = (p.ga(&f)?, p.ga(s)?);
    let lk = Args3::Link {
        fh: f,
        dir: *s,
        name: b"f2",
    };
    let (st, fa, w) = p.res("LINK", &lk, |r| match r {
        Res3::Link(st, a, w) => (st, a, w),
        _ => (Nfsstat3::SERVERFAULT, None, WccData::default()),
    })?;
    if st != Nfsstat3::OK {
        return Err(format!("LINK: {}", st.name()));
    }
    let (fnow, snow) = (p.ga(&f)?, p.ga(s)?);
    p.post_op("LINK.file_attr", fa.as_ref(), &fnow);
    p.moved("LINK.file", &fprior, &fnow, true);
    p.wcc("LINK.dir_wcc", &w, &sprior, &snow);
    plus(p, root, s)
}

/// READDIRPLUS and READDIR of `s`; a listing continued after a change.
fn plus(p: &mut Probe<'_>, root: &Fh, s: &Fh) -> Result<(), RunError> {
    let (rnow, sprior) = (p.ga(root)?, p.ga(s)?);
    let page =
        p.c.readdir_page(s, 0, [0; 8], 32 * 1024, true)
            .map_err(|e| call_err("READDIRPLUS", e))?;
    let snow = p.ga(s)?;
    p.post_op("READDIRPLUS.dir_attr", page.dir_attr.as_ref(), &snow);
    if let Some(a) = page.dir_attr {
        let current = a.atime == snow.atime;
        p.fact("READDIRPLUS.dir_attr.atime=current", yes(current), true);
    }
    p.moved("READDIRPLUS.dir", &sprior, &snow, false);
    p.fact("READDIRPLUS.eof", yes(page.eof), true);
    p.fact("READDIRPLUS.entries", page.entries.len(), true);
    for e in &page.entries {
        let n = String::from_utf8_lossy(&e.name).into_owned();
        let key = format!("READDIRPLUS[{n}]");
        p.fact(&format!("{key}.attr=present"), yes(e.attr.is_some()), true);
        p.fact(&format!("{key}.fh=present"), yes(e.fh.is_some()), true);
        let (want_fh, want) = match e.name.as_slice() {
            b"." => (*s, snow),
            b".." => (*root, rnow),
            name => {
                let fh = p.c.lookup(s, name).map_err(|e| call_err("LOOKUP", e))?;
                (fh, p.ga(&fh)?)
            }
        };
        if let Some(fh) = e.fh {
            p.fact(&format!("{key}.fh=lookup_fh"), yes(fh == want_fh), true);
        }
        if let Some(a) = e.attr {
            p.fact(
                &format!("{key}.attr=current"),
                yes(same_but_atime(&a, &want)),
                true,
            );
        }
        p.fact(
            &format!("{key}.fileid=attr_fileid"),
            yes(e.fileid == want.fileid),
            true,
        );
    }
    let plain =
        p.c.readdir_page(s, 0, [0; 8], 32 * 1024, false)
            .map_err(|e| call_err("READDIR", e))?;
    let ids = |es: &[super::proto::OwnedDirEntry]| {
        let mut v: Vec<_> = es.iter().map(|e| (e.name.clone(), e.fileid)).collect();
        v.sort();
        v
    };
    p.fact(
        "READDIR.entries=readdirplus",
        yes(ids(&plain.entries) == ids(&page.entries)),
        true,
    );
    p.fact(
        "READDIR.verf=readdirplus",
        yes(plain.verf == page.verf),
        false,
    );
    p.fact("READDIRPLUS.verf=zero", yes(page.verf == [0; 8]), false);
    // A listing in pages: the first entries, an entry added, the rest with cookie and verifier.
    let first =
        p.c.readdir_page(s, 0, [0; 8], 600, true)
            .map_err(|e| call_err("READDIRPLUS small", e))?;
    let last = first.entries.last().ok_or("READDIRPLUS small: no entry")?;
    let cr = Args3::Create {
        dir: *s,
        name: b"h",
        how: CreateHow::Guarded(Sattr3::default()),
    };
    p.make("CREATE-h", s, &cr)?;
    let rest =
        p.c.readdir_page(s, last.cookie, first.verf, 32 * 1024, true);
    let st = match &rest {
        Ok(_) => Nfsstat3::OK,
        Err(NfsError::Status(s)) => *s,
        Err(e) => return Err(call_err("READDIRPLUS continued", e.clone())),
    };
    p.fact("READDIRPLUS-continued.status", st.name(), true);
    Ok(())
}

/// RENAME across directories, REMOVE, RMDIR: their wcc data, the renamed file's id and
/// ctime, the link count.
fn names(p: &mut Probe<'_>, s: &Fh) -> Result<(), RunError> {
    let sub = p.c.lookup(s, b"sub").map_err(|e| call_err("LOOKUP", e))?;
    let f = p.c.lookup(s, b"f").map_err(|e| call_err("LOOKUP", e))?;
    let (sprior, bprior, fprior) = (p.ga(s)?, p.ga(&sub)?, p.ga(&f)?);
    let rn = Args3::Rename {
        from_dir: *s,
        from_name: b"f2",
        to_dir: sub,
        to_name: b"f3",
    };
    let (st, fw, tw) = p.res("RENAME", &rn, |r| match r {
        Res3::Rename(st, a, b) => (st, a, b),
        _ => (
            Nfsstat3::SERVERFAULT,
            WccData::default(),
            WccData::default(),
        ),
    })?;
    if st != Nfsstat3::OK {
        return Err(format!("RENAME: {}", st.name()));
    }
    let (snow, bnow, fnow) = (p.ga(s)?, p.ga(&sub)?, p.ga(&f)?);
    p.wcc("RENAME.from_wcc", &fw, &sprior, &snow);
    p.wcc("RENAME.to_wcc", &tw, &bprior, &bnow);
    p.moved("RENAME.file", &fprior, &fnow, true);
    let moved = p.c.lookup(&sub, b"f3").map_err(|e| call_err("LOOKUP", e))?;
    p.fact("RENAME.fh=same", yes(moved == f), true);
    p.fact(
        "RENAME.fileid=same",
        yes(p.ga(&moved)?.fileid == fprior.fileid),
        true,
    );
    let prior = p.ga(&f)?;
    p.status_wcc(
        "REMOVE",
        &sub,
        &Args3::Remove {
            dir: sub,
            name: b"f3",
        },
    )?;
    let now = p.ga(&f)?;
    p.moved("REMOVE.file", &prior, &now, true);
    p.status_wcc(
        "RMDIR-sub",
        s,
        &Args3::Rmdir {
            dir: *s,
            name: b"sub",
        },
    )?;
    for n in [&b"f"[..], b"g", b"h", b"l"] {
        p.c.remove(s, n).map_err(|e| call_err("REMOVE", e))?;
    }
    Ok(())
}

/// The status `args` gets (a fact `ERRORS.<what>.<type>` that must match): what a procedure
/// answers on an object of another type than it works on.
fn status_fact(p: &mut Probe<'_>, what: &str, ty: &str, args: &Args3<'_>) -> Result<(), RunError> {
    status_fact_as(p, what, ty, args, true)
}

/// [`status_fact`], the fact a must-match one or not (`must`).
fn status_fact_as(
    p: &mut Probe<'_>,
    what: &str,
    ty: &str,
    args: &Args3<'_>,
    must: bool,
) -> Result<(), RunError> {
    let r = match p.c.call(args.proc_num(), args) {
        Ok(r) => r,
        // Refused before the procedure ran (GARBAGE_ARGS): that is the answer.
        Err(NfsError::Rpc(ClientError::Rpc(stat))) => {
            p.fact(&format!("ERRORS.{what}.{ty}"), format!("{stat:?}"), must);
            return Ok(());
        }
        Err(e) => return Err(call_err(what, e)),
    };
    let word = r
        .results()
        .get(..4)
        .and_then(|w| <[u8; 4]>::try_from(w).ok());
    let st = Nfsstat3(u32::from_be_bytes(
        word.ok_or_else(|| format!("{what}: no status"))?,
    ));
    p.fact(&format!("ERRORS.{what}.{ty}"), st.name(), must);
    Ok(())
}

/// Every procedure that works on one type of object, on a regular file, a directory, a
/// symbolic link and a FIFO in a directory `t` of `s` (the statuses are facts that must
/// match: a client maps each to the errno its application sees); then `t` goes. Calls that
/// would succeed and change something are undone (a CREATE, MKDIR or LINK made, a RENAME).
fn wrong_types(p: &mut Probe<'_>, s: &Fh) -> Result<(), RunError> {
    let c = p.c;
    let err = |what| move |e| call_err(what, e);
    let t = c
        .mkdir(s, b"t", Sattr3::default())
        .map_err(err("MKDIR t"))?;
    let how = CreateHow::Guarded(Sattr3::default());
    let f = c.create(&t, b"f", how).map_err(err("CREATE f"))?;
    let d = c
        .mkdir(&t, b"d", Sattr3::default())
        .map_err(err("MKDIR d"))?;
    let l = c.symlink(&t, b"l", b"f").map_err(err("SYMLINK l"))?;
    let fifo = c.mknod(&t, b"p", Ftype3::Fifo).map_err(err("MKNOD p"))?;
    let objects = [
        ("file", f, &b"f"[..]),
        ("dir", d, b"d"),
        ("link", l, b"l"),
        ("fifo", fifo, b"p"),
    ];
    for (ty, x, name) in objects {
        for (what, a) in &type_calls(x) {
            status_fact(p, what, ty, a)?;
        }
        // Calls that change something when they succeed: made, then undone.
        status_fact(
            p,
            "CREATE-in",
            ty,
            &Args3::Create {
                dir: x,
                name: b"n",
                how,
            },
        )?;
        status_fact(
            p,
            "MKDIR-in",
            ty,
            &Args3::Mkdir {
                dir: x,
                name: b"m",
                attr: Sattr3::default(),
            },
        )?;
        status_fact(
            p,
            "LINK",
            ty,
            &Args3::Link {
                fh: x,
                dir: t,
                name: b"hard",
            },
        )?;
        status_fact(
            p,
            "RENAME-into",
            ty,
            &Args3::Rename {
                from_dir: t,
                from_name: b"f",
                to_dir: x,
                to_name: b"moved",
            },
        )?;
        let _ = (c.remove(&x, b"n"), c.rmdir(&x, b"m"), c.remove(&t, b"hard"));
        let _ = c.rename(&x, b"moved", &t, b"f");
        // The wrong kind of removal of the object: REMOVE of the directory, RMDIR of the rest
        // (the right kind would succeed and is not asked).
        let (proc_, rm) = match ty {
            "dir" => ("REMOVE", Args3::Remove { dir: t, name }),
            _ => ("RMDIR", Args3::Rmdir { dir: t, name }),
        };
        status_fact(p, proc_, ty, &rm)?;
    }
    for n in [&b"f"[..], b"l", b"p"] {
        c.remove(&t, n).map_err(err("REMOVE"))?;
    }
    c.rmdir(&t, b"d").map_err(err("RMDIR d"))?;
    c.rmdir(s, b"t").map_err(err("RMDIR t"))?;
    Ok(())
}

/// The calls [`wrong_types`] makes on object `x` that change nothing when they succeed.
fn type_calls(x: Fh) -> [(&'static str, Args3<'static>); 9] {
    let size0 = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    let (verf, stable) = ([0; 8], StableHow::Unstable);
    [
        (
            "READ",
            Args3::Read {
                fh: x,
                offset: 0,
                count: 10,
            },
        ),
        (
            "WRITE",
            Args3::Write {
                fh: x,
                offset: 0,
                count: 1,
                stable,
                data: b"w",
            },
        ),
        (
            "SETATTR-size",
            Args3::Setattr {
                fh: x,
                attr: size0,
                guard: None,
            },
        ),
        ("LOOKUP-in", Args3::Lookup { dir: x, name: b"x" }),
        ("READLINK", Args3::Readlink { fh: x }),
        (
            "READDIR",
            Args3::Readdir {
                dir: x,
                cookie: 0,
                verf,
                count: 4096,
            },
        ),
        (
            "READDIRPLUS",
            Args3::Readdirplus {
                dir: x,
                cookie: 0,
                verf,
                dircount: 4096,
                maxcount: 8192,
            },
        ),
        (
            "COMMIT",
            Args3::Commit {
                fh: x,
                offset: 0,
                count: 0,
            },
        ),
        (
            "ACCESS",
            Args3::Access {
                fh: x,
                access: 0x3f,
            },
        ),
    ]
}

/// Names a procedure must refuse, and changes POSIX refuses, in a directory `n` of `s` holding
/// a file `f`, a file `g`, an empty directory `e` and a directory `d` holding `sub/x`: `.` and
/// `..` as the name made, removed or renamed, an empty name, a name of 256 octets, one holding
/// `/`, names that exist, a directory renamed over a file, a file over a directory, a
/// directory over one that is not empty or into itself, RMDIR of a directory not empty (each
/// status a fact `ERRORS.<what>.name` that must match). Then `n` goes (whatever a server let
/// through is removed as far as it can be).
fn bad_names(p: &mut Probe<'_>, s: &Fh) -> Result<(), RunError> {
    let c = p.c;
    let err = |what| move |e| call_err(what, e);
    let n = c
        .mkdir(s, b"n", Sattr3::default())
        .map_err(err("MKDIR n"))?;
    let how = CreateHow::Guarded(Sattr3::default());
    let f = c.create(&n, b"f", how).map_err(err("CREATE f"))?;
    c.create(&n, b"g", how).map_err(err("CREATE g"))?;
    c.mkdir(&n, b"e", Sattr3::default())
        .map_err(err("MKDIR e"))?;
    let d = c
        .mkdir(&n, b"d", Sattr3::default())
        .map_err(err("MKDIR d"))?;
    let sub = c
        .mkdir(&d, b"sub", Sattr3::default())
        .map_err(err("MKDIR sub"))?;
    c.create(&sub, b"x", how).map_err(err("CREATE x"))?;
    for (what, a) in &name_calls(n, f, sub, how) {
        // A name of 256 octets: RFC 1813 names NFS3ERR_NAMETOOLONG, which this server
        // answers; Linux nfsd refuses it while decoding (GARBAGE_ARGS,
        // `svcxdr_decode_filename`). A client learns nothing from the latter, so the two may
        // differ here.
        status_fact_as(p, what, "name", a, !what.ends_with("-long"))?;
    }
    let _ = c.remove(&sub, b"x");
    let _ = c.rmdir(&d, b"sub");
    for name in [&b"d"[..], b"e", b"y"] {
        let _ = c.rmdir(&n, name);
    }
    for name in [&b"f"[..], b"g", b"y", b"a"] {
        let _ = c.remove(&n, name);
    }
    c.rmdir(s, b"n").map_err(err("RMDIR n"))?;
    Ok(())
}

/// The calls of [`bad_names`] in directory `n` (file `f`, directory `d/sub`).
fn name_calls(n: Fh, f: Fh, sub: Fh, how: CreateHow) -> [(&'static str, Args3<'static>); 26] {
    const LONG: [u8; 256] = [b'a'; 256];
    let none = Sattr3::default();
    let rename = |from: &'static [u8], to_dir: Fh, to: &'static [u8]| Args3::Rename {
        from_dir: n,
        from_name: from,
        to_dir,
        to_name: to,
    };
    let create = |name: &'static [u8]| Args3::Create { dir: n, name, how };
    [
        ("LOOKUP-empty", Args3::Lookup { dir: n, name: b"" }),
        (
            "LOOKUP-long",
            Args3::Lookup {
                dir: n,
                name: &LONG,
            },
        ),
        ("LOOKUP-dot", Args3::Lookup { dir: n, name: b"." }),
        ("CREATE-dot", create(b".")),
        ("CREATE-dotdot", create(b"..")),
        ("CREATE-long", create(&LONG)),
        ("CREATE-slash", create(b"a/b")),
        ("CREATE-exists", create(b"f")),
        (
            "MKDIR-dot",
            Args3::Mkdir {
                dir: n,
                name: b".",
                attr: none,
            },
        ),
        (
            "MKDIR-exists",
            Args3::Mkdir {
                dir: n,
                name: b"d",
                attr: none,
            },
        ),
        ("REMOVE-dot", Args3::Remove { dir: n, name: b"." }),
        (
            "REMOVE-dotdot",
            Args3::Remove {
                dir: n,
                name: b"..",
            },
        ),
        (
            "REMOVE-missing",
            Args3::Remove {
                dir: n,
                name: b"nope",
            },
        ),
        ("RMDIR-dot", Args3::Rmdir { dir: n, name: b"." }),
        (
            "RMDIR-dotdot",
            Args3::Rmdir {
                dir: n,
                name: b"..",
            },
        ),
        ("RMDIR-not-empty", Args3::Rmdir { dir: n, name: b"d" }),
        ("RENAME-dot", rename(b".", n, b"y")),
        ("RENAME-to-dot", rename(b"f", n, b".")),
        ("RENAME-missing", rename(b"nope", n, b"y")),
        ("RENAME-file-over-dir", rename(b"f", n, b"e")),
        ("RENAME-dir-over-file", rename(b"e", n, b"g")),
        ("RENAME-dir-over-not-empty", rename(b"e", n, b"d")),
        ("RENAME-dir-into-itself", rename(b"d", sub, b"y")),
        (
            "LINK-exists",
            Args3::Link {
                fh: f,
                dir: n,
                name: b"g",
            },
        ),
        (
            "LINK-dot",
            Args3::Link {
                fh: f,
                dir: n,
                name: b".",
            },
        ),
        (
            "SYMLINK-dot",
            Args3::Symlink {
                dir: n,
                name: b".",
                attr: none,
                target: b"f",
            },
        ),
    ]
}
