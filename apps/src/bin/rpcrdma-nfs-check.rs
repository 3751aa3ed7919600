//! `rpcrdma-nfs-check`: interoperability checks of our RPC-over-RDMA Version One client (the
//! poller's public [`Client`] over the rdma-sys provider) against the Linux kernel NFS server
//! (svcrdma) on `rdma 20049`, with NFSv4.0 COMPOUNDs (minor version 0: no sessions; READ and
//! WRITE with the anonymous stateid), then NFSv4.1 with a session whose backchannel
//! (RFC 8167) the client serves.
//!
//! Normal operation: `--setup DIR` creates the test tree on the server's exported file system
//! (a file of pseudo-random bytes from a fixed seed, an empty scratch file, a directory with
//! many entries). Then, against `SERVER`, four clients run their checks (`--parts`), each
//! printing `PASS name: ...` or `FAIL name: ...`:
//! - **big** (256 KiB buffers, so every call offers a Reply chunk): NULL; PUTROOTFH + LOOKUP +
//!   GETFH + GETATTR (type, size); READs of small sizes with the data inline, and of 4 KiB to
//!   256 KiB through a Write chunk (a receptacle: Linux RDMA-Writes the data into it), odd
//!   lengths and near EOF included, every byte compared, no pad octet written after the data;
//!   WRITEs whose data is a DDP item (a Read chunk Linux RDMA-Reads), odd lengths followed by
//!   a GETATTR in the same COMPOUND (the XDR stream after an unpadded chunk), read back and
//!   compared; a long call (inline WRITE data above the inline threshold: RDMA_NOMSG with a
//!   Position Zero Read chunk); READDIR of the many-entry directory (a reply far above the
//!   inline threshold, through the Reply chunk);
//! - **small** (4032-octet buffers: no Reply chunk is offered, replies come inline; inline
//!   send threshold 1024): GETATTR answered inline, READs of up to 4032 octets through a
//!   Write chunk and WRITEs through a Read chunk whose call carries that one STag only (Linux
//!   then answers with Send With Invalidate), a long call above the 1024-octet threshold, and
//!   a reply too large for the inline threshold with no Reply chunk offered;
//! - **nodr** (the small client without the RFC 8797 R bit): a single-STag call must be
//!   answered with a plain Send;
//! - **nfs41** (`Client::connect_serving`, handlers on a worker): EXCHANGE_ID,
//!   CREATE_SESSION with CONN_BACK_CHAN, SEQUENCE-prefixed COMPOUNDs; with `--local-tree`
//!   (the test tree's local path on the server) read delegations that local writers make nfsd
//!   recall with CB_COMPOUND {CB_SEQUENCE, CB_RECALL} on the client's connection, before and
//!   after a reconnection (BIND_CONN_TO_SESSION); DESTROY_SESSION, DESTROY_CLIENTID
//!   (`rpcrdma-nfs-check/nfs41.rs`).
//!
//! What each connection negotiated (`Client::negotiated`) and the per-connection counters
//! (Send With Invalidate receives, replies through the Reply chunk) are printed. The exit
//! status is 0 when every check passed, 1 otherwise, 2 on usage errors.
//!
//! Recovery: every call has a deadline (`--timeout`); a failed call, a refused connection or a
//! lost one fails the check at hand (and the run), never hangs it. NFS4ERR_GRACE (the
//! server's grace period after start) is waited out for up to `--grace-wait` seconds.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs4::{
    self, decode_compound, encode_compound_minor, CompoundReply, Op, OpResult, ReadPlacement,
    Stable, WriteData, NF4DIR, NF4REG, NFS4ERR_GRACE, NFS4_OK,
};
use rpcrdma_engine::conn::CallError;
use rpcrdma_engine::verbs::rdma::{Rdma, RdmaDevice};
use rpcrdma_engine::verbs::Device;
use rpcrdma_poller::{
    BackchannelService, BackoffMode, CallbackMode, Client, ClientError, ClientOptions,
    ConnSnapshot, Cores, Endpoint, EndpointConfig, PersistentStags, PinPolicy, Proc, ReactorConfig,
    ReactorSet,
};

#[path = "rpcrdma-nfs-check/nfs41.rs"]
mod nfs41;

/// Buffers of the big client: the largest READ / WRITE (and reply) it handles.
const BIG_BUF: usize = 256 * 1024;
/// Buffers of the small client: a reply buffer this small (with the header of an inline reply
/// carrying one Write chunk, under 4096) makes the client offer no Reply chunk.
const SMALL_BUF: usize = 4032;
/// Octets written into every receptacle before a call, to see what the server wrote.
const SENTINEL: u8 = 0xa5;
/// The parts of a run, in order.
const PARTS: [&str; 4] = ["big", "small", "nodr", "nfs41"];

