//! Connection engine: a call that fails after it took a call slot and a memory window gives
//! both back (the requester builds a new call in its slot; undoing it must leave the slot free
//! and as it was, and the window unbound).

mod common;

use common::*;
use rpcrdma_engine::conn::{
    CallSpec, Config, Event, LocalBuf, ReplyKind, ReplySpec, StagMode, StartError,
};

/// The Send of a call cannot be built when a message part past the SGE limit (copied after
/// the header) is unreachable: `BadSpec`, nothing posted, and the slot and the window bound
/// for its Reply chunk are given back — afterwards as many calls as there are credits (every
/// call slot), each offering a Reply chunk, are outstanding at once and all complete.
#[test]
fn rejects_unreachable_copied_part_giving_back_slot_and_window() {
    let mut cfg = Config::DEFAULT;
    cfg.max_send_sge = 1;
    assert_eq!(cfg.stag, StagMode::MemoryWindows);
    let mut p = Pair::new(cfg, Config::DEFAULT);
    let reply_bufs: Vec<LocalBuf> = (0..cfg.credits)
        .map(|_| p.req.host.alloc(4096, EXPOSE))
        .collect();
    // One round trip first: the responder's grant lets every slot be used.
    round_trip(&mut p, 1, reply_bufs[0]);
    let msg = p.req.host.buf_with(&rpc_call(2, 0, &[0; 16]), LW);
    let gone = LocalBuf::new(0xdead_0000, 16, msg.lkey);
    let before = p.stats;
    let r = p.try_call(&CallSpec {
        message: &[msg, gone],
        ddp: &[],
        receptacles: &[],
        reply: reply_bufs[0],
    });
    assert_eq!(r, Err(StartError::BadSpec));
    assert_eq!(p.stats.sends, before.sends, "nothing sent");
    assert_eq!(p.stats.binds, before.binds, "nothing bound");
    let mut ids = Vec::new();
    for (k, &reply) in reply_bufs.iter().enumerate() {
        let xid = 10 + k as u32;
        let msg = p.req.host.buf_with(&rpc_call(xid, 0, &[0; 16]), LW);
        let spec = CallSpec {
            message: &[msg],
            ddp: &[],
            receptacles: &[],
            reply,
        };
        ids.push((
            p.try_call(&spec).expect("a free slot for every credit"),
            xid,
        ));
    }
    for _ in 0..ids.len() {
        let inc = p.next_call().expect("CallReady");
        assert!(inc.reply_capacity.is_some(), "a Reply chunk is offered");
        answer(&mut p, inc.call, inc.xid);
    }
    let mut done: Vec<_> = (0..ids.len())
        .map(|_| {
            let r = p.next_reply();
            (r.call, r.xid)
        })
        .collect();
    done.sort_by_key(|&(_, xid)| xid);
    assert_eq!(done, ids);
    assert_eq!(
        p.stats.binds - before.binds,
        u64::from(cfg.credits),
        "one window per call"
    );
    assert!(!p
        .req
        .events
        .iter()
        .any(|e| matches!(e, Event::CallFailed { .. })));
    assert_eq!(p.stats.errors, 0);
}

/// One call of `xid` with the reply buffer `reply`, answered with an empty inline reply.
fn round_trip(p: &mut Pair, xid: u32, reply: LocalBuf) {
    let msg = p.req.host.buf_with(&rpc_call(xid, 0, &[0; 16]), LW);
    let id = p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply,
    });
    let inc = p.next_call().expect("CallReady");
    answer(p, inc.call, xid);
    let r = p.next_reply();
    assert_eq!((r.call, r.xid), (id, xid));
}

/// Answers call `call` (`xid`) with an empty inline reply.
fn answer(p: &mut Pair, call: rpcrdma_engine::conn::CallId, xid: u32) {
    let rmsg = p.resp.host.buf_with(&rpc_reply(xid, &[]), LW);
    let kind = p.reply(
        call,
        &ReplySpec {
            message: &[rmsg],
            results: &[],
        },
    );
    assert_eq!(kind, ReplyKind::Inline);
}
