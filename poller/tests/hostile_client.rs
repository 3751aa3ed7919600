//! Hostile servers against the real `Client` (issue 13 §3, client side): a raw soft-provider
//! server (`hostile_srv`) accepts the client's connections, decodes its calls and answers with
//! hand-built messages, and tries RDMA Reads and Writes with STags it should no longer (or
//! never) hold: keys of finished calls (after the reply, a timeout, an error reply), guessed
//! keys, keys of another connection, writes into Read chunks and reads beyond Write chunks;
//! it sends unknown and duplicate replies and Send With Invalidate naming foreign STags.
//!
//! Each case asserts what verbs and the specs prescribe — the access fails with
//! `REM_ACCESS_ERR`, the client's memory is unchanged, the client reconnects and later calls
//! complete — and that every call completes exactly once (`Tally`). Normal operation of the
//! client is the positive control in every case: while a call runs, its STags do work.

mod api_common;
mod hostile_srv;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use api_common::Tally;
use hostile_srv::*;
use rpcrdma_engine::proto::chunks::Segment;
use rpcrdma_engine::verbs::{inc_rkey, WcStatus};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{Client, ClientError, ClientOptions, Reply};

/// Which STag of a call a case looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A Write chunk (receptacle).
    Write,
    /// The Reply chunk.
    Reply,
    /// A Read chunk (DDP argument).
    Read,
}

/// How a call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    Reply,
    Timeout,
    Error,
}

const DDP_LEN: usize = 256;
const WRITE_LEN: usize = 64;

/// The callback of call `i`: records in `tally` (result word `want`) and forwards.
fn cb(
    i: usize,
    want: u32,
    tally: &Arc<Tally>,
    tx: &mpsc::Sender<Outcome>,
) -> impl FnOnce(Result<Reply, ClientError>) + Send + 'static {
    let t = Arc::clone(tally);
    let f = to_chan(i, tx);
    move |r| {
        t.record(i, &r, want);
        f(r)
    }
}

/// Starts call `i` offering a Reply chunk and, for `Write` / `Read`, a Write chunk / a Read
/// chunk of [`DDP_LEN`] octets of `0x40 + i`.
fn start(c: &Client, kind: Kind, i: usize, tally: &Arc<Tally>, tx: &mpsc::Sender<Outcome>) {
    let mut a = c.args().expect("args");
    a.put_u32(i as u32).unwrap();
    match kind {
        Kind::Write => a.receptacle(c.buffer().expect("buf")).unwrap(),
        Kind::Read => {
            let mut b = c.buffer().expect("buf");
            b[..DDP_LEN].fill(0x40 + i as u8);
            a.put_u32(DDP_LEN as u32).unwrap();
            a.ddp(b, DDP_LEN).unwrap();
        }
        Kind::Reply => {}
    }
    if c.call(Proc::new(PROG, 2, 1), a, cb(i, 1000 + i as u32, tally, tx))
        .is_err()
    {
        panic!("call {i} refused");
    }
}

/// The STag of `kind` in `call`.
fn stag_of(call: &Call, kind: Kind) -> (u32, u64, u32) {
    let want = match kind {
        Kind::Write => 'w',
        Kind::Reply => 'p',
        Kind::Read => 'r',
    };
    let s = call
        .stags()
        .into_iter()
        .find(|s| s.3 == want)
        .unwrap_or_else(|| panic!("call offers no {kind:?} STag: {:?}", call.stags()));
    (s.0, s.1, s.2)
}

/// Uses the call's STags as the client meant (the positive control), then answers it with
/// result word `1000 + i`: Write chunk filled with `0xc0 + i`, the reply through the Reply chunk
/// for `Kind::Reply`, inline otherwise.
fn serve(conn: &mut RawConn, call: &Call, kind: Kind, i: usize) {
    serve_c(conn, call, kind, i, 16)
}

