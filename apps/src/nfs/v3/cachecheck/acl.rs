//! The NFSACL part of the comparison (program 100227 version 3, beside NFSv3): GETACL of an
//! object without an ACL, SETACL of a named user's entry and what GETACL then shows, the mode
//! and the change time SETACL leaves, its refusals, a directory's default ACL and what a file
//! created in it inherits, removal. The Linux client keeps an object's ACLs in its cache beside
//! its attributes and shows them to `getfacl` and `ls -l` (the `+`), so the entries and the
//! statuses must match the kernel nfsd's; entry ids equal to the object's owner or group are
//! written `uid` / `gid` so that two servers with different identities compare.
//!
//! Normal operation: everything is made in the scratch directory and removed again. Recovery:
//! a call that fails ends the run with a message naming it.

use super::{call_err, yes, Probe, RunError};
use crate::nfs::acl::{tag, Ace};
use crate::nfs::types::{CreateHow, Fattr3, Fh, Nfsstat3, Sattr3};
use crate::nfs::v3::nfsacl::{
    decode_getacl_res, encode_getacl_args, encode_setacl_args, GETACL, PROGRAM, SETACL, VERSION,
};
use rpcrdma_engine::xdr::XdrWriter;

/// `(tag, id, perm)` entries, as the tests write them.
fn aces(e: &[(u32, u32, u32)]) -> Vec<Ace> {
    e.iter().map(|&(t, i, p)| Ace::new(t, i, p)).collect()
}

/// A named user's read-write entry on a 0640 object: `user::rw-, user:1234:rw-, group::r--,
/// mask::rw-, other::---`.
fn named() -> Vec<Ace> {
    aces(&[
        (tag::USER_OBJ, 0, 6),
        (tag::USER, 1234, 6),
        (tag::GROUP_OBJ, 0, 4),
        (tag::MASK, 0, 6),
        (tag::OTHER, 0, 0),
    ])
}

impl Probe<'_> {
    /// GETACL of `fh` with `mask`: status, attributes, and the two ACLs as `count:entries`.
    fn getacl(
        &self,
        fh: &Fh,
        mask: u32,
    ) -> Result<(Nfsstat3, Option<Fattr3>, [String; 2]), RunError> {
        let mut buf = [0u8; 256];
        let mut w = XdrWriter::new(&mut buf);
        encode_getacl_args(&mut w, fh, mask).map_err(|e| format!("GETACL: {e}"))?;
        let n = w.finish();
        let reply = self
            .c
            .call_as(PROGRAM, VERSION, GETACL, &buf[..n])
            .map_err(|e| format!("GETACL: {e}"))?;
        let (st, a, acls) =
            decode_getacl_res(reply.results()).map_err(|e| format!("GETACL: {e}"))?;
        let show = |(count, list): &(u32, Vec<Ace>)| {
            let ids = |e: &Ace| match (e.tag, a) {
                (tag::USER_OBJ, Some(a)) if e.id == a.uid => "uid".to_string(),
                (tag::GROUP_OBJ, Some(a)) if e.id == a.gid => "gid".to_string(),
                _ => e.id.to_string(),
            };
            let l: Vec<String> = list
                .iter()
                .map(|e| format!("{:x}/{}/{}", e.tag, ids(e), e.perm))
                .collect();
            format!("{count}:{}", l.join(","))
        };
        let shown = match &acls {
            Some((_, [x, d])) => [show(x), show(d)],
            None => [String::from("-"), String::from("-")],
        };
        Ok((st, a, shown))
    }

    /// SETACL of `fh` (access ACL, and a default one when `dir`): the status.
    fn setacl(
        &self,
        fh: &Fh,
        access: &[Ace],
        default: &[Ace],
        dir: bool,
    ) -> Result<Nfsstat3, RunError> {
        let mut buf = vec![0u8; 4096];
        let mut w = XdrWriter::new(&mut buf);
        let mask = if dir { 0x5 } else { 0x1 };
        encode_setacl_args(&mut w, fh, mask, access, default)
            .map_err(|e| format!("SETACL: {e}"))?;
        let n = w.finish();
        let reply = self
            .c
            .call_as(PROGRAM, VERSION, SETACL, &buf[..n])
            .map_err(|e| format!("SETACL: {e}"))?;
        let b = reply.results();
        let word = b.get(..4).ok_or("SETACL: short reply")?;
        Ok(Nfsstat3(u32::from_be_bytes([
            word[0], word[1], word[2], word[3],
        ])))
    }

    /// Facts of a GETACL of `fh` (every mask bit) under `key`.
    fn acl_facts(&mut self, key: &str, fh: &Fh) -> Result<(), RunError> {
        let (st, a, [access, default]) = self.getacl(fh, 0xf)?;
        let now = self.ga(fh)?;
        self.fact(&format!("{key}.status"), st.name(), true);
        self.post_op(&format!("{key}.attr"), a.as_ref(), &now);
        self.fact(&format!("{key}.access"), access, true);
        self.fact(&format!("{key}.default"), default, true);
        self.fact(&format!("{key}.mode"), format!("{:o}", now.mode), true);
        Ok(())
    }
}

