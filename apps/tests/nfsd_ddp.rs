//! Direct data placement in both directions through `rpcrdma-nfsd` on the software provider,
//! on both backends, checked by the server's counters: WRITE data as a Read chunk
//! (`chunks.read`) or inline, READ data into a Write chunk (`chunks.write`, `read.ddp`) or
//! inline (`read.inline`), large results through a Reply chunk (`chunks.reply`), and calls
//! longer than the inline threshold as Position-Zero long calls (`transport.long_calls`).
//!
//! Normal operation: each step takes a snapshot of the counters, makes one call and checks
//! which counters moved by how much (calls are sequential, so the deltas are exact).
//! Recovery: nothing to recover.

mod nfsd_common;

use nfsd_common::{on_dir, on_memory, Rig};
use rpcrdma_apps::nfs::types::{CreateHow, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::proto::{decode_readdir_res, decode_res, proc3, Args3, Res3};

const NAMES: [&str; 9] = [
    "chunks.read",
    "chunks.write",
    "chunks.reply",
    "chunks.pz",
    "read.ddp",
    "read.inline",
    "transport.long_calls",
    "transport.read_chunk_calls",
    "transport.write_chunk_calls",
];

/// The counters of [`NAMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snap([u64; NAMES.len()]);

impl Snap {
    fn take(r: &Rig) -> Snap {
        Snap(NAMES.map(|n| r.counter(n)))
    }

    /// The counters that moved since `self`, with how much.
    fn moved(&self, r: &Rig) -> Vec<(&'static str, u64)> {
        let now = Snap::take(r);
        NAMES
            .iter()
            .zip(now.0.iter().zip(self.0.iter()))
            .filter(|(_, (a, b))| a != b)
            .map(|(n, (a, b))| (*n, a - b))
            .collect()
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13 ^ seed) as u8)
        .collect()
}

fn ddp_both_directions(r: &Rig) {
    let f = r
        .nfs
        .create(&r.root, b"ddp", CreateHow::Guarded(Sattr3::default()))
        .unwrap();
    let big = pattern(256 * 1024, 1);
    // WRITE by DDP: one Read chunk.
    let s = Snap::take(r);
    let (n, _, _) = r.nfs.write(&f, 0, &big, StableHow::Unstable, true).unwrap();
    assert_eq!(n as usize, big.len());
    let moved = s.moved(r);
    assert!(moved.contains(&("chunks.read", 1)), "{moved:?}");
    assert!(
        moved.contains(&("transport.read_chunk_calls", 1)),
        "{moved:?}"
    );
    assert!(
        !moved.iter().any(|(k, _)| *k == "transport.long_calls"),
        "{moved:?}"
    );
    // A small WRITE inline: no chunk.
    let tail = pattern(1001, 2);
    let s = Snap::take(r);
    r.nfs
        .write(&f, big.len() as u64, &tail, StableHow::FileSync, false)
        .unwrap();
    let moved = s.moved(r);
    assert!(
        !moved.iter().any(|(k, _)| k.starts_with("chunks.read")),
        "{moved:?}"
    );
    // A WRITE of 6001 octets inline: longer than the inline threshold, a long call.
    let mid = pattern(6001, 3);
    let s = Snap::take(r);
    r.nfs
        .write(&f, 100_003, &mid, StableHow::DataSync, false)
        .unwrap();
    let moved = s.moved(r);
    assert!(moved.contains(&("transport.long_calls", 1)), "{moved:?}");
    assert!(moved.contains(&("chunks.pz", 1)), "{moved:?}");
    let mut model = big.clone();
    model.extend_from_slice(&tail);
    model[100_003..106_004].copy_from_slice(&mid);
    // READ 256 KiB by DDP: one Write chunk, placed by the server.
    let s = Snap::take(r);
    let (back, eof) = r.nfs.read(&f, 0, 256 * 1024, true).unwrap();
    assert!(!eof);
    assert_eq!(back, &model[..256 * 1024]);
    let moved = s.moved(r);
    assert!(moved.contains(&("chunks.write", 1)), "{moved:?}");
    assert!(moved.contains(&("read.ddp", 1)), "{moved:?}");
    assert!(!moved.iter().any(|(k, _)| *k == "read.inline"), "{moved:?}");
    // A READ asking for more than rtmax gets rtmax.
    let (back, eof) = r.nfs.read(&f, 0, 1 << 20, true).unwrap();
    assert_eq!((back.len(), eof), (256 * 1024, false));
    // The rest, by DDP, reaches the end.
    let (back, eof) = r.nfs.read(&f, 256 * 1024, 256 * 1024, true).unwrap();
    assert!(eof);
    assert_eq!(back, tail);
    // A small READ without a Write chunk (and no Reply chunk: it fits inline), ending
    // exactly at the end of the file.
    let s = Snap::take(r);
    let (back, eof) = r.nfs.read(&f, 262_145, 1000, false).unwrap();
    assert!(eof);
    assert_eq!(back, &model[262_145..]);
    let moved = s.moved(r);
    assert_eq!(moved, vec![("read.inline", 1)]);
    // A large READ without a Write chunk comes back short, through the Reply chunk, and
    // correct: the client reads on from there.
    let s = Snap::take(r);
    let (back, eof) = r.nfs.read(&f, 7, 256 * 1024, false).unwrap();
    let moved = s.moved(r);
    assert!(moved.contains(&("chunks.reply", 1)), "{moved:?}");
    assert!(moved.contains(&("read.inline", 1)), "{moved:?}");
    assert!(
        back.len() > 4096 && back.len() < 256 * 1024,
        "{}",
        back.len()
    );
    assert!(!eof);
    assert_eq!(back, &model[7..7 + back.len()]);
}

