//! Admission of each NFS call: which export its handles belong to, whether the calling
//! address may use that export, who the call acts as, and whether it may write.
//!
//! Normal operation: [`ExportTable::admit`] opens every handle of the call's arguments
//! ([`HandleKey::open`]: the MAC must match), finds the export they name, matches the peer's
//! address against the export's client rules ([`Export::options_for`]), turns the credential
//! into the [`Cred`] the call acts as (squashed), and refuses a modifying procedure on a
//! read-only export. The arguments handed on hold the stores' own handles. Outgoing handles
//! are sealed again by [`Share::seal`]. The table is replaced whole on reload
//! ([`crate::nfs::v3::server::Nfs3::set_exports`]); a call in progress keeps the table it started with.
//!
//! Recovery: every refusal is the error RFC 1813 / RFC 5531 and Linux nfsd give: a handle
//! that does not carry the trailer BADHANDLE, a forged or altered one (or one of an export no
//! longer listed) STALE, handles of two exports in one RENAME or LINK XDEV, an address the
//! export does not name ACCES, a credential flavor it does not accept AUTH_ERROR (TOOWEAK; an
//! undecodable AUTH_SYS body or an unserved flavor BADCRED), a modifying procedure on a `ro`
//! export ROFS.

use std::net::IpAddr;
use std::sync::Arc;

use rpcrdma_engine::rpc::{AuthStat, OpaqueAuth};

use super::exports::{Export, ExportOptions};
use super::handle_mac::HandleKey;
use super::identity::Cred;
use super::types::{Fh, NfsResult, Nfsstat3};
use crate::nfs::store::Store;
use crate::nfs::v3::proto::{proc3, Args3};

/// The name the NFSv4 pseudo file system's export id is derived from (no export path holds
/// NUL, so no export gets it by its path).
const PSEUDO_PATH: &str = "\0nfs4-pseudo";

/// One export being served: its rules, its store, its id in handles.
pub struct Share {
    /// The path and client rules.
    pub export: Export,
    /// The store behind it.
    pub store: Arc<dyn Store>,
    /// The export id its handles carry.
    pub id: [u8; 4],
    key: HandleKey,
}

impl Share {
    /// The wire handle of the store's handle `fh` (`None`: the store's handle is too long to
    /// seal; stores keep theirs within [`super::handle_mac::MAX_STORE_HANDLE`]).
    pub fn seal(&self, fh: &Fh) -> Option<Fh> {
        self.key.seal(self.id, fh)
    }

    /// The wire handle of the export's root.
    pub fn root(&self) -> Option<Fh> {
        self.seal(&self.store.root())
    }
}

impl core::fmt::Debug for Share {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Share({} on {})", self.export.path, self.store.kind())
    }
}

/// Every export served, and the handle key.
#[derive(Debug)]
pub struct ExportTable {
    shares: Vec<Arc<Share>>,
    key: HandleKey,
}

/// Why a call is not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Answer the procedure's failure result with this status.
    Status(Nfsstat3),
    /// Answer MSG_DENIED / AUTH_ERROR with this status.
    Auth(AuthStat),
}

/// A call admitted: the export it works in, who it acts as, with which options.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The export.
    pub share: Arc<Share>,
    /// The identity the call acts as.
    pub cred: Cred,
    /// The options the caller's address gets.
    pub opts: ExportOptions,
}

impl ExportTable {
    /// A table of `exports`, each with its store; an error when two paths get the same id
    /// (a 2^-32 chance; another key fixes it).
    pub fn new(key: HandleKey, exports: Vec<(Export, Arc<dyn Store>)>) -> Result<Self, String> {
        let mut shares: Vec<Arc<Share>> = Vec::with_capacity(exports.len());
        for (export, store) in exports {
            let id = key.export_id(&export.path);
            if id == key.export_id(PSEUDO_PATH) {
                return Err(format!(
                    "export {} collides with the NFSv4 pseudo file system in the handle key; use another key",
                    export.path
                ));
            }
            if let Some(o) = shares.iter().find(|s| s.id == id) {
                return Err(format!(
                    "exports {} and {} collide in the handle key; use another key",
                    o.export.path, export.path
                ));
            }
            shares.push(Arc::new(Share {
                export,
                store,
                id,
                key,
            }));
        }
        Ok(ExportTable { shares, key })
    }

    /// The exports, in the order written.
    pub fn shares(&self) -> &[Arc<Share>] {
        &self.shares
    }

    /// The export mounted as `path`.
    pub fn find(&self, path: &str) -> Option<&Arc<Share>> {
        self.shares.iter().find(|s| s.export.path == path)
    }

    /// The handle key.
    pub fn key(&self) -> HandleKey {
        self.key
    }

    /// The export id the handles of NFSv4 pseudo file system directories carry (distinct
    /// from every export's: [`ExportTable::new`] refuses a key under which they collide).
    pub fn pseudo_id(&self) -> [u8; 4] {
        self.key.export_id(PSEUDO_PATH)
    }

