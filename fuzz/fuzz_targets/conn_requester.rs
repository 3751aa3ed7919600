//! The whole requester side of the sans-IO connection engine on arbitrary replies: reply
//! matching by XID, RDMA_ERROR / RDMA2_ERROR handling (ERR_VERS fallback, CANT_REPLY retry),
//! Write list and Reply chunk lengths returned by the responder, credit grants, remote
//! invalidation (WITH_INV receive completions) and the local invalidation of every window.
//!
//! The input is a script: a flags octet, then messages, each a big-endian u16 length and that
//! many octets (a reply the peer "sent"). Before each message the requester starts a call
//! (XIDs 1, 2, 3, ...; with a DDP item, receptacles and a Reply chunk depending on the flags),
//! and every work request completes at once. The engine must never panic, never report a call
//! twice, never report more calls than were started, and never ask for more receives than it
//! was given.
#![no_main]
#[path = "common.rs"]
mod common;
use common::{wc, Carver, BASE};
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::conn::{
    CallOptions, CallSpec, CmInput, Config, Connection, DdpItem, Event, HostMemory, LocalBuf,
    Pools, Role, WorkRequest,
};
use rpcrdma_engine::verbs::{WcFlags, WcOpcode, WcStatus, WrId};

const CREDITS: u32 = 4;
const INLINE: u32 = 4096;
const BUF: u32 = 16 * 1024;

