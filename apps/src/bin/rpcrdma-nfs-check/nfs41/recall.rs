//! Delegation recalls of the NFSv4.1 part: the delegated test files made under `--local-tree`,
//! OPENs that ask for read delegations, local writers that break the leases so nfsd sends
//! CB_RECALL, and the checks of what the handler saw (recalls, CB_SEQUENCE, backward credits).
//!
//! Normal operation: files are created, opened with OPEN4_SHARE_ACCESS_WANT_READ_DELEG, a
//! non-blocking local open shows the lease, blocking writers are spawned, the recalls are
//! answered and the delegations returned, then the writers finish and the content is checked.
//! Recovery: every wait has a deadline and fails its check instead of hanging; a writer that
//! stays blocked is left behind (detached) and the check fails.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs::v4::cb::{self as nfs4cb, CbRecall};
use rpcrdma_apps::nfs::v4::{
    self as nfs4, Delegation, Op, OpResult, StateId, NFS4_OK, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
};

use super::super::{ok, Nfs, Tally};
use super::callbacks::Callbacks;
use super::{
    hex, lock, traffic, Session, Slot, Traffic, ANON_ID, APPENDED, CB_CREDITS, CB_HOLD, FILE_LEN,
    TRAFFIC_THREADS,
};

/// A delegated test file.
pub(super) struct DFile {
    pub(super) path: PathBuf,
    pub(super) content: Vec<u8>,
    pub(super) fh: Vec<u8>,
    pub(super) open: StateId,
    pub(super) deleg: Option<StateId>,
}

pub(super) fn make_files(dir: &Path, seed: u64, tags: &[&str]) -> Result<Made, String> {
    let mut out = Vec::new();
    for (k, tag) in tags.iter().enumerate() {
        let name = format!("deleg-{}-{tag}.txt", std::process::id());
        let path = dir.join(&name);
        let mut content = vec![0u8; FILE_LEN];
        nfs4::pattern(
            seed ^ (0xde1e_0000 + k as u64) ^ u64::from(tag.as_bytes()[0]),
            0,
            &mut content,
        );
        let e = |what: &str, err: std::io::Error| format!("{what} {}: {err}", path.display());
        let mut f = std::fs::File::create(&path).map_err(|err| e("create", err))?;
        f.write_all(&content).map_err(|err| e("write", err))?;
        drop(f);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .map_err(|err| e("chmod", err))?;
        std::os::unix::fs::chown(&path, Some(ANON_ID), Some(ANON_ID))
            .map_err(|err| e("chown", err))?;
        out.push((name, path, content));
    }
    Ok(out)
}

/// Opens `path` for appending without blocking: the error kind (WouldBlock when a lease is
/// held), or `Ok` when nothing stood in the way.
pub(super) fn try_local_open(path: &Path) -> Result<(), std::io::Error> {
    OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map(drop)
}

/// A local writer: blocks in open until the lease is gone, appends, reports when done.
pub(super) fn spawn_writer(path: PathBuf, tx: mpsc::Sender<(PathBuf, Result<Instant, String>)>) {
    std::thread::spawn(move || {
        let r = OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(APPENDED))
            .map(|()| Instant::now())
            .map_err(|e| e.to_string());
        let _ = tx.send((path, r));
    });
}

