//! The NFSv4.0 checks of `rpcrdma-nfs-check`, grouped by client shape: the test tree they read
//! (`--setup`), **big** (Reply chunk offered: inline and Write-chunk READs, DDP WRITEs, long
//! calls, READDIR through the Reply chunk), **small** (no Reply chunk: inline replies, single-STag
//! calls answered with Send With Invalidate, a reply too large for the inline threshold) and
//! **nodr** (no R bit: a single-STag call answered with a plain Send).
//!
//! Normal operation: each check runs its COMPOUND and records `PASS` / `FAIL` in the [`Tally`].
//! Recovery: a failed call fails only the check at hand (a missing file handle skips the checks
//! that need it); nothing here hangs, every call has the run's deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs::v4::{self as nfs4, Op, Stable, NF4REG};

use super::args::Args;
use super::client::{entry_name, How, Nfs, Tally};
use super::{null_check, print_negotiated, wire, BIG_BUF};

// ---------------------------------------------------------------------------------------------
// The test tree
// ---------------------------------------------------------------------------------------------

pub(super) fn setup(a: &Args, dir: &Path) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let e = |what: &str, p: &Path, err: std::io::Error| format!("{what} {}: {err}", p.display());
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
            .map_err(|err| e("chmod", p, err))
    };
    std::fs::create_dir_all(dir).map_err(|err| e("mkdir", dir, err))?;
    mode(dir, 0o777)?;
    let data = dir.join("data.bin");
    let mut f = std::fs::File::create(&data).map_err(|err| e("create", &data, err))?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < a.size {
        let n = (a.size - off).min(chunk.len() as u64) as usize;
        nfs4::pattern(a.seed, off, &mut chunk[..n]);
        f.write_all(&chunk[..n])
            .map_err(|err| e("write", &data, err))?;
        off += n as u64;
    }
    drop(f);
    mode(&data, 0o444)?;
    let scratch = dir.join("scratch.bin");
    std::fs::File::create(&scratch).map_err(|err| e("create", &scratch, err))?;
    mode(&scratch, 0o666)?;
    let many = dir.join("many");
    std::fs::create_dir_all(&many).map_err(|err| e("mkdir", &many, err))?;
    for i in 0..a.entries {
        let p = many.join(entry_name(i));
        std::fs::File::create(&p).map_err(|err| e("create", &p, err))?;
    }
    mode(&many, 0o777)?;
    println!(
        "setup: {} ({} octets, seed {:#x}), {}, {} ({} entries)",
        data.display(),
        a.size,
        a.seed,
        scratch.display(),
        many.display(),
        a.entries
    );
    Ok(())
}

pub(super) const HINT: Option<usize> = Some(512);

