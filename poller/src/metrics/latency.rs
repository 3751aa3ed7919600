//! Latency histograms per RPC program and procedure, recorded on a reactor and copied out to
//! readers without ever blocking it.
//!
//! Normal operation: a set of histograms is owned by one reactor thread and only it writes them: a
//! client's (`CallTimes`, in the client connection: round trips, call on the wire to reply
//! received), or a server's share on one node (`NodeLatency`, in the node, shared by the server's
//! connections there: call received to reply Send completed, with the stamps per call slot in each
//! server connection's dispatcher, `ServerTimes`). A set is created with every histogram it will
//! ever use when the client connects or the server starts (histograms on) — [`MAX_PROCS`]
//! histograms, one per distinct (program, version, procedure) in the order the owner first sees
//! them, and one "other" histogram for the rest — and stamp tables per call slot when a connection
//! is created. Per call: a stamp and a histogram index when it starts (a scan of at most
//! `MAX_PROCS` triples), the difference recorded when it completes: no allocation, lock or system
//! call (the stamps are the reactor's poll clock, so latencies are multiples of the poll period).
//! With histograms off every method is one branch.
//!
//! Hand-off to readers ([`LatencyReader::snapshot`], or [`LatencyReader::request`] then
//! [`LatencyReader::collect`]): the reader raises a request number (`want`, an increment), and
//! waits until the reactor has served it (`done` ≥ its number). On its next round the reactor
//! sees `want` ahead of what it last served (a Relaxed load: a late view only delays the copy
//! by a round) and copies its histograms into the shared slot with `try_lock` — never waiting:
//! if a reader holds the slot, it tries again next round — then publishes `done` (Release; the
//! reader's Acquire load pairs with it, and the slot's mutex orders the copied data besides).
//! Copying into the slot's pre-allocated histograms of the same bounds does not allocate. The
//! reader then clones the slot (allocating on its own thread). Readers may ask at the same
//! time: each waits for a copy served at or after its own request.
//!
//! Recovery: a reader gives up after its timeout (the connection's reactor stopped or the
//! connection is gone) and gets the last copy served, if any. Values beyond the histograms'
//! range are clamped to it; a call that completes without a stamp (started before metrics
//! could see it) is not recorded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Distinct (program, version, procedure) triples a recorder keeps apart; later ones share the
/// "other" histogram.
pub const MAX_PROCS: usize = 24;
/// Smallest latency tracked apart (ns): 1 µs.
const LOW_NS: u64 = 1_000;
/// Largest latency tracked (ns): 100 s; longer ones are recorded as 100 s.
const HIGH_NS: u64 = 100_000_000_000;
/// Significant digits (1 % resolution). Counts are `u32` (a count saturates at 2^32 - 1).
const SIGFIG: u8 = 2;
/// Marks a record with no call started.
const NONE: u8 = u8::MAX;

/// One procedure's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcKey {
    /// RPC program.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
}

/// A new, empty histogram of the bounds every recorder uses (about 11 KiB of counts).
fn histogram() -> Histogram<u32> {
    // Constant bounds that `new_with_bounds` accepts (low ≥ 1, high ≥ 2·low, sigfig ≤ 5).
    Histogram::new_with_bounds(LOW_NS, HIGH_NS, SIGFIG).expect("constant histogram bounds")
}

/// The histograms of one recorder, as copied to readers.
#[derive(Clone)]
struct Table {
    keys: [ProcKey; MAX_PROCS],
    nkeys: usize,
    /// `MAX_PROCS` histograms, then "other".
    hists: Vec<Histogram<u32>>,
    /// Exact sum of the values recorded into each histogram (ns).
    sums: Vec<u64>,
}

impl Table {
    fn new() -> Table {
        Table {
            keys: [ProcKey::default(); MAX_PROCS],
            nkeys: 0,
            hists: (0..=MAX_PROCS).map(|_| histogram()).collect(),
            sums: vec![0; MAX_PROCS + 1],
        }
    }

    /// Copies `src` into `self` (same bounds: no allocation).
    fn copy_from(&mut self, src: &Table) {
        self.keys = src.keys;
        self.nkeys = src.nkeys;
        for (d, s) in self.hists.iter_mut().zip(&src.hists) {
            d.reset();
            // Same bounds on both sides: `add` neither fails nor resizes.
            let _ = d.add(s);
        }
        self.sums.copy_from_slice(&src.sums);
    }
}

