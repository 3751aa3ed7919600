//! Tests of iWARP endpoints over real non-blocking TCP sockets on 127.0.0.1: connect, accept and
//! the MPA connection setup, Sends both ways with and without CRCs, reject, and a corrupted CRC.
//! Poll loops are bounded by iteration counts; time is the iteration number.

use super::*;
use crate::verbs::iwarp::term;

/// RFC 8797 private data: format identifier f6ab0e18, version 1, R, sizes 0 (1 KiB each).
const RPCRDMA_PD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00];
/// Poll rounds before a test gives up.
const ROUNDS: u64 = 200_000;

fn cfg(want_crc: bool) -> EndpointConfig {
    EndpointConfig {
        handshake: handshake::Config {
            want_crc,
            timeout_ns: u64::MAX / 2,
            ..handshake::Config::default()
        },
        ..EndpointConfig::default()
    }
}

/// Polls the listener (until it yields the responder, configured by `rcfg`) and both endpoints
/// until `done`.
fn pump(
    l: &Listener,
    rcfg: EndpointConfig,
    init: &mut Endpoint,
    resp: &mut Option<Endpoint>,
    mut done: impl FnMut(&mut Endpoint, &mut Option<Endpoint>) -> bool,
) {
    for now in 0..ROUNDS {
        init.poll(now);
        match resp {
            Some(r) => {
                r.poll(now);
            }
            None => *resp = l.accept(now, rcfg).expect("accept"),
        }
        if done(init, resp) {
            return;
        }
        std::thread::yield_now();
    }
    panic!(
        "no progress: initiator {:?}, responder {:?}",
        init.state(),
        resp.as_ref().map(Endpoint::state)
    );
}

/// A connected, established pair; `crc` on the initiator's side, `resp_crc` on the responder's.
fn pair(crc: bool, resp_crc: bool) -> (Endpoint, Endpoint) {
    let rcfg = cfg(resp_crc);
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut init = Endpoint::connect(l.local_addr().unwrap(), 0, cfg(crc), &RPCRDMA_PD).unwrap();
    let mut resp = None;
    pump(&l, rcfg, &mut init, &mut resp, |_, r| {
        r.as_ref()
            .is_some_and(|r| r.state() == State::AwaitingDecision)
    });
    let mut resp = resp.unwrap();
    assert_eq!(resp.peer_private_data(), RPCRDMA_PD);
    resp.accept(b"reply private data").unwrap();
    let mut resp = Some(resp);
    pump(&l, rcfg, &mut init, &mut resp, |i, _| {
        i.state() == State::Established
    });
    let resp = resp.unwrap();
    assert_eq!(init.peer_private_data(), b"reply private data");
    assert_eq!(init.crc(), crc || resp_crc);
    assert_eq!(resp.crc(), crc || resp_crc);
    (init, resp)
}

/// Polls both until `to` has received one whole Send; returns its payload.
fn deliver(from: &mut Endpoint, to: &mut Endpoint) -> Vec<u8> {
    let mut got = Vec::new();
    for now in 0..ROUNDS {
        from.poll(now);
        to.poll(now);
        let mut last = false;
        to.recv(|m| match m {
            Message::Send {
                payload,
                mo,
                last: l,
                ..
            } => {
                assert_eq!(mo as usize, got.len());
                got.extend_from_slice(payload);
                last = l;
            }
            other => panic!("unexpected {other:?}"),
        })
        .expect("receive");
        if last {
            return got;
        }
        std::thread::yield_now();
    }
    panic!("Send not delivered: {} octets", got.len());
}

fn exchange(crc: bool, resp_crc: bool) {
    let (mut a, mut b) = pair(crc, resp_crc);
    let big: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
    for msg in [&b"ping"[..], &big, &[]] {
        a.send(msg).unwrap();
        assert_eq!(deliver(&mut a, &mut b), msg);
        b.send(msg).unwrap();
        assert_eq!(deliver(&mut b, &mut a), msg);
    }
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
}

#[test]
fn accepts_sends_both_ways_with_crc() {
    exchange(true, false);
    exchange(false, true);
}

#[test]
fn accepts_sends_both_ways_without_crc() {
    exchange(false, false);
}