/// As [`serve`], granting `credits`.
fn serve_c(conn: &mut RawConn, call: &Call, kind: Kind, i: usize, credits: u32) {
    let want = (1000 + i as u32).to_be_bytes();
    let rpc = rpc_reply(call.xid, &want);
    let mut echo: Vec<Vec<Segment>> = call
        .writes
        .iter()
        .map(|w| {
            w.iter()
                .map(|s| Segment::new(s.handle, 0, s.offset))
                .collect()
        })
        .collect();
    if let Some(w) = call.writes.first() {
        let s = w[0];
        let st = conn.write(s.handle, s.offset, &[0xc0 + i as u8; WRITE_LEN]);
        assert_eq!(st, WcStatus::SUCCESS, "write into a live Write chunk");
        echo[0][0].length = WRITE_LEN as u32;
    }
    for r in &call.reads {
        let (st, data) = conn.read(r.target.handle, r.target.offset, r.target.length as usize);
        assert_eq!(st, WcStatus::SUCCESS, "read of a live Read chunk");
        assert!(data.iter().all(|&b| b == 0x40 + i as u8), "Read chunk data");
    }
    let refs: Vec<&[Segment]> = echo.iter().map(|v| &v[..]).collect();
    if kind == Kind::Reply {
        let rs = call.reply.as_ref().expect("a Reply chunk")[0];
        assert_eq!(conn.write(rs.handle, rs.offset, &rpc), WcStatus::SUCCESS);
        let seg = [Segment::new(rs.handle, rpc.len() as u32, rs.offset)];
        assert_eq!(
            conn.send(&v1_nomsg_reply(call.xid, credits, &seg)),
            WcStatus::SUCCESS
        );
    } else {
        assert_eq!(
            conn.send(&v1_msg(call.xid, credits, &refs, &rpc)),
            WcStatus::SUCCESS
        );
    }
}

/// Probes `stag` with the operation it granted while live (Write for Write / Reply chunks,
/// Read for Read chunks); returns the status and, for a Read, what arrived.
fn probe(conn: &mut RawConn, kind: Kind, stag: (u32, u64, u32)) -> (WcStatus, Vec<u8>) {
    match kind {
        Kind::Read => conn.read(stag.0, stag.1, stag.2 as usize),
        _ => (conn.write(stag.0, stag.1, &[0xee; 32]), Vec::new()),
    }
}

/// Asserts a hostile access failed as verbs prescribe and nothing came back.
fn assert_refused(st: WcStatus, data: &[u8], what: &str) {
    assert_eq!(st, WcStatus::REM_ACCESS_ERR, "{what}: {}", st.name());
    assert!(
        data.iter().all(|&b| b == 0xa5),
        "{what}: client data reached the server"
    );
}

/// After a hostile access killed the connection: the client reconnects, and a later call
/// completes normally on the new connection. Returns the new connection.
fn later_call_fine(
    srv: &mut RawServer,
    c: &Client,
    i: usize,
    tally: &Arc<Tally>,
    tx: &mpsc::Sender<Outcome>,
    rx: &mpsc::Receiver<Outcome>,
) -> RawConn {
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    call_fine(&mut conn, c, i, tally, tx, rx);
    conn
}

/// A Write-chunk call `i` completes normally on `conn`.
fn call_fine(
    conn: &mut RawConn,
    c: &Client,
    i: usize,
    tally: &Arc<Tally>,
    tx: &mpsc::Sender<Outcome>,
    rx: &mpsc::Receiver<Outcome>,
) {
    start(c, Kind::Write, i, tally, tx);
    let call = conn.recv_call();
    serve(conn, &call, Kind::Write, i);
    let (j, r) = next_outcome(rx);
    assert_eq!(j, i);
    let rep = r.expect("the later call succeeds");
    assert_eq!(rep.results(), (1000 + i as u32).to_be_bytes());
    assert_eq!(rep.receptacle(0), Some(&[0xc0 + i as u8; WRITE_LEN][..]));
}

