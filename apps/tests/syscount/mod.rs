//! Counting the system calls a server makes, exactly, without timing: a seccomp filter
//! (`seccomp(2)`, `SECCOMP_RET_USER_NOTIF`) installed on the thread that then starts the
//! server reports each watched system call of that thread and of every thread it starts
//! afterwards to a supervisor thread, which counts it by number and lets it run
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`); calls not watched run untouched.
//!
//! Normal operation: [`Counter::install`] on a fresh thread (the filter stays with that thread
//! and its descendants for their lives), then [`Counter::snapshot`] before and after the work;
//! [`Snapshot::since`] gives the calls per system call name. Needs CAP_SYS_ADMIN (root) and
//! Linux 5.5 or later. Recovery: when the filter cannot be installed, `install` says why and
//! the caller skips. The supervisor (started before the filter, so never filtered itself)
//! answers until every filtered thread has ended, then ends.
#![allow(dead_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The file system calls the directory store makes (and their near relatives).
pub const FS: &[(&str, libc::c_long)] = &[
    ("newfstatat", libc::SYS_newfstatat),
    ("fstat", libc::SYS_fstat),
    ("statx", libc::SYS_statx),
    ("openat", libc::SYS_openat),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("faccessat2", libc::SYS_faccessat2),
    ("close", libc::SYS_close),
    ("getdents64", libc::SYS_getdents64),
    ("lseek", libc::SYS_lseek),
    ("readlinkat", libc::SYS_readlinkat),
    ("unlinkat", libc::SYS_unlinkat),
    ("mkdirat", libc::SYS_mkdirat),
    ("renameat", libc::SYS_renameat),
    ("renameat2", libc::SYS_renameat2),
    ("linkat", libc::SYS_linkat),
    ("symlinkat", libc::SYS_symlinkat),
    ("mknodat", libc::SYS_mknodat),
    ("fchmod", libc::SYS_fchmod),
    ("fchmodat", libc::SYS_fchmodat),
    ("fchown", libc::SYS_fchown),
    ("fchownat", libc::SYS_fchownat),
    ("ioctl", libc::SYS_ioctl),
    ("utimensat", libc::SYS_utimensat),
    ("ftruncate", libc::SYS_ftruncate),
    ("truncate", libc::SYS_truncate),
    ("pread64", libc::SYS_pread64),
    ("pwrite64", libc::SYS_pwrite64),
    ("fsync", libc::SYS_fsync),
    ("fdatasync", libc::SYS_fdatasync),
    ("fstatfs", libc::SYS_fstatfs),
    ("getxattr", libc::SYS_getxattr),
    ("lgetxattr", libc::SYS_lgetxattr),
    ("fgetxattr", libc::SYS_fgetxattr),
    ("setxattr", libc::SYS_setxattr),
    ("fsetxattr", libc::SYS_fsetxattr),
    ("removexattr", libc::SYS_removexattr),
    ("fremovexattr", libc::SYS_fremovexattr),
    ("setgroups", libc::SYS_setgroups),
    ("setfsuid", libc::SYS_setfsuid),
    ("setfsgid", libc::SYS_setfsgid),
    ("unshare", libc::SYS_unshare),
];

/// The calls threads sleep and wake each other with (the worker hand-off, idle reactors).
pub const SCHED: &[(&str, libc::c_long)] = &[
    ("futex", libc::SYS_futex),
    ("ppoll", libc::SYS_ppoll),
    ("poll", libc::SYS_poll),
    ("read", libc::SYS_read),
    ("write", libc::SYS_write),
    ("sched_yield", libc::SYS_sched_yield),
    ("nanosleep", libc::SYS_nanosleep),
    ("clock_nanosleep", libc::SYS_clock_nanosleep),
];

/// Calls of one thread role: the role, the total, the calls by name.
pub type RoleCalls = (String, u64, Vec<(&'static str, u64)>);

/// Threads told apart (later ones are counted with the last).
const THREADS: usize = 128;

/// Counts of the watched calls, in the order of the list they were installed with.
#[derive(Debug, Clone)]
pub struct Snapshot {
    names: Vec<&'static str>,
    counts: Vec<u64>,
    /// Per thread: its name (`comm`, with digits dropped so threads of one role add up)
    /// and its counts.
    threads: Vec<(String, Vec<u64>)>,
}

impl Snapshot {
    /// What was counted between `earlier` and this snapshot, by name (only calls made).
    pub fn since(&self, earlier: &Snapshot) -> Vec<(&'static str, u64)> {
        self.names
            .iter()
            .zip(self.counts.iter().zip(&earlier.counts))
            .map(|(n, (a, b))| (*n, a - b))
            .filter(|(_, c)| *c > 0)
            .collect()
    }

    /// Calls in `set` between `earlier` and this snapshot per thread role (thread name
    /// without digits), with the calls by name.
    pub fn by_thread_since(
        &self,
        earlier: &Snapshot,
        set: &[(&str, libc::c_long)],
    ) -> Vec<RoleCalls> {
        let mut out: Vec<RoleCalls> = Vec::new();
        for (i, (role, now)) in self.threads.iter().enumerate() {
            let zero = vec![0; now.len()];
            let was = earlier.threads.get(i).map_or(&zero, |(_, c)| c);
            let calls: Vec<(&'static str, u64)> = self
                .names
                .iter()
                .zip(now.iter().zip(was))
                .map(|(n, (a, b))| (*n, a - b))
                .filter(|(n, c)| *c > 0 && set.iter().any(|(m, _)| m == n))
                .collect();
            let total: u64 = calls.iter().map(|(_, c)| c).sum();
            if total == 0 {
                continue;
            }
            match out.iter_mut().find(|(r, _, _)| r == role) {
                Some((_, t, by)) => {
                    *t += total;
                    for (n, c) in calls {
                        match by.iter_mut().find(|(m, _)| *m == n) {
                            Some((_, x)) => *x += c,
                            None => by.push((n, c)),
                        }
                    }
                }
                None => out.push((role.clone(), total, calls)),
            }
        }
        out
    }

    /// The total of the names in `set` between `earlier` and this snapshot.
    pub fn total_since(&self, earlier: &Snapshot, set: &[(&str, libc::c_long)]) -> u64 {
        self.since(earlier)
            .iter()
            .filter(|(n, _)| set.iter().any(|(m, _)| m == n))
            .map(|(_, c)| c)
            .sum()
    }
}

/// A counter installed on the calling thread.
pub struct Counter {
    names: Vec<&'static str>,
    tids: Arc<Vec<AtomicI32>>,
    per_thread: Arc<Vec<AtomicU64>>,
}

/// One BPF instruction (`struct sock_filter`).
fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

impl Counter {
    /// Installs a filter watching `calls` on the calling thread (and the threads it starts
    /// from now on). Fails when the kernel refuses it (no CAP_SYS_ADMIN, no user
    /// notification).
    pub fn install(calls: &[(&'static str, libc::c_long)]) -> Result<Counter, String> {
        let n = calls.len();
        assert!(n < 250);
        let nrs: Vec<i32> = calls.iter().map(|(_, nr)| *nr as i32).collect();
        // The supervisor starts before the filter (so it is not filtered) and waits for the
        // listener's number in an atomic: handing it over makes no system call.
        let handover = Arc::new(AtomicI32::new(-1));
        let tids: Arc<Vec<AtomicI32>> = Arc::new((0..THREADS).map(|_| AtomicI32::new(0)).collect());
        let per_thread: Arc<Vec<AtomicU64>> =
            Arc::new((0..THREADS * n).map(|_| AtomicU64::new(0)).collect());
        let (h, t, pt) = (handover.clone(), tids.clone(), per_thread.clone());
        std::thread::spawn(move || supervise(&h, &nrs, &t, &pt));
        // ld nr; for each watched nr: jeq → notify; allow; notify.
        let mut prog = vec![insn(
            (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            0,
            0,
            0,
        )];
        for (i, (_, nr)) in calls.iter().enumerate() {
            let code = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
            prog.push(insn(code, (n - i) as u8, 0, *nr as u32));
        }
        let ret = (libc::BPF_RET | libc::BPF_K) as u16;
        prog.push(insn(ret, 0, 0, libc::SECCOMP_RET_ALLOW));
        prog.push(insn(ret, 0, 0, libc::SECCOMP_RET_USER_NOTIF));
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: `fprog` points at `prog`, alive for the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            handover.store(-2, Ordering::SeqCst);
            return Err(format!("seccomp: {e}"));
        }
        handover.store(fd as i32, Ordering::SeqCst);
        Ok(Counter {
            names: calls.iter().map(|(n, _)| *n).collect(),
            tids,
            per_thread,
        })
    }

    /// The counts now, of every thread but the calling one (whose own reading of thread
    /// names would count).
    pub fn snapshot(&self) -> Snapshot {
        let n = self.names.len();
        // SAFETY: plain system call (not watched).
        let me = unsafe { libc::gettid() };
        let slots: Vec<(i32, Vec<u64>)> = self
            .tids
            .iter()
            .enumerate()
            .map(|(i, t)| (t.load(Ordering::SeqCst), i))
            .take_while(|(t, _)| *t != 0)
            .map(|(t, i)| {
                let c = (0..n)
                    .map(|k| self.per_thread[i * n + k].load(Ordering::SeqCst))
                    .collect();
                (t, c)
            })
            .collect();
        let mut counts = vec![0u64; n];
        for (_, c) in slots.iter().filter(|(t, _)| *t != me) {
            counts.iter_mut().zip(c).for_each(|(a, b)| *a += b);
        }
        let threads = slots
            .into_iter()
            .map(|(tid, c)| {
                let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                    .unwrap_or_else(|_| "(ended)".into());
                let role = if tid == me {
                    "(measuring thread)".to_string()
                } else {
                    comm.trim()
                        .chars()
                        .filter(|c| !c.is_ascii_digit())
                        .collect()
                };
                (role, c)
            })
            .collect();
        Snapshot {
            names: self.names.clone(),
            counts,
            threads,
        }
    }
}

/// Answers every notification on the listener handed over with "continue", counting it,
/// until no filtered thread is left.
fn supervise(handover: &AtomicI32, nrs: &[i32], tids: &[AtomicI32], per_thread: &[AtomicU64]) {
    let fd = loop {
        match handover.load(Ordering::SeqCst) {
            -1 => std::thread::sleep(Duration::from_millis(1)),
            -2 => return,
            fd => break fd,
        }
    };
    // SAFETY: the listener, handed over to this thread alone.
    let listener = unsafe { OwnedFd::from_raw_fd(fd) };
    let fd = listener.as_raw_fd();
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 50) } <= 0 || p.revents & libc::POLLIN == 0 {
            if p.revents & libc::POLLHUP != 0 {
                return;
            }
            continue;
        }
        // SAFETY: an all-zero seccomp_notif is what RECV expects.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: `req` is a writable seccomp_notif.
        if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } < 0 {
            continue;
        }
        if let Some(i) = nrs.iter().position(|&nr| nr == req.data.nr) {
            let tid = req.pid as i32;
            let slot = (0..THREADS)
                .find(|&s| {
                    let t = tids[s].load(Ordering::SeqCst);
                    t == tid || (t == 0 && tids[s].swap(tid, Ordering::SeqCst) == 0)
                })
                .unwrap_or(THREADS - 1);
            per_thread[slot * nrs.len() + i].fetch_add(1, Ordering::SeqCst);
        }
        let mut resp = libc::seccomp_notif_resp {
            id: req.id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        };
        // SAFETY: `resp` is a valid seccomp_notif_resp. A target that died meanwhile makes
        // this fail with ENOENT, which changes nothing.
        unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
    }
}
