//! Pool buffers are reused without being cleared: the zero-copy builders (`ReplyBuilder` and
//! `CallArgs`: `space` then `advance`) must never send octets the handler or caller did not
//! write — an earlier reply to another client, or an earlier call's arguments (issue 13 §2.4).
//!
//! RFC 5531 §7 lets results and arguments be any XDR the program defines; nothing in the
//! transport (RFC 8166 §3.3, §4.3: the sender decides what it sends) clears a buffer for us, so
//! the builders themselves must. Every test fills the pool buffers with a secret first (what
//! earlier calls would have left there), then builds by advancing over unwritten octets.

mod api_common;

use std::time::Duration;

use api_common::*;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BufPool, CallbackMode, Client, ClientOptions, Program, Reject, ReplyBuilder, Request, Server,
};

/// Returns 64 octets of `SECRET` written with `put`.
const TELL: u32 = 1;
/// Advances 64 octets of results over `space` without writing them.
const LAZY: u32 = 2;
/// Returns the call's arguments as it received them.
const RAW: u32 = 3;
/// Returns how much free space `space` offers.
const ROOM: u32 = 4;
const SECRET: u8 = 0xA5;

fn program() -> Program {
    Program::new(PROG, 2..=2)
        .procedure(
            TELL,
            |_: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                out.put(&[SECRET; 64]).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            LAZY,
            |_: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                out.put_u32(7).map_err(|_| Reject::SystemErr)?;
                let _ = out.space();
                out.advance(64).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            ROOM,
            |_: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                let n = out.space().len() as u32;
                out.put_u32(n).map_err(|_| Reject::SystemErr)
            },
        )
        .procedure(
            RAW,
            |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
                out.put(req.args).map_err(|_| Reject::SystemErr)
            },
        )
}

/// Fills every buffer the pool hands out with the secret, then returns them all.
fn soil(pool: &BufPool) -> usize {
    let mut held = Vec::new();
    while let Some(mut b) = pool.get() {
        b.fill(SECRET);
        held.push(b);
    }
    held.len()
}

fn serve(w: &World, mode: CallbackMode) -> Server {
    Server::builder()
        .program(program())
        .mode(mode)
        .start(&w.server_ep, w.addr)
        .expect("server")
}

fn connect(w: &World) -> Client {
    let c = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)), "connect");
    c
}

/// Client A gets a reply holding the secret; client B's handler advances over 64 octets it
/// never wrote. B must see zeros there, never A's reply (or anything the pool held).
fn lazy_reply_shows_no_secret(mode: CallbackMode) {
    let w = World::new(usize::from(mode == CallbackMode::Worker));
    let _server = serve(&w, mode);
    let a = connect(&w);
    let b = connect(&w);
    assert!(soil(w.server_ep.reply_buffers()) > 0);
    for round in 0..8 {
        let r = a
            .call_blocking(Proc::new(PROG, 2, TELL), a.args().unwrap())
            .expect("A");
        assert_eq!(r.results(), &[SECRET; 64][..], "round {round}: A's reply");
        let r = b
            .call_blocking(Proc::new(PROG, 2, LAZY), b.args().unwrap())
            .expect("B");
        assert_eq!(r.results().len(), 68, "round {round}");
        assert_eq!(&r.results()[..4], &7u32.to_be_bytes());
        assert!(
            r.results()[4..].iter().all(|&x| x == 0),
            "round {round}: B received octets its handler never wrote: {:02x?}",
            &r.results()[4..]
        );
    }
    w.stop();
}

#[test]
fn reply_advance_over_unwritten_octets_sends_zeros_inline() {
    lazy_reply_shows_no_secret(CallbackMode::Inline);
}

#[test]
fn reply_advance_over_unwritten_octets_sends_zeros_worker() {
    lazy_reply_shows_no_secret(CallbackMode::Worker);
}

/// A call whose arguments advance over octets the caller never wrote: the server receives
/// zeros there, not an earlier call's arguments left in the pool buffer.
#[test]
fn call_args_advance_over_unwritten_octets_sends_zeros() {
    let w = World::new(0);
    let _server = serve(&w, CallbackMode::Inline);
    let c = connect(&w);
    for round in 0..8 {
        // An earlier call that carried the secret, then every free buffer soiled as well.
        let mut a = c.args().unwrap();
        a.put(&[SECRET; 64]).unwrap();
        let r = c
            .call_blocking(Proc::new(PROG, 2, RAW), a)
            .expect("earlier call");
        assert_eq!(r.results(), &[SECRET; 64][..]);
        drop(r);
        assert!(soil(w.client_ep.buffers()) > 0);
        let mut a = c.args().unwrap();
        a.put_u32(9).unwrap();
        let _ = a.space();
        a.advance(60).unwrap();
        a.advance(4).unwrap(); // without `space` in between
        let r = c
            .call_blocking(Proc::new(PROG, 2, RAW), a)
            .expect("lazy call");
        assert_eq!(r.results().len(), 68, "round {round}");
        assert_eq!(&r.results()[..4], &9u32.to_be_bytes());
        assert!(
            r.results()[4..].iter().all(|&x| x == 0),
            "round {round}: the server received octets the caller never wrote: {:02x?}",
            &r.results()[4..]
        );
    }
    w.stop();
}

/// `advance` without any `space` call also zeroes: the pool's old octets never go out.
#[test]
fn call_args_advance_without_space_sends_zeros() {
    let w = World::new(0);
    let _server = serve(&w, CallbackMode::Inline);
    let c = connect(&w);
    assert!(soil(w.client_ep.buffers()) > 0);
    let mut a = c.args().unwrap();
    a.advance(32).unwrap();
    a.put_u32(5).unwrap();
    let r = c.call_blocking(Proc::new(PROG, 2, RAW), a).expect("call");
    assert_eq!(&r.results()[..32], &[0u8; 32][..]);
    assert_eq!(&r.results()[32..], &5u32.to_be_bytes());
    w.stop();
}

/// `space` offers only what the reply can carry, which bounds the memset that clears it: the
/// inline threshold (4 096 by default) less the 24-octet RPC success header when the client
/// offered no Reply chunk (RFC 8166 §3.5.1: a reply larger than the inline threshold needs
/// one), and the Reply chunk when it offered one (here its whole 16 KiB reply buffer).
#[test]
fn reply_space_is_bounded_by_what_the_reply_can_carry() {
    let w = World::new(0);
    let _server = serve(&w, CallbackMode::Inline);
    let c = connect(&w);
    let mut a = c.args().unwrap();
    a.expect_reply(64); // small: no Reply chunk offered
    let r = c.call_blocking(Proc::new(PROG, 2, ROOM), a).expect("room");
    assert_eq!(r.results(), &(4096u32 - 24).to_be_bytes());
    let r = c
        .call_blocking(Proc::new(PROG, 2, ROOM), c.args().unwrap())
        .expect("room with a Reply chunk");
    assert_eq!(r.results(), &(16 * 1024u32 - 24).to_be_bytes());
    w.stop();
}
