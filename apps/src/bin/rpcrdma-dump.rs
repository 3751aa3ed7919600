//! `rpcrdma-dump`: encodes example RPC-over-RDMA headers (v1, v2, RFC 8797 private data, ONC RPC)
//! with the engine's encoders, decodes them back with the strict decoders, and prints a hex dump
//! and the decoded fields. With file arguments, decodes each file's bytes as a transport header
//! (version chosen from the header's second word) and prints the decoded form or the exact error
//! and the response the specification requires.

use std::process::ExitCode;

use rpcrdma_apps::cli;
use rpcrdma_engine::proto::chunks::{ChunkLimits, ChunkLists, ChunkListsRef, ReadSegment, Segment};
use rpcrdma_engine::proto::{self, private_data, v1, v2};
use rpcrdma_engine::rpc;

fn hex(bytes: &[u8]) {
    for (i, line) in bytes.chunks(16).enumerate() {
        let words: Vec<String> = line
            .chunks(4)
            .map(|w| w.iter().map(|b| format!("{b:02x}")).collect::<String>())
            .collect();
        println!("  {:04x}  {}", i * 16, words.join(" "));
    }
}

fn chunks(c: &ChunkLists<'_>) {
    for s in c.reads.iter() {
        println!(
            "    read  pos={:<6} handle={:#010x} len={:<7} off={:#x}",
            s.position, s.target.handle, s.target.length, s.target.offset
        );
    }
    for (i, w) in c.writes.iter().enumerate() {
        println!(
            "    write chunk {i}: {} segment(s), {} octets",
            w.len(),
            w.total_length()
        );
        for s in w.segments() {
            println!(
                "      handle={:#010x} len={:<7} off={:#x}",
                s.handle, s.length, s.offset
            );
        }
    }
    if let Some(r) = &c.reply {
        println!(
            "    reply chunk: {} segment(s), {} octets",
            r.len(),
            r.total_length()
        );
        for s in r.segments() {
            println!(
                "      handle={:#010x} len={:<7} off={:#x}",
                s.handle, s.length, s.offset
            );
        }
    }
}

fn describe(buf: &[u8]) {
    let Some((xid, vers)) = proto::peek(buf) else {
        println!(
            "  too short for a transport header ({} octets): dropped",
            buf.len()
        );
        return;
    };
    if vers == 2 {
        match v2::decode(buf, &v2::Limits::DEFAULT) {
            Ok(h) => {
                println!(
                    "  v2 xid={:#010x} credits={} header_len={} payload={}",
                    h.xid,
                    h.credits,
                    h.header_len,
                    h.payload.len()
                );
                match &h.body {
                    v2::Body::Msg(c) | v2::Body::Nomsg(c) => {
                        let kind = if matches!(h.body, v2::Body::Msg(_)) {
                            "RDMA2_MSG"
                        } else {
                            "RDMA2_NOMSG"
                        };
                        println!(
                            "  {kind} direction={:?} inv_handle={:#x}",
                            c.direction, c.inv_handle
                        );
                        chunks(&c.lists);
                    }
                    v2::Body::Error(e) => println!("  RDMA2_ERROR {e:?}"),
                    v2::Body::Optional(o) => println!(
                        "  RDMA2_OPTIONAL optdir={:?} opttype={} optinfo={} octets",
                        o.optdir,
                        o.opttype,
                        o.optinfo.len()
                    ),
                }
            }
            Err(e) => println!("  rejected: {e} -> {:?}", e.kind),
        }
        return;
    }
    match v1::decode(buf, &ChunkLimits::DEFAULT) {
        Ok(h) => {
            println!(
                "  v1 xid={:#010x} credits={} header_len={} payload={}",
                h.xid,
                h.credits,
                h.header_len,
                h.payload.len()
            );
            match &h.body {
                v1::Body::Msg(c) => {
                    println!("  RDMA_MSG");
                    chunks(c)
                }
                v1::Body::Nomsg(c) => {
                    println!("  RDMA_NOMSG");
                    chunks(c)
                }
                v1::Body::Msgp {
                    align,
                    thresh,
                    chunks: c,
                } => {
                    println!("  RDMA_MSGP align={align} thresh={thresh} (treated as RDMA_MSG)");
                    chunks(c)
                }
                v1::Body::Done => println!("  RDMA_DONE (ignored)"),
                v1::Body::Error(e) => println!("  RDMA_ERROR {e:?}"),
            }
            if let Some(dir) = rpc::msg_direction(h.payload) {
                println!(
                    "  RPC payload: msg_type={dir:?} xid={:#010x}",
                    rpc::peek_xid(h.payload).unwrap_or(0)
                );
            }
        }
        Err(e) => println!(
            "  rejected (xid {xid:#x}, vers {vers}): {e} -> respond {:?}",
            e.response()
        ),
    }
}

