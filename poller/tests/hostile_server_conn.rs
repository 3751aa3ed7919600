//! Hostile peers against the real [`Server`] (issue 13 §3), part two: raw soft-provider QPs
//! (`hostile_raw`) that overrun their credits, repeat XIDs, ask for absurd credits, lie in
//! their RFC 8797 private data, send stray and duplicate backward replies (RFC 8167), guess
//! keys of server memory, and send Send With Invalidate naming keys. Each case asserts the
//! outcome the specs and verbs prescribe, and that an honest [`Client`] on another connection
//! keeps being served, every call completing exactly once with the right result.
//!
//! Normal operation and recovery of the rig: see `hostile_rig`.
//!
//! [`Server`]: rpcrdma_poller::Server
//! [`Client`]: rpcrdma_poller::Client

mod api_common;
mod hostile_raw;
mod hostile_rig;

use std::time::Duration;

use api_common::*;
use hostile_raw::*;
use hostile_rig::*;
use rpcrdma_engine::proto::chunks::{ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::v1;
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::verbs::soft::SoftConfig;
use rpcrdma_engine::verbs::{inc_rkey, Keys, QpState, WcStatus};
use rpcrdma_poller::Proc;
use rpcrdma_poller::ServerOptions;

/// Server credits in the credit tests.
const CREDITS: u32 = 4;
/// Backward calls the server keeps outstanding per connection (`backchannel_credits`).
const BACKWARD: u32 = 4;

fn small_credits() -> ServerOptions {
    ServerOptions {
        credits: CREDITS,
        backchannel_credits: BACKWARD,
        ..ServerOptions::default()
    }
}

/// A requester that overruns its credits and never takes its replies (RFC 8166 §3.3.1: "the
/// responder MAY terminate the connection"; a requester "MUST NOT" send more than granted):
/// the server keeps its granted receives and no more, so once the receives it owns are all
/// held by the violator's calls the next Send finds none and fails with RNR_RETRY_EXC_ERR
/// (the server asks RNR retry 0 in its accept): the violator alone is cut off, with at most
/// `3 × credits + backchannel_credits` calls taken in (every receive buffer of the
/// connection, the backward replies' too) plus one (the peer's one posted receive takes the
/// first reply, and that call's receive buffer is reposted).
/// Calls posted after the cut are flushed and never reach the server. Honest traffic goes on
/// throughout.
///
/// On a shared receive queue the server owns no receives per connection: it counts the
/// shared receives each connection holds (its holding slots, `credits` plus the backward
/// receives) and cuts the violator off — QP to the error state — at the first completion
/// beyond them. Its Sends never meet RNR (the server asks RNR retry 7, so a drained SRQ makes
/// a Send wait, never fail): the ones after the cut are flushed.
fn overrun_and_stall(r: &Rig, v2: bool, rx: Receives) {
    /// Receives the violator posts (it never reposts them).
    const PEER_RECVS: usize = 1;
    let what = if v2 { "v2 overrun" } else { "v1 overrun" };
    let mut p = r.peer_with(
        &pd_v1(4096, 4096),
        RawOpts {
            recvs: PEER_RECVS,
            recv_size: 4096,
            // The server's replies to this peer (but the first) wait for receives forever.
            rnr_retry: 7,
        },
    );
    let n = 4 * CREDITS + 16;
    let ids: Vec<u64> = (0..n)
        .map(|i| {
            let x = 0x9000 + i;
            p.send(&if v2 { sum_v2(x, i, 1) } else { sum_v1(x, i, 1) })
        })
        .collect();
    let wcs: Vec<WcStatus> = ids.iter().map(|&w| p.wait_send(w).status).collect();
    let ok = wcs.iter().take_while(|s| **s == WcStatus::SUCCESS).count();
    assert!(ok >= CREDITS as usize, "{what}: the granted calls went in");
    // The peer's one posted receive takes one reply; that call's receive buffer is then
    // reposted at the server and may take one more call. The connection's receive buffers
    // are its `3 × credits` forward ones and the `backchannel_credits` kept for backward
    // replies: all of one size in one idle pool, so while every forward buffer is held by
    // the violator's calls the backward ones are posted too (seen: 17 of 4 × 3 + 4 + 1, about
    // one run in thirty, when the server drains calls faster than the peer's RNR comes).
    let most = match rx {
        Receives::PerConnection => 3 * CREDITS as usize + BACKWARD as usize + PEER_RECVS,
        // The holding slots (credits + backward receives), the calls answered into the
        // connection's reply buffers (2 × credits), the one reply the peer took.
        Receives::Shared => 3 * CREDITS as usize + BACKWARD as usize + PEER_RECVS + 1,
    };
    match rx {
        Receives::PerConnection => {
            assert!(
                ok <= most,
                "{what}: {ok} calls taken in: more than the connection's receive buffers (+ {PEER_RECVS})"
            );
            assert_eq!(wcs[ok], WcStatus::RNR_RETRY_EXC_ERR, "{what}: {wcs:?}");
            assert!(
                wcs[ok + 1..].iter().all(|s| *s == WcStatus::WR_FLUSH_ERR),
                "{what}: {wcs:?}"
            );
        }
        // The SRQ may take every Send before the server polls (they all succeed on the wire);
        // the server takes in no more than `most` calls of them, then cuts the peer off: any
        // Send still queued is flushed.
        Receives::Shared => assert!(
            wcs[ok..].iter().all(|s| *s == WcStatus::WR_FLUSH_ERR),
            "{what}: {wcs:?}"
        ),
    }
    assert!(p.wait_down(), "{what}: cut off");
    assert_eq!(p.state(), QpState::Error);
    r.wait_only_honest_left(what);
    // The violator's connection (the last accepted) took in no more than its receives.
    let mine = || r.server.connection_stats().last().copied().expect("stats");
    let calls = mine().calls;
    assert!(calls <= most as u64, "{what}: {calls} calls taken in");
    assert_eq!(mine().connection_losses, 1);
    // Calls after the cut: flushed, never delivered.
    let late = p.send(&sum_v1(0x9fff, 1, 1));
    assert_eq!(p.wait_send(late).status, WcStatus::WR_FLUSH_ERR);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(mine().calls, calls, "{what}: nothing after the cut");
    r.honest_round(16, what);
}

/// Credit overruns in both versions (RFC 8166 §3.3.1; v2 draft, "Flow Control" keeps the
/// rule): the violator alone is cut off, other connections keep being served.
fn rejects_credit_overruns_by_cutting_off_the_violator_alone(rx: Receives) {
    let r = rig_in(small_credits(), rx);
    let live = liveness(&r.honest);
    overrun_and_stall(&r, false, rx);
    overrun_and_stall(&r, true, rx);
    // A burst far beyond the grant from a peer that does take its replies: the server may
    // serve it (each call answered once, correctly) or cut it off;
    // either way nothing else is disturbed.
    let mut p = r.peer_with(
        &pd_v1(4096, 4096),
        RawOpts {
            recvs: 256,
            recv_size: 4096,
            rnr_retry: 7,
        },
    );
    let n = 200u32;
    let ids: Vec<u64> = (0..n).map(|i| p.send(&sum_v1(0xa000 + i, i, 2))).collect();
    let wcs: Vec<WcStatus> = ids.iter().map(|&w| p.wait_send(w).status).collect();
    let ok = wcs.iter().take_while(|s| **s == WcStatus::SUCCESS).count();
    if ok < n as usize {
        // Per connection: RNR at the requester; on an SRQ: cut off by the server, flushed.
        let cut = match rx {
            Receives::PerConnection => WcStatus::RNR_RETRY_EXC_ERR,
            Receives::Shared => WcStatus::WR_FLUSH_ERR,
        };
        assert_eq!(wcs[ok], cut, "burst: {wcs:?}");
        assert!(p.wait_down());
    }
    let mut seen = vec![0u32; n as usize];
    while let Ok(m) = p.recv(Duration::from_millis(if ok == n as usize {
        10_000
    } else {
        50
    })) {
        match decode(&m) {
            Answer::Reply {
                xid,
                stat: Some(AcceptStat::Success),
                results,
                credits,
                ..
            } if (0xa000..0xa000 + n).contains(&xid) => {
                let i = xid - 0xa000;
                assert_eq!(results, (i + 2).to_be_bytes(), "burst reply {i}");
                assert_eq!(credits, CREDITS, "the grant stays the configured one");
                seen[i as usize] += 1;
            }
            other => panic!("burst: unexpected {other:?}"),
        }
        if seen.iter().take(ok).all(|&c| c == 1) && ok == n as usize {
            break;
        }
    }
    assert!(seen.iter().all(|&c| c <= 1), "a call answered twice");
    // On an SRQ every Send may land before the server cuts the peer off: cut off all the same.
    let cut = ok < n as usize || p.state() == QpState::Error;
    if !cut {
        assert!(seen.iter().all(|&c| c == 1), "served: every call answered");
        r.close(p, "burst");
    } else {
        r.wait_only_honest_left("burst cut off");
    }
    r.honest_round(16, "after the overruns");
    live.finish("credit overruns");
    r.stop();
}

/// Duplicate XIDs in flight (RFC 8166 §4.2.1: the XID only matches a reply to its call;
/// detecting retransmissions is the upper layer's business): two calls with one XID are two
/// calls, each answered once with its own result, in order; hostile `rdma_credit` requests (0,
/// 0xffffffff) never change the grant the server sends (RFC 8166 §3.3.1: the responder
/// decides; the value of a Version Two call likewise).
fn accepts_duplicate_xids_and_hostile_credit_requests_without_disturbance(rx: Receives) {
    let r = rig_in(small_credits(), rx);
    let live = liveness(&r.honest);
    for v2 in [false, true] {
        let vers = if v2 { 2 } else { 1 };
        let mk = |x, a, b| if v2 { sum_v2(x, a, b) } else { sum_v1(x, a, b) };
        let mut p = r.peer();
        let x = 0x4242;
        p.send(&mk(x, 1, 2));
        p.send(&mk(x, 3, 4));
        p.send(&mk(x, 5, 6));
        for (k, want) in [3u32, 7, 11].into_iter().enumerate() {
            assert_sum_reply(&p.recv_msg("dup"), x, vers, want, &format!("dup {k}"));
        }
        for (k, asked) in [0u32, 0xffff_ffff, 1000].into_iter().enumerate() {
            let x = 0x4300 + k as u32;
            let mut m = mk(x, k as u32, 1);
            m[8..12].copy_from_slice(&asked.to_be_bytes());
            p.send(&m);
            let got = p.recv_msg("credit request");
            assert_sum_reply(&got, x, vers, k as u32 + 1, "credit request");
            assert_eq!(word(&got, 2), Some(CREDITS), "grant after asking {asked}");
        }
        assert_eq!(p.recv(Duration::from_millis(20)), Err(RecvEnd::Timeout));
        r.close(p, "dup");
    }
    r.honest_round(16, "after duplicate XIDs");
    live.finish("duplicate XIDs");
    r.stop();
}

/// Lying RFC 8797 private data. A requester that advertises a receive size larger than the
/// receives it posted gets a reply its receive cannot hold: the receive fails LOC_LEN_ERR,
/// the connection goes down (verbs: a Send longer than the receive is an error at both ends),
/// and only that connection. Sizes below 1024 cannot be expressed (RFC 8797 §4: the size octet
/// counts 1024-octet units from 1024; the engine's encoder clamps): the server then uses 1024
/// and answers a reply larger than that, with no Reply chunk offered, ERR_CHUNK (RFC 8166
/// §4.4.2 / what Linux does). Private data that is not RFC 8797 — wrong format identifier,
/// unknown version, cut short, absent — makes the server assume 1024 both ways (RFC 8797 §5.1:
/// the defaults when no valid private data arrives), so the same ERR_CHUNK shows the lying
/// sizes were not used. The server's own private data is always a valid version 1 message.
fn rejects_lying_rfc_8797_sizes_within_that_connection(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    let live = liveness(&r.honest);
    // Advertises 8192, posts 1024.
    let mut p = r.peer_with(
        &pd_v1(4096, 8192),
        RawOpts {
            recvs: 8,
            recv_size: 1024,
            rnr_retry: 0,
        },
    );
    p.send(&echo_v1(0x8001, 3000));
    assert_eq!(
        p.recv(Duration::from_secs(10)),
        Err(RecvEnd::Flushed(WcStatus::LOC_LEN_ERR)),
        "the reply overflows the receive"
    );
    assert!(p.wait_down());
    r.wait_only_honest_left("overflowed receive");
    drop(p);
    // What the server believes in each case: 1024 from the requester.
    let mut bad_magic = pd_v1(8192, 8192);
    bad_magic[0] ^= 0xff;
    let mut bad_version = pd_v1(8192, 8192);
    bad_version[4] = 2;
    let long_garbage: Vec<u8> = (0..56u8).map(|i| i.wrapping_mul(37)).collect();
    for (name, pd) in [
        ("sizes below 1024", pd_v1(100, 512)),
        ("wrong format identifier", bad_magic),
        ("unknown version", bad_version),
        ("cut short", pd_v1(8192, 8192)[..6].to_vec()),
        ("56 octets of garbage", long_garbage),
        ("none", Vec::new()),
    ] {
        let mut p = r.peer_with(
            &pd,
            RawOpts {
                recvs: 8,
                recv_size: 1024,
                rnr_retry: 0,
            },
        );
        let theirs = rpcrdma_engine::proto::private_data::decode(&p.accept_pd)
            .unwrap_or_else(|e| panic!("{name}: server private data {e:?}"));
        assert_eq!(
            (theirs.version, theirs.max_send_size, theirs.max_recv_size),
            (1, 4096, 4096),
            "{name}"
        );
        // 2000 octets of results cannot go inline to a 1024-octet receiver.
        p.send(&echo_v1(0x8100, 2000));
        assert_eq!(
            decode(&p.recv_msg(name)),
            Answer::Error {
                xid: 0x8100,
                vers: 1,
                body: vec![2]
            },
            "{name}: ERR_CHUNK"
        );
        // 900 octets fit.
        p.send(&echo_v1(0x8101, 900));
        match decode(&p.recv_msg(name)) {
            Answer::Reply {
                xid: 0x8101,
                stat: Some(AcceptStat::Success),
                results,
                ..
            } => {
                assert_eq!(word(&results, 0), Some(900), "{name}");
                assert!(results[4..904]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i * 13) as u8));
            }
            other => panic!("{name}: {other:?}"),
        }
        r.close(p, name);
    }
    r.honest_round(16, "after lying private data");
    live.finish("lying private data");
    r.stop();
}

