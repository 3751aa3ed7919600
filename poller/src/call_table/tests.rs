//! Unit tests of the call table: exactly-once completion under reply / timeout / fail_all /
//! teardown races, late engine reports for reused slots, capacity, resend order, hand-over.

use std::sync::{Arc, Mutex};

use rpcrdma_engine::conn::{CallId, LocalBuf};
use rpcrdma_engine::verbs::soft::SoftEnv;
use rpcrdma_mempool::{HugePagePolicy, Pool, PoolBuf, PoolConfig};

use super::*;
use crate::memory::{registered_region, LOCAL_ACCESS};

/// Outcomes seen by the callbacks, by call tag.
type Seen = Arc<Mutex<Vec<(u32, Result<(), ClientError>)>>>;

#[derive(Default)]
struct TestSink {
    errors: u32,
    starts: u32,
    resends: u32,
    bufs_back: u32,
    inline: Vec<bool>,
}

impl CallSink for TestSink {
    fn get_buf(&mut self) -> Option<PoolBuf> {
        None
    }
    fn put_buf(&mut self, _b: PoolBuf) {
        self.bufs_back += 1;
    }
    fn count_error(&mut self) {
        self.errors += 1;
    }
    fn count_start(&mut self, _bytes: u64, resend: bool) {
        self.starts += 1;
        self.resends += u32::from(resend);
    }
    fn deliver(&mut self, cb: Callback, inline: bool, outcome: Result<Reply, ClientError>) {
        self.inline.push(inline);
        cb.call(outcome);
    }
}

struct Rig {
    pool: Pool,
    seen: Seen,
    table: CallTable,
    sink: TestSink,
}

fn rig(records: usize) -> Rig {
    let env = SoftEnv::new();
    let pd = env.client_pd();
    let r = registered_region(&pd, 64 * 1024, HugePagePolicy::Never, LOCAL_ACCESS).expect("r");
    let pool = Pool::new(&r, &PoolConfig::new(32, 256)).expect("pool");
    let headers: Vec<LocalBuf> = (0..records)
        .map(|i| {
            LocalBuf::new(
                0x1000 + u64::from(RPC_HEADER_SIZE) * i as u64,
                RPC_HEADER_SIZE,
                1,
            )
        })
        .collect();
    Rig {
        pool,
        seen: Arc::default(),
        table: CallTable::new(&headers),
        sink: TestSink::default(),
    }
}

impl Rig {
    fn call(&self, tag: u32, deadline: u64, reply: bool) -> NewCall {
        let seen = Arc::clone(&self.seen);
        NewCall {
            xid: 100 + tag,
            proc: crate::call::Proc::new(1, 1, tag),
            args: CallArgs::new(self.pool.get_buf().expect("buf")),
            reply: reply.then(|| self.pool.get_buf().expect("buf")),
            cb: Callback::new(move |r: Result<Reply, ClientError>| {
                seen.lock().unwrap().push((tag, r.map(|_| ())));
            }),
            inline_cb: false,
            deadline,
            sends: 0,
            cred: None,
        }
    }

    /// Takes `tag` into a record and queues it.
    fn queue(&mut self, tag: u32, deadline: u64) -> u32 {
        let c = self.call(tag, deadline, true);
        let i = self.table.alloc(c).expect("free record");
        self.table.push_ready(i);
        i
    }

    /// Starts every queued call on the engine ids given, in order (each id's slot is the
    /// record's index, as the engine's is).
    fn start(&mut self, ids: &[CallId]) -> usize {
        let mut k = 0;
        self.table
            .start_ready(&mut self.sink, |_, _, _| match ids.get(k) {
                Some(&id) => {
                    k += 1;
                    Start::Started(id, 0)
                }
                None => Start::Wait,
            })
    }

    fn seen(&self) -> Vec<(u32, Result<(), ClientError>)> {
        self.seen.lock().unwrap().clone()
    }
}

fn id(slot: u32, generation: u32) -> CallId {
    CallId { slot, generation }
}

