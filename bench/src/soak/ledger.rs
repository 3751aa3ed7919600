//! The soak's ledger: every call it issues, forward or backward, is entered before it is
//! started and must leave exactly once, through its completion callback.
//!
//! Normal operation: [`Ledger::begin`] hands out an id and records the call as in flight;
//! [`Ledger::refused`] takes back a call the API refused at submission (its callback never
//! runs); [`Ledger::finish`] takes the completion: it removes the id (a second completion of
//! the same id finds nothing and is a duplicate), checks the outcome (a reply whose octets
//! were checked by the caller, or an error from the kind's documented list) and counts it.
//!
//! Recovery: nothing here fails; every breach of an invariant is recorded as a violation
//! (the first [`MAX_KEPT`] with their text) for the report, which makes the soak exit
//! non-zero.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rpcrdma_engine::conn::CallError;
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_poller::ClientError;

use super::wire::Kind;

/// Violation texts kept for the report (all are counted).
pub const MAX_KEPT: usize = 40;

/// One call in flight.
#[derive(Debug, Clone, Copy)]
struct Pending {
    kind: Kind,
    client: u32,
}

/// The outcome of one finished call as its callback saw it.
pub type Outcome = Result<Result<(), String>, ClientError>;

/// Counts per kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct KindCounts {
    /// Calls started (accepted by the API).
    pub issued: u64,
    /// Calls refused at submission (never started; not counted as issued).
    pub refused: u64,
    /// Completed with a reply whose octets were right.
    pub ok: u64,
    /// Completed with a documented error.
    pub failed: u64,
}

/// Whether `e` is a documented outcome of a call of `kind` under the soak's faults.
///
/// Forward calls: `TimedOut` (clients with `call_timeout_ms`), `RetransmitsExhausted`
/// (connections lost more often than `max_retransmits`), `ReconnectFailed` (a server
/// unreachable for longer than the reconnect attempts last), `Closed` (client replaced),
/// `Rpc(SYSTEM_ERR)` (a handler found its endpoint pool empty: counted on the server side).
/// Backward calls: `TimedOut`, `SessionClosed` (grace period over or session closed),
/// `Transport(ConnectionLost)` (connection without session lost). Not `NotServed`: every
/// session here calls `enable()` before `bind()`, so a backward call never reaches a connection
/// that does not serve it (the race that once produced it is pinned by
/// `poller/tests/api_backchannel_race.rs`).
pub fn documented(kind: Kind, e: &ClientError) -> bool {
    match kind {
        Kind::Backward => matches!(
            e,
            ClientError::TimedOut
                | ClientError::SessionClosed
                | ClientError::Transport(CallError::ConnectionLost)
        ),
        _ => matches!(
            e,
            ClientError::TimedOut
                | ClientError::RetransmitsExhausted
                | ClientError::ReconnectFailed
                | ClientError::Closed
                | ClientError::Rpc(AcceptStat::SystemErr)
        ),
    }
}