pub(super) fn run_big(nfs: &Nfs<'_>, t: &mut Tally, size: u64, seed: u64) {
    let a = nfs.a;
    let c = nfs.client;
    let r = nfs.r_bit;
    t.check("big/null", null_check(nfs));
    print_negotiated(c);
    // LOOKUP + GETATTR, without a hint (a Reply chunk: the only STag) and with one (none).
    let path = format!("{}/data.bin", a.dir);
    let mut data_fh = None;
    for hint in [None, HINT] {
        let name = if hint.is_none() {
            "big/lookup-getattr"
        } else {
            "big/lookup-getattr-hinted"
        };
        let res = nfs.lookup(&path, hint).and_then(|(fh, ftype, sz, info)| {
            if ftype != NF4REG || sz != size {
                return Err(format!(
                    "type {ftype}, size {sz}; expected a regular file of {size}"
                ));
            }
            let s = format!(
                "PUTROOTFH + LOOKUP {path} + GETFH ({} octets) + GETATTR: regular file, size {sz}",
                fh.len()
            );
            data_fh = Some(fh);
            let has_chunk = hint.is_none();
            wire(Ok((s, info)), has_chunk, r && has_chunk)
        });
        t.check(name, res);
    }
    let Some(fh) = data_fh else { return };
    let expect = |off: u64, out: &mut [u8]| nfs4::pattern(seed, off, out);
    // READ, data inline (in the Reply chunk: its only STag).
    for (off, count) in [(0u64, 1u32), (1, 3), (5, 100), (4093, 7), (size - 3, 16)] {
        let res = nfs.read_check(&fh, off, count, How::default(), &expect, size);
        t.check(
            &format!("big/read-inline-{count}@{off}"),
            wire(res, true, r),
        );
    }
    // READ through a Write chunk, reply size hint: no Reply chunk; the Write chunk is the
    // call's only STag.
    let k = 1024u64;
    let wreads = [
        (0u64, 4096u32),
        (123, 4097),
        (4097, 8191),
        (64 * k, 65536),
        (100_001, 65537),
        (0, 262_144),
        (1, 262_143),
        (size - 262_141, 262_144),
        (size - 4097, 8192),
        (size - 1, 4096),
        (size, 4096),
    ];
    for (off, count) in wreads {
        let how = How {
            receptacle: true,
            hint: HINT,
            ..How::default()
        };
        let res = nfs.read_check(&fh, off, count, how, &expect, size);
        // Nothing to write at EOF: the READ returns no data, the Write chunk comes back empty.
        t.check(
            &format!("big/read-wchunk-{count}@{off}"),
            wire(res, false, r),
        );
    }
    // READ through a Write chunk AND a Reply chunk (no hint): two STags, no Send With
    // Invalidate; Linux's Reply chunk length includes the DDP item (checked, not failed).
    for (off, count) in [(0u64, 4096u32), (100_001, 65537)] {
        let how = How {
            receptacle: true,
            ..How::default()
        };
        let res = nfs
            .read_check(&fh, off, count, how, &expect, size)
            .and_then(|(s, info)| {
                let want = (count as usize).div_ceil(4) * 4;
                let quirk = match info.phantom {
                    0 => "Reply chunk length exact".to_string(),
                    p if p == want => format!(
                        "the returned Reply chunk length counts the {p} octets of the DDP item \
                         (Linux svcrdma; the results end {p} octets before it)"
                    ),
                    p => return Err(format!("{s}; Reply chunk length off by {p}")),
                };
                info.expect(true, false)
                    .map(|how| format!("{s}; {how}; {quirk}"))
                    .map_err(|e| format!("{s}; {e}"))
            });
        t.check(&format!("big/read-wchunk-replychunk-{count}@{off}"), res);
    }
    run_big_writes(nfs, t, seed);
}

/// The big client's WRITE checks (DDP item, inline, long calls) and READDIR through the Reply
/// chunk.
fn run_big_writes(nfs: &Nfs<'_>, t: &mut Tally, seed: u64) {
    let a = nfs.a;
    let r = nfs.r_bit;
    // WRITE.
    let spath = format!("{}/scratch.bin", a.dir);
    let scratch = match nfs.lookup(&spath, HINT) {
        Ok((fh, _, _, _)) => fh,
        Err(e) => {
            t.check("big/lookup-scratch", Err(e));
            return;
        }
    };
    let wseed = seed ^ 0x0057_5249_5445;
    // (offset, length, as a DDP item, stability, hint)
    let writes: [(u64, usize, bool, Stable, Option<usize>); 8] = [
        (0, 4096, true, Stable::FileSync, HINT),
        (4096, 4097, true, Stable::FileSync, HINT),
        (77_777, 12_345, true, Stable::Unstable, HINT),
        (300_001, 200_003, true, Stable::FileSync, HINT),
        (600_000, 262_144, true, Stable::Unstable, HINT),
        (20_003, 3, true, Stable::FileSync, HINT),
        (9_000, 101, false, Stable::FileSync, HINT),
        (30_001, 5_001, true, Stable::FileSync, None),
    ];
    for (off, len, ddp, stable, hint) in writes {
        let mut d = vec![0u8; len];
        nfs4::pattern(wseed, off, &mut d);
        let name = format!(
            "big/write-{}{}-{len}@{off}",
            if ddp { "rchunk" } else { "inline" },
            if hint.is_none() { "-replychunk" } else { "" }
        );
        let stags = u32::from(ddp) + u32::from(hint.is_none());
        let res = nfs.write_check(&scratch, off, &d, ddp, stable, hint);
        t.check(&name, wire(res, hint.is_none(), r && stags == 1));
    }
    // Long calls: 6000 octets inline, above the 4096-octet threshold: RDMA_NOMSG with a
    // Position Zero Read chunk (two segments: RPC header and arguments), with and without a
    // Reply chunk.
    for hint in [HINT, None] {
        let mut d = vec![0u8; 6000];
        let off = 1_000_000 + if hint.is_none() { 10_000 } else { 0 };
        nfs4::pattern(wseed, off, &mut d);
        let res = nfs
            .write_check(&scratch, off, &d, false, Stable::FileSync, hint)
            .map(|(s, i)| (format!("RDMA_NOMSG + Position Zero Read chunk: {s}"), i));
        t.check(
            &format!(
                "big/long-call-6000{}",
                if hint.is_none() { "-replychunk" } else { "" }
            ),
            wire(res, hint.is_none(), false),
        );
    }
    // READDIR: a reply far above the inline threshold, through the Reply chunk — offered at
    // once (no hint), or after ERR_CHUNK (hint 512: no Reply chunk at first; the client sends
    // the call again, same XID, offering its whole buffer).
    let mpath = format!("{}/many", a.dir);
    t.check(
        "big/readdir-reply-chunk",
        nfs.readdir_check(&mpath, 65_536, None),
    );
    t.check(
        "big/readdir-err-chunk-retry",
        nfs.readdir_check(&mpath, 65_536, HINT)
            .map(|s| format!("hint 512: ERR_CHUNK, sent again with a Reply chunk: {s}")),
    );
}

