//! Embedding rpcrdma on the `rdma` provider: a server with one RPC program and a client calling
//! it over a real RDMA device (hardware, or Soft-RoCE `rxe` / soft-iWARP `siw` on an ordinary
//! NIC), both in this process on two reactors.
//!
//! Run: `cargo run --release -- 192.0.2.1` with the address of an RDMA-capable interface (see
//! docs/quickstart.md to create an rxe or siw device). Without a device for that address it
//! stops with the reason and exit status 1.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rpcrdma_engine::verbs::rdma::Rdma;
use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::{
    Client, Config, Endpoint, Proc, Program, ReactorSet, Reject, ReplyBuilder, Request, Server,
};

/// Our program: number 0x2000_1234, version 1; procedure 1 adds two XDR unsigned ints.
const CALC: u32 = 0x2000_1234;
const ADD: u32 = 1;

fn add(req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
    let word = |i: usize| -> Result<u32, Reject> {
        let b = req.args.get(i..i + 4).ok_or(Reject::GarbageArgs)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    out.put_u32(word(0)?.wrapping_add(word(4)?))
        .map_err(|_| Reject::SystemErr)
}

fn run(ip: IpAddr) -> Result<(), Box<dyn std::error::Error>> {
    // Two reactors, not pinned, sleeping when idle (a shared machine); on a dedicated host pin
    // them (`pin = "on"`) and poll (`backoff = "busy_poll"`). `Config::from_file` reads a file.
    let cfg = Config::from_toml_str(
        r#"
        [runtime]
        reactors = 2
        pin = "off"
        backoff = "shared_cores"
        [endpoint]
        hugepages = false
        "#,
    )?;
    let mut reactors = ReactorSet::start(&cfg.runtime.reactor_config())?;
    // One device per endpoint: the RDMA device that owns `ip` (rdma_cm finds it).
    let open =
        |what: &str| Rdma::open(ip).map_err(|e| format!("no RDMA device for {ip} ({what}): {e}"));
    let server_ep: Endpoint<Rdma> =
        Endpoint::new(&reactors, open("server")?, cfg.endpoint.clone())?;
    let client_ep: Endpoint<Rdma> =
        Endpoint::new(&reactors, open("client")?, cfg.endpoint.clone())?;
    let addr = SocketAddr::new(ip, 20049);
    let server = Server::builder()
        .program(Program::new(CALC, 1..=1).procedure(ADD, add))
        .options(cfg.server)
        .start(&server_ep, addr)?;
    let client = Client::connect(&client_ep, addr, cfg.client)?;
    if !client.wait_connected(Duration::from_secs(5)) {
        return Err(format!("could not connect to {addr}").into());
    }
    let mut args = client.args().ok_or("no buffer")?;
    args.put_u32(40)?;
    args.put_u32(2)?;
    let reply = client.call_blocking(Proc::new(CALC, 1, ADD), args)?;
    println!("ADD(40, 2) = {:?} over {ip}", reply.results());
    client.close();
    drop(server);
    reactors.stop()?;
    server_ep.stop_workers();
    client_ep.stop_workers();
    Ok(())
}

fn main() {
    let ip: IpAddr = match std::env::args().nth(1).map(|a| a.parse()) {
        Some(Ok(ip)) => ip,
        Some(Err(_)) | None => {
            eprintln!("usage: embed-rdma IP   (the address of an RDMA-capable interface)");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(ip) {
        eprintln!("embed-rdma: {e}");
        std::process::exit(1);
    }
}
