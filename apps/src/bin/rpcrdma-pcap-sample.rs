//! `rpcrdma-pcap-sample FILE.pcap [EXPECTED.tsv]`: runs a short RPC-over-RDMA Version One
//! exchange (a call with a Read list, a Write list and a Reply chunk answered by RDMA_NOMSG,
//! then an inline call and reply) over the soft provider, captures it as RoCEv2 frames into
//! FILE.pcap, and writes the `tshark -T fields` lines the `rpcordma` dissector must produce to
//! EXPECTED.tsv (or stdout). `scripts/check-pcap.sh` compares the two.

use std::path::PathBuf;
use std::process::ExitCode;

use rpcrdma_apps::cli;
use rpcrdma_apps::pcap::{Mtu, PcapTrace};
use rpcrdma_apps::rpc_sample;
use rpcrdma_engine::verbs::soft::SoftFabric;

const USAGE: &str = "usage: rpcrdma-pcap-sample FILE.pcap [EXPECTED.tsv] [--mtu N]
  FILE.pcap       where the capture goes (RoCEv2 frames)
  EXPECTED.tsv    where the expected `tshark -T fields` lines go [stdout]
  --mtu N         frame payload: 256, 512, 1024, 2048 or 4096 [1024]
  -h, --help      this text
  -V, --version   the program's version
";

/// What the command line asks for.
struct Args {
    pcap: PathBuf,
    expected: Option<PathBuf>,
    mtu: Mtu,
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let (mut files, mut mtu) = (Vec::new(), Mtu::M1024);
    let mut c = cli::ArgCursor::new(argv);
    while let Some(a) = c.next_name() {
        match a {
            "--mtu" => {
                let v = c.value(a)?;
                mtu =
                    v.parse().ok().and_then(Mtu::from_bytes).ok_or_else(|| {
                        format!("--mtu {v}: must be 256, 512, 1024, 2048 or 4096")
                    })?;
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("unknown option {:?}", c.token()))
            }
            _ => files.push(PathBuf::from(c.token())),
        }
    }
    let mut files = files.into_iter();
    let pcap = files.next().ok_or("give FILE.pcap")?;
    let expected = files.next();
    if let Some(extra) = files.next() {
        return Err(format!("unexpected argument {:?}", extra.display()));
    }
    cli::check_out_file("FILE.pcap", &pcap)?;
    if let Some(e) = &expected {
        cli::check_out_file("EXPECTED.tsv", e)?;
    }
    Ok(Args {
        pcap,
        expected,
        mtu,
    })
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let prog = "rpcrdma-pcap-sample";
    if let Some(code) = cli::start(prog, &argv, &|t| t == "--mtu", USAGE) {
        return code;
    }
    let Args {
        pcap,
        expected,
        mtu,
    } = match parse(&argv) {
        Ok(a) => a,
        Err(e) => return cli::usage_error(prog, &e),
    };
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