/// Hostile backchannel traffic toward the server (RFC 8167): a backward reply with an XID
/// the server never sent is dropped (§4.1, §5.2: it matches no backward call); when the
/// server sends a backward call, the first reply completes it exactly once and duplicates of
/// that reply are dropped; a server without a backchannel drops backward replies. The
/// connection keeps serving forward calls after each.
fn rejects_stray_and_duplicate_backward_replies(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    let live = liveness(&r.honest);
    let mut p = r.peer();
    // Unknown XIDs, before any backward call exists.
    p.send(&back_reply(0xbad0_0001, 5));
    p.send(&back_reply(0, 5));
    p.send(&sum_v1(0x8201, 2, 2));
    assert_sum_reply(&p.recv_msg("after stray"), 0x8201, 1, 4, "after stray");
    // KICK: the handler sends one backward call on this connection.
    p.send(&v1_msg(
        0x8203,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(0x8203, PROG, 2, KICK, &[]),
    ));
    let (mut kick_reply, mut back_xid) = (false, None);
    for _ in 0..2 {
        match decode(&p.recv_msg("kick")) {
            Answer::Reply {
                xid: 0x8203,
                stat: Some(AcceptStat::Success),
                ..
            } => kick_reply = true,
            Answer::Call {
                xid,
                vers: 1,
                prog: CB_PROG,
                proc_num: CB_PROC,
            } => back_xid = Some(xid),
            other => panic!("kick: {other:?}"),
        }
    }
    assert!(kick_reply);
    let bx = back_xid.expect("the backward call");
    p.send(&back_reply(bx, 99));
    p.send(&back_reply(bx, 55));
    p.send(&back_reply(bx, 44));
    p.send(&back_reply(bx ^ 0x8000_0000, 33));
    wait_until("the backward reply", || !r.back.lock().unwrap().is_empty());
    p.send(&sum_v1(0x8204, 5, 5));
    assert_sum_reply(&p.recv_msg("after dup"), 0x8204, 1, 10, "after duplicates");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        *r.back.lock().unwrap(),
        vec![Ok(99)],
        "completed exactly once"
    );
    assert_eq!(p.recv(Duration::from_millis(20)), Err(RecvEnd::Timeout));
    r.close(p, "backward");
    r.honest_round(16, "after stray backward replies");
    live.finish("backward replies");
    r.stop();

    // A server without a backchannel.
    let r = rig_in(
        ServerOptions {
            backchannel_credits: 0,
            ..ServerOptions::default()
        },
        rx,
    );
    let mut p = r.peer();
    p.send(&back_reply(0x77, 5));
    p.send(&v1_msg(
        0x8301,
        1,
        ChunkListsRef::EMPTY,
        &rpc_call(0x8301, PROG, 2, KICK, &[]),
    ));
    match decode(&p.recv_msg("kick without backchannel")) {
        Answer::Reply {
            xid: 0x8301,
            stat: Some(AcceptStat::SystemErr),
            ..
        } => {}
        other => panic!("kick without backchannel: {other:?}"),
    }
    p.send(&sum_v1(0x8302, 1, 1));
    assert_sum_reply(
        &p.recv_msg("no backchannel"),
        0x8302,
        1,
        2,
        "no backchannel",
    );
    assert_eq!(p.recv(Duration::from_millis(20)), Err(RecvEnd::Timeout));
    r.close(p, "no backchannel");
    r.honest_round(16, "no backchannel");
    r.stop();
}