pub(super) fn run_small(nfs: &Nfs<'_>, t: &mut Tally, size: u64, seed: u64, p: &str) {
    let a = nfs.a;
    let c = nfs.client;
    let r = nfs.r_bit;
    let full = p == "small";
    t.check(&format!("{p}/null"), null_check(nfs));
    print_negotiated(c);
    if let Some(n) = c.negotiated() {
        t.check(
            &format!("{p}/negotiated"),
            if n.send_inline == 1024 && n.recv_inline == 4096 {
                Ok(format!(
                    "inline calls {} (ours 1024) / replies {} (the server's send size)",
                    n.send_inline, n.recv_inline
                ))
            } else {
                Err(format!(
                    "inline calls {} / replies {}, expected 1024 / 4096",
                    n.send_inline, n.recv_inline
                ))
            },
        );
    }
    // 4032-octet reply buffers: no Reply chunk is ever offered.
    let path = format!("{}/data.bin", a.dir);
    let fh = match nfs.lookup(&path, None) {
        Ok((fh, _, sz, info)) => {
            let res = if sz == size {
                Ok((format!("size {sz}"), info))
            } else {
                Err(format!("size {sz}, expected {size}"))
            };
            t.check(&format!("{p}/getattr-inline"), wire(res, false, false));
            fh
        }
        Err(e) => {
            t.check(&format!("{p}/getattr-inline"), Err(e));
            return;
        }
    };
    let expect = |off: u64, out: &mut [u8]| nfs4::pattern(seed, off, out);
    // READ with one Write chunk, the call's only STag.
    for (off, count) in [(0u64, 4032u32), (3, 1001), (size - 2001, 4000)] {
        let how = How {
            receptacle: true,
            ..How::default()
        };
        let res = nfs.read_check(&fh, off, count, how, &expect, size);
        t.check(
            &format!("{p}/read-wchunk-{count}@{off}"),
            wire(res, false, r),
        );
    }
    // READ, data inline: no STag at all.
    let res = nfs.read_check(&fh, 777, 1999, How::default(), &expect, size);
    t.check(
        &format!("{p}/read-inline-1999@777"),
        wire(res, false, false),
    );
    let spath = format!("{}/scratch.bin", a.dir);
    let sfh = match nfs.lookup(&spath, None) {
        Ok((fh, _, _, _)) => fh,
        Err(e) => {
            t.check(&format!("{p}/lookup-scratch"), Err(e));
            return;
        }
    };
    let wseed = seed ^ if full { 0x0053_4d41_4c4c } else { 0x4e4f_4452 };
    let base = if full { 2_000_000 } else { 2_100_000 };
    // WRITE whose only STag is its Read chunk.
    let mut d = vec![0u8; 3001];
    nfs4::pattern(wseed, base, &mut d);
    let res = nfs.write_check(&sfh, base, &d, true, Stable::FileSync, None);
    t.check(
        &format!("{p}/write-rchunk-3001@{base}"),
        wire(res, false, r),
    );
    if !full {
        return;
    }
    // A long call above the 1024-octet threshold: RDMA_NOMSG + Position Zero Read chunk.
    let mut d = vec![0u8; 2000];
    nfs4::pattern(wseed, base + 10_000, &mut d);
    let res = nfs
        .write_check(&sfh, base + 10_000, &d, false, Stable::FileSync, None)
        .map(|(s, i)| (format!("RDMA_NOMSG + Position Zero Read chunk: {s}"), i));
    t.check(&format!("{p}/long-call-2000"), wire(res, false, false));
    // A reply larger than the inline threshold, and no Reply chunk offered (nor a larger
    // buffer to send the call again with): RDMA_ERROR ERR_CHUNK, the connection stays.
    let mpath = format!("{}/many", a.dir);
    let res = nfs.lookup(&mpath, None).and_then(|(mfh, _, _, _)| {
        let ops = [
            Op::PutFh(&mfh),
            Op::ReadDir {
                cookie: 0,
                verifier: [0; 8],
                dircount: 16_384,
                maxcount: 16_384,
            },
        ];
        match nfs.compound_once(&ops, How::default()) {
            Err(e) if e.contains("ERR_CHUNK") => Ok(format!("the server answered {e}")),
            Err(e) => Err(format!("expected RDMA_ERROR ERR_CHUNK, got {e}")),
            Ok((r, _)) => Err(format!(
                "the server answered a {}-result COMPOUND (status {}) without a Reply chunk",
                r.ops.len(),
                r.status
            )),
        }
    });
    t.check(&format!("{p}/oversized-reply-err-chunk"), res);
    let res = nfs
        .lookup(&path, None)
        .map(|(_, _, sz, _)| format!("GETATTR after it: size {sz}, state {:?}", c.state()));
    t.check(&format!("{p}/usable-after-err-chunk"), res);
}

