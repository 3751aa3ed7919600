//! The checked-in `nfs_tcp_services` fuzz seeds (`fuzz/seeds/nfs_tcp_services/`, laid out by
//! hand from RFC 5531 and RFC 1813 Appendix I in `fuzz/seeds/make.py`) mean what their names
//! say: the exports files parse, each MOUNT call gets the answer its name names from a client
//! inside and one outside the export's rules, each record stream reads as the records and the
//! end written into it, and each reply decodes to the values written into it. So the seeds
//! start the fuzzer inside each part and serve as golden vectors of it.

use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use rpcrdma_apps::nfs::exports::Exports;
use rpcrdma_apps::nfs::mount::{self, MNT3ERR_ACCES, MNT3ERR_NOENT, MNT3_OK};
use rpcrdma_apps::nfs::rpc_tcp::{handle_record, RecordReader};
use rpcrdma_apps::nfs::rpcbind;
use rpcrdma_apps::nfs::types::Fh;
use rpcrdma_engine::rpc::{decode_reply, AcceptStat, ReplyBody};

fn seed(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs_tcp_services");
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The seed's body after its mode octet, which must be `mode`.
fn body(name: &str, mode: u8) -> Vec<u8> {
    let s = seed(name);
    assert_eq!(s.first(), Some(&mode), "{name}");
    s[1..].to_vec()
}

#[test]
fn accepts_the_exports_file_seeds() {
    let e = Exports::parse(&String::from_utf8(body("exports_file", 0)).unwrap()).unwrap();
    let paths: Vec<_> = e.list().iter().map(|x| x.path.as_str()).collect();
    assert_eq!(paths, ["/export", "/other"]);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(e.list()[0].options_for(ip("10.1.2.3")).is_some());
    assert!(e.list()[1].options_for(ip("192.168.1.7")).is_some());
    let v6 = Exports::parse(&String::from_utf8(body("exports_ipv6", 0)).unwrap()).unwrap();
    assert!(v6.list()[0].options_for(ip("::1")).is_some());
    assert!(v6.list()[0].options_for(ip("fe80::1")).is_some());
    assert!(v6.list()[0].options_for(ip("10.0.0.1")).is_none());
}

/// The accept status and the first result word of `name`'s reply from `ip`.
fn mount(name: &str, ip: Ipv4Addr) -> (AcceptStat, Option<u32>) {
    let rules = Exports::parse("/inside 10.0.0.0/8(rw,sec=sys)\n/open *(ro,sec=sys:none)\n")
        .expect("the fuzz target's exports");
    let root = Fh::new(&[7u8; 16]).unwrap();
    let svc = mount::service(
        rules
            .list()
            .iter()
            .map(|e| mount::Export::of(e, root))
            .collect(),
    );
    let record = body(name, 1);
    let reply = handle_record(&*svc, SocketAddr::new(ip.into(), 700), &record)
        .reply()
        .expect(name);
    let (h, off) = decode_reply(&reply).expect(name);
    assert_eq!(h.xid.to_be_bytes(), record[..4], "{name}");
    let ReplyBody::Accepted { stat, .. } = h.body else {
        panic!("{name}: {:?}", h.body)
    };
    let word = reply
        .get(off..off + 4)
        .map(|w| u32::from_be_bytes(w.try_into().unwrap()));
    (stat, word)
}

#[test]
fn accepts_the_mount_seeds_with_the_answers_their_names_give() {
    let (inside, outside) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(192, 168, 1, 7));
    let ok = AcceptStat::Success;
    assert_eq!(mount("mount_null", inside), (ok, None));
    assert_eq!(mount("mount_mnt_inside", inside), (ok, Some(MNT3_OK)));
    assert_eq!(
        mount("mount_mnt_inside", outside),
        (ok, Some(MNT3ERR_ACCES))
    );
    assert_eq!(mount("mount_mnt_open", outside), (ok, Some(MNT3_OK)));
    assert_eq!(
        mount("mount_mnt_unknown", inside),
        (ok, Some(MNT3ERR_NOENT))
    );
    assert_eq!(mount("mount_umnt", inside), (ok, None));
    // An empty mount list and an export list: `false`, then the first export's `true`.
    assert_eq!(mount("mount_dump", inside), (ok, Some(0)));
    assert_eq!(mount("mount_export", inside), (ok, Some(1)));
    assert_eq!(mount("mount_umntall", inside), (ok, None));
    assert_eq!(
        mount("mount_v1", inside).0,
        AcceptStat::ProgMismatch { low: 3, high: 3 }
    );
}

/// Reads `name`'s stream in the pieces it sizes, a `WouldBlock` before each.
fn stream(name: &str) -> (Vec<Vec<u8>>, io::ErrorKind) {
    struct Pieces(Vec<u8>, Vec<u8>, bool);
    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.2 = !self.2;
            if self.2 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let size = if self.1.is_empty() {
                255
            } else {
                self.1.remove(0)
            };
            let n = (usize::from(size) + 1).min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }
    let b = body(name, 2);
    let (n, rest) = b.split_first().unwrap();
    let (sizes, data) = rest.split_at(usize::from(*n));
    let mut r = Pieces(data.to_vec(), sizes.to_vec(), false);
    let mut reader = RecordReader::new();
    let mut records = Vec::new();
    loop {
        match reader.read_from(&mut r, 1024) {
            Ok(Some(rec)) => records.push(rec),
            Ok(None) => return (records, io::ErrorKind::Other),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return (records, e.kind()),
        }
    }
}

#[test]
fn accepts_the_record_stream_seeds_as_written() {
    let clean = io::ErrorKind::Other;
    assert_eq!(
        stream("stream_two_records"),
        (vec![b"abcd".to_vec(), b"efgh".to_vec()], clean)
    );
    let eof = io::ErrorKind::UnexpectedEof;
    assert_eq!(stream("stream_cut_in_body"), (vec![], eof));
    assert_eq!(stream("stream_cut_in_mark"), (vec![b"ab".to_vec()], eof));
    assert_eq!(
        stream("stream_too_long"),
        (vec![], io::ErrorKind::InvalidData)
    );
    assert_eq!(stream("stream_empty_fragments"), (vec![vec![]], clean));
}

#[test]
fn accepts_the_reply_seeds_with_their_values() {
    let (fh, flavors) = mount::decode_mountres3(&body("replies_mountres3_ok", 3))
        .unwrap()
        .unwrap();
    assert_eq!((fh.as_bytes(), flavors), (&[7u8; 16][..], vec![1, 0]));
    assert_eq!(
        mount::decode_exports(&body("replies_exports", 3)).unwrap(),
        ["/export"]
    );
    assert_eq!(
        mount::decode_mountlist(&body("replies_mountlist", 3)).unwrap(),
        [("10.0.0.1".to_string(), "/export".to_string())]
    );
    let addr = String::from_utf8(body("replies_universal_addr", 3)).unwrap();
    assert_eq!(
        rpcbind::parse_universal_addr(&addr),
        Some("10.0.0.1:2049".parse().unwrap())
    );
}