/// The ledger (shared by the issuing thread and every callback).
#[derive(Debug, Default)]
pub struct Ledger {
    next: AtomicU64,
    inflight: Mutex<HashMap<u64, Pending>>,
    counts: Mutex<BTreeMap<Kind, KindCounts>>,
    errors: Mutex<BTreeMap<(Kind, String), u64>>,
    violations: AtomicU64,
    kept: Mutex<Vec<String>>,
    duplicates: AtomicU64,
    bad_bytes: AtomicU64,
    undocumented: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Enters a call of `kind` by `client` (slot index) and returns its id.
    pub fn begin(&self, kind: Kind, client: u32) -> u64 {
        // Relaxed: a unique-number counter.
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.inflight).insert(id, Pending { kind, client });
        lock(&self.counts).entry(kind).or_default().issued += 1;
        id
    }

    /// Takes back call `id`: the API refused it, its callback will never run.
    pub fn refused(&self, id: u64) {
        if let Some(p) = lock(&self.inflight).remove(&id) {
            let mut c = lock(&self.counts);
            let k = c.entry(p.kind).or_default();
            k.issued -= 1;
            k.refused += 1;
        } else {
            self.violation(format!("refused call {id} was not in flight"));
        }
    }

    /// Records a breach of an invariant.
    pub fn violation(&self, text: String) {
        self.violations.fetch_add(1, Ordering::Relaxed);
        let mut k = lock(&self.kept);
        if k.len() < MAX_KEPT {
            k.push(text);
        }
    }

    /// Takes the completion of call `id`.
    pub fn finish(&self, id: u64, outcome: Outcome) {
        let Some(p) = lock(&self.inflight).remove(&id) else {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            self.violation(format!(
                "call {id} completed again or was never issued: {outcome:?}"
            ));
            return;
        };
        match outcome {
            Ok(Ok(())) => lock(&self.counts).entry(p.kind).or_default().ok += 1,
            Ok(Err(why)) => {
                self.bad_bytes.fetch_add(1, Ordering::Relaxed);
                self.violation(format!(
                    "{} call {id} (client {}) completed OK with wrong results: {why}",
                    p.kind.name(),
                    p.client
                ));
            }
            Err(e) => {
                lock(&self.counts).entry(p.kind).or_default().failed += 1;
                *lock(&self.errors)
                    .entry((p.kind, format!("{e:?}")))
                    .or_default() += 1;
                if !documented(p.kind, &e) {
                    self.undocumented.fetch_add(1, Ordering::Relaxed);
                    self.violation(format!(
                        "{} call {id} (client {}) failed with an undocumented error {e:?}",
                        p.kind.name(),
                        p.client
                    ));
                }
            }
        }
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        lock(&self.inflight).len()
    }

    /// Up to `n` calls in flight: `(id, kind, client)`.
    pub fn in_flight_sample(&self, n: usize) -> Vec<(u64, Kind, u32)> {
        let m = lock(&self.inflight);
        let mut v: Vec<_> = m.iter().map(|(&id, p)| (id, p.kind, p.client)).collect();
        v.sort_unstable();
        v.truncate(n);
        v
    }

    /// Completions counted so far (OK, failed, wrong bytes) — for progress checks.
    pub fn completed(&self) -> u64 {
        let c = lock(&self.counts);
        c.values().map(|k| k.ok + k.failed).sum::<u64>() + self.bad_bytes.load(Ordering::Relaxed)
    }

    /// Counts per kind.
    pub fn counts(&self) -> BTreeMap<Kind, KindCounts> {
        lock(&self.counts).clone()
    }

    /// Failures by `(kind, error)`.
    pub fn errors(&self) -> BTreeMap<(Kind, String), u64> {
        lock(&self.errors).clone()
    }

    /// `(violations, duplicates, wrong results, undocumented errors)`.
    pub fn breaches(&self) -> (u64, u64, u64, u64) {
        (
            self.violations.load(Ordering::Relaxed),
            self.duplicates.load(Ordering::Relaxed),
            self.bad_bytes.load(Ordering::Relaxed),
            self.undocumented.load(Ordering::Relaxed),
        )
    }

    /// The violation texts kept.
    pub fn kept(&self) -> Vec<String> {
        lock(&self.kept).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_second_completion_as_duplicate() {
        let l = Ledger::new();
        let id = l.begin(Kind::Inline, 0);
        l.finish(id, Ok(Ok(())));
        assert_eq!(l.breaches(), (0, 0, 0, 0));
        l.finish(id, Ok(Ok(())));
        assert_eq!(l.breaches(), (1, 1, 0, 0));
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn rejects_wrong_bytes_and_undocumented_errors() {
        let l = Ledger::new();
        let a = l.begin(Kind::WriteDdp, 1);
        let b = l.begin(Kind::Backward, 1);
        let c = l.begin(Kind::Inline, 1);
        let d = l.begin(Kind::Inline, 1);
        l.finish(a, Ok(Err("flipped".into())));
        l.finish(b, Err(ClientError::RetransmitsExhausted));
        l.finish(c, Err(ClientError::RetransmitsExhausted));
        l.refused(d);
        assert_eq!(l.breaches(), (2, 0, 1, 1));
        let k = l.counts()[&Kind::Inline];
        assert_eq!((k.issued, k.refused, k.failed), (1, 1, 1));
        assert_eq!(l.in_flight(), 0);
    }
}