/// One round per STag kind: a call ends as `finish`, then the raw server uses the call's
/// STag of that kind again. Verbs: the window was invalidated before the completion was
/// reported, so the access fails with `REM_ACCESS_ERR` (and the QP goes down); the client's
/// buffers still held in the `Reply` are unchanged; the client reconnects and a later call
/// completes; every call completes exactly once.
fn stale_round(finish: Finish) {
    let w = HWorld::new();
    let mut srv = w.listen();
    let o = ClientOptions {
        call_timeout_ms: if finish == Finish::Timeout { 300 } else { 0 },
        ..opts()
    };
    let c = w.client(&srv, o);
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let kinds = [Kind::Write, Kind::Reply, Kind::Read];
    let n = kinds.len() * 2;
    let tally = Tally::new(n);
    let (tx, rx) = mpsc::channel();
    let mut next = 0usize;
    for kind in kinds {
        let i = next;
        next += 1;
        start(&c, kind, i, &tally, &tx);
        let call = conn.recv_call();
        let stag = stag_of(&call, kind);
        let held = match finish {
            Finish::Reply => {
                serve(&mut conn, &call, kind, i);
                let (j, r) = next_outcome(&rx);
                assert_eq!(j, i);
                Some(r.expect("reply"))
            }
            Finish::Timeout => {
                // The live STag works (positive control), then no answer.
                let (st, _) = probe(&mut conn, kind, stag);
                assert_eq!(
                    st,
                    WcStatus::SUCCESS,
                    "{kind:?} STag live before the timeout"
                );
                let (j, r) = next_outcome(&rx);
                assert_eq!((j, r.err()), (i, Some(ClientError::TimedOut)));
                None
            }
            Finish::Error => {
                let (st, _) = probe(&mut conn, kind, stag);
                assert_eq!(st, WcStatus::SUCCESS, "{kind:?} STag live before the error");
                assert_eq!(conn.send(&v1_err_chunk(call.xid, 16)), WcStatus::SUCCESS);
                let (j, r) = next_outcome(&rx);
                assert_eq!(j, i);
                assert!(
                    matches!(r, Err(ClientError::Transport(_))),
                    "ERR_CHUNK fails the call: {:?}",
                    r.map(|x| x.xid())
                );
                None
            }
        };
        let before: Option<(Vec<u8>, Option<Vec<u8>>)> = held
            .as_ref()
            .map(|r| (r.results().to_vec(), r.receptacle(0).map(<[u8]>::to_vec)));
        let (st, data) = probe(&mut conn, kind, stag);
        assert_refused(st, &data, &format!("{kind:?} STag after {finish:?}"));
        if let (Some(r), Some((res, rec))) = (&held, &before) {
            assert_eq!(r.results(), &res[..], "reply buffer changed");
            assert_eq!(
                r.receptacle(0).map(<[u8]>::to_vec),
                *rec,
                "receptacle changed"
            );
        }
        drop(held);
        let i = next;
        next += 1;
        conn = later_call_fine(&mut srv, &c, i, &tally, &tx, &rx);
    }
    no_outcome(&rx, Duration::from_millis(50));
    tally.exactly_once();
    assert_eq!(tally.done(), n as u64);
    drop(conn);
    c.close();
    w.stop();
}

/// RFC 8166 §3.4.5 / verbs: a Write, Reply or Read chunk STag used after its call's reply
/// was received fails (`REM_ACCESS_ERR`); the client's reply and receptacle are unchanged.
#[test]
fn rejects_stale_stags_after_the_reply() {
    stale_round(Finish::Reply);
}

/// A call that timed out had its STags invalidated before it was reported: a late RDMA access
/// through them fails.
#[test]
fn rejects_stale_stags_after_a_timeout() {
    stale_round(Finish::Timeout);
}

/// A call failed by an RDMA_ERROR (ERR_CHUNK) had its STags invalidated before it was
/// reported: an RDMA access through them fails.
#[test]
fn rejects_stale_stags_after_an_error_reply() {
    stale_round(Finish::Error);
}