/// `--probe-reply-chunk-limit`: READs through a Write chunk with a Reply chunk offered (no
/// hint), sized so that the whole RPC reply *including* the READ data just fits the Reply
/// chunk, then one octet more. Linux 6.1 refuses a Reply chunk shorter than the whole reply
/// even though the data goes to the Write chunk: it drops the connection.
pub(super) fn run_probe(nfs: &Nfs<'_>, t: &mut Tally, size: u64, seed: u64) {
    let c = nfs.client;
    let path = format!("{}/data.bin", nfs.a.dir);
    let fh = match nfs.lookup(&path, HINT) {
        Ok((fh, ..)) => fh,
        Err(e) => {
            t.check("probe/lookup", Err(e));
            return;
        }
    };
    let expect = |off: u64, out: &mut [u8]| nfs4::pattern(seed, off, out);
    // RPC reply header (24) + COMPOUND results around the data (status, tag, count, PUTFH,
    // READ head): what Linux adds to the data in its Reply chunk length.
    let around = 24 + 12 + nfs.tag.len().div_ceil(4) * 4 + 8 + 16;
    let fits = (BIG_BUF - around) as u32;
    let how = How {
        receptacle: true,
        ..How::default()
    };
    let res = nfs.read_check(&fh, 0, fits, how, &expect, size);
    t.check(
        &format!("probe/read-{fits}-reply-chunk-just-fits"),
        res.map(|(s, i)| format!("{s}; phantom {} octets", i.phantom)),
    );
    let losses = c.stats().snapshot().connection_losses;
    let res = nfs.read_check(&fh, 0, fits + 1, how, &expect, size);
    // The loss is counted just after the failed call completes.
    let end = Instant::now() + Duration::from_secs(2);
    while res.is_err() && c.stats().snapshot().connection_losses == losses && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let lost = c.stats().snapshot().connection_losses - losses;
    t.check(
        &format!("probe/read-{}-reply-chunk-one-short", fits + 1),
        match res {
            Err(e) if lost > 0 => Ok(format!(
                "as expected of Linux 6.1: the connection was dropped ({e})"
            )),
            Err(e) => Err(format!("failed without a connection loss: {e}")),
            Ok((s, _)) => Ok(format!("served ({s}): this server does not need the room")),
        },
    );
}