/// What readers share with the recorder (see the module documentation).
struct Shared {
    /// Request number raised by readers.
    want: AtomicU64,
    /// Last request number the reactor served.
    done: AtomicU64,
    /// The copy readers take.
    slot: Mutex<Table>,
}

/// Histograms owned by one reactor, and their hand-off to readers.
struct Hists {
    table: Table,
    served: u64,
    shared: Arc<Shared>,
}

impl Hists {
    fn new() -> (Hists, LatencyReader) {
        let shared = Arc::new(Shared {
            want: AtomicU64::new(0),
            done: AtomicU64::new(0),
            slot: Mutex::new(Table::new()),
        });
        let h = Hists {
            table: Table::new(),
            served: 0,
            shared: Arc::clone(&shared),
        };
        (h, LatencyReader(shared))
    }

    /// The histogram index of a procedure: its own (assigned on first sight, while fewer than
    /// [`MAX_PROCS`] are known) or "other". A scan of at most `MAX_PROCS` triples.
    #[inline]
    fn index(&mut self, prog: u32, vers: u32, proc_num: u32) -> u8 {
        let k = ProcKey {
            prog,
            vers,
            proc_num,
        };
        let t = &mut self.table;
        let i = match t.keys[..t.nkeys].iter().position(|x| *x == k) {
            Some(i) => i,
            None if t.nkeys < MAX_PROCS => {
                t.keys[t.nkeys] = k;
                t.nkeys += 1;
                t.nkeys - 1
            }
            None => MAX_PROCS,
        };
        i as u8
    }

    /// Records `ns` into histogram `i` (clamped to the bounds: never resizes).
    #[inline]
    fn record(&mut self, i: u8, ns: u64) {
        let v = ns.clamp(LOW_NS, HIGH_NS);
        let i = usize::from(i).min(MAX_PROCS);
        self.table.hists[i].saturating_record(v);
        self.table.sums[i] = self.table.sums[i].wrapping_add(v);
    }

    /// Serves a reader's request, if one is waiting (once per reactor round).
    #[inline]
    fn serve(&mut self) {
        // Relaxed: only a hint that a request is waiting; readers wait for the `done` store
        // below, not for any particular round.
        let want = self.shared.want.load(Ordering::Relaxed);
        if want == self.served {
            return;
        }
        // try_lock: never wait for a reader; a busy slot is retried next round.
        let Ok(mut slot) = self.shared.slot.try_lock() else {
            return;
        };
        slot.copy_from(&self.table);
        drop(slot);
        self.served = want;
        // Release: pairs with the Acquire load in `LatencyReader::snapshot` (the slot's mutex
        // also orders the copy before the reader's lock).
        self.shared.done.store(want, Ordering::Release);
    }
}

/// Start stamps of a connection's calls: per slot, the stamp (ns) and histogram index.
struct Starts(Box<[(u64, u8)]>);

impl Starts {
    fn new(n: usize) -> Starts {
        Starts(vec![(0, NONE); n].into_boxed_slice())
    }

    #[inline]
    fn set(&mut self, slot: u32, now: u64, i: u8) {
        if let Some(s) = self.0.get_mut(slot as usize) {
            *s = (now, i);
        }
    }

    /// The latency and histogram of the call in `slot` at `now`, and clears it.
    #[inline]
    fn take(&mut self, slot: u32, now: u64) -> Option<(u8, u64)> {
        let s = self.0.get_mut(slot as usize)?;
        let (t0, i) = core::mem::replace(s, (0, NONE));
        (i != NONE).then(|| (i, now.saturating_sub(t0)))
    }
}

struct ClientRec {
    hists: Hists,
    /// Per call record: start stamp and histogram index.
    starts: Starts,
    /// Histogram index per call record, chosen when its header is written.
    index: Box<[u8]>,
}

/// A client connection's latency recorder (reactor side). Empty when metrics are off.
#[derive(Default)]
pub(crate) struct CallTimes(Option<Box<ClientRec>>);

/// Reads a recorder's histograms from any thread (see [`LatencyReader::snapshot`]).
#[derive(Clone)]
pub struct LatencyReader(Arc<Shared>);

impl core::fmt::Debug for LatencyReader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LatencyReader").finish_non_exhaustive()
    }
}