#[derive(Debug, Clone)]
struct Args {
    server: Option<String>,
    port: u16,
    dir: String,
    size: u64,
    seed: u64,
    entries: u32,
    bind: Option<IpAddr>,
    timeout: Duration,
    grace_wait: Duration,
    setup: Option<PathBuf>,
    probe: bool,
    /// The test tree as seen locally on the server (for the delegation recall).
    local_tree: Option<PathBuf>,
    /// The parts to run (big, small, nodr, nfs41).
    parts: Vec<String>,
    /// `--persistent-stags`: on a device without type-2 memory windows (siw), the client's
    /// endpoints expose their pools through endpoint-wide persistent STags (refused otherwise).
    persistent_stags: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            server: None,
            port: 20049,
            dir: "nfsinterop".into(),
            size: 1 << 20,
            seed: 0x5250_4344_4d41_4e46,
            entries: 300,
            bind: None,
            timeout: Duration::from_secs(30),
            grace_wait: Duration::from_secs(120),
            setup: None,
            probe: false,
            local_tree: None,
            parts: PARTS.iter().map(|p| p.to_string()).collect(),
            persistent_stags: false,
        }
    }
}

fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [options] SERVER[:port]     run the checks against nfsd over RDMA\n       \
         {prog} --setup DIR [options]            create the test tree in DIR (server side)\n\n\
         NFSv4.0 COMPOUNDs over RPC-over-RDMA Version One through the poller's Client (rdma\n\
         provider): NULL, LOOKUP/GETATTR, READ through Write chunks, WRITE through Read chunks,\n\
         long calls, Reply chunks, Send With Invalidate; then NFSv4.1 with a session whose\n\
         backchannel (RFC 8167) the client serves: CB_COMPOUND with CB_SEQUENCE and CB_RECALL.\n\
         Prints PASS/FAIL per check; exit status 0 all passed, 1 a check failed, 2 usage error.\n\n\
         Options:\n\
         \x20 -p, --port <n>        port (default 20049)\n\
         \x20     --dir <path>      test tree, relative to the export root (default nfsinterop)\n\
         \x20     --size <n>        size of data.bin (default 1048576)\n\
         \x20     --seed <n>        pattern seed (default 0x525043444d414e46)\n\
         \x20     --entries <n>     entries of many/ (default 300)\n\
         \x20     --bind <ip>       local address whose RDMA device to use\n\
         \x20 -t, --timeout <ms>    per-call and connect limit (default 30000)\n\
         \x20     --grace-wait <s>  how long to wait out NFS4ERR_GRACE (default 120)\n\
         \x20     --probe-reply-chunk-limit  also probe how large a Reply chunk Linux needs next\n\
         \x20                       to a Write chunk (its last READ drops the connection)\n\
         \x20     --local-tree <dir>  the test tree as the server sees it locally: the NFSv4.1\n\
         \x20                       part creates files there, gets read delegations on them and\n\
         \x20                       writes them locally so that the server recalls them\n\
         \x20     --parts <list>    parts to run (default big,small,nodr,nfs41)\n\
         \x20     --persistent-stags  on a device without type-2 memory windows (siw): expose the\n\
         \x20                       client's pools to the server through endpoint-wide\n\
         \x20                       persistent STags (refused without; docs/rdma-provider.md)\n\
         \x20 -h, --help\n"
    )
}

fn num(flag: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let t = v.trim();
    let n = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    }
    .map_err(|_| format!("{flag} expects a number, got {v:?}"))?;
    if n < lo || n > hi {
        return Err(format!("{flag} must be between {lo} and {hi}"));
    }
    Ok(n)
}

fn parse(argv: &[String]) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut i = 0;
    while i < argv.len() {
        let tok = argv[i].as_str();
        i += 1;
        let (name, inline) = match tok.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (tok, None),
        };
        let mut val = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = argv
                .get(i)
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))?;
            i += 1;
            Ok(v)
        };
        match name {
            "-h" | "--help" => return Ok(None),
            "-p" | "--port" => a.port = num(name, &val()?, 1, 65535)? as u16,
            "--dir" => {
                let d = val()?;
                if d.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
                    return Err(format!("--dir wants plain components, got {d:?}"));
                }
                a.dir = d;
            }
            "--size" => a.size = num(name, &val()?, 8 * BIG_BUF as u64, 1 << 32)?,
            "--seed" => a.seed = num(name, &val()?, 0, u64::MAX)?,
            "--entries" => a.entries = num(name, &val()?, 1, 100_000)? as u32,
            "--bind" => {
                let v = val()?;
                a.bind = Some(
                    v.parse()
                        .map_err(|_| format!("--bind expects an IP address, got {v:?}"))?,
                );
            }
            "-t" | "--timeout" => {
                a.timeout = Duration::from_millis(num(name, &val()?, 100, 3_600_000)?)
            }
            "--grace-wait" => a.grace_wait = Duration::from_secs(num(name, &val()?, 0, 3600)?),
            "--setup" => a.setup = Some(PathBuf::from(val()?)),
            "--probe-reply-chunk-limit" => a.probe = true,
            "--persistent-stags" => a.persistent_stags = true,
            "--local-tree" => a.local_tree = Some(PathBuf::from(val()?)),
            "--parts" => {
                let v = val()?;
                let parts: Vec<String> = v.split(',').map(|p| p.trim().to_string()).collect();
                if let Some(bad) = parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
                    return Err(format!(
                        "--parts: unknown part {bad:?} (big, small, nodr, nfs41)"
                    ));
                }
                a.parts = parts;
            }
            _ if tok.starts_with('-') && tok.len() > 1 => {
                return Err(format!("unknown flag {tok}"))
            }
            _ => {
                if a.server.is_some() {
                    return Err(format!("unexpected argument {tok:?}"));
                }
                a.server = Some(tok.to_string());
            }
        }
    }
    if a.server.is_none() && a.setup.is_none() {
        return Err("give the server's address (or --setup DIR)".into());
    }
    Ok(Some(a))
}

