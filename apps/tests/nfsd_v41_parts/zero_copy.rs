//! `rpcrdma-nfsd --nfs4` on the software provider: READ data through the client's Write chunk
//! (RFC 8267 §5.3) goes from where the memory backend stores it, as for NFSv3. A range inside
//! one registered block is sent from that block (`nfs4_read_zero_copy`); other ranges (across
//! two blocks, a small file's heap block, the directory backend) are read into one registered
//! buffer (`nfs4_read_ddp` only). Only the first READ of a COMPOUND uses the Write chunk, the
//! data's length stays in the reply and its XDR pad is not sent. The data stays correct: odd
//! offsets and lengths, short reads at the end of the file, a file overwritten while READs are
//! answered (copy on write: a READ sees a block whole, old or new), and a retry answered from
//! the slot (the data inline, as the first reply had it).
//!
//! Normal operation: `cargo test -p rpcrdma-apps --test nfsd_v41 zero_copy` (a module of that
//! test binary). Recovery: a failure names the range and the counters seen.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::nfsd_common::{options, scratch_dir, v41, Rig, Rng};
use rpcrdma_apps::nfs::daemon::Backend;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v4::{
    decode_compound, encode_compound_minor, op, CompoundReply, Op, OpResult, ReadPlacement, NFS4_OK,
};
use rpcrdma_poller::Proc;

/// The daemon's `max_io` (options()): the memory backend's block size.
const PIECE: usize = 256 * 1024;

fn rig(backend: Backend) -> Rig {
    let dir = match &backend {
        Backend::Dir(d) => Some(d.clone()),
        _ => None,
    };
    let mut o = options(backend);
    o.nfs4 = true;
    Rig::with(o, dir)
}

/// A file `name` holding `data`, written over NFSv3 in `PIECE`-octet WRITEs.
fn file(r: &Rig, name: &str, data: &[u8]) -> Fh {
    let how = CreateHow::Unchecked(Sattr3::default());
    let f = r.nfs.create(&r.root, name.as_bytes(), how).expect("create");
    for (i, piece) in data.chunks(PIECE).enumerate() {
        r.nfs
            .write(&f, (i * PIECE) as u64, piece, StableHow::FileSync, true)
            .expect("write");
    }
    f
}

/// Sends `ops` offering one Write chunk: the raw results and what the Write chunk received.
fn send_ddp(c: &NfsClient, ops: &[Op<'_>]) -> (Vec<u8>, Option<Vec<u8>>) {
    let e = encode_compound_minor("zc", 1, ops);
    let rpc = c.rpc();
    let mut a = rpc.args().expect("call buffer");
    a.put(&e.bytes).expect("arguments fit");
    a.receptacle(rpc.buffer().expect("receive buffer"))
        .expect("Write chunk");
    let r = rpc
        .call_blocking(Proc::new(100_003, 4, 1), a)
        .expect("COMPOUND answered");
    let placed = r
        .receptacle(0)
        .filter(|d| !d.is_empty())
        .map(<[u8]>::to_vec);
    (r.results().to_vec(), placed)
}

/// The READs' results of a decoded reply: (eof, length word, inline data).
fn results(d: &CompoundReply) -> Vec<(bool, u32, Vec<u8>)> {
    assert_eq!(d.status, NFS4_OK, "{d:?}");
    d.ops
        .iter()
        .filter_map(|o| match &o.result {
            OpResult::Read { eof, len, data } => Some((*eof, *len, data.clone())),
            _ => None,
        })
        .collect()
}

/// One session's COMPOUNDs on slot 0 over connection `c`.
struct Reader<'a> {
    c: &'a NfsClient,
    sid: [u8; 16],
    seq: u32,
    root: Vec<u8>,
    /// `sa_cachethis` of its SEQUENCEs (the Linux client never sets it for READ; the slot
    /// keeps at most 8 KiB, and a READ whose reply, placed data included, would be larger is
    /// shortened to it).
    cache_this: bool,
}

