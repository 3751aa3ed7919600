//! The NFSv4.0 client of `rpcrdma-nfs-check` over the poller's public `Client`: the [`Tally`] of
//! check results, [`Nfs`] (one COMPOUND with a chosen chunk layout, [`How`], and what the wire
//! showed, [`Info`]), and the READ / WRITE / READDIR checks that compare every byte.
//!
//! Normal operation: a COMPOUND is encoded, sent with the receptacles / DDP item / reply hint
//! asked for, and its reply decoded; the per-connection counters before and after tell whether
//! a Reply chunk or Send With Invalidate was used. Recovery: NFS4ERR_GRACE is retried until
//! `--grace-wait` passes; any other failure is returned as the check's error text. A connection
//! known to be dead ([`Link`]: the poller reports it lost and not reconnected, or the first
//! call on it timed out with nothing received) fails every later call at once, saying why,
//! instead of letting each wait out `--timeout`.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs::v4::{
    self as nfs4, decode_compound, encode_compound_minor, CompoundReply, Op, OpResult,
    ReadPlacement, Stable, WriteData, NF4DIR, NFS4ERR_GRACE, NFS4_OK,
};
use rpcrdma_engine::conn::CallError;
use rpcrdma_poller::{CallArgs, Client, ClientError, ClientState, ConnSnapshot, Proc, Reply};

use super::args::Args;
use super::{delta, SENTINEL};

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
pub(super) struct Tally {
    pub(super) pass: u32,
    pub(super) fail: u32,
    pub(super) failed: Vec<String>,
}

impl Tally {
    pub(super) fn check(&mut self, name: &str, r: Result<String, String>) -> bool {
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

/// What the run knows about a client's connection: whether calls on it can still be answered.
///
/// A call that timed out keeps its credit until a reply comes (the server may still answer
/// it: `rpcrdma_engine::conn`), so on a connection that never received anything the one
/// credit of the initial grant is gone with the first call: every later call would only queue
/// until its own timeout. Such a connection, and one the poller reports lost and not
/// reconnected ([`ClientState::Failed`]), is dead: [`Nfs::call`] then fails at once.
#[derive(Default)]
pub(super) struct Link {
    /// Why no call on the connection can be answered any more (set once).
    dead: Mutex<Option<String>>,
    /// The connection's reconnection count and what it had received when the run's first
    /// call on that connection started.
    epoch: Mutex<Option<(u64, u64)>>,
}

impl Link {
    fn kill(&self, why: &str) {
        let mut d = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        if d.is_none() {
            println!("   connection dead: {why}; its remaining calls fail at once");
            *d = Some(why.to_string());
        }
    }

    fn dead(&self) -> Option<String> {
        self.dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A call starts on the connection `s` describes: the first call on it sets its epoch.
    fn starting(&self, s: &ConnSnapshot) {
        let mut e = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        if e.map(|e| e.0) != Some(s.reconnects) {
            *e = Some((s.reconnects, received(s)));
        }
    }

    /// Nothing was received on the connection `s` describes since its first call started.
    fn silent(&self, s: &ConnSnapshot) -> bool {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner)
            == Some((s.reconnects, received(s)))
    }
}

/// Everything the connection received: replies (errors included) and backward calls.
fn received(s: &ConnSnapshot) -> u64 {
    s.bytes_in + s.replies + s.back_calls + s.err_vers_in + s.err_chunk_in + s.err_other_in
}

/// Why the connection of `c` is gone for good, when the poller says so.
fn lost(c: &Client) -> Option<String> {
    match c.state() {
        ClientState::Failed | ClientState::Closed => Some(gone(&c.stats().snapshot())),
        _ => None,
    }
}

/// What the counters `s` of a connection given up on tell.
fn gone(s: &ConnSnapshot) -> String {
    if s.connection_losses > 0 {
        format!(
            "connection lost (the server or the device ended it; {} loss(es), not reconnected)",
            s.connection_losses
        )
    } else {
        format!(
            "no connection ({} failed connect attempt(s))",
            s.connect_failures
        )
    }
}

/// A client and what it needs to run COMPOUNDs.
pub(super) struct Nfs<'a> {
    pub(super) client: &'a Client,
    pub(super) a: &'a Args,
    pub(super) tag: &'static str,
    /// The client advertises the RFC 8797 R bit.
    pub(super) r_bit: bool,
    /// The COMPOUND minor version (0, or 1 with sessions).
    pub(super) minor: u32,
    /// Whether the connection can still answer.
    pub(super) link: Link,
}

/// How one COMPOUND is sent.
#[derive(Clone, Copy, Default)]
pub(super) struct How<'d> {
    /// A WRITE's data, sent as a DDP item (a Read chunk).
    pub(super) ddp: Option<&'d [u8]>,
    /// Offer one receptacle (a Write chunk: a whole buffer) for the first READ's data.
    pub(super) receptacle: bool,
    /// Reply size hint ([`rpcrdma_poller::CallArgs::expect_reply`]).
    pub(super) hint: Option<usize>,
}

