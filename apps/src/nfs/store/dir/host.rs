//! The directory store's objects as processes on the host see them
//! ([`crate::nfs::store::Store::host_object`]):
//! a descriptor and the kernel file handle, for the NFSv4.1 server's watch of local changes to
//! delegated files (`v4::server::deleg_local`).
//!
//! Normal operation: the handle is the one inside the NFS handle (no system call); the
//! descriptor is the cached one, or the object is opened by handle (`O_PATH`). Recovery: a
//! removed object is STALE, as for every other call.

use super::{handle, DirStore};
use crate::nfs::store::HostObject;
use crate::nfs::types::{Fh, NfsResult};

impl DirStore {
    /// [`crate::nfs::store::Store::host_object`] of `fh`.
    pub(super) fn host_obj(&self, fh: &Fh) -> NfsResult<HostObject> {
        let kh = handle::decode(self.tag, fh)?;
        let o = self.stat_obj(fh)?;
        Ok(HostObject {
            fd: o.fd,
            handle: (kh.htype(), kh.bytes().to_vec()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    use super::super::sys::{self, KernelHandle};
    use super::*;
    use crate::nfs::identity::Cred;
    use crate::nfs::store::Store;
    use crate::nfs::types::{CreateHow, Sattr3};

    /// The handle given is the one `name_to_handle_at` gives for the object, and the
    /// descriptor names that object.
    #[test]
    fn accepts_the_kernel_handle_and_descriptor_of_a_file() {
        // SAFETY: plain syscall.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: the directory store needs root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("rpcrdma-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let s = DirStore::open(&dir).expect("dir store");
        let how = CreateHow::Unchecked(Sattr3::default());
        let f = s
            .create(&Cred::ROOT, &s.root(), b"f", &how)
            .expect("create");
        let o = s.host_object(&f).expect("dir store").expect("object");
        let path = std::ffi::CString::new(dir.join("f").into_os_string().into_encoded_bytes())
            .expect("path");
        let (kh, _) = KernelHandle::of(libc::AT_FDCWD, &path, 0).expect("handle");
        assert_eq!(o.handle, (kh.htype(), kh.bytes().to_vec()));
        let st = sys::fstat(o.fd.as_raw_fd()).expect("fstat");
        let ino = std::fs::metadata(dir.join("f")).expect("stat").ino();
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(st.st_ino, ino);
    }
}