    /// Admits the call with arguments `args` from `peer` with credential `cred`: the
    /// arguments' handles are replaced by the stores' own. NULL (no handle) is not admitted
    /// here: it needs no export.
    pub fn admit(
        &self,
        p: u32,
        args: &mut Args3<'_>,
        peer: IpAddr,
        cred: &OpaqueAuth<'_>,
    ) -> Result<Admitted, Refusal> {
        let mut export: Option<[u8; 4]> = None;
        let mut bad: Option<Nfsstat3> = None;
        for_each_handle(args, &mut |fh| match self.key.open(fh) {
            Ok((id, inner)) => {
                *fh = inner;
                match export {
                    None => export = Some(id),
                    Some(e) if e != id => {
                        bad.get_or_insert(Nfsstat3::XDEV);
                    }
                    Some(_) => {}
                }
            }
            Err(e) => {
                bad = Some(e);
            }
        });
        if let Some(st) = bad {
            return Err(Refusal::Status(st));
        }
        let id = export.ok_or(Refusal::Status(Nfsstat3::BADHANDLE))?;
        let admitted = self.admit_export(id, peer, cred)?;
        if admitted.opts.read_only && modifies(p) {
            return Err(Refusal::Status(Nfsstat3::ROFS));
        }
        Ok(admitted)
    }

    /// Admits one wire handle (NFSv4 PUTFH): the export it names, who the caller acts as
    /// there, and the store's own handle. Read-only exports are the caller's to enforce per
    /// operation.
    pub fn admit_handle(
        &self,
        fh: &Fh,
        peer: IpAddr,
        cred: &OpaqueAuth<'_>,
    ) -> Result<(Admitted, Fh), Refusal> {
        let (id, inner) = self.key.open(fh).map_err(Refusal::Status)?;
        Ok((self.admit_export(id, peer, cred)?, inner))
    }

    /// Admits `peer` with credential `cred` to the export whose handles carry `id`.
    pub fn admit_export(
        &self,
        id: [u8; 4],
        peer: IpAddr,
        cred: &OpaqueAuth<'_>,
    ) -> Result<Admitted, Refusal> {
        let share = self
            .shares
            .iter()
            .find(|s| s.id == id)
            .ok_or(Refusal::Status(Nfsstat3::STALE))?;
        let opts = share
            .export
            .options_for(peer)
            .ok_or(Refusal::Status(Nfsstat3::ACCES))?;
        let cred = Cred::from_call(cred, &opts).map_err(Refusal::Auth)?;
        Ok(Admitted {
            share: Arc::clone(share),
            cred,
            opts,
        })
    }

    /// [`ExportTable::admit_export`] for a call whose credential the export refused
    /// (`AuthStat::TooWeak`) and which only asks which flavors it takes (NFSv4.1 SECINFO_NO_NAME
    /// after a put-filehandle operation, RFC 8881 §2.6.3.1.1.5): the export's client rules
    /// still apply, and the caller acts as the anonymous identity.
    pub fn admit_for_secinfo(&self, id: [u8; 4], peer: IpAddr) -> Result<Admitted, Refusal> {
        let share = self
            .shares
            .iter()
            .find(|s| s.id == id)
            .ok_or(Refusal::Status(Nfsstat3::STALE))?;
        let opts = share
            .export
            .options_for(peer)
            .ok_or(Refusal::Status(Nfsstat3::ACCES))?;
        Ok(Admitted {
            share: Arc::clone(share),
            cred: Cred::anonymous(&opts),
            opts,
        })
    }
}

/// True for the procedures that change the file system (COMMIT too: it writes data back).
pub fn modifies(p: u32) -> bool {
    matches!(
        p,
        proc3::SETATTR
            | proc3::WRITE
            | proc3::CREATE
            | proc3::MKDIR
            | proc3::SYMLINK
            | proc3::MKNOD
            | proc3::REMOVE
            | proc3::RMDIR
            | proc3::RENAME
            | proc3::LINK
            | proc3::COMMIT
    )
}

/// Calls `f` on every file handle of `args`.
fn for_each_handle(args: &mut Args3<'_>, f: &mut dyn FnMut(&mut Fh)) {
    match args {
        Args3::Null => {}
        Args3::Getattr { fh }
        | Args3::Setattr { fh, .. }
        | Args3::Access { fh, .. }
        | Args3::Readlink { fh }
        | Args3::Read { fh, .. }
        | Args3::Write { fh, .. }
        | Args3::Fsstat { fh }
        | Args3::Fsinfo { fh }
        | Args3::Pathconf { fh }
        | Args3::Commit { fh, .. } => f(fh),
        Args3::Lookup { dir, .. }
        | Args3::Create { dir, .. }
        | Args3::Mkdir { dir, .. }
        | Args3::Symlink { dir, .. }
        | Args3::Mknod { dir, .. }
        | Args3::Remove { dir, .. }
        | Args3::Rmdir { dir, .. }
        | Args3::Readdir { dir, .. }
        | Args3::Readdirplus { dir, .. } => f(dir),
        Args3::Rename {
            from_dir, to_dir, ..
        } => {
            f(from_dir);
            f(to_dir);
        }
        Args3::Link { fh, dir, .. } => {
            f(fh);
            f(dir);
        }
    }
}

/// Seals `fh` for the reply; a store handle too long to seal (a store defect: stores keep
/// theirs within [`super::handle_mac::MAX_STORE_HANDLE`]) is SERVERFAULT.
pub fn seal_or_fault(share: &Share, fh: &Fh) -> NfsResult<Fh> {
    share.seal(fh).ok_or(Nfsstat3::SERVERFAULT)
}
