//! Unforgeable file handles: every handle the server gives out carries a keyed MAC, and
//! every handle a client sends is checked before any store sees it.
//!
//! Layout of a handle on the wire (at most 64 octets, RFC 1813 NFS3_FHSIZE): the store's own
//! handle, the export id (4 octets), then SipHash-2-4 (Aumasson and Bernstein, "SipHash: a
//! fast short-input PRF", 2012) of export id and store handle under the server's 128-bit
//! secret (8 octets). The export id is the MAC of the export's path (so it is the same after a
//! restart and a reload that keeps the path, and says nothing of the path to a client).
//!
//! Normal operation: the server seals each handle it encodes ([`HandleKey::seal`]) and opens
//! each handle it decodes ([`HandleKey::open`]); the store behind the export only ever sees
//! handles it issued itself for objects it reached from the export root. The secret is kept in
//! a file ([`HandleKey::load_or_create`], mode 0600) so handles survive restarts. Recovery: a
//! handle too short to carry the trailer is BADHANDLE; one whose MAC does not match (forged,
//! altered, from another server or key, or naming an export that is gone) is STALE — which
//! also answers a client that guesses kernel handles of objects outside the export. Cost: one
//! SipHash over at most 56 octets per handle in and out (a few tens of nanoseconds), no
//! system call and no lookup, where a subtree check would walk the object's ancestors.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::types::{Fh, NfsResult, Nfsstat3, FHSIZE};

/// Octets the server appends to a store's handle (export id + MAC).
pub const TRAILER: usize = 4 + 8;
/// Longest store handle that fits with the trailer.
pub const MAX_STORE_HANDLE: usize = FHSIZE - TRAILER;
/// Length of the key file.
const KEY_LEN: usize = 16;

/// The server's handle secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HandleKey {
    k0: u64,
    k1: u64,
}

impl core::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    /// The key of 16 octets `k` (SipHash's k0, k1 little-endian).
    pub fn from_bytes(k: [u8; KEY_LEN]) -> HandleKey {
        let (a, b) = k.split_at(8);
        HandleKey {
            k0: u64::from_le_bytes(a.try_into().unwrap_or_default()),
            k1: u64::from_le_bytes(b.try_into().unwrap_or_default()),
        }
    }

    /// A fresh key from the kernel's random source (`/dev/urandom`).
    pub fn random() -> io::Result<HandleKey> {
        let mut k = [0u8; KEY_LEN];
        fs::File::open("/dev/urandom")?.read_exact(&mut k)?;
        Ok(HandleKey::from_bytes(k))
    }

    /// The key kept in `path`; a new random one written there (mode 0600, created with its
    /// directory) when the file does not exist. A file of another length, or readable by
    /// others than its owner, is refused: a key others can read lets them forge handles.
    pub fn load_or_create(path: &Path) -> io::Result<HandleKey> {
        match fs::File::open(path) {
            Ok(mut f) => {
                let meta = f.metadata()?;
                if meta.permissions().mode() & 0o077 != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        "the handle key file is accessible to group or others (chmod 600 it)",
                    ));
                }
                let mut k = [0u8; KEY_LEN];
                let mut extra = [0u8; 1];
                f.read_exact(&mut k)?;
                if f.read(&mut extra)? != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the handle key file is not 16 octets",
                    ));
                }
                Ok(HandleKey::from_bytes(k))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    fs::create_dir_all(dir)?;
                }
                let key = HandleKey::random()?;
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)?;
                let mut b = key.k0.to_le_bytes().to_vec();
                b.extend_from_slice(&key.k1.to_le_bytes());
                f.write_all(&b)?;
                f.sync_all()?;
                Ok(key)
            }
            Err(e) => Err(e),
        }
    }

    /// The export id of the export mounted as `path`.
    pub fn export_id(&self, path: &str) -> [u8; 4] {
        let h = siphash24(self.k0 ^ 0x6578_706f_7274, self.k1, path.as_bytes());
        let b = h.to_le_bytes();
        [b[0], b[1], b[2], b[3]]
    }

    fn mac(&self, export: [u8; 4], inner: &[u8]) -> [u8; 8] {
        let mut m = [0u8; FHSIZE];
        m[..4].copy_from_slice(&export);
        m[4..4 + inner.len()].copy_from_slice(inner);
        siphash24(self.k0, self.k1, &m[..4 + inner.len()]).to_le_bytes()
    }

    /// The wire handle of store handle `inner` of export `export`; `None` when the store's
    /// handle is longer than [`MAX_STORE_HANDLE`].
    pub fn seal(&self, export: [u8; 4], inner: &Fh) -> Option<Fh> {
        let b = inner.as_bytes();
        if b.len() > MAX_STORE_HANDLE {
            return None;
        }
        let mut out = [0u8; FHSIZE];
        out[..b.len()].copy_from_slice(b);
        out[b.len()..b.len() + 4].copy_from_slice(&export);
        out[b.len() + 4..b.len() + TRAILER].copy_from_slice(&self.mac(export, b));
        Fh::new(&out[..b.len() + TRAILER])
    }

    /// The export id and store handle of wire handle `fh`: BADHANDLE when it cannot carry
    /// the trailer, STALE when its MAC does not match.
    pub fn open(&self, fh: &Fh) -> NfsResult<([u8; 4], Fh)> {
        let b = fh.as_bytes();
        if b.len() <= TRAILER {
            return Err(Nfsstat3::BADHANDLE);
        }
        let n = b.len() - TRAILER;
        let export: [u8; 4] = b[n..n + 4].try_into().map_err(|_| Nfsstat3::BADHANDLE)?;
        let want = self.mac(export, &b[..n]);
        // Compared without an early exit, so the time taken says nothing of a near miss.
        let diff = want
            .iter()
            .zip(&b[n + 4..])
            .fold(0u8, |d, (x, y)| d | (x ^ y));
        if diff != 0 {
            return Err(Nfsstat3::STALE);
        }
        let inner = Fh::new(&b[..n]).ok_or(Nfsstat3::BADHANDLE)?;
        Ok((export, inner))
    }
}