/// One procedure's latency histogram, copied out of a reactor.
#[derive(Clone, Debug)]
pub struct ProcLatency {
    /// The procedure; `None` for the "other" histogram (procedures beyond the first
    /// [`MAX_PROCS`] distinct ones).
    pub key: Option<ProcKey>,
    /// The latencies, in nanoseconds (1 µs .. 100 s, two significant digits).
    pub hist: Histogram<u32>,
    /// The exact sum of the latencies recorded, in nanoseconds.
    pub sum_ns: u64,
}

impl CallTimes {
    /// A recorder for `records` call records when `on`, else an empty one.
    pub(crate) fn new(on: bool, records: usize) -> (CallTimes, Option<LatencyReader>) {
        if !on {
            return (CallTimes(None), None);
        }
        let (hists, reader) = Hists::new();
        let rec = ClientRec {
            hists,
            starts: Starts::new(records),
            index: vec![MAX_PROCS as u8; records].into_boxed_slice(),
        };
        (CallTimes(Some(Box::new(rec))), Some(reader))
    }

    /// Call record `rec` now carries a call of `prog`/`vers`/`proc_num`.
    #[inline]
    pub(crate) fn key(&mut self, rec: u32, prog: u32, vers: u32, proc_num: u32) {
        if let Some(r) = self.0.as_deref_mut() {
            let i = r.hists.index(prog, vers, proc_num);
            if let Some(x) = r.index.get_mut(rec as usize) {
                *x = i;
            }
        }
    }

    /// Call record `rec` went on the wire at `now` (ns; a retransmission restarts the clock).
    #[inline]
    pub(crate) fn start(&mut self, rec: u32, now: u64) {
        if let Some(r) = self.0.as_deref_mut() {
            let i = r
                .index
                .get(rec as usize)
                .copied()
                .unwrap_or(MAX_PROCS as u8);
            r.starts.set(rec, now, i);
        }
    }

    /// Call record `rec` completed at `now`: records its latency.
    #[inline]
    pub(crate) fn done(&mut self, rec: u32, now: u64) {
        if let Some(r) = self.0.as_deref_mut() {
            if let Some((i, ns)) = r.starts.take(rec, now) {
                r.hists.record(i, ns);
            }
        }
    }

    /// Serves a reader's request, if one is waiting (once per reactor round).
    #[inline]
    pub(crate) fn serve(&mut self) {
        if let Some(r) = self.0.as_deref_mut() {
            r.hists.serve();
        }
    }
}

/// A server's latency readers, one per node (created when the server starts with histograms
/// on). Each node's reactor records the server's calls into its own histograms.
pub(crate) struct ServerLatency {
    nodes: Vec<Mutex<Option<Hists>>>,
    readers: Vec<LatencyReader>,
}

impl ServerLatency {
    /// Histograms for `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> ServerLatency {
        let (hists, readers): (Vec<_>, Vec<_>) = (0..nodes)
            .map(|_| {
                let (h, r) = Hists::new();
                (Mutex::new(Some(h)), r)
            })
            .unzip();
        ServerLatency {
            nodes: hists,
            readers,
        }
    }

    /// The readers of the nodes that have served a connection of the server (node index and
    /// reader); a node never used has no histograms of this server, and nobody to copy them.
    pub(crate) fn readers(&self) -> Vec<(usize, LatencyReader)> {
        let unused = |m: &Mutex<Option<Hists>>| m.lock().map_or(true, |h| h.is_some());
        self.nodes
            .iter()
            .zip(&self.readers)
            .enumerate()
            .filter(|(_, (m, _))| !unused(m))
            .map(|(i, (_, r))| (i, r.clone()))
            .collect()
    }
}

/// The histograms a node's reactor keeps for the servers whose connections it serves (in
/// the node's environment; owned and written by the reactor alone).
#[derive(Default)]
pub(crate) struct NodeLatency {
    boards: Vec<(Arc<ServerLatency>, Hists)>,
}

