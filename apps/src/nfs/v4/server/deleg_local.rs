//! Delegations against processes on the server's host: RFC 8881 §10.4.6 asks for a recall on
//! any conflicting access, and on a `dir:` export other processes (and other servers) reach the
//! same files. Linux nfsd's delegations are leases, which the kernel breaks for any opener;
//! this server watches its delegated files with fanotify (Linux ≥ 5.1, CAP_SYS_ADMIN).
//!
//! Normal operation: [`Nfs41::watch_local_changes`] starts the watch (`rpcrdma-nfsd` does when
//! it serves NFSv4 with delegations on). A grant marks the file's inode ([`LocalWatch::mark`]:
//! `FAN_MODIFY`, `FAN_ATTRIB` (also link count: unlink, link), `FAN_DELETE_SELF`,
//! `FAN_MOVE_SELF`, `FAN_OPEN`) before OPEN answers; the watch's thread reads the events, skips
//! those of this process (its own NFS calls recall through [`super::open::check_stateid`] and
//! [`super::deleg_foreign`]), and reports each other one as an access from outside NFSv4.1
//! ([`super::deleg_foreign::Gate`]): a change recalls every delegation of the file, an open
//! the write delegations, and new ones stay off the file for a while. Events carry the file
//! system's id and the kernel file handle (`FAN_REPORT_FID`), which name the marked file
//! without a descriptor. Marks of files no longer delegated are removed within a second.
//!
//! Recovery: the events come after the access (a lease makes the opener wait; a notification
//! cannot), so a client may serve its cached copy for the few milliseconds until its recall.
//! An overflowed event queue recalls every watched file. A file that cannot be marked gets no
//! delegation; where the watch cannot start (no CAP_SYS_ADMIN, no fanotify) `rpcrdma-nfsd`
//! says so, and `--v4-no-delegations` is the operator's choice.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::nfs::cross_locks::DelegView;
use crate::nfs::store::Store;
use crate::nfs::types::Fh;

use super::Nfs41;

/// The events watched on a delegated file.
const MASK: u64 = libc::FAN_MODIFY
    | libc::FAN_ATTRIB
    | libc::FAN_DELETE_SELF
    | libc::FAN_MOVE_SELF
    | libc::FAN_OPEN;
/// The events that change the file (any other is an open: a read).
const CHANGES: u64 =
    libc::FAN_MODIFY | libc::FAN_ATTRIB | libc::FAN_DELETE_SELF | libc::FAN_MOVE_SELF;
/// How often the thread looks for marks of files no longer delegated.
const SWEEP: Duration = Duration::from_secs(1);

/// A watched file: the file system id, the kernel handle's type and octets, as fanotify
/// reports them.
type Key = Vec<u8>;

/// One watched file.
struct Marked {
    /// Keeps the inode (and its mark) alive, and names it for the mark's removal.
    fd: Arc<OwnedFd>,
    /// The (export, handle) pairs delegated: the same file may be exported twice.
    on: Vec<([u8; 4], Fh)>,
}

/// The fanotify watch of delegated files ([`Nfs41::watch_local_changes`]).
pub struct LocalWatch {
    fan: OwnedFd,
    marks: Mutex<HashMap<Key, Marked>>,
    pid: i32,
    /// Events read; those of other processes (written by the watch's thread, read by
    /// [`LocalWatch::events`]: counts only, no other memory is published through them).
    read: AtomicU64,
    foreign: AtomicU64,
}

/// One event read: its mask, the pid of the process that caused it, the file's key (none for
/// a queue overflow).
#[derive(Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// `FAN_*` bits.
    pub mask: u64,
    /// The process (thread group) that caused it.
    pub pid: i32,
    /// File system id (8 octets), handle type (native `i32`), handle octets.
    pub fid: Option<(&'a [u8], &'a [u8])>,
}

impl Nfs41 {
    /// Starts watching delegated files for changes and opens by processes on the host
    /// (module docs); once per server (a second call does nothing).
    ///
    /// # Errors
    ///
    /// When fanotify cannot start (not permitted: CAP_SYS_ADMIN; a kernel without it) or its
    /// thread cannot be spawned; delegations are then granted without it.
    pub fn watch_local_changes(&self) -> io::Result<()> {
        if self.local.get().is_some() {
            return Ok(());
        }
        let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_REPORT_FID;
        // SAFETY: plain syscall; the descriptor returned is owned below.
        let fd = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_LARGEFILE) as u32) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor no one else owns.
        let fan = unsafe { OwnedFd::from_raw_fd(fd) };
        let w = Arc::new(LocalWatch {
            fan,
            marks: Mutex::new(HashMap::new()),
            pid: std::process::id() as i32,
            read: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
        });
        let (srv, thread_w) = (self.me.clone(), Arc::clone(&w));
        std::thread::Builder::new()
            .name("nfsd-v4-local".into())
            .spawn(move || run(&thread_w, &srv))?;
        let _ = self.local.set(w);
        Ok(())
    }

    /// The watch of delegated files, when started.
    pub fn local_watch(&self) -> Option<&LocalWatch> {
        self.local.get().map(|w| &**w)
    }
}