/// Guessed keys, one per connection (each refused access ends it): the next key of a live
/// window (`ibv_inc_rkey`), the live key with its key byte flipped, the raw server's own lkey
/// used as an rkey, and the live key of another call in flight aimed at this call's memory.
/// All fail with `REM_ACCESS_ERR`; the calls in flight are sent again on the new connection
/// and complete exactly once.
#[test]
fn rejects_guessed_keys() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let c = w.client(&srv, opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let guesses = 4usize;
    let tally = Tally::new(guesses + 2);
    let (tx, rx) = mpsc::channel();
    // A first call completes: the grant rises above one credit.
    start(&c, Kind::Reply, guesses + 1, &tally, &tx);
    let call = conn.recv_call();
    serve(&mut conn, &call, Kind::Reply, guesses + 1);
    next_outcome(&rx).1.expect("first call");
    for g in 0..guesses {
        let (a, b) = (g, guesses);
        start(&c, Kind::Write, a, &tally, &tx);
        let ca = conn.recv_call();
        // (The grant may be one on a new connection: B goes once A is answered there.)
        let (ka, oa, _) = stag_of(&ca, Kind::Write);
        let (key, addr, what) = match g {
            0 => (inc_rkey(ka), oa, "the next key"),
            1 => (ka ^ 0x5a, oa, "a flipped key byte"),
            2 => (conn.own_lkey(), oa, "the server's own lkey"),
            _ => {
                start(&c, Kind::Read, b, &tally, &tx);
                // Needs two credits: granted by the first reply (16).
                let cb_ = conn.recv_call();
                let (kb, _, _) = stag_of(&cb_, Kind::Read);
                // B's key (live, read-only, B's memory) aimed at A's Write chunk.
                (kb, oa, "another call's live key")
            }
        };
        let st = conn.write(key, addr, &[0xee; 32]);
        assert_eq!(st, WcStatus::REM_ACCESS_ERR, "{what}: {}", st.name());
        // The calls in flight are sent again on the next connection.
        conn = srv.accept(&pdata(true, 4096, 4096), 4096);
        let mut open = if g == 3 { vec![a, b] } else { vec![a] };
        while !open.is_empty() {
            let call = conn.recv_call();
            let i = word(&call.rpc, 10) as usize;
            let kind = if call.writes.is_empty() {
                Kind::Read
            } else {
                Kind::Write
            };
            serve(&mut conn, &call, kind, i);
            let (j, r) = next_outcome(&rx);
            let rep = r.expect("resent call succeeds");
            if kind == Kind::Write {
                assert_eq!(rep.receptacle(0), Some(&[0xc0 + j as u8; WRITE_LEN][..]));
            }
            open.retain(|&x| x != j);
        }
    }
    no_outcome(&rx, Duration::from_millis(50));
    tally.exactly_once();
    drop(conn);
    c.close();
    w.stop();
}

/// The kind a call was started with (see [`start`]) and its index (first argument word).
fn kind_and_index(call: &Call) -> (Kind, usize) {
    let kind = if !call.writes.is_empty() {
        Kind::Write
    } else if !call.reads.is_empty() {
        Kind::Read
    } else {
        Kind::Reply
    };
    (kind, word(&call.rpc, 10) as usize)
}

/// Serves calls as they arrive until `n` outcomes are in; returns them by index.
fn serve_all(
    conn: &mut RawConn,
    rx: &mpsc::Receiver<Outcome>,
    n: usize,
    credits: u32,
) -> Vec<(usize, Result<Reply, ClientError>)> {
    let mut out = Vec::new();
    while out.len() < n {
        if let Ok(o) = rx.try_recv() {
            out.push(o);
            continue;
        }
        if let Some(m) = conn.recv_within(Duration::from_millis(2)) {
            let call = decode_call(&m.bytes).expect("a call");
            let (kind, i) = kind_and_index(&call);
            serve_c(conn, &call, kind, i, credits);
        }
    }
    out
}

/// Two raw servers, one client endpoint with a connection to each. Server A uses the live
/// Write-chunk STag of a call sent to server B: memory windows are bound to one QP (type 2),
/// so the access fails with `REM_ACCESS_ERR` and only connection A goes down. B's call is
/// untouched (its receptacle holds what B wrote), A reconnects and serves a later call.
#[test]
fn rejects_stags_of_another_connection() {
    let w = HWorld::new();
    let mut sa = w.listen();
    let mut sb = w.listen();
    let ca = w.client(&sa, opts());
    let cb_ = w.client(&sb, opts());
    let mut conn_a = sa.accept(&pdata(true, 4096, 4096), 4096);
    let mut conn_b = sb.accept(&pdata(true, 4096, 4096), 4096);
    let tally = Tally::new(3);
    let (tx, rx) = mpsc::channel();
    for (i, kind) in [(0usize, Kind::Write), (1, Kind::Reply)] {
        start(&cb_, kind, i, &tally, &tx);
        let call = conn_b.recv_call();
        let (k, off, _) = stag_of(&call, kind);
        let st = conn_a.write(k, off, &[0xee; 32]);
        assert_eq!(st, WcStatus::REM_ACCESS_ERR, "{kind:?} STag of B used by A");
        serve(&mut conn_b, &call, kind, i);
        let (j, r) = next_outcome(&rx);
        let rep = r.expect("B's call is unaffected");
        assert_eq!(j, i);
        if kind == Kind::Write {
            assert_eq!(rep.receptacle(0), Some(&[0xc0 + i as u8; WRITE_LEN][..]));
        }
        conn_a = sa.accept(&pdata(true, 4096, 4096), 4096);
    }
    call_fine(&mut conn_a, &ca, 2, &tally, &tx, &rx);
    drop(conn_a);
    no_outcome(&rx, Duration::from_millis(50));
    tally.exactly_once();
    ca.close();
    cb_.close();
    w.stop();
}