// ---------------------------------------------------------------------------------------------
// The test tree
// ---------------------------------------------------------------------------------------------

/// Name of entry `i` of `many/` (long, so the READDIR reply is large).
fn entry_name(i: u32) -> String {
    format!("entry-{i:05}-abcdefghijklmnopqrstuvwxyz0123456789")
}

fn setup(a: &Args, dir: &Path) -> Result<(), String> {
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

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    pass: u32,
    fail: u32,
    failed: Vec<String>,
}

impl Tally {
    fn check(&mut self, name: &str, r: Result<String, String>) -> bool {
        match r {
            Ok(d) => {
                self.pass += 1;
                println!("PASS {name}: {d}");
                true
            }
            Err(d) => {
                self.fail += 1;
                self.failed.push(name.to_string());
                println!("FAIL {name}: {d}");
                false
            }
        }
    }
}

/// A client and what it needs to run COMPOUNDs.
struct Nfs<'a> {
    client: &'a Client,
    a: &'a Args,
    tag: &'static str,
    /// The client advertises the RFC 8797 R bit.
    r_bit: bool,
    /// The COMPOUND minor version (0, or 1 with sessions).
    minor: u32,
}

/// How one COMPOUND is sent.
#[derive(Clone, Copy, Default)]
struct How<'d> {
    /// A WRITE's data, sent as a DDP item (a Read chunk).
    ddp: Option<&'d [u8]>,
    /// Offer one receptacle (a Write chunk: a whole buffer) for the first READ's data.
    receptacle: bool,
    /// Reply size hint ([`rpcrdma_poller::CallArgs::expect_reply`]).
    hint: Option<usize>,
}

/// What the server placed in a receptacle.
struct Placed {
    data: Vec<u8>,
    /// The receptacle's octets after the data, as far as a pad could reach: all SENTINEL
    /// when no pad was written.
    after: Vec<u8>,
}

/// What the transport did with one call, from the connection's counters (the checks make
/// one call at a time).
struct Info {
    placed: Option<Placed>,
    /// The reply came through the Reply chunk (RDMA_NOMSG).
    long: bool,
    /// Receives that came as Send With Invalidate.
    swi: u64,
    /// Octets the Reply chunk's returned length claimed beyond the COMPOUND results: Linux
    /// svcrdma counts the DDP items it wrote into Write chunks (with their XDR pad) in it.
    phantom: usize,
}

impl Info {
    /// Checks how the reply came against what Linux does: through the Reply chunk when one
    /// was offered, and with Send With Invalidate exactly when the client set the R bit and
    /// the call carried a single STag.
    fn expect(&self, reply_chunk: bool, swi: bool) -> Result<String, String> {
        let how = format!(
            "reply {} by {}",
            if self.long {
                "through the Reply chunk (RDMA_NOMSG)"
            } else {
                "inline (RDMA_MSG)"
            },
            match self.swi {
                0 => "a plain Send".to_string(),
                1 => "Send With Invalidate".to_string(),
                n => format!("{n} Sends With Invalidate"),
            }
        );
        if self.long != reply_chunk {
            return Err(format!(
                "{how}; expected the reply {}",
                if reply_chunk {
                    "through the offered Reply chunk"
                } else {
                    "inline"
                }
            ));
        }
        if self.swi != u64::from(swi) {
            return Err(format!(
                "{how}; expected {}",
                if swi {
                    "Send With Invalidate (R bit, one STag)"
                } else {
                    "a plain Send"
                }
            ));
        }
        Ok(how)
    }
}