impl Reader<'_> {
    fn ops<'o>(&'o self, seq: u32, name: &'o str, reads: &[(u64, u32)]) -> Vec<Op<'o>> {
        let mut ops = vec![
            Op::Sequence {
                session: self.sid,
                sequence: seq,
                slot: 0,
                highest_slot: 0,
                cache_this: self.cache_this,
            },
            Op::PutFh(&self.root),
            Op::Lookup(name),
        ];
        ops.extend(
            reads
                .iter()
                .map(|&(offset, count)| Op::Read { offset, count }),
        );
        ops
    }

    /// READs of `name` in one COMPOUND offering a Write chunk: the first READ's result with
    /// its data from the chunk, then the other READs' results (inline).
    fn read(&mut self, name: &str, reads: &[(u64, u32)]) -> Vec<(bool, u32, Vec<u8>)> {
        self.seq += 1;
        let ops = self.ops(self.seq, name, reads);
        let (b, placed) = send_ddp(self.c, &ops);
        let d = decode_compound(&b, &ops, ReadPlacement::FirstDirect).expect("decodes");
        let mut got = results(&d);
        if let Some(first) = got.first_mut() {
            assert!(first.2.is_empty(), "the first READ's data is not inline");
            first.2 = placed.unwrap_or_default();
            assert_eq!(first.1 as usize, first.2.len(), "length word = data placed");
        }
        got
    }

    /// The last COMPOUND sent again (same slot and sequence id), offering a Write chunk: the
    /// slot's reply, every READ's data inline, nothing in the chunk.
    fn retry(&self, name: &str, reads: &[(u64, u32)]) -> Vec<(bool, u32, Vec<u8>)> {
        let ops = self.ops(self.seq, name, reads);
        let (b, placed) = send_ddp(self.c, &ops);
        assert_eq!(
            placed, None,
            "a retry answered from the slot has its data inline"
        );
        let d = decode_compound(&b, &ops, ReadPlacement::Inline).expect("decodes");
        results(&d)
    }
}

/// A session made over connection `c`.
fn reader<'a>(r: &Rig, c: &'a NfsClient) -> Reader<'a> {
    let ex = Op::ExchangeId {
        verifier: [7; 8],
        owner: b"zero copy",
        flags: 0,
    };
    let x = v41::compound(c, "zc", &[ex]);
    let Some(OpResult::ExchangeId(x)) = x.find(op::EXCHANGE_ID).map(|o| o.result.clone()) else {
        panic!("EXCHANGE_ID: {x:?}");
    };
    let cs = Op::CreateSession {
        clientid: x.clientid,
        sequence: x.sequence,
        flags: 0,
        fore: v41::channel_attrs_mib(),
        back: v41::channel_attrs_mib(),
        cb_program: 0x4000_0000,
    };
    let s = v41::compound(c, "zc", &[cs]);
    let Some(OpResult::CreateSession(s)) = s.find(op::CREATE_SESSION).map(|o| o.result.clone())
    else {
        panic!("CREATE_SESSION: {s:?}");
    };
    let sid = s.session;
    Reader {
        c,
        sid,
        seq: 0,
        root: r.root.as_bytes().to_vec(),
        cache_this: false,
    }
}

/// (`nfs4_read_ddp`, `nfs4_read_zero_copy`).
fn counts(r: &Rig) -> (u64, u64) {
    (r.counter("nfs4_read_ddp"), r.counter("nfs4_read_zero_copy"))
}