/// A Read chunk is exposed read-only and a Write chunk write-only, each exactly over its
/// buffer (RFC 8166 §3.4.5: the requester exposes what the chunk describes). A write into a
/// live Read chunk, a read of a live Write chunk, a write past a Write chunk's end and a read
/// past a Read chunk's end all fail with `REM_ACCESS_ERR`; the call is sent again on the new
/// connection and completes once with the right data.
#[test]
fn rejects_writes_into_read_chunks_and_access_beyond_chunks() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let c = w.client(&srv, opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let cases = 4usize;
    let tally = Tally::new(cases);
    let (tx, rx) = mpsc::channel();
    for i in 0..cases {
        let kind = if i % 2 == 0 { Kind::Read } else { Kind::Write };
        start(&c, kind, i, &tally, &tx);
        let call = conn.recv_call();
        let (k, off, len) = stag_of(&call, kind);
        let (st, data, what) = match i {
            0 => (
                conn.write(k, off, &[0xee; 32]),
                vec![],
                "write into a Read chunk",
            ),
            1 => {
                let (st, d) = conn.read(k, off, 32);
                (st, d, "read of a Write chunk")
            }
            2 => {
                let (st, d) = conn.read(k, off, len as usize + 1);
                (st, d, "read past a Read chunk's end")
            }
            _ => (
                conn.write(k, off + u64::from(len) - 8, &[0xee; 32]),
                vec![],
                "write past a Write chunk's end",
            ),
        };
        assert_refused(st, &data, what);
        conn = srv.accept(&pdata(true, 4096, 4096), 4096);
        let call = conn.recv_call();
        assert_eq!(kind_and_index(&call), (kind, i), "the call is sent again");
        serve(&mut conn, &call, kind, i);
        let (j, r) = next_outcome(&rx);
        let rep = r.expect("resent call succeeds");
        assert_eq!(
            (j, rep.results()),
            (i, &(1000 + i as u32).to_be_bytes()[..])
        );
        if kind == Kind::Write {
            assert_eq!(rep.receptacle(0), Some(&[0xc0 + i as u8; WRITE_LEN][..]));
        }
    }
    no_outcome(&rx, Duration::from_millis(50));
    tally.all_ok_exactly_once(cases, "chunk rights");
    drop(conn);
    c.close();
    w.stop();
}

/// A reply with an unknown XID and a second reply to a completed XID are dropped (RFC 8166
/// §4.2.1 and implementation experience: a reply matching no outstanding call is discarded):
/// no callback runs twice, and the duplicate does not free a credit — with a grant of 4 the
/// server sees exactly 4 calls outstanding afterwards, never a fifth.
#[test]
fn accepts_unknown_and_duplicate_replies_dropped() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let c = w.client(&srv, opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let n = 9usize;
    let tally = Tally::new(n);
    let (tx, rx) = mpsc::channel();
    start(&c, Kind::Reply, 0, &tally, &tx);
    let call = conn.recv_call();
    let stray = v1_msg(
        call.xid ^ 0x5a5a_0000,
        4,
        &[],
        &rpc_reply(call.xid ^ 0x5a5a_0000, &[0; 4]),
    );
    assert_eq!(conn.send(&stray), WcStatus::SUCCESS);
    no_outcome(&rx, Duration::from_millis(100));
    let dup = v1_msg(
        call.xid,
        4,
        &[],
        &rpc_reply(call.xid, &1000u32.to_be_bytes()),
    );
    serve_c(&mut conn, &call, Kind::Reply, 0, 4);
    let (j, r) = next_outcome(&rx);
    assert_eq!(j, 0);
    r.expect("the real reply");
    // The same reply again, twice.
    assert_eq!(conn.send(&dup), WcStatus::SUCCESS);
    assert_eq!(conn.send(&dup), WcStatus::SUCCESS);
    no_outcome(&rx, Duration::from_millis(100));
    for i in 1..n {
        start(&c, Kind::Write, i, &tally, &tx);
    }
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(conn.recv_call());
    }
    // The grant is 4: no fifth call while four are outstanding.
    conn.expect_silence(Duration::from_millis(200));
    for call in &held {
        let (kind, i) = kind_and_index(call);
        serve_c(&mut conn, call, kind, i, 4);
    }
    let outs = serve_all(&mut conn, &rx, n - 1, 4);
    assert!(outs.iter().all(|(_, r)| r.is_ok()));
    no_outcome(&rx, Duration::from_millis(50));
    tally.all_ok_exactly_once(n, "unknown and duplicate replies");
    drop(conn);
    c.close();
    w.stop();
}

