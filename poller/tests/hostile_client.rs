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
    if c.call(PROG, 2, 1, a, cb(i, 1000 + i as u32, tally, tx))
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