#[test]
fn accepts_reply_completing_call_exactly_once() {
    let mut r = rig(4);
    let i = r.queue(1, u64::MAX);
    assert_eq!(r.start(&[id(0, 1)]), 1);
    assert_eq!((r.table.in_flight(), r.table.queued()), (1, 0));
    assert_eq!(r.table.returned(id(0, 1), &mut r.sink), Some(i));
    let reply = Reply::backward(r.pool.get_buf().unwrap(), 0, 0, 101);
    r.table.finish(i, &mut r.sink, Ok(reply));
    // A second report of the same call, a timeout and fail_all find nothing.
    assert_eq!(r.table.returned(id(0, 1), &mut r.sink), None);
    assert_eq!(r.table.expire(u64::MAX, &mut r.sink), u64::MAX);
    assert_eq!(r.table.fail_all(&mut r.sink, ClientError::Closed), 0);
    assert_eq!(r.seen(), vec![(1, Ok(()))]);
    assert_eq!(
        (r.table.in_use(), r.table.in_flight(), r.sink.errors),
        (0, 0, 0)
    );
    // Arguments and reply buffer went back (the reply's with the Reply).
    assert_eq!(r.pool.available(), 32);
}

#[test]
fn accepts_timeout_then_late_reply_freeing_the_zombie_without_a_second_callback() {
    let mut r = rig(4);
    let i = r.queue(1, 50);
    r.queue(2, 500);
    assert_eq!(r.start(&[id(0, 1)]), 1);
    // Call 1 is on the wire past its deadline, call 2 still queued.
    assert_eq!(r.table.expire(60, &mut r.sink), 500);
    assert_eq!(r.seen(), vec![(1, Err(ClientError::TimedOut))]);
    assert_eq!(r.sink.errors, 1);
    // The engine still has call 1: its record stays held (a zombie) until the engine reports.
    assert_eq!(r.table.in_use(), 2);
    assert_eq!(r.table.in_flight(), 0);
    assert_eq!(r.table.returned(id(0, 1), &mut r.sink), None);
    assert_eq!(r.table.in_use(), 1);
    assert_eq!(r.sink.bufs_back, 1);
    assert_eq!(r.table.rec(i).state, CallState::Free);
    // The queued call stays queued and times out on its own.
    assert_eq!(r.table.queued(), 1);
    assert_eq!(r.table.expire(500, &mut r.sink), u64::MAX);
    assert_eq!(r.table.queued(), 0);
    assert_eq!(r.seen().len(), 2);
    assert_eq!(r.table.in_use(), 0);
}

#[test]
fn rejects_late_report_for_a_reused_slot() {
    let mut r = rig(4);
    r.queue(9, u64::MAX);
    let a = r.queue(1, u64::MAX);
    assert_eq!(a, 1);
    r.start(&[id(0, 3), id(1, 7)]);
    let gen_a = r.table.rec(a).gen;
    assert_eq!(r.table.returned(id(1, 7), &mut r.sink), Some(a));
    r.table.finish(a, &mut r.sink, Err(ClientError::TimedOut));
    // The record (the free list being LIFO) and so its engine slot are reused by call 2, in a
    // new generation of the record.
    let b = r.queue(2, u64::MAX);
    assert_eq!(b, a);
    assert_eq!(r.table.rec(b).gen, gen_a.wrapping_add(1));
    r.start(&[id(1, 8)]);
    // A late report with the old generation is not call 2's.
    assert_eq!(r.table.returned(id(1, 7), &mut r.sink), None);
    // Nor is a report for a slot the engine does not have, or for another record's slot.
    assert_eq!(r.table.returned(id(99, 8), &mut r.sink), None);
    assert_eq!(r.table.returned(id(0, 8), &mut r.sink), None);
    assert_eq!(r.table.in_flight(), 2);
    assert_eq!(r.seen(), vec![(1, Err(ClientError::TimedOut))]);
    assert_eq!(r.table.returned(id(1, 8), &mut r.sink), Some(b));
}

#[test]
fn accepts_fail_all_completing_every_state_once() {
    let mut r = rig(4);
    let flying = r.queue(1, u64::MAX);
    r.queue(2, u64::MAX);
    r.start(&[id(0, 1)]);
    let c = r.call(3, u64::MAX, false);
    let parked = r.table.alloc(c).unwrap();
    assert_eq!(r.table.rec(parked).state, CallState::Queued);
    assert_eq!(r.table.fail_all(&mut r.sink, ClientError::SessionClosed), 3);
    let mut tags: Vec<u32> = r.seen().iter().map(|s| s.0).collect();
    tags.sort_unstable();
    assert_eq!(tags, vec![1, 2, 3]);
    assert!(r
        .seen()
        .iter()
        .all(|s| s.1 == Err(ClientError::SessionClosed)));
    assert_eq!(r.sink.errors, 3);
    assert_eq!(r.table.queued(), 0);
    // The call on the wire is a zombie: a second fail_all, a timeout and its reply run nothing.
    assert_eq!(r.table.rec(flying).state, CallState::Zombie);
    assert_eq!(r.table.fail_all(&mut r.sink, ClientError::Closed), 0);
    assert_eq!(r.table.expire(u64::MAX - 1, &mut r.sink), u64::MAX);
    assert_eq!(r.table.returned(id(0, 1), &mut r.sink), None);
    assert_eq!((r.seen().len(), r.table.in_use()), (3, 0));
}