/// The NFSACL sequence in scratch directory `s`.
pub(super) fn acls(p: &mut Probe<'_>, s: &Fh) -> Result<(), RunError> {
    let mode = |m| Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    };
    let how = |m| CreateHow::Unchecked(mode(m));
    let f =
        p.c.create(s, b"acl", how(0o640))
            .map_err(|e| call_err("CREATE", e))?;
    p.acl_facts("GETACL-mode", &f)?;
    let prior = p.ga(&f)?;
    let st = p.setacl(&f, &named(), &[], false)?;
    p.fact("SETACL.status", st.name(), true);
    let now = p.ga(&f)?;
    p.moved("SETACL", &prior, &now, true);
    p.acl_facts("GETACL-named", &f)?;
    // Named entries without a mask; a default ACL on a file.
    let no_mask = aces(&[
        (tag::USER_OBJ, 0, 6),
        (tag::USER, 1234, 6),
        (tag::GROUP_OBJ, 0, 4),
        (tag::OTHER, 0, 0),
    ]);
    let st = p.setacl(&f, &no_mask, &[], false)?;
    p.fact("SETACL-no-mask.status", st.name(), true);
    let st = p.setacl(&f, &named(), &named(), true)?;
    p.fact("SETACL-default-on-file.status", st.name(), true);
    let (st, a, _) = p.getacl(&f, 0x10)?;
    p.fact("GETACL-bad-mask.status", st.name(), true);
    p.fact("GETACL-bad-mask.attr=present", yes(a.is_some()), true);
    // A directory's default ACL, inherited by a file made in it.
    let d =
        p.c.mkdir(s, b"acld", mode(0o755))
            .map_err(|e| call_err("MKDIR", e))?;
    let minimal = aces(&[
        (tag::USER_OBJ, 0, 7),
        (tag::GROUP_OBJ, 0, 5),
        (tag::OTHER, 0, 5),
    ]);
    let def = aces(&[
        (tag::USER_OBJ, 0, 7),
        (tag::USER, 1234, 7),
        (tag::GROUP_OBJ, 0, 5),
        (tag::MASK, 0, 7),
        (tag::OTHER, 0, 0),
    ]);
    let st = p.setacl(&d, &minimal, &def, true)?;
    p.fact("SETACL-dir-default.status", st.name(), true);
    p.acl_facts("GETACL-dir", &d)?;
    let x =
        p.c.create(&d, b"x", how(0o666))
            .map_err(|e| call_err("CREATE", e))?;
    p.acl_facts("GETACL-inherited", &x)?;
    let sub =
        p.c.mkdir(&d, b"sub", mode(0o777))
            .map_err(|e| call_err("MKDIR", e))?;
    p.acl_facts("GETACL-inherited-dir", &sub)?;
    // Removed: the mode's ACL again.
    let st = p.setacl(&f, &[], &[], false)?;
    p.fact("SETACL-remove.status", st.name(), true);
    p.acl_facts("GETACL-removed", &f)?;
    p.c.rmdir(&d, b"sub").map_err(|e| call_err("RMDIR", e))?;
    p.c.remove(&d, b"x").map_err(|e| call_err("REMOVE", e))?;
    p.c.rmdir(s, b"acld").map_err(|e| call_err("RMDIR", e))?;
    p.c.remove(s, b"acl").map_err(|e| call_err("REMOVE", e))?;
    Ok(())
}