/// What the server placed in a receptacle.
pub(super) struct Placed {
    pub(super) data: Vec<u8>,
    /// The receptacle's octets after the data, as far as a pad could reach: all SENTINEL
    /// when no pad was written.
    pub(super) after: Vec<u8>,
}

/// What the transport did with one call, from the connection's counters (the checks make
/// one call at a time).
pub(super) struct Info {
    pub(super) placed: Option<Placed>,
    /// The reply came through the Reply chunk (RDMA_NOMSG).
    pub(super) long: bool,
    /// Receives that came as Send With Invalidate.
    pub(super) swi: u64,
    /// Octets the Reply chunk's returned length claimed beyond the COMPOUND results: Linux
    /// svcrdma counts the DDP items it wrote into Write chunks (with their XDR pad) in it.
    pub(super) phantom: usize,
}

impl Info {
    /// Checks how the reply came against what Linux does: through the Reply chunk when one
    /// was offered, and with Send With Invalidate exactly when the client set the R bit and
    /// the call carried a single STag.
    pub(super) fn expect(&self, reply_chunk: bool, swi: bool) -> Result<String, String> {
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
    /// Makes one call and waits for its outcome; fails at once, saying why, when the connection
    /// is known to be dead ([`Link`]), and learns from each failure whether it now is.
    pub(super) fn call(&self, proc: Proc, args: CallArgs) -> Result<Reply, String> {
        let c = self.client;
        if let Some(why) = lost(c) {
            self.link.kill(&why);
        }
        if let Some(why) = self.link.dead() {
            return Err(format!("not sent: {why}"));
        }
        self.link.starting(&c.stats().snapshot());
        c.call_blocking(proc, args).map_err(|e| {
            let msg = explain(&e);
            let Some(why) = self.verdict(&e) else {
                return msg;
            };
            self.link.kill(&why);
            if matches!(e, ClientError::TimedOut) {
                format!("{msg}; {why}")
            } else {
                msg
            }
        })
    }

    /// Whether a call's failure shows the connection dead: lost for good, or a timeout with
    /// nothing received since the run's first call on the connection.
    fn verdict(&self, e: &ClientError) -> Option<String> {
        if let Some(why) = lost(self.client) {
            return Some(why);
        }
        // The poller completes the calls of a connection it gives up on before it publishes
        // `Failed`: the error says it first.
        if matches!(e, ClientError::ReconnectFailed | ClientError::Rejected(_)) {
            return Some(gone(&self.client.stats().snapshot()));
        }
        let s = self.client.stats().snapshot();
        (matches!(e, ClientError::TimedOut) && self.link.silent(&s)).then(|| {
            format!(
                "no reply to the first call on this connection within {:?}: nothing received \
                 since it was established (credits granted {}, in use {}; calls sent {}, {} \
                 octets; receives posted {})",
                self.a.timeout,
                s.credits_granted,
                s.credits_in_use,
                s.calls,
                s.bytes_out,
                s.recv_posted
            )
        })
    }

    /// Runs a COMPOUND; waits out NFS4ERR_GRACE.
    pub(super) fn compound(
        &self,
        ops: &[Op<'_>],
        how: How<'_>,
    ) -> Result<(CompoundReply, Info), String> {
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

    pub(super) fn compound_once(
        &self,
        ops: &[Op<'_>],
        how: How<'_>,
    ) -> Result<(CompoundReply, Info), String> {
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
        let reply = self.call(
            Proc::new(nfs4::PROGRAM, nfs4::VERSION, nfs4::PROC_COMPOUND),
            args,
        );
        let (swi, long) = delta(&before, &c.stats().snapshot());
        let long = long > 0;
        let mut reply = reply.map_err(|e| format!("call failed: {e}"))?;
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
    pub(super) fn lookup(
        &self,
        path: &str,
        hint: Option<usize>,
    ) -> Result<(Vec<u8>, u32, u64, Info), String> {
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
    pub(super) fn read_check(
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
    pub(super) fn write_check(
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
    pub(super) fn readdir(
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
    pub(super) fn readdir_check(
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

pub(super) fn ok(r: &CompoundReply) -> Result<(), String> {
    if r.status == NFS4_OK {
        return Ok(());
    }
    let at = r.ops.last().map(|o| o.op).unwrap_or(0);
    Err(format!("COMPOUND status {} (operation {at})", r.status))
}

pub(super) fn compare(got: &[u8], want: &[u8], offset: u64) -> Result<(), String> {
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

pub(super) fn explain(e: &ClientError) -> String {
    match e {
        ClientError::Transport(CallError::ErrChunk) => {
            "RDMA_ERROR ERR_CHUNK (the server could not use the chunks offered)".into()
        }
        ClientError::TimedOut => "no reply within the call timeout".into(),
        ClientError::RetransmitsExhausted => {
            "the connection was lost with the call outstanding (not sent again)".into()
        }
        ClientError::ReconnectFailed => "connection lost, not reconnected".into(),
        other => format!("{other:?}"),
    }
}

/// Name of entry `i` of `many/` (long, so the READDIR reply is large).
pub(super) fn entry_name(i: u32) -> String {
    format!("entry-{i:05}-abcdefghijklmnopqrstuvwxyz0123456789")
}