#[test]
fn accepts_engine_gone_freeing_zombies_and_requeueing_calls_on_the_wire() {
    let mut r = rig(4);
    let a = r.queue(1, 10);
    let b = r.queue(2, u64::MAX);
    r.start(&[id(0, 1), id(1, 1)]);
    r.table.expire(10, &mut r.sink);
    assert_eq!(r.table.rec(a).state, CallState::Zombie);
    r.table.engine_gone(&mut r.sink);
    assert_eq!(r.table.rec(a).state, CallState::Free);
    assert_eq!(r.table.rec(b).state, CallState::Queued);
    assert_eq!((r.table.in_use(), r.table.in_flight()), (1, 0));
    // The old engine's reports no longer map to a record.
    assert_eq!(r.table.returned(id(1, 1), &mut r.sink), None);
    // Parked (not queued to start); its reply buffer goes back.
    assert_eq!(r.table.queued(), 0);
    let before = r.sink.bufs_back;
    r.table.park_all(&mut r.sink);
    assert_eq!(r.sink.bufs_back, before + 1);
    assert!(r.table.rec(b).reply.is_none());
    assert_eq!(r.seen().len(), 1);
}

#[test]
fn rejects_calls_beyond_capacity() {
    let mut r = rig(2);
    r.queue(1, u64::MAX);
    r.queue(2, u64::MAX);
    assert!(!r.table.has_free());
    // A call that finds no record is dropped: its callback still runs, once, with Dropped.
    let c = r.call(3, u64::MAX, true);
    assert!(r.table.alloc(c).is_none());
    assert_eq!(r.seen(), vec![(3, Err(ClientError::Dropped))]);
    // Completing one frees its record for the next call.
    assert_eq!(r.table.fail_all(&mut r.sink, ClientError::Closed), 2);
    assert!(r.table.has_free());
    assert_eq!(r.table.in_use(), 0);
}

#[test]
fn accepts_resend_in_submission_order_with_send_counts() {
    let mut r = rig(4);
    let recs: Vec<u32> = (1..=3).map(|t| r.queue(t, u64::MAX)).collect();
    r.start(&[id(0, 1), id(1, 1), id(2, 1)]);
    // The engine reports them (connection lost) in another order.
    for slot in [2, 0, 1] {
        let i = r.table.returned(id(slot, 1), &mut r.sink).unwrap();
        r.table.hold_for_resend(i);
    }
    // A new call queued meanwhile goes after the resends.
    let late = r.queue(4, u64::MAX);
    r.table.resend_held();
    let mut order = Vec::new();
    r.table.start_ready(&mut r.sink, |_, rec, _| {
        order.push((rec.proc.proc_num, rec.sends));
        Start::Wait
    });
    assert_eq!(order, vec![(1, 1)]);
    r.table.start_ready(&mut r.sink, |i, rec, _| {
        order.push((rec.proc.proc_num, rec.sends));
        Start::Started(id(i, 2), 0)
    });
    assert_eq!(order, vec![(1, 1), (1, 1), (2, 1), (3, 1), (4, 0)]);
    assert!(recs
        .iter()
        .chain([late].iter())
        .all(|&i| r.table.rec(i).state == CallState::InFlight));
    assert_eq!(r.table.rec(recs[0]).sends, 2);
    // Seven starts, three of them resends.
    assert_eq!((r.sink.starts, r.sink.resends), (7, 3));
    assert!(r.seen().is_empty());
}