#[test]
fn accepts_reads_through_the_write_chunk_from_the_stores_blocks() {
    let r = rig(Backend::Memory);
    // Four whole blocks and a last one of 100 001 octets: all registered (64 KiB and more).
    let size = 4 * PIECE + 100_001;
    let data = Rng(0x41).bytes(size);
    file(&r, "big", &data);
    let mut rd = reader(&r, &r.nfs);
    let (ddp, zc) = counts(&r);
    // (offset, count, zero copy): whole blocks, odd ranges inside one, the end of the file.
    let cases: [(usize, usize, bool); 9] = [
        (0, PIECE, true),
        (PIECE, PIECE, true),
        (3 * PIECE, PIECE, true),
        (PIECE + 12_345, 77_777, true),
        (2 * PIECE + 1, 3, true),
        (4 * PIECE + 99_000, 50_000, true), // short: 1 001 octets to the end
        (PIECE - 1_001, 5_003, false),      // across two blocks: copied once
        (2 * PIECE - 7, PIECE, false),
        (0, 2 * PIECE, true), // cut to max_io: the first block
    ];
    let mut want = (0, 0);
    for (off, count, zero) in cases {
        let got = rd.read("big", &[(off as u64, count as u32)]);
        let end = (off + count.min(PIECE)).min(size);
        let (eof, _, d) = &got[0];
        assert_eq!(*eof, end == size, "eof at {off}+{count}");
        assert!(d[..] == data[off..end], "data of {off}+{count}");
        want.0 += 1;
        want.1 += u64::from(zero);
        let now = counts(&r);
        assert_eq!((now.0 - ddp, now.1 - zc), want, "{off}+{count}");
    }
    // At the end of the file: nothing to place, no DDP item.
    let got = rd.read("big", &[(size as u64, 100)]);
    assert_eq!(got[0], (true, 0, Vec::new()));
    assert_eq!(counts(&r), (ddp + want.0, zc + want.1));
    // Two READs in one COMPOUND: the first through the Write chunk, the second inline.
    let got = rd.read("big", &[(5, 70_001), (PIECE as u64 + 3, 1_001)]);
    assert!(got[0].2[..] == data[5..70_006]);
    assert_eq!(got[1].1, 1_001);
    assert!(got[1].2[..] == data[PIECE + 3..PIECE + 1_004]);
    assert_eq!(counts(&r), (ddp + want.0 + 1, zc + want.1 + 1));
    // A small file's data stays on the heap: copied once into a registered buffer.
    let small = Rng(9).bytes(3_001);
    file(&r, "small", &small);
    let got = rd.read("small", &[(1, 5_000)]);
    assert_eq!((got[0].0, &got[0].2[..]), (true, &small[1..]));
    assert_eq!(counts(&r), (ddp + want.0 + 2, zc + want.1 + 1));
    r.stop();
}

#[test]
fn overwrites_never_change_data_a_read_through_the_write_chunk_answered() {
    let r = rig(Backend::Memory);
    let f = file(&r, "race", &[0u8; PIECE]);
    let (_ep, other) = r.second_client(Ipv4Addr::new(10, 0, 0, 3));
    let mut rd = reader(&r, &other);
    let (_, zc) = counts(&r);
    // Before and after an overwrite of the middle.
    let before = rd.read("race", &[(0, PIECE as u32)]).remove(0).2;
    r.nfs
        .write(&f, 4096, &[0x22; 8192], StableHow::Unstable, true)
        .expect("write");
    let after = rd.read("race", &[(0, PIECE as u32)]).remove(0).2;
    assert!(
        before.iter().all(|&x| x == 0),
        "a READ before the write changed"
    );
    assert!(after[4096..4096 + 8192].iter().all(|&x| x == 0x22));
    assert!(after[..4096]
        .iter()
        .chain(&after[4096 + 8192..])
        .all(|&x| x == 0));
    // READs on another connection while the block is overwritten whole, again and again.
    r.nfs
        .write(&f, 0, &[0; PIECE], StableHow::Unstable, true)
        .expect("write");
    let stop = AtomicBool::new(false);
    let n = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let d = rd.read("race", &[(0, PIECE as u32)]).remove(0).2;
                assert_eq!(d.len(), PIECE);
                assert!(
                    d.iter().all(|&x| x == d[0]),
                    "a READ saw a block half overwritten (first {})",
                    d[0]
                );
                n += 1;
            }
            n
        });
        for i in 1..=200u32 {
            r.nfs
                .write(&f, 0, &[i as u8; PIECE], StableHow::Unstable, true)
                .expect("write");
        }
        stop.store(true, Ordering::Relaxed);
        t.join().expect("reader")
    });
    assert!(n > 0);
    assert!(
        counts(&r).1 - zc >= u64::from(n) + 2,
        "READs served from the block"
    );
    let d = rd.read("race", &[(0, PIECE as u32)]).remove(0).2;
    assert!(d.iter().all(|&x| x == 200));
    r.stop();
}