/// SipHash-2-4 of `m` under key (`k0`, `k1`).
pub fn siphash24(k0: u64, k1: u64, m: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = m.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or_default());
        v[3] ^= w;
        round(&mut v);
        round(&mut v);
        v[0] ^= w;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    last[7] = m.len() as u8;
    let w = u64::from_le_bytes(last);
    v[3] ^= w;
    round(&mut v);
    round(&mut v);
    v[0] ^= w;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper_key() -> HandleKey {
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = i as u8;
        }
        HandleKey::from_bytes(k)
    }

    #[test]
    fn accepts_the_siphash_paper_vectors() {
        // Appendix A of the SipHash paper: key 00..0f, message 00..0e.
        let k = paper_key();
        let m: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(k.k0, k.k1, &m), 0xa129_ca61_49be_45e5);
        // The reference implementation's vectors.h, first entry (empty message).
        assert_eq!(siphash24(k.k0, k.k1, &[]), 0x726f_db47_dd0e_0e31);
    }

    #[test]
    fn accepts_sealed_handles_and_rejects_every_altered_one() {
        let k = paper_key();
        let e = k.export_id("/export");
        let inner = Fh::new(b"store-handle-0123").unwrap();
        let fh = k.seal(e, &inner).unwrap();
        assert_eq!(k.open(&fh), Ok((e, inner)));
        let b = fh.as_bytes().to_vec();
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut x = b.clone();
                x[i] ^= 1 << bit;
                assert_eq!(
                    k.open(&Fh::new(&x).unwrap()),
                    Err(Nfsstat3::STALE),
                    "{i}/{bit}"
                );
            }
        }
        // Cut, extended, from another key, the store handle alone.
        assert_eq!(
            k.open(&Fh::new(&b[..b.len() - 1]).unwrap()),
            Err(Nfsstat3::STALE)
        );
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(k.open(&Fh::new(&longer).unwrap()), Err(Nfsstat3::STALE));
        let other = HandleKey::from_bytes([7; 16]);
        assert_eq!(other.open(&fh), Err(Nfsstat3::STALE));
        assert_eq!(
            k.open(&Fh::new(&b[..TRAILER]).unwrap()),
            Err(Nfsstat3::BADHANDLE)
        );
        assert_ne!(k.export_id("/export"), k.export_id("/other"));
        assert!(k
            .seal(e, &Fh::new(&[1; MAX_STORE_HANDLE + 1]).unwrap())
            .is_none());
        assert!(k
            .seal(e, &Fh::new(&[1; MAX_STORE_HANDLE]).unwrap())
            .is_some());
    }

    #[test]
    fn accepts_a_key_file_kept_across_restarts_and_rejects_a_readable_one() {
        let dir = std::env::temp_dir().join(format!("rpcrdma-fhkey-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("sub/handle.key");
        let a = HandleKey::load_or_create(&path).unwrap();
        let b = HandleKey::load_or_create(&path).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(HandleKey::load_or_create(&path).is_err());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, [1u8; 17]).unwrap();
        assert!(HandleKey::load_or_create(&path).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