#[test]
fn accepts_start_failure_completing_and_skip_not_completing() {
    let mut r = rig(4);
    r.queue(1, u64::MAX);
    r.queue(2, u64::MAX);
    let mut k = 0;
    let n = r.table.start_ready(&mut r.sink, |_, _, _| {
        k += 1;
        if k == 1 {
            Start::Fail(ClientError::NotServed)
        } else {
            Start::Skip
        }
    });
    assert_eq!(n, 0);
    assert_eq!(r.seen(), vec![(1, Err(ClientError::NotServed))]);
    assert_eq!((r.sink.errors, r.table.queued()), (1, 0));
    // The skipped call is still held (its owner completes it later, once).
    assert_eq!(r.table.in_use(), 1);
    r.table.fail_all(&mut r.sink, ClientError::Closed);
    assert_eq!(r.seen().len(), 2);
}

#[test]
fn accepts_hand_over_oldest_first_and_keeps_a_refused_call() {
    let mut r = rig(4);
    for t in [1, 2, 3] {
        let c = r.call(t, 1000 + u64::from(t), false);
        r.table.alloc(c).unwrap();
    }
    let mut moved = Vec::new();
    let (n, refused) = r.table.hand_over(&mut r.sink, |c| {
        if moved.len() == 2 {
            return Err(c);
        }
        moved.push((c.xid, c.deadline, c.sends));
        c.cb.disarm();
        Ok(())
    });
    assert_eq!((n, refused), (2, true));
    assert_eq!(moved, vec![(101, 1001, 0), (102, 1002, 0)]);
    // The refused call stays, with its callback, and completes once later.
    assert_eq!(r.table.in_use(), 1);
    assert!(r.seen().is_empty());
    assert_eq!(r.table.fail_all(&mut r.sink, ClientError::Closed), 1);
    assert_eq!(r.seen(), vec![(3, Err(ClientError::Closed))]);
}

#[test]
fn accepts_drain_callbacks_taking_each_once() {
    let mut r = rig(4);
    r.queue(1, u64::MAX);
    r.queue(2, u64::MAX);
    r.start(&[id(0, 1)]);
    let mut n = 0;
    r.table.drain_callbacks(|cb| {
        n += 1;
        cb.call(Err(ClientError::Closed));
    });
    r.table.drain_callbacks(|_| n += 10);
    assert_eq!(n, 2);
    assert_eq!(r.seen().len(), 2);
    assert!(r.sink.inline.is_empty());
}

#[test]
fn accepts_engine_start_answers_mapped_alike_for_both_directions() {
    use rpcrdma_engine::conn::StartError as E;
    assert!(matches!(Start::of(Ok(id(3, 4)), 9), Start::Started(c, 9) if c == id(3, 4)));
    for e in [E::NoCredit, E::Busy, E::NotConnected] {
        assert!(matches!(Start::of(Err(e), 9), Start::Wait));
    }
    assert!(matches!(
        Start::of(Err(E::BackchannelDisabled), 9),
        Start::Fail(ClientError::NotServed)
    ));
    assert!(matches!(
        Start::of(Err(E::BadSpec), 9),
        Start::Fail(ClientError::BadCall(E::BadSpec))
    ));
}

/// Host memory of one plain buffer at address 0x1000 (the rig's header buffers).
struct Flat(Vec<u8>);

impl rpcrdma_engine::conn::HostMemory for Flat {
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let at = usize::try_from(addr.checked_sub(0x1000)?).ok()?;
        self.0.get(at..at.checked_add(len)?)
    }
    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let at = usize::try_from(addr.checked_sub(0x1000)?).ok()?;
        self.0.get_mut(at..at.checked_add(len)?)
    }
}

