//! The NFSv4 pseudo file system (RFC 8881 §7.3–7.8): read-only directories joining the
//! server's root to the exports a client may see, as Linux nfsd builds them for exports that
//! are not `fsid=0`.
//!
//! Normal operation: the tree is computed per caller from the export table: the exports whose
//! client rules name the caller's address are visible, and a pseudo directory is a path that
//! lies strictly above a visible export and at or under none. PUTROOTFH gives the export
//! mounted as `/` when the caller may see one, the pseudo root otherwise. LOOKUP in a pseudo
//! directory walks to the next pseudo directory or crosses into an export's root (its own
//! fsid); LOOKUPP from an export's root climbs back into the tree. Pseudo directories are
//! type NF4DIR, mode 0555, owned by root, with their own fsid and fileids; their handles are
//! sealed with the handle key like every other handle, carrying the export id
//! [`ExportTable::pseudo_id`] and a hash of the path.
//!
//! Recovery: a name that is not a child of the pseudo directory for this caller (an export
//! the caller may not see is not there at all) is NFS4ERR_NOENT; a pseudo handle whose MAC
//! does not match is NFS4ERR_STALE, as is one for a directory this caller's tree does not
//! hold; an operation that would change a pseudo directory is NFS4ERR_ROFS, READ and COMMIT
//! NFS4ERR_ISDIR, READLINK NFS4ERR_INVAL.

use std::net::IpAddr;
use std::sync::Arc;

use rpcrdma_engine::xdr::XdrReader;

use crate::nfs::admit::{ExportTable, Share};
use crate::nfs::handle_mac::siphash24;
use crate::nfs::types::{Fattr3, Fh, Ftype3, Time3};

use super::attrs::{get_bitmap, get_verify, put_fattr, verdict, Source};
use super::xdr::{bad_xdr, from_store, get_name, st, Enc, Status};
use super::{op, Compound, Cur};

/// The fsid of the pseudo file system (an export's is its store's).
pub const PSEUDO_FSID: u64 = 0x7073_6575_646f;

/// The exports whose client rules name `peer`.
fn visible(table: &ExportTable, peer: IpAddr) -> Vec<&Arc<Share>> {
    table
        .shares()
        .iter()
        .filter(|s| s.export.options_for(peer).is_some())
        .collect()
}

/// What of `p` lies strictly under directory `dir`, without the separating `/`.
fn under<'a>(p: &'a str, dir: &str) -> Option<&'a str> {
    let rest = if dir == "/" {
        p.strip_prefix('/')
    } else {
        p.strip_prefix(dir)?.strip_prefix('/')
    };
    rest.filter(|r| !r.is_empty())
}