/// RFC 8797 §4.1: "Each RDMA Send with Invalidate MUST invalidate an STag associated only with
/// the XID in the rdma_xid field". A server answers call A with Send With Invalidate naming the
/// Write-chunk STag of call B, in flight on the same connection. The client checks the
/// invalidated STag (it is not A's): A completes with its data and its own window is still
/// invalidated by the client (a later access through it fails); B's window is dead, so B cannot
/// be answered through it on this connection — it is sent again on the new connection and
/// completes exactly once.
#[test]
fn rejects_send_with_invalidate_of_another_calls_stag() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let c = w.client(&srv, opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let tally = Tally::new(3);
    let (tx, rx) = mpsc::channel();
    call_fine(&mut conn, &c, 2, &tally, &tx, &rx);
    start(&c, Kind::Write, 0, &tally, &tx);
    start(&c, Kind::Write, 1, &tally, &tx);
    let ca = conn.recv_call();
    let cb_ = conn.recv_call();
    let (ka, oa, _) = stag_of(&ca, Kind::Write);
    let (kb, ob, _) = stag_of(&cb_, Kind::Write);
    let (ia, ib) = (kind_and_index(&ca).1, kind_and_index(&cb_).1);
    assert_eq!(
        conn.write(ka, oa, &[0xc0 + ia as u8; WRITE_LEN]),
        WcStatus::SUCCESS
    );
    let seg = [Segment::new(ka, WRITE_LEN as u32, oa)];
    let rpc = rpc_reply(ca.xid, &(1000 + ia as u32).to_be_bytes());
    assert_eq!(
        conn.send_inv(&v1_msg(ca.xid, 16, &[&seg], &rpc), kb),
        WcStatus::SUCCESS
    );
    let (j, r) = next_outcome(&rx);
    assert_eq!(j, ia);
    let rep = r.expect("A completes");
    assert_eq!(rep.receptacle(0), Some(&[0xc0 + ia as u8; WRITE_LEN][..]));
    // A's window was invalidated by the client despite the foreign invalidation.
    assert_refused(conn.write(ka, oa, &[0xee; 8]), &[], "A's STag after A");
    drop(rep);
    // B goes again on the next connection (its window on the old one was dead anyway).
    let _ = ob;
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let call = conn.recv_call();
    assert_eq!(kind_and_index(&call), (Kind::Write, ib));
    serve(&mut conn, &call, Kind::Write, ib);
    let (j, r) = next_outcome(&rx);
    assert_eq!(j, ib);
    assert_eq!(
        r.expect("B completes").receptacle(0),
        Some(&[0xc0 + ib as u8; WRITE_LEN][..])
    );
    no_outcome(&rx, Duration::from_millis(50));
    tally.all_ok_exactly_once(3, "foreign invalidation");
    drop(conn);
    c.close();
    w.stop();
}