impl Nfs<'_> {
    /// Runs a COMPOUND; waits out NFS4ERR_GRACE.
    fn compound(&self, ops: &[Op<'_>], how: How<'_>) -> Result<(CompoundReply, Info), String> {
        let deadline = Instant::now() + self.a.grace_wait;
        loop {
            let (r, info) = self.compound_once(ops, how)?;
            if r.status == NFS4ERR_GRACE && Instant::now() < deadline {
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            return Ok((r, info));
        }
    }

    fn compound_once(&self, ops: &[Op<'_>], how: How<'_>) -> Result<(CompoundReply, Info), String> {
        let c = self.client;
        let mut args = c.args().ok_or("argument buffer pool exhausted")?;
        let enc = encode_compound_minor(self.tag, self.minor, ops);
        match (enc.ddp_at, how.ddp) {
            (Some(at), Some(data)) => {
                args.put(&enc.bytes[..at]).map_err(|e| format!("{e:?}"))?;
                let mut item = c.buffer().ok_or("buffer pool exhausted")?;
                if data.len() > item.len() {
                    return Err(format!("DDP item of {} octets too large", data.len()));
                }
                item[..data.len()].copy_from_slice(data);
                args.ddp(item, data.len())
                    .map_err(|(e, _)| format!("ddp: {e:?}"))?;
                args.put(&enc.bytes[at..]).map_err(|e| format!("{e:?}"))?;
            }
            (None, None) => args.put(&enc.bytes).map_err(|e| format!("{e:?}"))?,
            _ => return Err("DDP data without a DDP WRITE (or the reverse)".into()),
        }
        if how.receptacle {
            let mut r = c.buffer().ok_or("buffer pool exhausted")?;
            r.fill(SENTINEL);
            args.receptacle(r)
                .map_err(|(e, _)| format!("receptacle: {e:?}"))?;
        }
        if let Some(h) = how.hint {
            args.expect_reply(h);
        }
        let before = c.stats().snapshot();
        let reply = c.call_blocking(
            Proc::new(nfs4::PROGRAM, nfs4::VERSION, nfs4::PROC_COMPOUND),
            args,
        );
        let (swi, long) = delta(&before, &c.stats().snapshot());
        let long = long > 0;
        let mut reply = reply.map_err(|e| format!("call failed: {}", explain(&e)))?;
        let placed = if how.receptacle {
            let (buf, n) = reply
                .take_receptacle(0)
                .ok_or("the reply lost the receptacle")?;
            Some(Placed {
                data: buf[..n].to_vec(),
                after: buf[n..(n + 8).min(buf.len())].to_vec(),
            })
        } else {
            None
        };
        let written = placed.as_ref().map_or(0, |p| p.data.len());
        let placement = if written > 0 {
            ReadPlacement::FirstDirect
        } else {
            ReadPlacement::Inline
        };
        let res = reply.results();
        // Linux's Reply chunk length counts the DDP item it wrote into the Write chunk: the
        // results then end that many octets (the item rounded up to 4) early.
        let phantom = if long && written > 0 {
            written.div_ceil(4) * 4
        } else {
            0
        };
        let strict = decode_compound(res, ops, placement);
        let (r, phantom) = match strict {
            Ok(r) => (r, 0),
            Err(e) => {
                let lenient = (phantom > 0 && res.len() >= phantom)
                    .then(|| decode_compound(&res[..res.len() - phantom], ops, placement).ok())
                    .flatten();
                match lenient {
                    Some(r) => (r, phantom),
                    None => {
                        let tail = &res[res.len().saturating_sub(32)..];
                        return Err(format!(
                            "COMPOUND reply did not decode: {e} ({} octets of results, Write \
                             chunk {written} octets, {}; last octets {tail:02x?})",
                            res.len(),
                            if long { "RDMA_NOMSG" } else { "RDMA_MSG" }
                        ));
                    }
                }
            }
        };
        Ok((
            r,
            Info {
                placed,
                long,
                swi,
                phantom,
            },
        ))
    }

    /// PUTROOTFH + LOOKUP of every component of `path` + GETFH + GETATTR.
    fn lookup(&self, path: &str, hint: Option<usize>) -> Result<(Vec<u8>, u32, u64, Info), String> {
        let mut ops = vec![Op::PutRootFh];
        ops.extend(path.split('/').map(Op::Lookup));
        ops.push(Op::GetFh);
        ops.push(Op::GetAttrTypeSize);
        let (r, info) = self.compound(
            &ops,
            How {
                hint,
                ..How::default()
            },
        )?;
        ok(&r)?;
        let fh = match r.find(nfs4::op::GETFH).map(|o| &o.result) {
            Some(OpResult::Fh(fh)) => fh.clone(),
            _ => return Err("no GETFH result".into()),
        };
        match r.find(nfs4::op::GETATTR).map(|o| &o.result) {
            Some(OpResult::Attrs {
                ftype: Some(t),
                size: Some(s),
            }) => Ok((fh, *t, *s, info)),
            other => Err(format!("GETATTR returned {other:?}")),
        }
    }

    /// READ `count` at `offset` of `fh` (`how.receptacle`: through a Write chunk). Checks
    /// every byte against `expect` and, when direct, that nothing but the data was written.
    fn read_check(
        &self,
        fh: &[u8],
        offset: u64,
        count: u32,
        how: How<'_>,
        expect: &dyn Fn(u64, &mut [u8]),
        file_size: u64,
    ) -> Result<(String, Info), String> {
        let ops = [Op::PutFh(fh), Op::Read { offset, count }];
        let (r, info) = self.compound(&ops, how)?;
        ok(&r)?;
        let Some(OpResult::Read { eof, len, data }) = r.find(nfs4::op::READ).map(|o| &o.result)
        else {
            return Err("no READ result".into());
        };
        let want_len = file_size.saturating_sub(offset).min(u64::from(count)) as u32;
        if *len != want_len {
            return Err(format!("READ returned {len} octets, expected {want_len}"));
        }
        let want_eof = offset + u64::from(*len) >= file_size;
        if *eof != want_eof {
            return Err(format!("eof {eof}, expected {want_eof}"));
        }
        let mut want = vec![0u8; *len as usize];
        expect(offset, &mut want);
        let (got, where_) = match &info.placed {
            Some(p) if !p.data.is_empty() || *len == 0 => {
                if p.data.len() != *len as usize {
                    return Err(format!(
                        "Write chunk returned {} octets, the READ result says {len}",
                        p.data.len()
                    ));
                }
                if let Some(k) = p.after.iter().position(|&b| b != SENTINEL) {
                    return Err(format!(
                        "the server wrote past the data into the Write chunk (octet {} after \
                         it is {:#04x}: an XDR pad?)",
                        k, p.after[k]
                    ));
                }
                (&p.data, "in the Write chunk, no pad octet")
            }
            Some(_) => {
                return Err(format!(
                    "{len} octets came inline: expected the Write chunk"
                ))
            }
            None => (data, "inline"),
        };
        compare(got, &want, offset)?;
        Ok((
            format!(
                "{len} octets at {offset}{} {where_}, all equal",
                if *eof { " (eof)" } else { "" }
            ),
            info,
        ))
    }

    /// WRITE `data` at `offset` (as a DDP item, or inline) followed by GETATTR in the same
    /// COMPOUND (and COMMIT when UNSTABLE); then READ it back through Write chunks (reply
    /// size hint: no Reply chunk) and compare. The Info is the WRITE's.
    fn write_check(
        &self,
        fh: &[u8],
        offset: u64,
        data: &[u8],
        ddp: bool,
        stable: Stable,
        hint: Option<usize>,
    ) -> Result<(String, Info), String> {
        let wd = if ddp {
            WriteData::Ddp(data.len() as u32)
        } else {
            WriteData::Inline(data)
        };
        let mut ops = vec![
            Op::PutFh(fh),
            Op::Write {
                offset,
                stable,
                data: wd,
            },
            Op::GetAttrTypeSize,
        ];
        if stable == Stable::Unstable {
            ops.push(Op::Commit {
                offset: 0,
                count: 0,
            });
        }
        let how = How {
            ddp: ddp.then_some(data),
            hint,
            ..How::default()
        };
        let (r, info) = self.compound(&ops, how)?;
        ok(&r)?;
        let Some(OpResult::Write {
            count, committed, ..
        }) = r.find(nfs4::op::WRITE).map(|o| &o.result)
        else {
            return Err("no WRITE result".into());
        };
        if *count as usize != data.len() {
            return Err(format!("WRITE wrote {count} of {} octets", data.len()));
        }
        let size = match r.find(nfs4::op::GETATTR).map(|o| &o.result) {
            Some(OpResult::Attrs { size: Some(s), .. }) => *s,
            other => return Err(format!("GETATTR after WRITE returned {other:?}")),
        };
        if size < offset + data.len() as u64 {
            return Err(format!(
                "size {size} after writing up to {}",
                offset + data.len() as u64
            ));
        }
        // Read back through Write chunks (whole buffers).
        let cap = self.client.buffer().map(|b| b.len()).unwrap_or(0);
        let mut got = Vec::with_capacity(data.len());
        while got.len() < data.len() {
            let at = offset + got.len() as u64;
            let n = (data.len() - got.len()).min(cap.max(1)) as u32;
            let ops = [
                Op::PutFh(fh),
                Op::Read {
                    offset: at,
                    count: n,
                },
            ];
            let how = How {
                receptacle: true,
                hint: Some(512),
                ..How::default()
            };
            let (r, rinfo) = self.compound(&ops, how)?;
            ok(&r)?;
            let Some(OpResult::Read { len, data: d, .. }) =
                r.find(nfs4::op::READ).map(|o| &o.result)
            else {
                return Err("no READ result".into());
            };
            if *len == 0 {
                return Err(format!("read back: nothing at {at}"));
            }
            match rinfo.placed {
                Some(p) if !p.data.is_empty() => got.extend_from_slice(&p.data),
                _ => got.extend_from_slice(d),
            }
        }
        compare(&got, data, offset)?;
        Ok((
            format!(
                "{} octets at {offset} {} ({}; committed {committed}), GETATTR after it: size \
                 {size}; read back equal",
                data.len(),
                if ddp { "as a Read chunk" } else { "inline" },
                match stable {
                    Stable::Unstable => "UNSTABLE + COMMIT",
                    Stable::DataSync => "DATA_SYNC",
                    Stable::FileSync => "FILE_SYNC",
                }
            ),
            info,
        ))
    }

    /// READDIR of `fh` until eof: the names, the number of calls, and whether every reply
    /// came through the Reply chunk.
    fn readdir(
        &self,
        fh: &[u8],
        maxcount: u32,
        hint: Option<usize>,
    ) -> Result<(Vec<String>, u32, bool), String> {
        let mut names = Vec::new();
        let mut cookie = 0u64;
        let mut verifier = [0u8; 8];
        let mut calls = 0;
        let mut all_long = true;
        loop {
            calls += 1;
            let ops = [
                Op::PutFh(fh),
                Op::ReadDir {
                    cookie,
                    verifier,
                    dircount: maxcount,
                    maxcount,
                },
            ];
            let how = How {
                hint,
                ..How::default()
            };
            let (r, info) = self.compound(&ops, how)?;
            ok(&r)?;
            all_long &= info.long;
            let Some(OpResult::ReadDir {
                verifier: v,
                entries,
                eof,
            }) = r.find(nfs4::op::READDIR).map(|o| &o.result)
            else {
                return Err("no READDIR result".into());
            };
            verifier = *v;
            if let Some(last) = entries.last() {
                cookie = last.cookie;
            }
            names.extend(entries.iter().map(|e| e.name.clone()));
            if *eof {
                return Ok((names, calls, all_long));
            }
            if entries.is_empty() || calls > 10_000 {
                return Err("READDIR makes no progress".into());
            }
        }
    }

    /// READDIR of `path` checked against the names `--setup` created.
    fn readdir_check(
        &self,
        path: &str,
        maxcount: u32,
        hint: Option<usize>,
    ) -> Result<String, String> {
        let (fh, ftype, _, _) = self.lookup(path, Some(512))?;
        if ftype != NF4DIR {
            return Err(format!("{path}: type {ftype}, expected a directory"));
        }
        let (names, calls, all_long) = self.readdir(&fh, maxcount, hint)?;
        let got: BTreeSet<_> = names.iter().cloned().collect();
        let want: BTreeSet<_> = (0..self.a.entries).map(entry_name).collect();
        if got != want || names.len() != want.len() {
            let missing = want.difference(&got).count();
            let extra = got.difference(&want).count();
            return Err(format!(
                "{} names ({missing} missing, {extra} unexpected, {} duplicates)",
                names.len(),
                names.len() - got.len()
            ));
        }
        if !all_long {
            return Err(format!(
                "{} entries in {calls} call(s), but not every reply came through the Reply chunk",
                names.len()
            ));
        }
        let octets: usize = names.iter().map(|n| 24 + n.len().div_ceil(4) * 4).sum();
        Ok(format!(
            "{} entries (~{octets} octets of entries) in {calls} call(s), every reply through \
             the Reply chunk (RDMA_NOMSG)",
            names.len()
        ))
    }
}

fn ok(r: &CompoundReply) -> Result<(), String> {
    if r.status == NFS4_OK {
        return Ok(());
    }
    let at = r.ops.last().map(|o| o.op).unwrap_or(0);
    Err(format!("COMPOUND status {} (operation {at})", r.status))
}

fn compare(got: &[u8], want: &[u8], offset: u64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("got {} octets, expected {}", got.len(), want.len()));
    }
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let bad = got[i..]
            .iter()
            .zip(&want[i..])
            .filter(|(g, w)| g != w)
            .count();
        return Err(format!(
            "{bad} octets differ, first at file offset {} (got {:#04x}, expected {:#04x})",
            offset + i as u64,
            got[i],
            want[i]
        ));
    }
    Ok(())
}