/// The path of `name` in directory `dir`.
fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The directory holding `p` (`/` for `/` itself).
fn parent(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

/// True when `p` is a pseudo directory among exports `vis`: above one, at or under none.
fn is_node(vis: &[&Arc<Share>], p: &str) -> bool {
    let covered = vis
        .iter()
        .any(|s| s.export.path == p || under(p, &s.export.path).is_some());
    !covered && vis.iter().any(|s| under(&s.export.path, p).is_some())
}

/// The names in pseudo directory `p`, sorted, each once.
fn children(vis: &[&Arc<Share>], p: &str) -> Vec<String> {
    let mut names: Vec<String> = vis
        .iter()
        .filter_map(|s| under(&s.export.path, p))
        .map(|r| r.split('/').next().unwrap_or(r).to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The store-level handle of pseudo directory `p` (a hash of its path; the seal makes it
/// unforgeable).
fn inner(p: &str) -> [u8; 8] {
    siphash24(0x7073_6575_646f, 0, p.as_bytes()).to_be_bytes()
}

/// The wire handle of pseudo directory `p`.
pub fn handle(table: &ExportTable, p: &str) -> Result<Fh, Status> {
    let fh = Fh::new(&inner(p)).ok_or(st::SERVERFAULT)?;
    table
        .key()
        .seal(table.pseudo_id(), &fh)
        .ok_or(st::SERVERFAULT)
}

/// PUTFH of an opened pseudo handle `fh`: the pseudo directory of this caller's tree whose
/// path hashes to it (NFS4ERR_STALE when there is none).
pub fn put(c: &mut Compound<'_>, fh: &Fh) -> Result<(), Status> {
    let vis = visible(&c.table, c.cx.peer);
    let mut p = String::from("/");
    let mut candidates = vec![p.clone()];
    for s in &vis {
        p.clear();
        for comp in s.export.path.split('/').filter(|x| !x.is_empty()) {
            p = join(if p.is_empty() { "/" } else { &p }, comp);
            candidates.push(p.clone());
        }
    }
    let found = candidates
        .into_iter()
        .find(|n| inner(n) == fh.as_bytes() && is_node(&vis, n))
        .ok_or(st::STALE)?;
    c.set_pseudo(found);
    Ok(())
}

/// Makes the root of export `share` the current file handle, admitted for the caller.
fn enter(c: &mut Compound<'_>, share: &Share, path: &[&str]) -> Result<(), Status> {
    let a = c.admit(share.id)?;
    let mut fh = a.share.store.root();
    for comp in path {
        fh = a
            .share
            .store
            .lookup(&a.cred, &fh, comp.as_bytes())
            .map_err(from_store)?;
    }
    c.set_real(Cur {
        fh,
        share: a.share,
        cred: a.cred,
        opts: a.opts,
    });
    Ok(())
}

/// PUTROOTFH: the export mounted as `/` when the caller may see it, the pseudo root when it
/// may see another export, NFS4ERR_ACCESS when it may see none.
pub fn putrootfh(c: &mut Compound<'_>) -> Result<(), Status> {
    let table = Arc::clone(&c.table);
    let vis = visible(&table, c.cx.peer);
    if let Some(s) = vis.iter().find(|s| s.export.path == "/") {
        return enter(c, s, &[]);
    }
    if vis.is_empty() {
        return Err(st::ACCESS);
    }
    c.set_pseudo("/".to_string());
    Ok(())
}

/// LOOKUPP from the root of export `share`: the pseudo directory above it, or the directory
/// above it in the visible export that holds its parent; NFS4ERR_NOENT above `/`.
pub fn above_export(c: &mut Compound<'_>, share: &Share) -> Result<(), Status> {
    let path = share.export.path.as_str();
    if path == "/" {
        return Err(st::NOENT);
    }
    let up = parent(path).to_string();
    let table = Arc::clone(&c.table);
    let vis = visible(&table, c.cx.peer);
    if is_node(&vis, &up) {
        c.set_pseudo(up);
        return Ok(());
    }
    let holder = vis
        .iter()
        .filter(|s| s.export.path == up || under(&up, &s.export.path).is_some())
        .max_by_key(|s| s.export.path.len())
        .ok_or(st::NOENT)?;
    let rest: Vec<&str> = under(&up, &holder.export.path)
        .map(|r| r.split('/').collect())
        .unwrap_or_default();
    enter(c, holder, &rest)
}

/// Runs operation `opnum` on the current pseudo directory `p`: `None` for an operation that
/// does not use the current file handle.
pub fn run(
    c: &mut Compound<'_>,
    p: &str,
    opnum: u32,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Option<Result<(), Status>> {
    Some(match opnum {
        op::LOOKUP => lookup(c, p, r),
        op::LOOKUPP => lookupp(c, p),
        op::GETATTR => getattr(c, p, r, out),
        op::VERIFY | op::NVERIFY => verify(c, p, opnum, r, out),
        op::ACCESS => access(r, out),
        op::READDIR => readdir(c, p, r, out),
        op::GETFH => handle(&c.table, p).map(|fh| out.opaque(fh.as_bytes())),
        op::SAVEFH => {
            c.saved = None;
            c.saved_pseudo = Some(p.to_string());
            Ok(())
        }
        op::SECINFO => secinfo(c, p, r, out),
        op::READ | op::COMMIT | op::LOCK | op::LOCKT | op::LOCKU => Err(st::ISDIR),
        op::READLINK => Err(st::INVAL),
        op::CLOSE | op::OPEN_DOWNGRADE => Err(st::BAD_STATEID),
        op::WRITE | op::SETATTR | op::CREATE | op::REMOVE | op::RENAME | op::LINK | op::OPEN => {
            Err(st::ROFS)
        }
        // No extended attributes (its `xattr_support` is false).
        op::GETXATTR | op::SETXATTR | op::LISTXATTRS | op::REMOVEXATTR => Err(st::NOTSUPP),
        _ => return None,
    })
}

fn lookup(c: &mut Compound<'_>, p: &str, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let name = get_name(r)?;
    let name = std::str::from_utf8(name).map_err(|_| st::NOENT)?;
    let child = join(p, name);
    let table = Arc::clone(&c.table);
    let vis = visible(&table, c.cx.peer);
    if let Some(s) = vis.iter().find(|s| s.export.path == child) {
        return enter(c, s, &[]);
    }
    if !is_node(&vis, &child) {
        return Err(st::NOENT);
    }
    c.set_pseudo(child);
    Ok(())
}

/// LOOKUPP from pseudo directory `p`: its parent; NFS4ERR_NOENT at the root.
pub fn lookupp(c: &mut Compound<'_>, p: &str) -> Result<(), Status> {
    if p == "/" {
        return Err(st::NOENT);
    }
    c.set_pseudo(parent(p).to_string());
    Ok(())
}

/// The attributes of pseudo directory `p` among exports `vis`: the change attribute follows
/// its listing, so a client sees a new export appear.
fn attrs_of(vis: &[&Arc<Share>], p: &str) -> Fattr3 {
    let names = children(vis, p);
    let h = siphash24(1, 2, names.join("/").as_bytes());
    let t = Time3 {
        seconds: (h >> 32) as i64,
        nseconds: (h as u32) % 1_000_000_000,
    };
    Fattr3 {
        ftype: Ftype3::Dir,
        mode: 0o555,
        nlink: 2 + names.len() as u32,
        uid: 0,
        gid: 0,
        size: 4096,
        used: 4096,
        rdev: (0, 0),
        fsid: PSEUDO_FSID,
        fileid: u64::from_be_bytes(inner(p)) | 1 << 63,
        atime: t,
        mtime: t,
        ctime: t,
    }
}

/// Largest file size reported for pseudo directories (nothing can be written there).
const MAX_FILE_SIZE: u64 = i64::MAX as u64;

fn getattr(
    c: &mut Compound<'_>,
    p: &str,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let want = get_bitmap(r)?;
    let (a, fh) = attrs_and_handle(c, p)?;
    let src = Source {
        attr: &a,
        fs: None,
        fh: Some(fh.as_bytes()),
    };
    put_fattr(c, MAX_FILE_SIZE, &want, &src, out);
    Ok(())
}

/// Pseudo directory `p`'s attributes as the caller sees them, and its handle.
fn attrs_and_handle(c: &Compound<'_>, p: &str) -> Result<(Fattr3, Fh), Status> {
    let a = attrs_of(&visible(&c.table, c.cx.peer), p);
    Ok((a, handle(&c.table, p)?))
}

/// VERIFY or NVERIFY (`opnum`) of pseudo directory `p` ([`super::attrs::verify`]).
fn verify(
    c: &mut Compound<'_>,
    p: &str,
    opnum: u32,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let v = get_verify(r)?;
    v.check(c.minor)?;
    let (a, fh) = attrs_and_handle(c, p)?;
    let src = Source {
        attr: &a,
        fs: None,
        fh: Some(fh.as_bytes()),
    };
    verdict(opnum, v.same(c, MAX_FILE_SIZE, &src, out))
}

/// ACCESS: read, lookup and execute are granted to everyone; nothing else.
fn access(r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let want = r.get_u32().map_err(bad_xdr)? & 0x3f;
    out.u32(want);
    out.u32(want & (0x01 | 0x02 | 0x20));
    Ok(())
}

/// The flavors of a pseudo directory (SECINFO_NO_NAME, SECINFO of a pseudo directory): those
/// of the exports the caller may see, each once, in the export table's order.
pub fn flavors(c: &Compound<'_>) -> Vec<u32> {
    let mut flavors: Vec<u32> = Vec::new();
    for s in visible(&c.table, c.cx.peer) {
        for f in s
            .export
            .options_for(c.cx.peer)
            .map(|o| o.sec.numbers())
            .unwrap_or_default()
        {
            if !flavors.contains(&f) {
                flavors.push(f);
            }
        }
    }
    flavors
}

/// SECINFO in pseudo directory `p`: an export's root named answers that export's flavors
/// for the caller (never NFS4ERR_WRONGSEC, RFC 8881 §2.6.3.1.1.5: this is how a client
/// that got it from LOOKUP learns what to use), a pseudo directory [`flavors`]; a name that
/// is neither is NFS4ERR_NOENT. The current file handle is consumed.
fn secinfo(
    c: &mut Compound<'_>,
    p: &str,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let name = get_name(r)?;
    let name = std::str::from_utf8(name).map_err(|_| st::NOENT)?;
    let child = join(p, name);
    let table = Arc::clone(&c.table);
    let vis = visible(&table, c.cx.peer);
    let list = match vis.iter().find(|s| s.export.path == child) {
        Some(s) => s
            .export
            .options_for(c.cx.peer)
            .map(|o| o.sec.numbers())
            .ok_or(st::NOENT)?,
        None if is_node(&vis, &child) => flavors(c),
        None => return Err(st::NOENT),
    };
    put_secinfo(c, &list, out);
    Ok(())
}

/// READDIR of a pseudo directory: its children after `cookie` (the child's index plus 3),
/// each a pseudo directory or an export's root with that root's attributes.
fn readdir(
    c: &mut Compound<'_>,
    p: &str,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let cookie = r.get_u64().map_err(bad_xdr)?;
    r.get_fixed_opaque(8).map_err(bad_xdr)?;
    let _dircount = r.get_u32().map_err(bad_xdr)?;
    let maxcount = r.get_u32().map_err(bad_xdr)?.min(c.srv.config().max_io) as usize;
    let want = get_bitmap(r)?;
    if cookie == 1 || cookie == 2 {
        return Err(st::BAD_COOKIE);
    }
    let table = Arc::clone(&c.table);
    let vis = visible(&table, c.cx.peer);
    let names = children(&vis, p);
    let start = out.len();
    out.fixed(&[0; 8]);
    let mut all = true;
    for (i, name) in names.iter().enumerate() {
        let at = i as u64 + 3;
        if at <= cookie {
            continue;
        }
        let mark = out.len();
        let child = join(p, name);
        let (a, fh, max) = match vis.iter().find(|s| s.export.path == child) {
            Some(s) => {
                let root = s.store.root();
                let a = s.store.getattr(&root).map_err(from_store)?;
                let fh = s.seal(&root).ok_or(st::SERVERFAULT)?;
                (a, fh, s.store.max_file_size())
            }
            None => (
                attrs_of(&vis, &child),
                handle(&table, &child)?,
                MAX_FILE_SIZE,
            ),
        };
        out.u32(1);
        out.u64(at);
        out.opaque(name.as_bytes());
        let src = Source {
            attr: &a,
            fs: None,
            fh: Some(fh.as_bytes()),
        };
        put_fattr(c, max, &want, &src, out);
        if out.len() - start + 8 > maxcount {
            out.b.truncate(mark);
            all = false;
            break;
        }
    }
    if out.len() == start + 8 && !all {
        return Err(st::TOOSMALL);
    }
    out.u32(0);
    out.u32(u32::from(all));
    Ok(())
}

/// Writes SECINFO4resok for AUTH_SYS / AUTH_NONE `flavors` (no RPCSEC_GSS triples: GSS is not
/// served) and consumes the current file handle (RFC 8881 §2.6.3.1.1.8).
pub fn put_secinfo(c: &mut Compound<'_>, flavors: &[u32], out: &mut Enc) {
    out.u32(flavors.len() as u32);
    for f in flavors {
        out.u32(*f);
    }
    c.cur = None;
    c.pseudo = None;
}