/// Send With Invalidate naming an STag of another connection: a type-2 window can be
/// invalidated only through the QP it is bound to, so the client's receive completes in error
/// and connection A goes down (verbs); connection B's window stays live — B's call is answered
/// through it — and A's call is sent again and completes once.
#[test]
fn rejects_send_with_invalidate_of_another_connections_stag() {
    let w = HWorld::new();
    let mut sa = w.listen();
    let mut sb = w.listen();
    let ca = w.client(&sa, opts());
    let cb_ = w.client(&sb, opts());
    let mut conn_a = sa.accept(&pdata(true, 4096, 4096), 4096);
    let mut conn_b = sb.accept(&pdata(true, 4096, 4096), 4096);
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    start(&ca, Kind::Write, 0, &tally, &tx);
    start(&cb_, Kind::Write, 1, &tally, &tx);
    let call_a = conn_a.recv_call();
    let call_b = conn_b.recv_call();
    let (kb, _, _) = stag_of(&call_b, Kind::Write);
    let rpc = rpc_reply(call_a.xid, &1000u32.to_be_bytes());
    let echo = [Segment::new(stag_of(&call_a, Kind::Write).0, 0, 0)];
    // The Send itself may complete before or after the receiver's error is noticed.
    let _ = conn_a.send_inv(&v1_msg(call_a.xid, 16, &[&echo], &rpc), kb);
    no_outcome(&rx, Duration::from_millis(100));
    serve(&mut conn_b, &call_b, Kind::Write, 1);
    let (j, r) = next_outcome(&rx);
    assert_eq!(j, 1);
    assert_eq!(
        r.expect("B unaffected").receptacle(0),
        Some(&[0xc1; WRITE_LEN][..])
    );
    let mut conn_a = sa.accept(&pdata(true, 4096, 4096), 4096);
    let call = conn_a.recv_call();
    assert_eq!(kind_and_index(&call), (Kind::Write, 0), "A sent again");
    serve(&mut conn_a, &call, Kind::Write, 0);
    let (j, r) = next_outcome(&rx);
    assert_eq!(j, 0);
    r.expect("A completes");
    no_outcome(&rx, Duration::from_millis(50));
    tally.all_ok_exactly_once(2, "foreign connection's invalidation");
    drop((conn_a, conn_b));
    ca.close();
    cb_.close();
    w.stop();
}

/// Starts `n` Reply-chunk calls from index `from`.
fn start_many(c: &Client, from: usize, n: usize, tally: &Arc<Tally>, tx: &mpsc::Sender<Outcome>) {
    for i in from..from + n {
        start(c, Kind::Reply, i, tally, tx);
    }
}

/// Receives exactly `n` calls, then nothing more within 200 ms (the grant is `n`).
fn exactly_outstanding(conn: &mut RawConn, n: usize) -> Vec<Call> {
    let calls: Vec<Call> = (0..n).map(|_| conn.recv_call()).collect();
    conn.expect_silence(Duration::from_millis(200));
    calls
}

/// RFC 8166 §3.3.1: a grant of 0 would deadlock, so it counts as 1; a grant above what the
/// requester asked for is clamped to its own maximum (16 here). With grant 0 the server sees
/// one call at a time; with grant 2^32-1 exactly 16 outstanding, never more.
#[test]
fn accepts_credit_grants_of_zero_and_huge_clamped() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let c = w.client(&srv, opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let n = 3 + 20;
    let tally = Tally::new(n);
    let (tx, rx) = mpsc::channel();
    start_many(&c, 0, 3, &tally, &tx);
    for _ in 0..3 {
        let calls = exactly_outstanding(&mut conn, 1);
        let (kind, i) = kind_and_index(&calls[0]);
        serve_c(&mut conn, &calls[0], kind, i, 0);
        next_outcome(&rx).1.expect("grant 0 call");
    }
    // Now a huge grant.
    start(&c, Kind::Reply, 3, &tally, &tx);
    let call = conn.recv_call();
    serve_c(&mut conn, &call, Kind::Reply, 3, u32::MAX);
    next_outcome(&rx).1.expect("huge grant call");
    start_many(&c, 4, 19, &tally, &tx);
    let held = exactly_outstanding(&mut conn, 16);
    for call in &held {
        let (kind, i) = kind_and_index(call);
        serve_c(&mut conn, call, kind, i, u32::MAX);
    }
    let outs = serve_all(&mut conn, &rx, 19, u32::MAX);
    assert!(outs.iter().all(|(_, r)| r.is_ok()));
    no_outcome(&rx, Duration::from_millis(50));
    tally.all_ok_exactly_once(n, "credit clamps");
    drop(conn);
    c.close();
    w.stop();
}

