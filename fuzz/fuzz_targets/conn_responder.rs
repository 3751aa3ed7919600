//! The whole responder side of the sans-IO connection engine on arbitrary received messages:
//! header validation (v1 and v2), Read chunk pulls and reassembly of the call's XDR stream,
//! replies through the Write list / Reply chunk, RDMA_ERROR answers, RDMA2_OPTIONAL routing,
//! credit accounting and error completions.
//!
//! The input is a script: a flags octet, then messages, each a big-endian u16 length and that
//! many octets (what the peer "sent"). Each message lands in a posted receive; every work
//! request the engine asks for completes at once (RDMA Reads copy a pattern from the input,
//! some work requests fail when the flags say so); every delivered call is answered with a
//! reply whose size and DDP results come from the input. The engine must never panic, never
//! ask for more receives than it was given, and never reference memory outside its buffers
//! (the host memory below refuses such accesses, and the engine must cope).
#![no_main]
#[path = "common.rs"]
mod common;
use common::{wc, Carver, BASE, LKEY};
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::conn::{
    CmInput, Config, Connection, DdpItem, Event, HostMemory, LocalBuf, Pools, ReplySpec, Role,
    WorkRequest,
};
use rpcrdma_engine::verbs::{WcOpcode, WcStatus, WrId};

const CREDITS: u32 = 4;
const INLINE: u32 = 4096;
const DATA: u32 = 16 * 1024;

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
    let c = CREDITS as usize;
    let mut carve = Carver(BASE);
    let headers: Vec<LocalBuf> = (0..2 * c).map(|_| carve.take(INLINE)).collect();
    let recvs: Vec<LocalBuf> = (0..3 * c).map(|_| carve.take(INLINE)).collect();
    let bufs: Vec<LocalBuf> = (0..c).map(|_| carve.take(DATA)).collect();
    let zero = carve.take(64);
    let reply_buf = carve.take(DATA);
    let mut mem = carve.region();
    let pools = Pools {
        headers: &headers,
        recvs: &recvs,
        data: &bufs,
        mws: &[],
        zero,
    };
    let Ok(mut conn) = Connection::new(Role::Responder, cfg, &pools) else {
        return;
    };
    // The peer's private data: RFC 8797, R bit from the flags.
    let pd = [0xf6, 0xab, 0x0e, 0x18, 1, (flags >> 2) & 1, 3, 3];
    conn.handle_cm(
        0,
        CmInput::Established {
            private_data: if flags & 8 != 0 { &pd } else { &[] },
        },
    );
    let mut posted: Vec<(WrId, LocalBuf)> = Vec::new();
    let mut now = 1u64;
    let mut wr_count = 0u32;
    let fail_every = u32::from(flags >> 4);
    let pattern: Vec<u8> = rest.iter().copied().cycle().take(256).collect();
    loop {
        // Run the engine until it has nothing more to do.
        for _ in 0..10_000 {
            let mut progressed = false;
            while let Some(wr) = conn.poll_wr() {
                progressed = true;
                wr_count += 1;
                let fail = fail_every != 0 && wr_count % (fail_every + 3) == 0;
                let status = if fail {
                    WcStatus::REM_ACCESS_ERR
                } else {
                    WcStatus::SUCCESS
                };
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
                        conn.handle_completion(
                            now,
                            &wc(wr_id, status, WcOpcode::SEND, len),
                            &mut mem,
                        );
                    }
                    WorkRequest::RdmaWrite { wr_id, local, .. } => {
                        conn.handle_completion(
                            now,
                            &wc(wr_id, status, WcOpcode::RDMA_WRITE, local.len),
                            &mut mem,
                        );
                    }
                    WorkRequest::RdmaRead { wr_id, local, .. } => {
                        if let Some(dst) = mem.bytes_mut(local.addr, local.len as usize) {
                            for (i, b) in dst.iter_mut().enumerate() {
                                *b = pattern.get(i % pattern.len().max(1)).copied().unwrap_or(0);
                            }
                        }
                        conn.handle_completion(
                            now,
                            &wc(wr_id, status, WcOpcode::RDMA_READ, local.len),
                            &mut mem,
                        );
                    }
                    WorkRequest::BindMw { wr_id, .. } | WorkRequest::LocalInv { wr_id, .. } => {
                        // A responder never binds or invalidates: complete as an error.
                        conn.handle_completion(
                            now,
                            &wc(wr_id, WcStatus::GENERAL_ERR, WcOpcode::SEND, 0),
                            &mut mem,
                        );
                    }
                }
            }
            while let Some(ev) = conn.poll_event() {
                progressed = true;
                if let Event::CallReady(inc) = ev {
                    // A reply of a size taken from the call, with its first DDP result (if
                    // the call offered Write chunks) from the reply buffer.
                    let want = inc.stream.len.min(DATA - 64).max(24);
                    let msg = LocalBuf {
                        addr: reply_buf.addr,
                        len: want.min(4 * 1024 + (flags as u32) * 97),
                        lkey: LKEY,
                    };
                    let item = DdpItem {
                        at: 24.min(msg.len),
                        buf: LocalBuf {
                            addr: reply_buf.addr + 8000,
                            len: u32::from(flags).wrapping_mul(131) % 5000 + 1,
                            lkey: LKEY,
                        },
                    };
                    let results: &[DdpItem] = if inc.write_chunks > 0 { &[item] } else { &[] };
                    let parts = [msg];
                    let _ = conn.send_reply(
                        now,
                        inc.call,
                        &ReplySpec {
                            message: &parts,
                            results,
                        },
                        &mut mem,
                    );
                }
            }
            if !progressed {
                break;
            }
        }
        now += 1000;
        conn.handle_timeout(now, &mut mem);
        // The next message from the peer.
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (msg, tail) = tail.split_at(len);
        rest = tail;
        if posted.is_empty() {
            // The peer sent with no receive posted: RNR on hardware; the test stops here.
            break;
        }
        let (wr_id, buf) = posted.remove(0);
        let n = msg.len().min(buf.len as usize);
        if let Some(dst) = mem.bytes_mut(buf.addr, n) {
            dst.copy_from_slice(&msg[..n]);
        }
        conn.handle_completion(
            now,
            &wc(wr_id, WcStatus::SUCCESS, WcOpcode::RECV, n as u32),
            &mut mem,
        );
    }
    conn.handle_cm(now, CmInput::Disconnected);
    while conn.poll_wr().is_some() {}
    while conn.poll_event().is_some() {}
});