/// The server endpoint's two pools (payload buffers, reply buffers): their start address,
/// length and keys, as an all-knowing attacker would have them.
fn server_pools(r: &Rig) -> Vec<(&'static str, u64, usize, Keys)> {
    let ep = &r.w.server_ep;
    [
        ("payload pool", ep.buffers()),
        ("reply pool", ep.reply_buffers()),
    ]
    .into_iter()
    .map(|(n, b)| {
        let reg = b.pool().region();
        (n, reg.as_ptr() as u64, reg.len(), b.pool().keys())
    })
    .collect()
}

/// The keys an attacker tries against a region whose key is `k`: the key itself, the next
/// key (`ibv_inc_rkey`), the key byte flipped, the neighbouring table entries, and the raw
/// peer's own lkeys and rkeys (keys are small and allocated in order on every device, so a
/// peer's own keys name the same table entries on the server's device).
fn guesses(k: Keys, own: &[Keys]) -> Vec<u32> {
    let mut g = vec![
        k.rkey,
        k.lkey,
        inc_rkey(k.rkey),
        k.rkey ^ 0xff,
        k.rkey.wrapping_add(0x100),
        k.rkey.wrapping_sub(0x100),
    ];
    for o in own {
        g.extend([o.lkey, o.rkey, inc_rkey(o.lkey)]);
    }
    g.sort_unstable();
    g.dedup();
    g
}