/// A storm of RDMA_ERROR messages (ERR_CHUNK, unknown XIDs, `rdma_credit` 1000): each is
/// dropped (no call has that XID), none changes the grant (v2 draft, "Protocol Version
/// Negotiation": the credit limit comes from non-error messages), the connection stays up, and
/// with the server's grant of 2 the client keeps exactly 2 calls outstanding afterwards.
#[test]
fn accepts_rdma_error_storm_without_effect() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let c = w.client(&srv, opts());
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    let n = 5;
    let tally = Tally::new(n);
    let (tx, rx) = mpsc::channel();
    start(&c, Kind::Reply, 0, &tally, &tx);
    let call = conn.recv_call();
    serve_c(&mut conn, &call, Kind::Reply, 0, 2);
    next_outcome(&rx).1.expect("first call");
    for burst in 0..20u32 {
        for k in 0..8u32 {
            let xid = 0xbad0_0000 | (burst << 8) | k;
            assert_eq!(conn.send(&v1_err_chunk(xid, 1000)), WcStatus::SUCCESS);
        }
        // The client reposts its receives (a storm past them would be a credit overrun).
        std::thread::sleep(Duration::from_millis(5));
    }
    no_outcome(&rx, Duration::from_millis(50));
    start_many(&c, 1, 4, &tally, &tx);
    let held = exactly_outstanding(&mut conn, 2);
    for call in &held {
        let (kind, i) = kind_and_index(call);
        serve_c(&mut conn, call, kind, i, 2);
    }
    let outs = serve_all(&mut conn, &rx, 4, 2);
    assert!(outs.iter().all(|(_, r)| r.is_ok()));
    assert_eq!(
        c.stats().snapshot().connection_losses,
        0,
        "stayed connected"
    );
    tally.all_ok_exactly_once(n, "error storm");
    drop(conn);
    c.close();
    w.stop();
}

/// A server that advertises (RFC 8797) a receive size of 256 KiB but posts 4 KiB receives: the
/// client's 8 KiB inline call overruns the receive, the raw receive fails and the connection
/// drops (verbs). The client sends the call again on each new connection up to
/// `max_retransmits`, then fails it once (`RetransmitsExhausted`). An honest server
/// advertising 4 KiB then gets the same call as a long message (RDMA_NOMSG with a Position
/// Zero Read chunk) and answers it.
#[test]
fn rejects_lying_receive_size_and_recovers_with_an_honest_one() {
    let w = HWorld::new();
    let mut srv = w.listen();
    let o = ClientOptions {
        inline_send: 16 * 1024,
        max_retransmits: 2,
        ..opts()
    };
    let c = w.client(&srv, o);
    let tally = Tally::new(2);
    let (tx, rx) = mpsc::channel();
    let big = |i: usize| {
        let mut a = c.args().expect("args");
        a.put_u32(i as u32).unwrap();
        a.put(&[0x77; 8000]).unwrap();
        a.expect_reply(64);
        a
    };
    let lie = pdata(true, 4096, 256 * 1024);
    let mut conn = srv.accept(&lie, 4096);
    c.call(Proc::new(PROG, 2, 1), big(0), cb(0, 1000, &tally, &tx))
        .unwrap_or_else(|_| panic!("call refused"));
    let m = conn.recv_within(WAIT).expect("the overrun");
    assert!(!m.status.is_success(), "an 8 KiB Send into 4 KiB");
    // Sent again on each of the next connections (max_retransmits = 2).
    for _ in 0..2 {
        let mut conn = srv.accept(&lie, 4096);
        let m = conn.recv_within(WAIT).expect("the overrun again");
        assert!(!m.status.is_success());
    }
    let (j, r) = next_outcome(&rx);
    assert_eq!((j, r.err()), (0, Some(ClientError::RetransmitsExhausted)));
    let mut conn = srv.accept(&pdata(true, 4096, 4096), 4096);
    c.call(Proc::new(PROG, 2, 1), big(1), cb(1, 1001, &tally, &tx))
        .unwrap_or_else(|_| panic!("call refused"));
    let call = conn.recv_call();
    assert!(call.nomsg && call.reads[0].position == 0, "a long call");
    let mut data = Vec::new();
    for r in call.reads.iter().filter(|r| r.position == 0) {
        let (st, d) = conn.read(r.target.handle, r.target.offset, r.target.length as usize);
        assert_eq!(st, WcStatus::SUCCESS);
        data.extend(d);
    }
    assert_eq!(word(&data, 10), 1, "the call's argument");
    assert_eq!(data.len(), 44 + 8000, "the whole RPC call");
    let rpc = rpc_reply(call.xid, &1001u32.to_be_bytes());
    assert_eq!(
        conn.send(&v1_msg(call.xid, 16, &[], &rpc)),
        WcStatus::SUCCESS
    );
    let (j, r) = next_outcome(&rx);
    assert_eq!(j, 1);
    r.expect("honest server");
    no_outcome(&rx, Duration::from_millis(50));
    tally.exactly_once();
    drop(conn);
    c.close();
    w.stop();
}
