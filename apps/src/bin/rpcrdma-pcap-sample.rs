//! `rpcrdma-pcap-sample FILE.pcap [EXPECTED.tsv]`: runs a short RPC-over-RDMA Version One
//! exchange (a call with a Read list, a Write list and a Reply chunk answered by RDMA_NOMSG,
//! then an inline call and reply) over the soft provider, captures it as RoCEv2 frames into
//! FILE.pcap, and writes the `tshark -T fields` lines the `rpcordma` dissector must produce to
//! EXPECTED.tsv (or stdout). `scripts/check-pcap.sh` compares the two.

use std::path::PathBuf;
use std::process::ExitCode;

use rpcrdma_apps::pcap::{Mtu, PcapTrace};
use rpcrdma_apps::rpc_sample;
use rpcrdma_engine::verbs::soft::SoftFabric;

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pcap) = args.first().map(PathBuf::from) else {
        eprintln!("usage: rpcrdma-pcap-sample FILE.pcap [EXPECTED.tsv] [--mtu N]");
        return ExitCode::from(2);
    };
    let mut expected = None;
    let mut mtu = Mtu::M1024;
    let mut i = 1;
    while i < args.len() {
        if args[i] == "--mtu" {
            match args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .and_then(Mtu::from_bytes)
            {
                Some(m) => mtu = m,
                None => {
                    eprintln!("--mtu takes 256, 512, 1024, 2048 or 4096");
                    return ExitCode::from(2);
                }
            }
            i += 2;
        } else {
            expected = Some(PathBuf::from(&args[i]));
            i += 1;
        }
    }
    let fabric = SoftFabric::new();
    let trace = match PcapTrace::create(&fabric, &pcap, mtu) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", pcap.display());
            return ExitCode::FAILURE;
        }
    };
    let msgs = match rpc_sample::run(&fabric) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("exchange failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    match trace.finish() {
        Ok(n) => eprintln!("{n} frames written to {}", pcap.display()),
        Err(e) => {
            eprintln!("{}: {e}", pcap.display());
            return ExitCode::FAILURE;
        }
    }
    let lines = rpc_sample::expected_tshark_fields(&msgs);
    match expected {
        Some(p) => {
            if let Err(e) = std::fs::write(&p, lines) {
                eprintln!("{}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{lines}"),
    }
    ExitCode::SUCCESS
}
