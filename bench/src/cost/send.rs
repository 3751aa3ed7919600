//! The `send` kind of the cost benchmark: the bare soft-provider SEND round trip of
//! `soft_rtt` (32 octets each way, every WR signaled, one receive reposted per message), but
//! both sides driven by ONE thread, so callgrind counts the same instructions every run. The
//! soft provider executes a queue at its doorbell on the posting thread, so the client's
//! `flush_send` has already placed the message (and its receive completion) on the server
//! side when the server polls. Compare with the `null` kind: what an RPC adds to the two SENDs.
//!
//! Normal operation: warm-up round trips with collection off, then callgrind's collection is
//! toggled on for exactly `n` round trips and off again ([`super::callgrind_toggle_collect`]).
//! Recovery: a receive that does not arrive within a bounded number of polls, or a verbs
//! error, ends the run with an error (it cannot happen on one thread unless the provider
//! broke).

use rpcrdma_engine::verbs::conformance::{self, Buf, Side};
use rpcrdma_engine::verbs::soft::{SoftEnv, SoftProvider};
use rpcrdma_engine::verbs::{Access, QueuePair, RecvWr, SendWr};

use super::{callgrind_toggle_collect, Outcome};
use crate::soft_rtt::{poll_recv, DEPTH, MSG};

/// Polls of an empty CQ after which a round trip counts as lost (one thread: the completion
/// is always there at the first poll).
const MAX_POLLS: u64 = 1_000;

/// One side: its QP, CQ and registered buffer (message at 0, receive slots after it).
struct End {
    side: Side<SoftProvider>,
    buf: Buf<SoftProvider>,
}

impl End {
    /// Posts receive `id` into its slot and rings the receive doorbell.
    fn post_recv(&mut self, id: u64) -> Result<(), String> {
        let sge = [self.buf.sge(1024 * (1 + id as usize % DEPTH), 1024)];
        let wr = RecvWr {
            wr_id: id,
            sgl: &sge,
        };
        self.side.qp.queue_recv(&wr).map_err(|e| format!("{e:?}"))?;
        self.side.qp.flush_recv().map_err(|e| format!("{e:?}"))
    }

    /// Sends the 32-octet message and rings the send doorbell.
    fn send(&mut self, id: u64) -> Result<(), String> {
        let msg = [self.buf.sge(0, MSG)];
        let wr = SendWr::send(id, &msg);
        self.side.qp.queue_send(&wr).map_err(|e| format!("{e:?}"))?;
        self.side.qp.flush_send().map_err(|e| format!("{e:?}"))
    }

    /// The next receive's `wr_id`, reposted at once.
    fn take_recv(&mut self) -> Result<u64, String> {
        let id = poll_recv(&mut self.side.cq, MAX_POLLS).ok_or("no receive completion")?;
        self.post_recv(id)?;
        Ok(id)
    }
}

/// One round trip: the client SENDs, the server takes the receive, reposts it and SENDs back,
/// the client takes the echo and reposts.
#[inline(never)] // its own symbol: the profile counts it as application code
fn round_trip(c: &mut End, s: &mut End) -> Result<(), String> {
    c.send(u64::MAX)?;
    let id = s.take_recv()?;
    s.send(id)?;
    c.take_recv().map(|_| ())
}

/// Runs `warmup` then `n` round trips on the calling thread; under callgrind
/// (`--collect-atstart=no`) only the `n` measured ones are counted.
pub fn run(warmup: u64, n: u64) -> Result<Outcome, String> {
    let mut env = SoftEnv::new();
    let pair = conformance::connect(&mut env)?;
    let lw = Access::LOCAL_WRITE;
    let cbuf = Buf::<SoftProvider>::new(&pair.c.pd, 64 * 1024, lw)?;
    let sbuf = Buf::<SoftProvider>::new(&pair.s.pd, 64 * 1024, lw)?;
    let mut c = End {
        side: pair.c,
        buf: cbuf,
    };
    let mut s = End {
        side: pair.s,
        buf: sbuf,
    };
    for i in 0..DEPTH as u64 {
        c.post_recv(i)?;
        s.post_recv(i)?;
    }
    let warmup = warmup.max(1);
    let mut ok = 0;
    for i in 0..warmup + n {
        if i == warmup {
            callgrind_toggle_collect();
        }
        round_trip(&mut c, &mut s)?;
        ok += 1;
    }
    callgrind_toggle_collect();
    Ok(Outcome { ok, bad: 0 })
}