const MARK: &[u8; 8] = b"HOSTILE!";

/// Tries RDMA Read and RDMA Write with every guessed key at the start and the middle of each
/// server pool, one connection per attempt (a remote access error ends the connection). Each
/// must fail with REM_ACCESS_ERR (IBA: an R_Key that does not name a region or window with
/// the right, in this QP's PD, is a remote access error), land nothing in the reader's
/// buffer, and end that connection alone. Returns the number of attempts that succeeded.
fn attack_server_memory(r: &Rig) -> usize {
    let own = {
        let p = r.peer();
        let k = p.own_keys();
        r.close(p, "key probe");
        k
    };
    let mut breaches = 0;
    for (name, addr, len, keys) in server_pools(r) {
        for key in guesses(keys, &own) {
            for at in [addr, addr + (len as u64 / 2)] {
                let mut p = r.peer();
                let (c, got) = p.read(at, key, 256);
                if c.status == WcStatus::SUCCESS {
                    breaches += 1;
                    eprintln!("{name}: RDMA Read with key {key:#x} at {at:#x} succeeded");
                } else {
                    assert_eq!(c.status, WcStatus::REM_ACCESS_ERR, "{name} read {key:#x}");
                    assert!(got.iter().all(|&b| b == 0), "{name}: nothing landed");
                    assert!(p.wait_down());
                }
                r.close(p, name);
                let mut p = r.peer();
                let c = p.write(at, key, &MARK.repeat(32));
                if c.status == WcStatus::SUCCESS {
                    breaches += 1;
                    eprintln!("{name}: RDMA Write with key {key:#x} at {at:#x} succeeded");
                } else {
                    assert_eq!(c.status, WcStatus::REM_ACCESS_ERR, "{name} write {key:#x}");
                    assert!(p.wait_down());
                }
                r.close(p, name);
            }
        }
    }
    breaches
}