/// Delegations on new files named by `tags`, recalled by local writers; checks named
/// `{prefix}/...`.
#[allow(clippy::too_many_arguments)]
pub(super) fn recall(
    nfs: &Nfs<'_>,
    cb: &Callbacks,
    s: &Session,
    slot: &mut Slot,
    t: &mut Tally,
    dir: &Path,
    tags: &[&str],
    prefix: &str,
) {
    let name = |n: &str| format!("{prefix}/{n}");
    let made = match make_files(dir, nfs.a.seed, tags) {
        Ok(m) => m,
        Err(e) => {
            t.check(&name("open-read-delegation"), Err(e));
            return;
        }
    };
    let mut dops = vec![Op::PutRootFh];
    dops.extend(nfs.a.dir.split('/').map(Op::Lookup));
    dops.push(Op::GetFh);
    let dir_fh = match nfs.seq_compound(s, slot, &dops).and_then(|(r, _)| {
        ok(&r)?;
        match r.find(nfs4::op::GETFH).map(|o| &o.result) {
            Some(OpResult::Fh(fh)) => Ok(fh.clone()),
            _ => Err("no GETFH result".to_string()),
        }
    }) {
        Ok(fh) => fh,
        Err(e) => {
            t.check(&name("open-read-delegation"), Err(e));
            return;
        }
    };
    let t0 = Instant::now();
    let (files, notes, failed, tries) = open_delegated(nfs, s, slot, &dir_fh, &made);
    let res = match failed {
        Some(e) => Err(e),
        None if files.iter().all(|f| f.deleg.is_some()) => Ok(format!(
            "OPEN (share access READ, WANT_READ_DELEG) of {} files: {}{}",
            files.len(),
            notes.join("; "),
            if tries > 1 {
                format!(
                    " (after {tries} tries in {} ms: none during the grace period)",
                    t0.elapsed().as_millis()
                )
            } else {
                String::new()
            }
        )),
        None => Err(format!(
            "no read delegation granted in {tries} tries over {} s: {} (WND4_RESOURCE is what \
             Linux 6.1 says for any refusal, e.g. during a grace period)",
            t0.elapsed().as_secs(),
            notes.join("; ")
        )),
    };
    let granted = res.is_ok();
    t.check(&name("open-read-delegation"), res);
    if granted {
        lock(&cb.log).delegations = files
            .iter()
            .filter_map(|f| f.deleg.map(|d| (d, f.fh.clone())))
            .collect();
        recall_delegations(nfs, cb, s, slot, t, &files, prefix);
    }
    // CLOSE every open.
    let mut closed = Vec::new();
    for f in &files {
        let r = nfs
            .seq_compound(s, slot, &[Op::PutFh(&f.fh), Op::Close(f.open)])
            .and_then(|(r, _)| ok(&r));
        if let Err(e) = r {
            closed.push(format!("CLOSE {}: {e}", f.path.display()));
        }
    }
    t.check(
        &name("close"),
        if closed.is_empty() {
            Ok(format!("{} opens closed", files.len()))
        } else {
            Err(closed.join("; "))
        },
    );
}

pub(super) type Made = Vec<(String, PathBuf, Vec<u8>)>;