#[test]
fn accepts_ddp_write_and_read_and_inline_both_ways_memory() {
    on_memory(ddp_both_directions);
}

#[test]
fn accepts_ddp_write_and_read_and_inline_both_ways_dir() {
    on_dir("ddp", ddp_both_directions);
}

fn long_calls_and_reply_chunks(r: &Rig) {
    // A SYMLINK with a 4000-octet target and a 200-octet name: more than 4096 octets of
    // arguments, sent as a Position-Zero long call.
    let target: Vec<u8> = (0..4000).map(|i| b'a' + (i % 26) as u8).collect();
    let name = vec![b'L'; 200];
    let s = Snap::take(r);
    let l = r
        .nfs
        .symlink(&r.root, &name, &target)
        .expect("long SYMLINK");
    let moved = s.moved(r);
    assert!(moved.contains(&("transport.long_calls", 1)), "{moved:?}");
    assert!(moved.contains(&("chunks.pz", 1)), "{moved:?}");
    // READLINK of it: more than fits inline, so through the Reply chunk.
    let s = Snap::take(r);
    assert_eq!(r.nfs.readlink(&l).unwrap(), target);
    let moved = s.moved(r);
    assert!(moved.contains(&("chunks.reply", 1)), "{moved:?}");
    // Asked without a Reply chunk first, the client is told the reply did not fit and
    // sends the call again offering one.
    let r2 = r
        .nfs
        .call_hint(proc3::READLINK, &Args3::Readlink { fh: l }, 512)
        .expect("READLINK retried with a Reply chunk");
    match decode_res(proc3::READLINK, r2.results()).unwrap() {
        Res3::Readlink(Ok((_, t))) => assert_eq!(t, &target[..]),
        other => panic!("{other:?}"),
    }
    // A directory with 300 entries: a READDIRPLUS with a large count comes back through
    // the Reply chunk with far more than an inline reply holds.
    let d = r.nfs.mkdir(&r.root, b"many", Sattr3::default()).unwrap();
    for i in 0..300 {
        r.nfs
            .create(
                &d,
                format!("entry-{i:04}").as_bytes(),
                CreateHow::Guarded(Sattr3::default()),
            )
            .unwrap();
    }
    let s = Snap::take(r);
    let page = r.nfs.readdir_page(&d, 0, [0; 8], 32 * 1024, true).unwrap();
    let moved = s.moved(r);
    assert!(moved.contains(&("chunks.reply", 1)), "{moved:?}");
    assert!(page.entries.len() > 60, "{}", page.entries.len());
    assert!(page
        .entries
        .iter()
        .all(|e| e.fh.is_some() && e.attr.is_some()));
    // The same without a Reply chunk: the server fills only what an inline reply holds.
    for plus in [false, true] {
        let args = if plus {
            Args3::Readdirplus {
                dir: d,
                cookie: 0,
                verf: [0; 8],
                dircount: 32 * 1024,
                maxcount: 32 * 1024,
            }
        } else {
            Args3::Readdir {
                dir: d,
                cookie: 0,
                verf: [0; 8],
                count: 32 * 1024,
            }
        };
        let s = Snap::take(r);
        let rep = r
            .nfs
            .call_hint(args.proc_num(), &args, 1024)
            .expect("inline listing");
        assert!(s.moved(r).is_empty(), "no chunk: {:?}", s.moved(r));
        assert!(rep.results().len() <= 4096, "{}", rep.results().len());
        let page = decode_readdir_res(rep.results(), plus).unwrap();
        assert!(!page.eof && page.entries.len() > 5, "plus={plus}");
    }
}

#[test]
fn accepts_long_calls_and_reply_chunks_memory() {
    on_memory(long_calls_and_reply_chunks);
}

#[test]
fn accepts_long_calls_and_reply_chunks_dir() {
    on_dir("longcall", long_calls_and_reply_chunks);
}