/// True when `MARK` occurs anywhere in the server's pools (read with the reactors idle).
fn server_memory_marked(r: &Rig) -> bool {
    server_pools(r).into_iter().any(|(_, addr, len, _)| {
        let ptr = addr as *const u8;
        // SAFETY: the region is mapped for the endpoint's life; the reactors are idle (no call
        // in flight), and a volatile read of plain octets cannot observe an invalid value.
        let bytes: Vec<u8> = (0..len)
            .map(|i| unsafe { ptr.add(i).read_volatile() })
            .collect();
        bytes.windows(MARK.len()).any(|w| w == MARK)
    })
}

/// Echo calls of distinct payloads on the honest client: each reply byte-exact.
fn honest_echoes(r: &Rig, n: usize, what: &str) {
    for i in 0..n {
        let data: Vec<u8> = (0..1500).map(|k| (k * 7 + i * 31) as u8).collect();
        let mut a = r.honest.args().expect("args");
        a.put_opaque(&data).unwrap();
        let rep = r
            .honest
            .call_blocking(Proc::new(PROG, 2, ECHO), a)
            .unwrap_or_else(|e| panic!("{what}: echo {i}: {e:?}"));
        assert_eq!(word(rep.results(), 0), Some(1500), "{what}");
        assert_eq!(
            &rep.results()[4..1504],
            &data[..],
            "{what}: echo {i} altered"
        );
    }
}