/// Per call slot: the buffers of the call started in it.
#[derive(Clone, Copy)]
struct SlotMem {
    msg: LocalBuf,
    item: LocalBuf,
    rec: [LocalBuf; 2],
    reply: LocalBuf,
    fallback: LocalBuf,
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut cfg = Config::DEFAULT;
    cfg.credits = CREDITS;
    cfg.inline_send = INLINE;
    cfg.inline_recv = INLINE;
    cfg.max_version = if flags & 1 != 0 { 2 } else { 1 };
    cfg.remote_invalidate = flags & 2 != 0;
    cfg.call_timeout_ns = if flags & 0x80 != 0 { 5_000 } else { 0 };
    let c = CREDITS as usize;
    let mut carve = Carver(BASE);
    let headers: Vec<LocalBuf> = (0..c).map(|_| carve.take(INLINE)).collect();
    let recvs: Vec<LocalBuf> = (0..c).map(|_| carve.take(INLINE)).collect();
    let slots: Vec<SlotMem> = (0..c)
        .map(|_| SlotMem {
            msg: carve.take(2048),
            item: carve.take(3001),
            rec: [carve.take(BUF), carve.take(BUF)],
            reply: carve.take(BUF),
            fallback: carve.take(BUF),
        })
        .collect();
    let mws: Vec<u32> = (0..8 * CREDITS).map(|i| 0x1000 + i * 0x100).collect();
    let zero = carve.take(64);
    let mut mem = carve.region();
    let pools = Pools {
        headers: &headers,
        recvs: &recvs,
        data: &[],
        mws: &mws,
        zero,
    };
    let Ok(mut conn) = Connection::new(Role::Requester, cfg, &pools) else {
        return;
    };
    let pd = [0xf6, 0xab, 0x0e, 0x18, 1, (flags >> 2) & 1, 3, 3];
    conn.handle_cm(
        0,
        CmInput::Established {
            private_data: if flags & 8 != 0 { &pd } else { &[] },
        },
    );
    let mut posted: Vec<(WrId, LocalBuf)> = Vec::new();
    let mut last_rkey = 0u32;
    let mut now = 1u64;
    let mut xid = 0u32;
    let mut started = 0u64;
    let mut finished = 0u64;
    // (slot, generation) of every call started and not reported yet, to catch a lost or
    // doubled report. (A slot may be reused before the event of its previous call is polled:
    // the generation tells them apart.)
    let mut live: Vec<(u32, u32)> = Vec::with_capacity(4 * c);
    loop {
        for _ in 0..10_000 {
            let mut progressed = false;
            while let Some(wr) = conn.poll_wr() {
                progressed = true;
                let ok = WcStatus::SUCCESS;
                match wr {
                    WorkRequest::Recv { wr_id, sge } => {
                        assert!(posted.len() < recvs.len(), "more receives than buffers");
                        posted.push((
                            wr_id,
                            LocalBuf {
                                addr: sge.addr,
                                len: sge.len,
                                lkey: sge.lkey,
                            },
                        ));
                    }
                    WorkRequest::Send {
                        wr_id, sges, nsge, ..
                    } => {
                        let len: u32 = sges[..usize::from(nsge)].iter().map(|s| s.len).sum();
                        conn.handle_completion(now, &wc(wr_id, ok, WcOpcode::SEND, len), &mut mem);
                    }
                    WorkRequest::BindMw {
                        wr_id, new_rkey, ..
                    } => {
                        last_rkey = new_rkey;
                        conn.handle_completion(now, &wc(wr_id, ok, WcOpcode::BIND_MW, 0), &mut mem);
                    }
                    WorkRequest::LocalInv { wr_id, .. } => {
                        conn.handle_completion(
                            now,
                            &wc(wr_id, ok, WcOpcode::LOCAL_INV, 0),
                            &mut mem,
                        );
                    }
                    WorkRequest::RdmaWrite { wr_id, local, .. } => {
                        conn.handle_completion(
                            now,
                            &wc(wr_id, ok, WcOpcode::RDMA_WRITE, local.len),
                            &mut mem,
                        );
                    }
                    WorkRequest::RdmaRead { wr_id, local, .. } => {
                        conn.handle_completion(
                            now,
                            &wc(wr_id, ok, WcOpcode::RDMA_READ, local.len),
                            &mut mem,
                        );
                    }
                }
            }
            while let Some(ev) = conn.poll_event() {
                progressed = true;
                let id = match ev {
                    Event::ReplyReady(r) => Some(r.call),
                    Event::CallFailed { call, .. } => Some(call),
                    _ => None,
                };
                if let Some(id) = id {
                    finished += 1;
                    assert!(finished <= started, "more calls reported than started");
                    let k = live
                        .iter()
                        .position(|&l| l == (id.slot, id.generation))
                        .expect("call reported twice, or never started");
                    live.swap_remove(k);
                }
            }
            if !progressed {
                break;
            }
        }
        now += 1000;
        conn.handle_timeout(now, &mut mem);
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (msg, tail) = tail.split_at(len);
        rest = tail;
        // Start the next call (when a slot and a credit are free), its shape from the flags
        // and the message length.
        xid += 1;
        {
            let m = slots[xid as usize % c];
            let shape = (len as u32).wrapping_add(u32::from(flags));
            let msg_len = 40 + (shape % 5) * 700;
            let mut hdr = [0u8; 40];
            hdr[..4].copy_from_slice(&xid.to_be_bytes());
            hdr[8..12].copy_from_slice(&2u32.to_be_bytes());
            if let Some(d) = mem.bytes_mut(m.msg.addr, 40) {
                d.copy_from_slice(&hdr);
            }
            let message = [LocalBuf {
                len: msg_len,
                ..m.msg
            }];
            let item = [DdpItem {
                at: 40,
                buf: LocalBuf {
                    len: 1 + shape % 3000,
                    ..m.item
                },
            }];
            let ddp: &[DdpItem] = if shape & 4 != 0 { &item } else { &[] };
            let nrec = (shape as usize >> 3) % 3;
            let reply = LocalBuf {
                len: if shape & 32 != 0 { BUF } else { 1024 },
                ..m.reply
            };
            let spec = CallSpec {
                message: &message,
                ddp,
                receptacles: &m.rec[..nrec],
                reply,
            };
            let opts = CallOptions {
                fallback_reply: (shape & 64 != 0).then_some(m.fallback),
                fallback_receptacles: &[],
            };
            // (The buffers are picked by the XID; the engine picks its own slot, so buffers
            // may be shared between calls: only the data suffers.)
            if let Ok(id) = conn.start_call_with(now, &spec, &opts, &mut mem) {
                assert!((id.slot as usize) < c, "call slot out of range");
                assert!(
                    !live.contains(&(id.slot, id.generation)),
                    "a live call id handed out again"
                );
                started += 1;
                live.push((id.slot, id.generation));
            }
        }
        if posted.is_empty() {
            break;
        }
        // Replies name small XIDs: the fuzzer finds the live ones.
        let (wr_id, buf) = posted.remove(0);
        let n = msg.len().min(buf.len as usize);
        if let Some(dst) = mem.bytes_mut(buf.addr, n) {
            dst.copy_from_slice(&msg[..n]);
        }
        let mut rc = wc(wr_id, WcStatus::SUCCESS, WcOpcode::RECV, n as u32);
        if flags & 0x10 != 0 && last_rkey != 0 {
            rc.flags = WcFlags::WITH_INV;
            rc.invalidated_rkey = last_rkey;
        }
        conn.handle_completion(now, &rc, &mut mem);
    }
    conn.handle_cm(now, CmInput::Disconnected);
    for _ in 0..10_000 {
        let mut any = false;
        while let Some(wr) = conn.poll_wr() {
            any = true;
            if !matches!(wr, WorkRequest::Recv { .. }) {
                let c = wc(wr.wr_id(), WcStatus::WR_FLUSH_ERR, WcOpcode::SEND, 0);
                conn.handle_completion(now, &c, &mut mem);
            }
        }
        while let Some(ev) = conn.poll_event() {
            any = true;
            let id = match ev {
                Event::ReplyReady(r) => Some(r.call),
                Event::CallFailed { call, .. } => Some(call),
                _ => None,
            };
            if let Some(id) = id {
                let k = live
                    .iter()
                    .position(|&l| l == (id.slot, id.generation))
                    .expect("call reported twice, or never started");
                live.swap_remove(k);
            }
        }
        if !any {
            break;
        }
    }
    // Every call started was reported exactly once, the connection loss included.
    assert!(live.is_empty(), "calls never reported: {live:?}");
});