/// [`open_all`] until every file came with a read delegation, a failure, or the time allowed
/// (the grace wait, at most 30 s) is over; also the number of tries. nfsd grants none while a
/// grace period (its own or lockd's) runs, nor while it is still probing the back channel of a
/// connection just bound: then CLOSE (and DELEGRETURN what was granted), wait and OPEN again.
pub(super) fn open_delegated(
    nfs: &Nfs<'_>,
    s: &Session,
    slot: &mut Slot,
    dir_fh: &[u8],
    made: &Made,
) -> (Vec<DFile>, Vec<String>, Option<String>, u32) {
    let deadline = Instant::now() + nfs.a.grace_wait.min(Duration::from_secs(30));
    let mut tries = 0;
    loop {
        tries += 1;
        let (files, notes, failed) = open_all(nfs, s, slot, dir_fh, made);
        if failed.is_some() || files.iter().all(|f| f.deleg.is_some()) || Instant::now() >= deadline
        {
            return (files, notes, failed, tries);
        }
        for f in &files {
            if let Some(d) = f.deleg {
                let _ = nfs.seq_compound(s, slot, &[Op::PutFh(&f.fh), Op::DelegReturn(d)]);
            }
            let _ = nfs.seq_compound(s, slot, &[Op::PutFh(&f.fh), Op::Close(f.open)]);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// OPENs every file of `made` asking for a read delegation: the files opened, what was
/// granted, the first failure.
pub(super) fn open_all(
    nfs: &Nfs<'_>,
    s: &Session,
    slot: &mut Slot,
    dir_fh: &[u8],
    made: &Made,
) -> (Vec<DFile>, Vec<String>, Option<String>) {
    let mut files = Vec::new();
    let mut notes = Vec::new();
    let mut failed = None;
    for (name, path, content) in made {
        let ops = [
            Op::PutFh(dir_fh),
            Op::Open {
                clientid: s.clientid,
                owner: b"rpcrdma-nfs-check open owner",
                access: OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
                name,
            },
            Op::GetFh,
        ];
        let r = nfs.seq_compound(s, slot, &ops).and_then(|(r, _)| {
            ok(&r)?;
            let open = match r.find(nfs4::op::OPEN).map(|o| &o.result) {
                Some(OpResult::Open(o)) => *o,
                _ => return Err("no OPEN result".to_string()),
            };
            match r.find(nfs4::op::GETFH).map(|o| &o.result) {
                Some(OpResult::Fh(fh)) => Ok((open, fh.clone())),
                _ => Err("no GETFH result".to_string()),
            }
        });
        match r {
            Ok((open, fh)) => {
                let deleg = match open.delegation {
                    Delegation::Read { stateid, .. } => Some(stateid),
                    _ => None,
                };
                notes.push(format!(
                    "{name}: {}",
                    match open.delegation {
                        Delegation::Read { stateid, recall } => {
                            format!("read delegation {} (recall {recall})", hex(&stateid))
                        }
                        Delegation::NoneExt { why } => format!("none (WND4 reason {why})"),
                        other => format!("{other:?}"),
                    }
                ));
                files.push(DFile {
                    path: path.clone(),
                    content: content.clone(),
                    fh,
                    open: open.stateid,
                    deleg,
                });
            }
            Err(e) => failed = Some(format!("OPEN {name}: {e}")),
        }
    }
    (files, notes, failed)
}

pub(super) fn recall_delegations(
    nfs: &Nfs<'_>,
    cb: &Callbacks,
    s: &Session,
    slot: &mut Slot,
    t: &mut Tally,
    files: &[DFile],
    prefix: &str,
) {
    let name = |n: &str| format!("{prefix}/{n}");
    let before = cb.recalls();
    let stop = AtomicBool::new(false);
    let first = &files[0];
    std::thread::scope(|sc| {
        let stop = &stop;
        let threads: Vec<_> = (1..s.fore_slots.min(TRAFFIC_THREADS + 1))
            .map(|k| {
                sc.spawn(move || traffic(nfs, s, k, &first.fh, first.open, &first.content, stop))
            })
            .collect();
        // Local writers: a non-blocking open must find the lease (and starts its break, so
        // nfsd recalls the delegation), then a blocking writer waits for the return.
        let (tx, rx) = mpsc::channel();
        let mut held = Vec::new();
        let mut not_held = Vec::new();
        for f in files {
            match try_local_open(&f.path) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    held.push(f.path.display().to_string())
                }
                Ok(()) => not_held.push(format!("{}: opened at once", f.path.display())),
                Err(e) => not_held.push(format!("{}: {e}", f.path.display())),
            }
            spawn_writer(f.path.clone(), tx.clone());
        }
        let breaking = Instant::now();
        t.check(
            &name("local-write-breaks-lease"),
            if not_held.is_empty() {
                Ok(format!(
                    "a non-blocking local open for writing got EWOULDBLOCK on {} files (nfsd \
                     holds a lease for each delegation; the open starts the lease break)",
                    held.len()
                ))
            } else {
                Err(format!("no lease in the way: {}", not_held.join("; ")))
            },
        );
        // The recalls.
        let got = cb.wait_recalls(before + files.len(), Duration::from_secs(30)) - before;
        let recalled_at = Instant::now();
        t.check(&name("cb-recall"), check_recalls(cb, files, got, breaking));
        t.check(&name("cb-sequence"), check_cb_sequence(cb));
        t.check(&name("backward-credits"), check_credits(cb, nfs));
        // Forward calls while the delegations are being recalled (not returned yet): a READ
        // with the open stateid; the local writers are still blocked.
        let res = nfs
            .seq_compound(
                s,
                slot,
                &[
                    Op::PutFh(&first.fh),
                    Op::ReadStateid {
                        stateid: first.open,
                        offset: 0,
                        count: FILE_LEN as u32,
                    },
                ],
            )
            .and_then(|(r, q)| {
                ok(&r)?;
                match r.find(nfs4::op::READ).map(|o| &o.result) {
                    Some(OpResult::Read { data, .. }) if *data == first.content => {}
                    other => return Err(format!("READ returned {other:?}")),
                }
                let pending = rx.try_recv();
                if let Ok((p, r)) = pending {
                    return Err(format!(
                        "a local writer finished before DELEGRETURN ({}: {r:?})",
                        p.display()
                    ));
                }
                Ok(format!(
                    "READ of {FILE_LEN} octets with the open stateid while the recalled \
                     delegations were not returned yet: equal; local writers still blocked; \
                     SEQUENCE status flags {:#x}",
                    q.status_flags
                ))
            });
        t.check(&name("forward-during-recall"), res);
        let (returning, errs) = return_delegations(nfs, s, slot, files, &rx);
        t.check(
            &name("delegreturn"),
            if errs.is_empty() {
                Ok(format!(
                    "{} delegations returned; the blocked local writers finished after \
                     DELEGRETURN ({} ms after the last recall was answered); GETATTR over NFS \
                     shows the appended octets",
                    files.len(),
                    returning.saturating_duration_since(recalled_at).as_millis()
                ))
            } else {
                Err(errs.join("; "))
            },
        );
        // Relaxed: see `traffic`.
        stop.store(true, Ordering::Relaxed);
        let res = traffic_result(threads, s, breaking, returning);
        t.check(&name("forward-traffic"), res);
    });
}

/// Returns every delegation (DELEGRETURN), waits for the blocked local writers to finish after
/// it, and checks over NFS that their appended octets are there. Returns when the returns began
/// and the errors found.
fn return_delegations(
    nfs: &Nfs<'_>,
    s: &Session,
    slot: &mut Slot,
    files: &[DFile],
    rx: &mpsc::Receiver<(PathBuf, Result<Instant, String>)>,
) -> (Instant, Vec<String>) {
    // DELEGRETURN, then the writers go on.
    let returning = Instant::now();
    let mut errs = Vec::new();
    for f in files {
        let Some(d) = f.deleg else { continue };
        if let Err(e) = nfs
            .seq_compound(s, slot, &[Op::PutFh(&f.fh), Op::DelegReturn(d)])
            .and_then(|(r, _)| ok(&r))
        {
            errs.push(format!("DELEGRETURN {}: {e}", f.path.display()));
        }
    }
    let end = Instant::now() + Duration::from_secs(20);
    let mut done = 0;
    while done < files.len() && errs.is_empty() {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok((_, Ok(at))) if at >= returning => done += 1,
            Ok((p, Ok(_))) => errs.push(format!(
                "{}: the local writer finished before DELEGRETURN",
                p.display()
            )),
            Ok((p, Err(e))) => errs.push(format!("{}: {e}", p.display())),
            Err(_) => errs.push(format!(
                "{} local writers still blocked 20 s after DELEGRETURN",
                files.len() - done
            )),
        }
    }
    // The appended data is visible over NFS.
    if errs.is_empty() {
        for f in files {
            let want = (FILE_LEN + APPENDED.len()) as u64;
            match nfs
                .seq_compound(s, slot, &[Op::PutFh(&f.fh), Op::GetAttrTypeSize])
                .and_then(|(r, _)| {
                    ok(&r)?;
                    match r.find(nfs4::op::GETATTR).map(|o| &o.result) {
                        Some(OpResult::Attrs { size: Some(sz), .. }) => Ok(*sz),
                        other => Err(format!("GETATTR returned {other:?}")),
                    }
                }) {
                Ok(sz) if sz == want => {}
                Ok(sz) => errs.push(format!("{}: size {sz}, expected {want}", f.path.display())),
                Err(e) => errs.push(e),
            }
        }
    }
    (returning, errs)
}