/// Guessed keys against the server's memory on a device with memory windows (issue 13 §2.2,
/// §3): the Read-Write model never exposes responder memory (RFC 8166 §3.5: the responder
/// reads and writes the requester's chunks, never the reverse), so no key — the pools' exact
/// keys at their exact addresses, the next key, a flipped key byte, a neighbouring entry, the
/// peer's own lkey used as an rkey — reaches any server memory: every RDMA Read and Write
/// fails REM_ACCESS_ERR and ends only that connection, nothing is read, and no honest reply
/// is altered.
fn rejects_guessed_keys_against_server_memory(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    honest_echoes(&r, 8, "before");
    let live = liveness(&r.honest);
    assert_eq!(attack_server_memory(&r), 0, "server memory reachable");
    live.finish("guessed keys");
    honest_echoes(&r, 8, "after");
    assert!(!server_memory_marked(&r), "server memory written");
    r.stop();
}

/// The same attack on devices without memory windows (siw; issue 13 §2.2): a serving
/// endpoint registers its pools without remote rights there too (before the fix they carried
/// REMOTE_READ|REMOTE_WRITE for the client role, and a connected peer read and wrote them).
fn rejects_guessed_keys_against_server_memory_without_memory_windows(rx: Receives) {
    let mut dev = SoftConfig::default();
    dev.caps.mw_type2 = false;
    dev.caps.send_with_invalidate = false;
    let r = rig_on_in(ServerOptions::default(), &dev, rx);
    honest_echoes(&r, 8, "before");
    let breaches = attack_server_memory(&r);
    honest_echoes(&r, 8, "after");
    assert!(!server_memory_marked(&r), "server memory written");
    assert_eq!(breaches, 0, "server memory reachable");
    r.stop();
}