impl NodeLatency {
    /// A server connection of `server` is accepted on node `node` with `slots` call slots:
    /// its stamps, attached to the server's histograms of this node (taken over from the
    /// server on first use; accept time, may allocate).
    pub(crate) fn attach(
        &mut self,
        server: Option<&Arc<ServerLatency>>,
        node: usize,
        slots: usize,
    ) -> ServerTimes {
        let Some(s) = server else {
            return ServerTimes::default();
        };
        let at = match self.boards.iter().position(|(o, _)| Arc::ptr_eq(o, s)) {
            Some(i) => Some(i),
            None => {
                let h = s
                    .nodes
                    .get(node)
                    .and_then(|m| m.lock().unwrap_or_else(|e| e.into_inner()).take());
                h.map(|h| {
                    self.boards.push((Arc::clone(s), h));
                    self.boards.len() - 1
                })
            }
        };
        match at {
            Some(board) => ServerTimes(Some(Box::new(ServerRec {
                board,
                starts: Starts::new(slots),
                done: Vec::with_capacity(slots),
            }))),
            None => ServerTimes::default(),
        }
    }

    /// Serves readers' requests (once per node poll; nothing when no server is attached).
    #[inline]
    pub(crate) fn serve(&mut self) {
        for (_, h) in &mut self.boards {
            h.serve();
        }
    }
}

struct ServerRec {
    board: usize,
    starts: Starts,
    /// Latencies measured at completions, recorded at the connection's next round.
    done: Vec<(u8, u64)>,
}

/// A server connection's call stamps (reactor side). Empty when histograms are off.
#[derive(Default)]
pub(crate) struct ServerTimes(Option<Box<ServerRec>>);

impl ServerTimes {
    /// A call arrived in engine call slot `slot` at `now`; `stream` is its RPC message (the
    /// procedure is read from it: program, version and procedure words after XID, direction
    /// and RPC version; a stream too short for them goes to "other").
    #[inline]
    pub(crate) fn start(&mut self, board: &mut NodeLatency, slot: u32, stream: &[u8], now: u64) {
        let Some(r) = self.0.as_deref_mut() else {
            return;
        };
        let Some((_, h)) = board.boards.get_mut(r.board) else {
            return;
        };
        let word = |at: usize| {
            stream
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let i = match (word(12), word(16), word(20)) {
            (Some(p), Some(v), Some(n)) => h.index(p, v, n),
            _ => MAX_PROCS as u8,
        };
        r.starts.set(slot, now, i);
    }

    /// The reply Send of the call in `slot` (its work-request index) completed at `now` (on the completion path: no
    /// board at hand, so the latency waits for [`ServerTimes::flush`]).
    #[inline]
    pub(crate) fn sent(&mut self, slot: u64, now: u64) {
        let (Some(r), Ok(slot)) = (self.0.as_deref_mut(), u32::try_from(slot)) else {
            return;
        };
        if let Some(d) = r.starts.take(slot, now) {
            // At most one entry per slot between flushes: the capacity is never exceeded.
            if r.done.len() < r.done.capacity() {
                r.done.push(d);
            }
        }
    }

    /// Records the latencies measured since the last round.
    #[inline]
    pub(crate) fn flush(&mut self, board: &mut NodeLatency) {
        let Some(r) = self.0.as_deref_mut() else {
            return;
        };
        if r.done.is_empty() {
            return;
        }
        if let Some((_, h)) = board.boards.get_mut(r.board) {
            for &(i, ns) in &r.done {
                h.record(i, ns);
            }
        }
        r.done.clear();
    }
}

/// A copy asked for ([`LatencyReader::request`]), to collect with [`LatencyReader::collect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRequest(u64);

impl LatencyReader {
    /// The recorder's histograms: asks its reactor for a copy and waits for it at most
    /// `timeout` (then returns the last copy served, which may be empty). Histograms with
    /// nothing recorded are left out. Allocates on the calling thread only.
    pub fn snapshot(&self, timeout: Duration) -> Vec<ProcLatency> {
        let r = self.request();
        self.collect(r, Instant::now() + timeout)
    }