/// Prints each file named on the command line: its size, a hex dump and the decoded header.
const USAGE: &str = "usage: rpcrdma-dump [FILE...]
  no FILE     encode example RPC-over-RDMA headers (Version One, Version Two, RFC 8797
              private data) and print them decoded
  FILE...     decode each file's octets as a transport header (`--` before a name that
              starts with -)
  -h, --help      this text
  -V, --version   the program's version
";

/// The file arguments (every one readable), or the exit status of help, version or a usage
/// error.
fn files(argv: &[String]) -> Result<Vec<String>, ExitCode> {
    let prog = "rpcrdma-dump";
    if let Some(code) = cli::start(prog, argv, &|_| false, USAGE) {
        return Err(code);
    }
    let mut out = Vec::new();
    let mut operands = false;
    for a in argv {
        if !operands && a == "--" {
            operands = true;
        } else if !operands && a.starts_with('-') && a.len() > 1 {
            return Err(cli::usage_error(prog, &format!("unknown option {a:?}")));
        } else {
            cli::check_in_file("file", std::path::Path::new(a))
                .map_err(|e| cli::usage_error(prog, &e))?;
            out.push(a.clone());
        }
    }
    Ok(out)
}

fn dump_files(args: &[String]) -> ExitCode {
    for path in args {
        match std::fs::read(path) {
            Ok(b) => {
                println!("{path}: {} octets", b.len());
                hex(&b[..b.len().min(256)]);
                describe(&b);
            }
            Err(e) => {
                eprintln!("rpcrdma-dump: {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// An ONC RPC NULL call (NFS program 100003, version 3) to follow the transport headers.
const NULL_CALL: rpc::CallHeader<'static> = rpc::CallHeader {
    xid: 0x1234_5678,
    prog: 100_003,
    vers: 3,
    proc_num: 0,
    cred: rpc::OpaqueAuth::NONE,
    verf: rpc::OpaqueAuth::NONE,
};

/// Version One examples: inline call, long call, Write list, RDMA_ERROR.
fn v1_examples(buf: &mut [u8], writes: &[&[Segment]]) {
    let call = NULL_CALL;
    let mut rpcbuf = [0u8; 64];
    let rpclen = rpc::encode_call(&mut rpcbuf, &call).expect("NULL call fits 64 octets");

    let seg = |h, l, o| Segment::new(h, l, o);
    let reads = [
        ReadSegment::new(0, seg(0x101, 4096, 0x7f00_0000_1000)),
        ReadSegment::new(0, seg(0x102, 1500, 0x7f00_0000_9000)),
    ];
    let reply = [
        seg(0x301, 4096, 0x7f00_0004_0000),
        seg(0x302, 4096, 0x7f00_0005_0000),
    ];

    let examples: [(&str, v1::Message<'_>, bool); 4] = [
        (
            "v1 RDMA_MSG, inline NULL call",
            v1::Message {
                xid: call.xid,
                credits: 128,
                body: v1::MessageBody::Msg(ChunkListsRef::EMPTY),
            },
            true,
        ),
        (
            "v1 RDMA_NOMSG long call: two-segment Position Zero Read chunk, Reply chunk",
            v1::Message {
                xid: call.xid,
                credits: 128,
                body: v1::MessageBody::Nomsg(ChunkListsRef {
                    reads: &reads,
                    writes: &[],
                    reply: Some(&reply),
                }),
            },
            false,
        ),
        (
            "v1 RDMA_MSG with a Write list of two chunks",
            v1::Message {
                xid: call.xid,
                credits: 128,
                body: v1::MessageBody::Msg(ChunkListsRef {
                    reads: &[],
                    writes,
                    reply: None,
                }),
            },
            true,
        ),
        (
            "v1 RDMA_ERROR ERR_VERS 1..1",
            v1::Message {
                xid: call.xid,
                credits: 64,
                body: v1::MessageBody::Error(v1::RdmaError::Vers { low: 1, high: 1 }),
            },
            false,
        ),
    ];
    for (title, msg, with_rpc) in examples {
        let need = v1::encoded_len(&msg);
        let n = v1::encode(&msg, buf).expect("example fits");
        assert_eq!(n, need, "encoded_len agrees with encode");
        let total = if with_rpc {
            buf[n..n + rpclen].copy_from_slice(&rpcbuf[..rpclen]);
            n + rpclen
        } else {
            n
        };
        println!("\n{title} ({n} header octets, {total} total)");
        hex(&buf[..total]);
        describe(&buf[..total]);
    }
}

/// A Version Two RDMA2_MSG call with `rdma_inv_handle` and a Write list.
fn v2_example(buf: &mut [u8], writes: &[&[Segment]]) {
    let v2msg = v2::Message {
        xid: 0x2222_0001,
        credits: 32,
        body: v2::MessageBody::Msg(v2::ChunksRef {
            direction: v2::Direction::Call,
            inv_handle: 0x201,
            lists: ChunkListsRef {
                reads: &[],
                writes,
                reply: None,
            },
        }),
    };
    let n = v2::encode(&v2msg, buf).expect("v2 example fits");
    let call2 = rpc::CallHeader {
        xid: 0x2222_0001,
        ..NULL_CALL
    };
    let m = rpc::encode_call(&mut buf[n..], &call2).expect("rpc fits");
    println!("\nv2 RDMA2_MSG call with rdma_inv_handle and a Write list ({n} header octets)");
    hex(&buf[..n + m]);
    describe(&buf[..n + m]);
}

/// RFC 8797 private data: encoded, decoded and negotiated.
fn private_data_example() {
    let ours = private_data::PrivateData::v1(true, 4096, 4096);
    let wire = ours.encode();
    println!("\nRFC 8797 private data (R set, 4096/4096)");
    hex(&wire);
    let peer = private_data::find(&wire);
    println!("  decoded: {peer:?}");
    println!(
        "  negotiated with a peer that sent nothing: {:?}",
        private_data::negotiate(&ours, None)
    );
    println!(
        "  negotiated with itself: {:?}",
        private_data::negotiate(&ours, peer.as_ref())
    );
}

fn main() -> ExitCode {
    rpcrdma_apps::logging::init("warn");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match files(&argv) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if !args.is_empty() {
        return dump_files(&args);
    }
    let mut buf = [0u8; 1024];
    let seg = |h, l, o| Segment::new(h, l, o);
    let w0 = [
        seg(0x201, 8192, 0x7f00_0001_0000),
        seg(0x202, 4096, 0x7f00_0002_0000),
    ];
    let w1 = [seg(0x203, 4096, 0x7f00_0003_0000)];
    let writes: [&[Segment]; 2] = [&w0, &w1];
    v1_examples(&mut buf, &writes);
    v2_example(&mut buf, &writes);
    private_data_example();
    println!("\nA header with an unknown version (7) is answered with ERR_VERS:");
    let mut bad = [0u8; 28];
    bad[..16].copy_from_slice(&buf[..16]);
    bad[4..8].copy_from_slice(&7u32.to_be_bytes());
    describe(&bad);
    ExitCode::SUCCESS
}