/// The RFC 5531 CALL header of (xid, prog, vers, proc) with AUTH_NONE credential and
/// verifier, written out word by word.
fn call_header(xid: u32, prog: u32, vers: u32, proc_num: u32) -> Vec<u8> {
    [xid, 0, 2, prog, vers, proc_num, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

/// A record's header buffer is re-encoded whole when its procedure changes and only its XID
/// is rewritten when the procedure repeats: either way the buffer holds exactly the header
/// of the current call.
#[test]
fn accepts_record_headers_for_repeated_and_changed_procedures() {
    let mut r = rig(1);
    let mut mem = Flat(vec![0xee; RPC_HEADER_SIZE as usize]);
    for (tag, xid, proc_num) in [(0u32, 7u32, 3u32), (1, 8, 3), (2, 9, 5), (3, 10, 3)] {
        let mut c = r.call(tag, u64::MAX, false);
        c.xid = xid;
        c.proc = crate::call::Proc::new(100_003, 3, proc_num);
        let i = r.table.alloc(c).expect("free record");
        assert!(r.table.rec_mut(i).encode_header(&mut mem, &CredBody::NONE));
        assert_eq!(r.table.rec(i).hdr_len, 40);
        assert_eq!(mem.0[..40], call_header(xid, 100_003, 3, proc_num)[..]);
        r.table.finish(i, &mut r.sink, Err(ClientError::Closed));
    }
    assert_eq!(r.seen().len(), 4);
}

/// An AUTH_SYS credential (RFC 5531 section 8.2: stamp, machine name, uid, gid, gids) goes
/// into every header, also when only the XID is rewritten; 16 groups fit the header buffer.
#[test]
fn accepts_auth_sys_credentials_in_record_headers() {
    let mut r = rig(1);
    let mut mem = Flat(vec![0xee; RPC_HEADER_SIZE as usize]);
    let groups: Vec<u32> = (100..116).collect();
    let cred = CredBody::of(Some(crate::config::AuthSysCred::new(1000, 50, &groups)));
    for xid in [7u32, 8] {
        let mut c = r.call(xid, u64::MAX, false);
        c.xid = xid;
        c.proc = crate::call::Proc::new(100_003, 3, 1);
        let i = r.table.alloc(c).expect("free record");
        assert!(r.table.rec_mut(i).encode_header(&mut mem, &cred));
        let mut want: Vec<u8> = [xid, 0, 2, 100_003, 3, 1, 1, 28 + 16 * 4, 0, 7]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        want.extend_from_slice(b"rpcrdma\0");
        for w in [1000u32, 50, 16].into_iter().chain(groups.iter().copied()) {
            want.extend_from_slice(&w.to_be_bytes());
        }
        want.extend_from_slice(&[0; 8]); // AUTH_NONE verifier
        assert_eq!(r.table.rec(i).hdr_len as usize, want.len());
        assert_eq!(mem.0[..want.len()], want[..]);
        r.table.finish(i, &mut r.sink, Err(ClientError::Closed));
    }
}

/// A call's own credential (a peer's AUTH_SYS body, as an NFSv4.1 client gives it in
/// `csa_sec_parms`) goes into its header octet for octet, and the next call of the same
/// procedure without one carries the connection's credential again (no cached header reused).
#[test]
fn accepts_a_calls_own_credential_in_its_header() {
    let mut r = rig(1);
    let mut mem = Flat(vec![0xee; RPC_HEADER_SIZE as usize]);
    let p = rpcrdma_engine::rpc::AuthSysParams {
        stamp: 9,
        machinename: &[b'h'; 64],
        uid: 0,
        gid: 0,
        gids: &[],
    };
    let mut body = vec![0u8; p.encoded_len()];
    let n = p.encode_into(&mut body).expect("fits");
    body.truncate(n);
    let own = CredBody::sys_body(&body).expect("a Linux-sized body fits");
    for (xid, cred) in [(7u32, Some(own)), (8, None), (9, Some(own))] {
        let mut c = r.call(xid, u64::MAX, false);
        c.xid = xid;
        c.cred = cred;
        c.proc = crate::call::Proc::new(0x4000_0000, 1, 1);
        let i = r.table.alloc(c).expect("free record");
        assert!(r.table.rec_mut(i).encode_header(&mut mem, &CredBody::NONE));
        let len = r.table.rec(i).hdr_len as usize;
        if cred.is_some() {
            assert_eq!(len, 40 + body.len());
            assert_eq!(mem.0[24..32], [0, 0, 0, 1, 0, 0, 0, n as u8]);
            assert_eq!(mem.0[32..32 + n], body[..]);
        } else {
            assert_eq!(mem.0[..len], call_header(xid, 0x4000_0000, 1, 1)[..]);
        }
        r.table.finish(i, &mut r.sink, Err(ClientError::Closed));
    }
}

/// A peer's credential body that does not parse, or that is longer than a header leaves room
/// for, is refused.
#[test]
fn rejects_peer_credentials_that_do_not_parse_or_fit() {
    assert_eq!(CredBody::sys_body(&[0, 0, 0, 1]), None);
    let p = rpcrdma_engine::rpc::AuthSysParams {
        stamp: 1,
        machinename: &[b'h'; 64],
        uid: 0,
        gid: 0,
        gids: &[7; 16],
    };
    let mut body = vec![0u8; p.encoded_len()];
    let n = p.encode_into(&mut body).expect("fits");
    assert!(n > crate::cred::CRED_MAX);
    assert_eq!(CredBody::sys_body(&body[..n]), None);
}