/// Joins the background traffic threads and judges what they did: every READ equal, none
/// failed, and how many completed between the lease break and DELEGRETURN.
fn traffic_result(
    threads: Vec<std::thread::ScopedJoinHandle<'_, Traffic>>,
    s: &Session,
    breaking: Instant,
    returning: Instant,
) -> Result<String, String> {
    let mut all = Traffic::default();
    let mut panicked = 0;
    for h in threads {
        match h.join() {
            Ok(tr) => {
                all.ok += tr.ok;
                all.errors.extend(tr.errors);
                all.done.extend(tr.done);
                all.slowest = all.slowest.max(tr.slowest);
            }
            Err(_) => panicked += 1,
        }
    }
    let during = all
        .done
        .iter()
        .filter(|&&d| d >= breaking && d <= returning)
        .count();
    let nthreads = s.fore_slots.min(TRAFFIC_THREADS + 1).saturating_sub(1);
    if nthreads == 0 {
        Ok(format!(
            "the server granted {} fore channel slot(s): no background traffic",
            s.fore_slots
        ))
    } else if panicked > 0 || !all.errors.is_empty() || all.ok == 0 {
        Err(format!(
            "{} READs passed, {panicked} threads panicked, errors: {}",
            all.ok,
            all.errors.join("; ")
        ))
    } else {
        Ok(format!(
            "{} SEQUENCE + READ calls from {} threads on slots 1..={}, all equal; {during} \
         of them completed between the lease break and DELEGRETURN; slowest {} ms \
         (call_blocking hands its outcome over on the reactor, not through the \
         worker holding the CB_RECALL replies)",
            all.ok,
            nthreads,
            nthreads,
            all.slowest.as_millis()
        ))
    }
}

