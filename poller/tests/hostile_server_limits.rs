//! Hostile peers against the real [`Server`]'s shared resources, part three: a credit
//! violator draining a shared receive queue (RFC 8166 §3.3.1, §4.3: a requester MUST NOT
//! exceed its grant; the responder may terminate the violator's connection) while honest
//! clients run on the same SRQ. Each case asserts that the honest clients lose nothing — no
//! connection, no call — and that the violator alone is cut off.
//!
//! Normal operation and recovery of the rig: see `hostile_rig`.
//!
//! [`Server`]: rpcrdma_poller::Server

mod api_common;
mod hostile_raw;
mod hostile_rig;

use std::time::Duration;

use hostile_raw::*;
use hostile_rig::*;
use rpcrdma_engine::verbs::WcStatus;
use rpcrdma_poller::{Client, ClientOptions, ServerOptions};

/// Credits the server grants in the SRQ cases.
const CREDITS: u32 = 4;
/// Depth of the shared receive queue in the drain case: the honest clients' reservations and
/// the violator's fit, with little to spare.
const DRAIN_DEPTH: u32 = 48;

/// SRQ drain (RFC 8166 §3.3.1): a requester granted 4 credits posts 300 calls at once — six
/// times the whole SRQ — in each of 8 rounds, while three honest clients keep 4 SUM calls in
/// flight each on the same SRQ. The violator's sends take every posted shared receive before
/// the server polls, so honest Sends meet an empty SRQ. What must hold: the violator is cut
/// off every round (its QP goes down and the server counts the loss), while every honest
/// client keeps its one connection (no loss, no reconnect) and every honest call completes
/// exactly once with the right result.
#[test]
fn rejects_srq_drain_by_a_credit_violator_cutting_it_off_alone() {
    let opts = ServerOptions {
        credits: CREDITS,
        shared_receive_queue: Some(DRAIN_DEPTH),
        max_conns_per_peer: 0,
        ..ServerOptions::default()
    };
    let r = rig_in(opts, Receives::Shared);
    let copts = ClientOptions {
        credits: CREDITS,
        ..ClientOptions::default()
    };
    let more: Vec<Client> = (0..2)
        .map(|_| {
            let c = Client::connect(&r.w.client_ep, r.w.addr, copts).expect("client");
            assert!(c.wait_connected(Duration::from_secs(10)));
            c
        })
        .collect();
    let honest: Vec<&Client> = std::iter::once(&r.honest).chain(more.iter()).collect();
    let lives: Vec<Liveness> = honest.iter().map(|c| liveness(c)).collect();
    const ROUNDS: u64 = 8;
    const BURST: u32 = 300;
    for round in 0..ROUNDS {
        let before: Vec<u64> = lives.iter().map(|l| l.done()).collect();
        let mut p = r.peer_with(
            &pd_v1(4096, 4096),
            RawOpts {
                recvs: 256,
                recv_size: 4096,
                rnr_retry: 7,
            },
        );
        let ids: Vec<u64> = (0..BURST)
            .map(|i| p.send(&sum_v1(0xd000 + i, i, 1)))
            .collect();
        let wcs: Vec<WcStatus> = ids.iter().map(|&w| p.wait_send(w).status).collect();
        let ok = wcs.iter().filter(|s| **s == WcStatus::SUCCESS).count();
        assert!(ok < BURST as usize, "round {round}: the violator went on");
        assert!(p.wait_down(), "round {round}: the violator is cut off");
        wait_until("the violator's loss counted", || {
            r.server.totals().connection_losses > round
        });
        // Honest calls go on between rounds (each client completes a few more).
        wait_until("honest progress", || {
            lives.iter().zip(&before).all(|(l, b)| l.done() >= b + 8)
        });
    }
    for (i, l) in lives.into_iter().enumerate() {
        l.finish(&format!("honest client {i}"));
    }
    for (i, c) in honest.iter().enumerate() {
        let s = c.stats().snapshot();
        assert_eq!(
            (s.connection_losses, s.reconnects, s.retransmits),
            (0, 0, 0),
            "honest client {i} lost its connection"
        );
    }
    assert_eq!(
        r.server.totals().connection_losses,
        ROUNDS,
        "only the violators lost their connections"
    );
    let node = r.w.server_ep.node_stats(0).expect("node");
    assert_eq!(node.srq_violations, ROUNDS, "each violator cut off as one");
    assert!(node.srq_held_max <= DRAIN_DEPTH as u64);
    drop(more);
    r.stop();
}