fn explain(e: &ClientError) -> String {
    match e {
        ClientError::Transport(CallError::ErrChunk) => {
            "RDMA_ERROR ERR_CHUNK (the server could not use the chunks offered)".into()
        }
        ClientError::TimedOut => "no reply within the call timeout".into(),
        other => format!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// A client configuration of the run.
struct Shape {
    name: &'static str,
    buffer: usize,
    inline_send: u32,
    remote_invalidate: bool,
}

impl Shape {
    const fn new(name: &'static str, buffer: usize, inline_send: u32, r: bool) -> Shape {
        Shape {
            name,
            buffer,
            inline_send,
            remote_invalidate: r,
        }
    }
}

fn open_device(a: &Args, target: SocketAddr) -> Result<RdmaDevice, String> {
    let local = match a.bind {
        Some(ip) => ip,
        None => {
            // The source address the kernel picks towards the target (nothing is sent).
            let s =
                std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| e.to_string())?;
            s.connect(target).map_err(|e| e.to_string())?;
            s.local_addr().map_err(|e| e.to_string())?.ip()
        }
    };
    RdmaDevice::open(local).map_err(|e| format!("no RDMA device owns {local} ({e}); use --bind"))
}

fn connect(
    set: &ReactorSet,
    a: &Args,
    target: SocketAddr,
    shape: &Shape,
    service: Option<BackchannelService>,
) -> Result<(Endpoint<Rdma>, Client, bool), String> {
    let dev = open_device(a, target)?;
    let caps = dev.caps();
    // Without type-2 memory windows the client exposes chunks through persistent STags and
    // never advertises the R bit.
    let r_bit = shape.remote_invalidate && caps.mw_type2;
    println!(
        "== client {}: device {} ({:?}), buffers {} octets, inline send {}, R bit {}{}",
        shape.name,
        dev.name(),
        caps.transport,
        shape.buffer,
        shape.inline_send,
        u8::from(r_bit),
        if caps.mw_type2 {
            " (memory windows)"
        } else {
            " (no memory windows: persistent STags)"
        }
    );
    let ecfg = EndpointConfig {
        max_conns_per_reactor: 2,
        max_credits: 32,
        buffers: 24,
        reply_buffers: 16,
        buffer_size: shape.buffer,
        // A client serving a backchannel runs its handlers (and its completions) on a worker:
        // they may block (the CB_RECALL handler holds its reply, see `nfs41`).
        workers: usize::from(service.is_some()),
        hugepages: false,
        persistent_stags: if a.persistent_stags {
            PersistentStags::EndpointWide
        } else {
            PersistentStags::Refuse
        },
        ..EndpointConfig::default()
    };
    let ep = Endpoint::<Rdma>::with_backoff(set, dev, ecfg, BackoffMode::SharedCores)
        .map_err(|e| format!("endpoint: {e}"))?;
    let opts = ClientOptions {
        inline_send: shape.inline_send,
        inline_recv: 4096,
        credits: 16,
        remote_invalidate: shape.remote_invalidate,
        call_timeout_ms: a.timeout.as_millis().min(u128::from(u32::MAX)) as u64,
        max_retransmits: 0,
        // The NFSv4.1 client reconnects (its reconnection round); the others must never lose
        // their connection.
        max_reconnects: if service.is_some() { 5 } else { 0 },
        max_pending: 16,
        reactor: Some(0),
        mode: if service.is_some() {
            CallbackMode::Worker
        } else {
            CallbackMode::Inline
        },
        ..ClientOptions::default()
    };
    let client = match service {
        Some(s) => Client::connect_serving(&ep, target, opts, s),
        None => Client::connect(&ep, target, opts),
    }
    .map_err(|e| match e {
        ClientError::PersistentStagsRefused => {
            format!("{e}; pass --persistent-stags to accept that exposure")
        }
        e => format!("connect: {e}"),
    })?;
    if !client.wait_connected(a.timeout) {
        return Err(format!(
            "no RPC-over-RDMA connection to {target} within {:?} (state {:?})",
            a.timeout,
            client.state()
        ));
    }
    Ok((ep, client, r_bit))
}

fn print_negotiated(client: &Client) {
    match client.negotiated() {
        Some(n) => {
            println!(
                "   negotiated: version {:?}, inline calls {} / replies {}, credits granted {}, \
                 remote invalidation (both R bits) {}",
                n.version, n.send_inline, n.recv_inline, n.credits, n.remote_invalidate
            );
            match n.peer_private_data {
                Some(p) => println!(
                    "   server private data (RFC 8797): {:02x?} = version {}, R={}, send {}, \
                     receive {}",
                    p.raw,
                    p.version,
                    u8::from(p.remote_invalidate),
                    p.max_send_size,
                    p.max_recv_size
                ),
                None => println!("   server private data: none (Version One defaults)"),
            }
        }
        None => println!("   negotiated: (nothing published)"),
    }
}

fn delta(b: &ConnSnapshot, a: &ConnSnapshot) -> (u64, u64) {
    (
        a.remote_invalidations - b.remote_invalidations,
        a.reply_chunk_replies - b.reply_chunk_replies,
    )
}

/// Runs NULL.
fn null_check(c: &Client) -> Result<String, String> {
    let args = c.args().ok_or("argument buffer pool exhausted")?;
    let rep = c
        .call_blocking(
            Proc::new(nfs4::PROGRAM, nfs4::VERSION, nfs4::PROC_NULL),
            args,
        )
        .map_err(|e| explain(&e))?;
    if rep.results().is_empty() {
        Ok("NULL (program 100003 version 4) answered, empty results".into())
    } else {
        Err(format!("NULL returned {} octets", rep.results().len()))
    }
}

/// A check that also verifies how the reply came (`reply_chunk`, `swi`: see [`Info::expect`]).
fn wire(r: Result<(String, Info), String>, reply_chunk: bool, swi: bool) -> Result<String, String> {
    let (s, info) = r?;
    if info.phantom > 0 {
        return Err(format!(
            "{s}; but the Reply chunk's length claimed {} octets more than the results",
            info.phantom
        ));
    }
    info.expect(reply_chunk, swi)
        .map(|how| format!("{s}; {how}"))
        .map_err(|e| format!("{s}; {e}"))
}

const HINT: Option<usize> = Some(512);

fn run_big(nfs: &Nfs<'_>, t: &mut Tally, size: u64, seed: u64) {
    let a = nfs.a;
    let c = nfs.client;
    let r = nfs.r_bit;
    t.check("big/null", null_check(c));
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

fn run_small(nfs: &Nfs<'_>, t: &mut Tally, size: u64, seed: u64, p: &str) {
    let a = nfs.a;
    let c = nfs.client;
    let r = nfs.r_bit;
    let full = p == "small";
    t.check(&format!("{p}/null"), null_check(c));
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
fn run_probe(nfs: &Nfs<'_>, t: &mut Tally, size: u64, seed: u64) {
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

fn run(a: &Args) -> Result<Tally, String> {
    let server = a.server.as_deref().unwrap_or_default();
    let target: SocketAddr = match server.parse::<SocketAddr>() {
        Ok(sa) => sa,
        Err(_) => SocketAddr::new(
            server
                .parse::<IpAddr>()
                .map_err(|_| format!("{server}: not an IP address"))?,
            a.port,
        ),
    };
    let mut rc = ReactorConfig::new(Cores::Count(1));
    rc.pin = PinPolicy::Off;
    rc.backoff = BackoffMode::SharedCores.config();
    rc.drain_timeout = Duration::from_secs(1);
    rc.name = "nfscheck".into();
    let mut set = ReactorSet::start(&rc).map_err(|e| format!("reactors: {e}"))?;
    println!(
        "rpcrdma-nfs-check: server {target}, test tree /{}, data.bin {} octets",
        a.dir, a.size
    );
    let mut t = Tally::default();
    let mut shapes: Vec<Shape> = [
        Shape::new("big", BIG_BUF, 4096, true),
        Shape::new("small", SMALL_BUF, 1024, true),
        Shape::new("nodr", SMALL_BUF, 1024, false),
        Shape::new("nfs41", nfs41::BUF, 4096, true),
    ]
    .into_iter()
    .filter(|s| a.parts.iter().any(|p| p == s.name))
    .collect();
    if a.probe {
        shapes.push(Shape::new("probe", BIG_BUF, 4096, true));
    }
    let mut eps = Vec::new();
    for shape in &shapes {
        let cb = (shape.name == "nfs41").then(nfs41::Callbacks::new);
        let service = cb.as_ref().map(nfs41::Callbacks::service);
        let (ep, client, r_bit) = match connect(&set, a, target, shape, service) {
            Ok(x) => x,
            Err(e) => {
                t.check(&format!("{}/connect", shape.name), Err(e));
                continue;
            }
        };
        let nfs = Nfs {
            client: &client,
            a,
            tag: "rpcrdma-nfs-check",
            r_bit,
            minor: u32::from(cb.is_some()),
        };
        match (shape.name, &cb) {
            ("big", _) => run_big(&nfs, &mut t, a.size, a.seed),
            ("probe", _) => run_probe(&nfs, &mut t, a.size, a.seed),
            (_, Some(cb)) => nfs41::run(&nfs, cb, &mut t),
            (name, None) => run_small(&nfs, &mut t, a.size, a.seed, name),
        }
        let s = client.stats().snapshot();
        println!(
            "   counters {}: calls {}, replies {} ({} through the Reply chunk), errors {}, Send \
             With Invalidate {}, connection losses {}, credits granted {}, backward calls {} \
             (replies {}, errors {})",
            shape.name,
            s.calls,
            s.replies,
            s.reply_chunk_replies,
            s.errors,
            s.remote_invalidations,
            s.connection_losses,
            s.credits_granted,
            s.back_calls,
            s.back_replies,
            s.back_errors
        );
        if shape.name != "probe" {
            // The NFSv4.1 part drops one connection on purpose (its reconnection round).
            let caused = cb.as_ref().map_or(0, |c| c.losses_caused());
            t.check(
                &format!("{}/connection-kept", shape.name),
                match s.connection_losses {
                    0 => Ok("no connection loss".into()),
                    n if n == caused => Ok(format!(
                        "{n} connection loss, the one caused on purpose; no other"
                    )),
                    n => Err(format!(
                        "{n} connection losses ({caused} caused on purpose)"
                    )),
                },
            );
        }
        client.close();
        let end = Instant::now() + Duration::from_secs(5);
        while client.state() != rpcrdma_poller::ClientState::Closed && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        eps.push(ep);
    }
    let _ = set.stop();
    for e in &eps {
        e.stop_workers();
    }
    Ok(t)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let argv0 = argv
        .first()
        .map(String::as_str)
        .unwrap_or("rpcrdma-nfs-check");
    let prog = argv0.rsplit('/').next().unwrap_or(argv0);
    let a = match parse(argv.get(1..).unwrap_or(&[])) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{}", usage(prog));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{prog}: {e}\nTry `{prog} --help`.");
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &a.setup {
        return match setup(&a, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{prog}: setup: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if a.persistent_stags {
        eprintln!(
            "{prog}: --persistent-stags: on a device without type-2 memory windows (siw) each \
             client's payload pool (read+write) and reply pool (write) are reachable by the NFS \
             server until that client ends (docs/rdma-provider.md)"
        );
    }
    match run(&a) {
        Ok(t) => {
            println!(
                "nfs-check: {} passed, {} failed{}",
                t.pass,
                t.fail,
                if t.failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", t.failed.join(", "))
                }
            );
            if t.fail == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            println!("nfs-check: 0 passed, 1 failed (setup)");
            ExitCode::FAILURE
        }
    }
}