pub(super) fn check_recalls(
    cb: &Callbacks,
    files: &[DFile],
    got: usize,
    since: Instant,
) -> Result<String, String> {
    let g = lock(&cb.log);
    let recalls: Vec<&(CbRecall, u32)> = g.calls.iter().flat_map(|c| &c.served.recalls).collect();
    if got < files.len() {
        return Err(format!(
            "{got} CB_RECALL(s) within 30 s of the lease break, expected {} ({} CB_COMPOUNDs \
             served)",
            files.len(),
            g.calls.len()
        ));
    }
    let mut seen = Vec::new();
    for f in files {
        let Some(d) = f.deleg else { continue };
        match recalls.iter().find(|(r, _)| r.stateid == d) {
            Some((r, st)) if r.fh == f.fh && *st == NFS4_OK => {
                seen.push(format!("stateid {} truncate {}", hex(&d), r.truncate))
            }
            Some((r, st)) => {
                return Err(format!(
                    "CB_RECALL of {}: file handle {} (ours {}), answered {st}",
                    hex(&d),
                    hex(&r.fh),
                    hex(&f.fh)
                ))
            }
            None => return Err(format!("no CB_RECALL for delegation {}", hex(&d))),
        }
    }
    let shapes: Vec<String> = g
        .calls
        .iter()
        .map(|c| {
            format!(
                "[{}] v{} flavor {}",
                c.served
                    .ops
                    .iter()
                    .map(|o| match *o {
                        nfs4cb::op::SEQUENCE => "CB_SEQUENCE".to_string(),
                        nfs4cb::op::RECALL => "CB_RECALL".to_string(),
                        n => format!("op {n}"),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                c.vers,
                c.cred_flavor
            )
        })
        .collect();
    Ok(format!(
        "{} CB_COMPOUNDs so far on the client's connection ({}), the last within {} ms of the \
         lease break; each CB_RECALL named a delegation we hold and its file handle, answered \
         NFS4_OK: {}",
        g.calls.len(),
        shapes.join("; "),
        since.elapsed().as_millis(),
        seen.join("; ")
    ))
}

pub(super) fn check_cb_sequence(cb: &Callbacks) -> Result<String, String> {
    let g = lock(&cb.log);
    let mut seqs = Vec::new();
    for c in &g.calls {
        let Some(q) = c.served.sequence else {
            return Err(format!(
                "a CB_COMPOUND without CB_SEQUENCE: {:?}",
                c.served.ops
            ));
        };
        if c.served.sequence_status != Some(NFS4_OK) || c.served.replay {
            return Err(format!(
                "CB_SEQUENCE slot {} sequence id {} answered {:?}{}",
                q.slot,
                q.sequence,
                c.served.sequence_status,
                if c.served.replay {
                    " (a retransmission)"
                } else {
                    ""
                }
            ));
        }
        if q.highest_slot >= CB_CREDITS {
            return Err(format!(
                "CB_SEQUENCE highest slot {} beyond our {CB_CREDITS} backchannel slot(s)",
                q.highest_slot
            ));
        }
        seqs.push(format!("slot {} seq {}", q.slot, q.sequence));
    }
    if g.calls.is_empty() {
        return Err("no CB_COMPOUND".into());
    }
    Ok(format!(
        "every CB_COMPOUND opened with CB_SEQUENCE of our session, in order ({}); answered \
         with the same session, sequence id and slot, highest and target slot {}",
        seqs.join(", "),
        CB_CREDITS - 1
    ))
}

pub(super) fn check_credits(cb: &Callbacks, nfs: &Nfs<'_>) -> Result<String, String> {
    // The last reply goes out just after its handler returned.
    let end = Instant::now() + Duration::from_secs(2);
    let mut snap = nfs.client.stats().snapshot();
    while snap.back_replies < snap.back_calls && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
        snap = nfs.client.stats().snapshot();
    }
    let g = lock(&cb.log);
    let max = g.calls.iter().map(|c| c.outstanding).max().unwrap_or(0);
    if max > u64::from(CB_CREDITS) {
        return Err(format!(
            "{max} backward calls outstanding at once, we granted {CB_CREDITS}"
        ));
    }
    Ok(format!(
        "at most {max} backward call outstanding (granted {CB_CREDITS}; each CB_RECALL's reply \
         held {} ms); backward calls {}, replies {}, errors {}",
        CB_HOLD.as_millis(),
        snap.back_calls,
        snap.back_replies,
        snap.back_errors
    ))
}