impl LocalWatch {
    /// Watches (`export`, `fh`) of `store`, just delegated: true when watched, or when no
    /// process on the host reaches the store's objects; false when the file cannot be watched
    /// (it must then not be delegated).
    #[must_use]
    pub fn mark(&self, store: &dyn Store, export: [u8; 4], fh: &Fh) -> bool {
        let obj = match store.host_object(fh) {
            None => return true,
            Some(Ok(obj)) => obj,
            Some(Err(_)) => return false,
        };
        let Some(key) = key_of(&obj.fd, obj.handle.0, &obj.handle.1) else {
            return false;
        };
        let mut marks = self.marks();
        if let Some(m) = marks.get_mut(&key) {
            if !m.on.contains(&(export, *fh)) {
                m.on.push((export, *fh));
            }
            return true;
        }
        if self.fan_mark(libc::FAN_MARK_ADD, &obj.fd).is_err() {
            return false;
        }
        let on = vec![(export, *fh)];
        marks.insert(key, Marked { fd: obj.fd, on });
        true
    }

    /// Events read so far: all of them, and those of other processes.
    pub fn events(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.foreign.load(Ordering::Relaxed),
        )
    }

    /// How many files are marked.
    pub fn marked(&self) -> usize {
        self.marks().len()
    }

    fn marks(&self) -> MutexGuard<'_, HashMap<Key, Marked>> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `fanotify_mark` of the inode `fd` names (through its /proc link: the call refuses an
    /// `O_PATH` descriptor itself).
    fn fan_mark(&self, how: u32, fd: &OwnedFd) -> io::Result<()> {
        let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        // SAFETY: both descriptors are open; `path` is NUL-terminated.
        let r = unsafe {
            libc::fanotify_mark(
                self.fan.as_raw_fd(),
                how,
                MASK,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The (export, handle, change) pairs `events` report from other processes.
    fn targets(&self, buf: &[u8], out: &mut Vec<([u8; 4], Fh, bool)>) {
        let marks = self.marks();
        for ev in Events(buf) {
            self.read.fetch_add(1, Ordering::Relaxed);
            if ev.pid == self.pid && ev.mask & libc::FAN_Q_OVERFLOW == 0 {
                continue;
            }
            self.foreign.fetch_add(1, Ordering::Relaxed);
            let change = ev.mask & (CHANGES | libc::FAN_Q_OVERFLOW) != 0;
            let hit = |m: &Marked, out: &mut Vec<_>| {
                out.extend(m.on.iter().map(|&(e, fh)| (e, fh, change)));
            };
            match ev.fid {
                Some((fsid, handle)) => {
                    let key: Key = [fsid, handle].concat();
                    if let Some(m) = marks.get(&key) {
                        hit(m, out);
                    }
                }
                // Events were lost: any watched file may have changed.
                None => marks.values().for_each(|m| hit(m, out)),
            }
        }
    }

    /// Removes the marks of files no longer delegated. Takes the state mutex under the
    /// marks' (a grant marks after it let the state mutex go).
    fn sweep(&self, srv: &Nfs41) {
        let mut marks = self.marks();
        let s = srv.state();
        marks.retain(|_, m| {
            m.on.retain(|(e, fh)| s.delegs_on(*e, fh).next().is_some());
            if m.on.is_empty() {
                let _ = self.fan_mark(libc::FAN_MARK_REMOVE, &m.fd);
            }
            !m.on.is_empty()
        });
    }
}

/// The key fanotify's events give the object `fd` names, whose kernel handle is
/// (`htype`, `handle`).
fn key_of(fd: &OwnedFd, htype: i32, handle: &[u8]) -> Option<Key> {
    // SAFETY: `st` is written by the call before it is read.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a statfs to fill.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    // SAFETY: fsid_t is two c_ints (8 octets), read as octets as the kernel writes them.
    let fsid: [u8; 8] = unsafe { std::mem::transmute_copy(&st.f_fsid) };
    Some([&fsid[..], &htype.to_ne_bytes(), handle].concat())
}

/// The watch's thread: events until the server is gone.
fn run(w: &LocalWatch, srv: &Weak<Nfs41>) {
    let mut buf = vec![0u8; 16 << 10];
    let mut hits = Vec::new();
    let mut last_sweep = std::time::Instant::now();
    loop {
        let mut p = libc::pollfd {
            fd: w.fan.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        let r = unsafe { libc::poll(&mut p, 1, SWEEP.as_millis() as i32) };
        let Some(srv) = srv.upgrade() else {
            return;
        };
        if r > 0 {
            // SAFETY: reads into `buf`, at most its length.
            let n = unsafe { libc::read(w.fan.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                w.targets(&buf[..n as usize], &mut hits);
            }
        }
        for (export, fh, change) in hits.drain(..) {
            let _ = srv
                .deleg_gate
                .foreign_access(export, fh.as_bytes(), change, &|| true);
        }
        if last_sweep.elapsed() >= SWEEP {
            w.sweep(&srv);
            last_sweep = std::time::Instant::now();
        }
    }
}

/// The events of one `read` of a fanotify descriptor (`fanotify_event_metadata`, version 3,
/// then its information records); an event cut short or of another version ends the list.
pub struct Events<'a>(pub &'a [u8]);

/// `sizeof(struct fanotify_event_metadata)`.
const META: usize = 24;

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        let b = self.0;
        let u32_at = |i: usize| {
            b.get(i..i + 4)
                .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
        };
        let len = u32_at(0)? as usize;
        let meta_len = usize::from(u16::from_ne_bytes([*b.get(6)?, *b.get(7)?]));
        if b[4] != libc::FANOTIFY_METADATA_VERSION
            || meta_len < META
            || len < meta_len
            || len > b.len()
        {
            self.0 = &[];
            return None;
        }
        let mut m = [0u8; 8];
        m.copy_from_slice(&b[8..16]);
        let mask = u64::from_ne_bytes(m);
        let pid = u32_at(20)? as i32;
        let fid = fid_of(&b[meta_len..len]);
        self.0 = &b[len..];
        Some(Event { mask, pid, fid })
    }
}

/// The file id record among an event's information records: (fsid, handle type and octets).
fn fid_of(mut info: &[u8]) -> Option<(&[u8], &[u8])> {
    while info.len() >= 4 {
        let (kind, len) = (info[0], usize::from(u16::from_ne_bytes([info[2], info[3]])));
        if len < 4 || len > info.len() {
            return None;
        }
        let rec = &info[4..len];
        if kind == libc::FAN_EVENT_INFO_TYPE_FID && rec.len() >= 16 {
            let bytes = u32::from_ne_bytes([rec[8], rec[9], rec[10], rec[11]]) as usize;
            let handle = rec.get(12..16 + bytes)?;
            return Some((&rec[..8], handle));
        }
        info = &info[len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event as the kernel writes it: metadata (version 3), then a file id record.
    fn event(mask: u64, pid: i32, fsid: [u8; 8], htype: i32, handle: &[u8]) -> Vec<u8> {
        let info_len = 4 + 8 + 8 + handle.len();
        let mut b = Vec::new();
        b.extend_from_slice(&((META + info_len) as u32).to_ne_bytes());
        b.push(libc::FANOTIFY_METADATA_VERSION);
        b.push(0);
        b.extend_from_slice(&(META as u16).to_ne_bytes());
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&(-1i32).to_ne_bytes()); // FAN_NOFD
        b.extend_from_slice(&pid.to_ne_bytes());
        b.push(libc::FAN_EVENT_INFO_TYPE_FID);
        b.push(0);
        b.extend_from_slice(&(info_len as u16).to_ne_bytes());
        b.extend_from_slice(&fsid);
        b.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        b.extend_from_slice(&htype.to_ne_bytes());
        b.extend_from_slice(handle);
        b
    }

    #[test]
    fn accepts_events_with_their_file_ids() {
        let mut buf = event(libc::FAN_MODIFY, 42, [1; 8], 0x81, &[9; 8]);
        buf.extend(event(libc::FAN_OPEN, 7, [2; 8], 1, &[5; 12]));
        let evs: Vec<Event<'_>> = Events(&buf).collect();
        assert_eq!(evs.len(), 2);
        assert_eq!((evs[0].mask, evs[0].pid), (libc::FAN_MODIFY, 42));
        let (fsid, handle) = evs[0].fid.expect("file id");
        assert_eq!(fsid, &[1; 8]);
        assert_eq!(handle, [&0x81i32.to_ne_bytes()[..], &[9; 8]].concat());
        assert_eq!(evs[1].fid.map(|f| f.1.len()), Some(16));
    }

    #[test]
    fn rejects_cut_events_and_other_versions_without_panicking() {
        let whole = event(libc::FAN_ATTRIB, 3, [0; 8], 1, &[1, 2, 3, 4, 5, 6, 7, 8]);
        for n in 0..whole.len() {
            assert_eq!(Events(&whole[..n]).count(), 0, "cut at {n}");
        }
        let mut v2 = whole.clone();
        v2[4] = 2;
        assert_eq!(Events(&v2).count(), 0, "version 2");
        // A record longer than its event: the event stands, without a file id.
        let mut long = whole.clone();
        long[META + 2] = 0xff;
        let evs: Vec<_> = Events(&long).collect();
        assert_eq!((evs.len(), evs[0].fid), (1, None));
        // A handle longer than its record.
        let mut big = whole;
        big[META + 12] = 0xff;
        assert_eq!(Events(&big).next().map(|e| e.fid), Some(None));
        // Any octets: no panic.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2_000 {
            let bytes: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x & 0xff) as u8
                })
                .collect();
            let _ = Events(&bytes).count();
        }
    }
}