/// A READ through the Write chunk, the range overwritten, the COMPOUND retried: the slot's
/// reply carries the first reply's data inline; the next sequence id reads the new data.
fn retry_answered_from_the_slot(r: &Rig, zero_copy: bool) {
    let data = Rng(0x5107).bytes(PIECE);
    let f = file(r, "retry", &data);
    let mut rd = reader(r, &r.nfs);
    rd.cache_this = true;
    let replays = r.counter("nfs4_slot_replays");
    for (off, count) in [(1_001u64, 1_503u32), (PIECE as u64 - 2_001, 3_000)] {
        let (ddp, zc) = counts(r);
        let span = off as usize..(off as usize + count as usize).min(PIECE);
        let first = rd.read("retry", &[(off, count)]);
        assert!(first[0].2[..] == data[span.clone()], "{off}+{count}");
        let zero = u64::from(zero_copy);
        assert_eq!(counts(r), (ddp + 1, zc + zero), "{off}+{count}");
        r.nfs
            .write(
                &f,
                off,
                &vec![0xee; count as usize],
                StableHow::FileSync,
                false,
            )
            .expect("overwrite");
        let again = rd.retry("retry", &[(off, count)]);
        assert_eq!(again, first, "the retry's reply is the first one");
        assert_eq!(counts(r), (ddp + 1, zc + zero), "a retry places nothing");
        let next = rd.read("retry", &[(off, count)]);
        assert!(
            next[0].2.iter().all(|&x| x == 0xee),
            "the next READ sees the write"
        );
    }
    assert_eq!(r.counter("nfs4_slot_replays") - replays, 2);
}

#[test]
fn accepts_a_retry_of_a_read_through_the_write_chunk_answered_from_the_slot() {
    let r = rig(Backend::Memory);
    retry_answered_from_the_slot(&r, true);
    r.stop();
}

#[test]
fn accepts_reads_through_the_write_chunk_copied_once_on_the_dir_backend() {
    let d = scratch_dir("v41zc");
    let r = rig(Backend::Dir(d));
    let size = 2 * PIECE + 777;
    let data = Rng(0xd1).bytes(size);
    file(&r, "big", &data);
    let mut rd = reader(&r, &r.nfs);
    let (ddp, zc) = counts(&r);
    for (i, (off, count)) in [(0usize, PIECE), (12_345, 77_777), (2 * PIECE, 5_000)]
        .into_iter()
        .enumerate()
    {
        let got = rd.read("big", &[(off as u64, count as u32)]);
        let end = (off + count).min(size);
        assert_eq!(got[0].0, end == size);
        assert!(got[0].2[..] == data[off..end], "{off}+{count}");
        assert_eq!(counts(&r), (ddp + i as u64 + 1, zc), "copied, not lent");
    }
    retry_answered_from_the_slot(&r, false);
    r.stop();
}

/// A READ through the Write chunk whose reply, its placed data counted, would be larger than
/// the slot keeps, with `sa_cachethis` set: the READ returns what fits in the slot's 8 KiB, as
/// Linux nfsd shortens a READ to the session's reply bound, placed through the chunk; the same
/// READ without `sa_cachethis` returns all 20 000 octets.
#[test]
fn accepts_a_read_through_the_write_chunk_past_the_cached_size_shortened_to_it() {
    let r = rig(Backend::Memory);
    let data = Rng(0x7b).bytes(PIECE);
    file(&r, "big", &data);
    let mut rd = reader(&r, &r.nfs);
    rd.cache_this = true;
    let before = counts(&r);
    rd.seq += 1;
    let ops = rd.ops(rd.seq, "big", &[(0, 20_000)]);
    let (b, placed) = send_ddp(rd.c, &ops);
    let d = decode_compound(&b, &ops, ReadPlacement::FirstDirect).expect("decodes");
    let got = results(&d);
    let (eof, len) = (got[0].0, got[0].1 as usize);
    assert!(
        !eof && (7_000..8_192).contains(&len),
        "a short READ: {len} octets"
    );
    assert_eq!(
        placed.as_deref(),
        Some(&data[..len]),
        "placed through the chunk"
    );
    assert_eq!(counts(&r).0, before.0 + 1);
    rd.cache_this = false;
    let got = rd.read("big", &[(0, 20_000)]);
    assert!(got[0].2[..] == data[..20_000]);
    r.stop();
}