#[test]
fn rejects_a_corrupted_crc_with_a_terminate() {
    let (mut a, mut b) = pair(true, true);
    a.send_corrupted(b"this FPDU is damaged").unwrap();
    let mut ended = None;
    for now in 0..ROUNDS {
        a.poll(now);
        b.poll(now);
        if let Err(why) = b.recv(|m| panic!("delivered a damaged segment {m:?}")) {
            ended = Some(why);
            break;
        }
        std::thread::yield_now();
    }
    let code = TermCode::new(term::LAYER_LLP, mpa::TERM_ETYPE_MPA, mpa::TERM_ECODE_CRC);
    assert_eq!(ended, Some(Closed::Terminated(code)));
    // The sender receives the Terminate with the CRC error code.
    let mut seen = None;
    for now in 0..ROUNDS {
        a.poll(now);
        b.poll(now);
        if let Err(why) = a.recv(|m| panic!("unexpected {m:?}")) {
            seen = Some(why);
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(seen, Some(Closed::PeerTerminated(code)));
    assert_eq!(b.state(), State::Closed(Closed::Terminated(code)));
}

#[test]
fn rejects_a_connection_with_private_data() {
    let rcfg = cfg(true);
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut init = Endpoint::connect(l.local_addr().unwrap(), 0, cfg(true), &RPCRDMA_PD).unwrap();
    let mut resp = None;
    pump(&l, rcfg, &mut init, &mut resp, |_, r| {
        r.as_ref()
            .is_some_and(|r| r.state() == State::AwaitingDecision)
    });
    resp.as_mut().unwrap().reject(b"go away").unwrap();
    pump(&l, rcfg, &mut init, &mut resp, |i, r| {
        matches!(i.state(), State::Closed(_))
            && matches!(r.as_ref().unwrap().state(), State::Closed(_))
    });
    assert_eq!(init.state(), State::Closed(Closed::Rejected));
    assert_eq!(init.peer_private_data(), b"go away");
    assert_eq!(init.send(b"x"), Err(SendError::NotEstablished));
}

#[test]
fn rejects_an_unreachable_peer_without_blocking() {
    // A port just freed: connecting is refused (seen on a later poll, not in `connect`).
    let addr = {
        let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        l.local_addr().unwrap()
    };
    let mut init = Endpoint::connect(addr, 0, cfg(true), &[]).unwrap();
    let mut state = init.state();
    for now in 0..ROUNDS {
        state = init.poll(now);
        if matches!(state, State::Closed(_)) {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(
        state,
        State::Closed(Closed::Io(io::ErrorKind::ConnectionRefused))
    );
}

#[test]
fn rejects_a_send_larger_than_the_transmit_buffer() {
    let (mut a, _b) = pair(false, false);
    let huge = vec![0u8; 200 * 1024];
    assert!(matches!(
        a.send(&huge),
        Err(SendError::Segment(SegmentError::NoSpace { .. }))
    ));
}

#[test]
fn rejects_a_silent_peer_at_the_deadline() {
    // The listener's backlog completes the TCP connect, but no one answers the Request.
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut c = cfg(true);
    c.handshake.timeout_ns = 1_000;
    let mut init = Endpoint::connect(l.local_addr().unwrap(), 0, c, &RPCRDMA_PD).unwrap();
    assert_eq!(init.poll_timeout(), Some(1_000));
    let mut state = init.state();
    for _ in 0..ROUNDS {
        state = init.poll(999);
        if state == State::Handshaking && init.tx.is_empty() {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(state, State::Handshaking);
    assert_eq!(
        init.poll(1_000),
        State::Closed(Closed::Handshake(HandshakeError::Timeout))
    );
}

#[test]
fn accepts_back_pressure_then_delivers_everything_in_order() {
    let (mut a, mut b) = pair(false, false);
    // Queue 64 KiB Sends without the peer reading until the socket and the transmit buffer
    // are full: writes end part-way and `send` reports `Full`.
    let msg = |k: usize| vec![k as u8; 64 * 1024];
    let mut queued = 0;
    while queued < 2_000 {
        match a.send(&msg(queued)) {
            Ok(()) => queued += 1,
            Err(SendError::Full) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(queued < 2_000, "the transmit side never filled up");
    let mut got = 0;
    let mut sent = queued;
    for now in 0..ROUNDS {
        a.poll(now);
        b.poll(now);
        b.recv(|m| {
            let Message::Send { payload, last, .. } = m else {
                panic!("unexpected {m:?}");
            };
            assert!(payload.iter().all(|&x| x == got as u8));
            got += usize::from(last);
        })
        .expect("receive");
        if sent < queued + 4 && a.send(&msg(sent)).is_ok() {
            sent += 1;
        }
        if got == queued + 4 {
            return;
        }
        std::thread::yield_now();
    }
    panic!("delivered {got} of {}", queued + 4);
}
