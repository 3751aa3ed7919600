//! What rpcrdma-nfsd reads outside RPC-over-RDMA, on arbitrary bytes; the first octet picks:
//! 0. an exports(5) file (`apps::nfs::exports::Exports::parse`): no panic, the list within
//!    its bounds, every export found again by its path, every rule asked about a few clients;
//! 1. a call record to the MOUNT v3 service (`apps::nfs::mount::service`, through
//!    `apps::nfs::rpc_tcp::handle_record`, from a client inside and one outside the export's
//!    rules): a reply, when there is one, is a REPLY record that decodes, with the call's XID;
//! 2. a byte stream of RFC 5531 record marking read by `apps::nfs::rpc_tcp::RecordReader` in
//!    pieces the input sizes, with reads that would block between them: the records, the end
//!    and the error are those of a reading of the whole stream at once (the bound 1 KiB);
//! 3. the client side's decoders of MOUNT and rpcbind replies (`decode_mountres3`,
//!    `decode_exports`, `decode_mountlist`, `decode_rpcblist`, `parse_universal_addr`).
#![no_main]
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::exports::{self, Exports, MAX_CLIENTS, MAX_EXPORTS};
use rpcrdma_apps::nfs::mount;
use rpcrdma_apps::nfs::rpc_tcp::{handle_record, RecordReader, LAST_FRAGMENT};
use rpcrdma_apps::nfs::rpcbind;
use rpcrdma_apps::nfs::types::Fh;
use rpcrdma_engine::rpc::decode_reply;

/// Clients every parsed rule is asked about.
const CLIENTS: [IpAddr; 4] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 1, 7)),
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// The record bound mode 2 reads with.
const MAX_RECORD: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => exports_file(body),
        1 => mount_record(body),
        2 => record_stream(body),
        _ => client_decoders(body),
    }
});

fn exports_file(body: &[u8]) {
    let text = String::from_utf8_lossy(body);
    let Ok(list) = Exports::parse(&text) else {
        return;
    };
    assert!(list.list().len() <= MAX_EXPORTS);
    for (i, e) in list.list().iter().enumerate() {
        assert!(e.clients.len() <= MAX_CLIENTS);
        assert_eq!(list.find(&e.path).map(|(at, _)| at), Some(i), "{}", e.path);
        for ip in CLIENTS {
            assert_eq!(e.options_for(ip), exports::options_for(&e.clients, ip));
        }
    }
}

fn mount_record(record: &[u8]) {
    let rules = Exports::parse("/inside 10.0.0.0/8(rw,sec=sys)\n/open *(ro,sec=sys:none)\n")
        .expect("the target's exports parse");
    let root = Fh::new(&[7u8; 16]).expect("a 16-octet handle");
    let service = mount::service(
        rules
            .list()
            .iter()
            .map(|e| mount::Export::of(e, root))
            .collect(),
    );
    for ip in [CLIENTS[0], CLIENTS[1]] {
        let Some(reply) = handle_record(&*service, SocketAddr::new(ip, 700), record).reply() else {
            continue;
        };
        let (header, _) = decode_reply(&reply).expect("the reply decodes");
        assert_eq!(header.xid.to_be_bytes(), record[..4], "the call's XID");
    }
}

/// A reader that hands the stream out in pieces whose sizes the input chooses, saying
/// `WouldBlock` before each piece.
struct Pieces<'a> {
    stream: &'a [u8],
    sizes: &'a [u8],
    blocked: bool,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.blocked {
            self.blocked = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.blocked = false;
        let (&size, rest) = self.sizes.split_first().unwrap_or((&255, &[]));
        self.sizes = rest;
        let n = (usize::from(size) + 1)
            .min(buf.len())
            .min(self.stream.len());
        buf[..n].copy_from_slice(&self.stream[..n]);
        self.stream = &self.stream[n..];
        Ok(n)
    }
}

/// How a reading of a stream ends.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The stream ended between records.
    Clean,
    /// The stream ended inside a record.
    Eof,
    /// A record over the bound.
    TooLong,
}

/// The records of `stream` read at once, and how the reading ended.
fn whole(mut stream: &[u8]) -> (Vec<Vec<u8>>, End) {
    let mut records = Vec::new();
    let mut record = Vec::new();
    // A mark's first octet starts a record; its last fragment ends it.
    let mut started = false;
    loop {
        if stream.is_empty() {
            return (records, if started { End::Eof } else { End::Clean });
        }
        let Some((mark, rest)) = stream.split_first_chunk::<4>() else {
            return (records, End::Eof);
        };
        started = true;
        let word = u32::from_be_bytes(*mark);
        let len = (word & !LAST_FRAGMENT) as usize;
        if record.len() + len > MAX_RECORD {
            return (records, End::TooLong);
        }
        if rest.len() < len {
            return (records, End::Eof);
        }
        record.extend_from_slice(&rest[..len]);
        stream = &rest[len..];
        if word & LAST_FRAGMENT != 0 {
            records.push(std::mem::take(&mut record));
            started = false;
        }
    }
}

fn record_stream(body: &[u8]) {
    let Some((&split, rest)) = body.split_first() else {
        return;
    };
    let (sizes, stream) = rest.split_at(usize::from(split).min(rest.len()));
    let (want, want_end) = whole(stream);
    let mut r = Pieces {
        stream,
        sizes,
        blocked: false,
    };
    let mut reader = RecordReader::new();
    let mut got = Vec::new();
    let end = loop {
        match reader.read_from(&mut r, MAX_RECORD) {
            Ok(Some(rec)) => got.push(rec),
            Ok(None) => break End::Clean,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break End::Eof,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => break End::TooLong,
            Err(e) => panic!("unexpected error {e}"),
        }
    };
    assert_eq!(got, want);
    assert_eq!(end, want_end);
}

fn client_decoders(body: &[u8]) {
    if let Ok(Ok((_, flavors))) = mount::decode_mountres3(body) {
        assert!(flavors.len() <= 64);
    }
    let _ = mount::decode_exports(body);
    let _ = mount::decode_mountlist(body);
    let _ = rpcbind::decode_rpcblist(body);
    if let Some(addr) = rpcbind::parse_universal_addr(&String::from_utf8_lossy(body)) {
        let again = rpcbind::universal_addr(&addr);
        assert_eq!(rpcbind::parse_universal_addr(&again), Some(addr));
    }
}
