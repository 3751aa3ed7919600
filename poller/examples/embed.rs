//! Embedding rpcrdma: a server with one RPC program and a client calling it, both on the same
//! two reactors, over the in-process software provider. `docs/embedding.md` walks through it.
//!
//! Run: `cargo run -p rpcrdma-poller --example embed`

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::mpsc;
use std::time::Duration;

use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackoffMode, CallbackMode, Client, Config, Endpoint, Program, ReactorSet, Reject, ReplyBuilder,
    Request, Server,
};

/// Our program: number 0x2000_1234, version 1.
const CALC: u32 = 0x2000_1234;
/// Procedure 1: ADD(a, b) → a + b (XDR unsigned ints).
const ADD: u32 = 1;

/// The handler: decode the arguments from the zero-copy view, write the results straight into
/// the registered reply buffer. Returning `Err(GarbageArgs)` makes the server answer
/// GARBAGE_ARGS.
fn add(req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
    let word = |i: usize| -> Result<u32, Reject> {
        let b = req.args.get(i..i + 4).ok_or(Reject::GarbageArgs)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let sum = word(0)?.wrapping_add(word(4)?);
    out.put_u32(sum).map_err(|_| Reject::SystemErr)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Configuration: defaults, overridden from TOML (a file works the same way with
    //    `Config::from_file("rpc.toml")`).
    let cfg = Config::from_toml_str(
        r#"
        [runtime]
        reactors = 2
        pin = "off"
        backoff = "shared_cores"
        [endpoint]
        buffers = 256
        reply_buffers = 256
        hugepages = false
        [client]
        credits = 16
        [server]
        credits = 16
        "#,
    )?;

    // 2. The reactors: one thread per core, polling to completion.
    let mut reactors = ReactorSet::start(&cfg.runtime.reactor_config())?;

    // 3. Endpoints: a device bound to every reactor (one CQ per reactor). The soft provider's
    //    fabric stands in for the network; with hardware, open the device with `P::open(ip)`.
    let fabric = SoftFabric::new();
    let server_ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    let client_ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
    let server_ep: Endpoint<SoftProvider> = Endpoint::with_backoff(
        &reactors,
        fabric.open(server_ip),
        cfg.endpoint.clone(),
        BackoffMode::SharedCores,
    )?;
    let client_ep: Endpoint<SoftProvider> =
        Endpoint::new(&reactors, fabric.open(client_ip), cfg.endpoint.clone())?;

    // 4. The server: programs and options; NULL (procedure 0) is answered automatically.
    let addr = SocketAddr::new(server_ip, 20049);
    let server = Server::builder()
        .program(Program::new(CALC, 1..=1).procedure(ADD, add))
        .options(cfg.server)
        .mode(CallbackMode::Inline)
        .start(&server_ep, addr)?;

    // 5. The client: connect, then call. Arguments are encoded into a registered buffer.
    let client = Client::connect(&client_ep, addr, cfg.client)?;
    if !client.wait_connected(Duration::from_secs(5)) {
        return Err("could not connect".into());
    }

    // Blocking call.
    let mut args = client.args().ok_or("no buffer")?;
    args.put_u32(40)?;
    args.put_u32(2)?;
    let reply = client.call_blocking(Proc::new(CALC, 1, ADD), args)?;
    println!("ADD(40, 2) = {:?}", reply.results());

    // Asynchronous calls: the callback runs on the reactor (inline mode) and must not block.
    let (tx, rx) = mpsc::channel();
    for i in 0..10u32 {
        let mut args = client.args().ok_or("no buffer")?;
        args.put_u32(i)?;
        args.put_u32(i)?;
        let tx = tx.clone();
        client
            .call(Proc::new(CALC, 1, ADD), args, move |r| {
                let v = r.map(|rep| rep.results().to_vec());
                let _ = tx.send((i, v));
            })
            .map_err(|r| r.error)?;
    }
    for _ in 0..10 {
        let (i, v) = rx.recv()?;
        println!("ADD({i}, {i}) = {:?}", v.map_err(|e| e.to_string())?);
    }

    // 6. Statistics, readable while running.
    println!("client: {:?}", client.stats().snapshot());
    println!("server: {:?}", server.totals());

    // 7. Graceful stop: calls in progress finish, then the reactors exit.
    client.close();
    reactors.stop()?;
    server_ep.stop_workers();
    client_ep.stop_workers();
    Ok(())
}