    /// Asks the reactor for a copy (without waiting): ask several, then collect each, and the
    /// waits overlap.
    pub fn request(&self) -> CopyRequest {
        // Relaxed: the number only has to be unique and increasing (the RMW gives both); the
        // reactor compares it and publishes what it served through `done`. Whatever the
        // reactor recorded before it sees this request is in the copy (same thread).
        CopyRequest(self.0.want.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Waits until the reactor served `r` or `deadline` passed, then copies the histograms out
    /// (the last copy served, when the reactor did not answer in time).
    pub fn collect(&self, r: CopyRequest, deadline: Instant) -> Vec<ProcLatency> {
        let s = &self.0;
        // Acquire: pairs with the Release store in `Hists::serve`. `done` only grows (one
        // writer storing the values it loaded from `want`, which only grows).
        while s.done.load(Ordering::Acquire) < r.0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        // While we hold the slot the reactor's `try_lock` fails: it copies next round.
        let t = s.slot.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (i, h) in t.hists.iter().enumerate() {
            if h.is_empty() {
                continue;
            }
            let key = if i < MAX_PROCS {
                t.keys.get(i).copied().filter(|_| i < t.nkeys)
            } else {
                None
            };
            out.push(ProcLatency {
                key,
                hist: h.clone(),
                sum_ns: t.sums[i],
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_records_per_procedure_and_other_bucket() {
        let (mut t, r) = CallTimes::new(true, 4);
        let r = r.unwrap();
        for p in 0..(MAX_PROCS as u32 + 2) {
            t.key(0, 7, 1, p);
            t.start(0, 1_000);
            t.done(0, 1_000 + 50_000);
        }
        // A completion without a start is not recorded.
        t.done(1, 9_999_999);
        let h = std::thread::spawn(move || r.snapshot(Duration::from_secs(10)));
        while !h.is_finished() {
            t.serve();
            std::thread::yield_now();
        }
        let snap = h.join().unwrap();
        assert_eq!(snap.len(), MAX_PROCS + 1);
        let other = snap.last().unwrap();
        assert!(other.key.is_none());
        assert_eq!(other.hist.len(), 2);
        assert_eq!(other.sum_ns, 100_000);
        assert_eq!(snap[3].key.unwrap().proc_num, 3);
        assert_eq!(snap[3].hist.len(), 1);
    }

    /// An RPC call header's first six words: XID, CALL, RPC version 2, program, version,
    /// procedure (RFC 5531 §9).
    fn call_header(prog: u32, vers: u32, proc_num: u32) -> Vec<u8> {
        [1u32, 0, 2, prog, vers, proc_num]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect()
    }

    #[test]
    fn accepts_server_board_shared_by_connections_of_a_node() {
        let server = Arc::new(ServerLatency::new(2));
        let mut board = NodeLatency::default();
        let mut a = board.attach(Some(&server), 1, 4);
        let mut b = board.attach(Some(&server), 1, 4);
        assert_eq!(board.boards.len(), 1, "one board per server per node");
        a.start(&mut board, 0, &call_header(100003, 3, 6), 1_000);
        b.start(&mut board, 0, &call_header(100003, 3, 6), 2_000);
        b.start(&mut board, 1, &call_header(100003, 3, 7), 2_000);
        // Too short for the procedure words: "other".
        b.start(&mut board, 2, &[0u8; 16], 2_000);
        a.sent(0, 11_000);
        b.sent(0, 32_000);
        b.sent(2, 5_000);
        // An index beyond the stamps and a slot never started record nothing.
        b.sent(99, 5_000);
        b.sent(3, 5_000);
        a.flush(&mut board);
        b.flush(&mut board);
        let readers = server.readers();
        assert_eq!(readers.len(), 1, "only node 1 serves the server");
        let r = readers[0].1.clone();
        let h = std::thread::spawn(move || r.snapshot(Duration::from_secs(10)));
        while !h.is_finished() {
            board.serve();
            std::thread::yield_now();
        }
        let snap = h.join().unwrap();
        assert_eq!(snap.len(), 2);
        assert_eq!(snap[0].key.map(|k| k.proc_num), Some(6));
        assert_eq!((snap[0].hist.len(), snap[0].sum_ns), (2, 40_000));
        assert!(snap[1].key.is_none());
        // Node 0 was never attached: its reader times out empty; no board, no stamps.
        assert!(server.readers[0]
            .snapshot(Duration::from_millis(10))
            .is_empty());
        let mut none = board.attach(None, 0, 4);
        none.start(&mut board, 0, &call_header(1, 1, 1), 0);
        assert!(none.0.is_none());
    }

    #[test]
    fn accepts_reader_timeout_when_nobody_serves() {
        let (_t, r) = CallTimes::new(true, 1);
        assert!(r.unwrap().snapshot(Duration::from_millis(10)).is_empty());
        let (off, none) = CallTimes::new(false, 1);
        assert!(off.0.is_none() && none.is_none());
    }
}