/// Send With Invalidate from a requester naming a key (InfiniBand verbs: the responder invalidates
/// only a memory window bound to this QP — or a region, on siw, see below — otherwise the
/// Send is a Remote Invalid Request error at both ends): naming the server pools' keys, a
/// neighbour, its own keys, or nonsense, each a valid SUM call, ends that connection alone
/// (the requester's Send completes REM_INV_REQ_ERR) and leaves every server key working (the
/// honest client is served byte-exact afterwards). docs/rdma-provider.md 2.4: siw instead
/// invalidates any STag of the receiver's PD, registered regions included — on siw a hostile
/// requester could invalidate the server's local keys; the soft provider follows IB.
fn rejects_send_with_invalidate_naming_server_keys(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    let live = liveness(&r.honest);
    let own = {
        let p = r.peer();
        let k = p.own_keys();
        r.close(p, "key probe");
        k
    };
    let mut keys: Vec<u32> = server_pools(&r)
        .into_iter()
        .flat_map(|(_, _, _, k)| guesses(k, &own))
        .collect();
    keys.extend([0, 0xffff_ffff, 0x1234_5678]);
    keys.sort_unstable();
    keys.dedup();
    for (i, key) in keys.into_iter().enumerate() {
        let mut p = r.peer();
        let w = p.send_with_inv(&sum_v1(0xc000 + i as u32, 1, 1), key);
        assert_eq!(
            p.wait_send(w).status,
            WcStatus::REM_INV_REQ_ERR,
            "Send With Invalidate of {key:#x}"
        );
        assert!(p.wait_down());
        r.close(p, "send with invalidate");
    }
    live.finish("send with invalidate");
    honest_echoes(&r, 8, "after send with invalidate");
    r.stop();
}

/// Chunks whose handles reach nothing (RFC 8166 §3.4: the responder uses the requester's
/// handles as given): the server's RDMA Read of a Position Zero Read chunk, its RDMA Write
/// of a DDP result into a Write chunk, and its Write of a long reply into a Reply chunk fail
/// with a remote access error, which ends that connection (verbs) and only that one; the
/// honest client is not disturbed.
fn rejects_chunks_with_dead_handles_by_losing_only_that_connection(rx: Receives) {
    let r = rig_in(ServerOptions::default(), rx);
    let live = liveness(&r.honest);
    let dead = |n: u32| Segment::new(0xdead_0000 | n, 4096, 0x10_0000);
    let x = 0xd001;
    let pz = [ReadSegment::new(0, Segment::new(0xdead_0001, 96, 0x1000))];
    let nomsg = {
        let m = v1::Message {
            xid: x,
            credits: 1,
            body: v1::MessageBody::Nomsg(ChunkListsRef {
                reads: &pz,
                writes: &[],
                reply: None,
            }),
        };
        let mut out = vec![0u8; v1::encoded_len(&m)];
        v1::encode(&m, &mut out).unwrap();
        out
    };
    let ws = [dead(2)];
    let wl: [&[Segment]; 1] = [&ws];
    let fill_ddp = v1_msg(
        0xd002,
        1,
        ChunkListsRef {
            reads: &[],
            writes: &wl,
            reply: None,
        },
        &rpc_call(0xd002, PROG, 2, FILL, &words(&[3000, 0x5a])),
    );
    let rs = [dead(3), dead(4)];
    let fill_long = v1_msg(
        0xd003,
        1,
        ChunkListsRef {
            reads: &[],
            writes: &[],
            reply: Some(&rs),
        },
        &rpc_call(0xd003, PROG, 2, ECHO, &{
            let mut a = words(&[3000]);
            a.extend([0x33; 3000]);
            a
        }),
    );
    for (name, msg) in [
        ("Position Zero Read chunk", nomsg),
        ("Write chunk", fill_ddp),
        ("Reply chunk", fill_long),
    ] {
        let mut p = r.peer_with(
            &pd_v1(4096, 1024),
            RawOpts {
                recvs: 8,
                recv_size: 1024,
                rnr_retry: 0,
            },
        );
        p.send(&msg);
        assert!(
            p.wait_down(),
            "{name}: the server's RDMA op ends the connection"
        );
        match p.recv(Duration::from_millis(50)) {
            Err(RecvEnd::Flushed(WcStatus::WR_FLUSH_ERR)) => {}
            other => panic!("{name}: no reply may arrive, got {other:?}"),
        }
        r.close(p, name);
    }
    live.finish("dead handles");
    r.stop();
}

in_both_receive_modes!(
    rejects_credit_overruns_by_cutting_off_the_violator_alone,
    accepts_duplicate_xids_and_hostile_credit_requests_without_disturbance,
    rejects_lying_rfc_8797_sizes_within_that_connection,
    rejects_stray_and_duplicate_backward_replies,
    rejects_guessed_keys_against_server_memory,
    rejects_guessed_keys_against_server_memory_without_memory_windows,
    rejects_send_with_invalidate_naming_server_keys,
    rejects_chunks_with_dead_handles_by_losing_only_that_connection,
);
