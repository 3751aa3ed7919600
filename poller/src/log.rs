//! Events for operators through the `tracing` facade (docs/observability.md, "Logs"), and the
//! rate limit of the events a peer can cause at will.
//!
//! Normal operation: the runtime emits events where a connection or a server changes state —
//! accepted, refused, evicted, closed, lost, reconnected — and where a peer breaks the protocol
//! (a credit violation, an RDMA_ERROR). None is on the path of a call that succeeds: with no
//! subscriber, or one that filters the level out, an event costs a load and a compare on the
//! branch that reaches it, and nothing elsewhere. An embedder routes or silences them with its
//! own subscriber; targets are the module paths (`rpcrdma_poller::accept`, ...).
//!
//! Recovery: an event a remote peer can trigger as often as it likes (a refused connect, a
//! violation, a connection opened and closed in a loop) goes through [`log_limited!`](crate::log_limited): at most
//! [`BURST`] events a second per call site and per peer address reach the subscriber; the rest
//! are dropped and counted, and the next event of that peer that passes carries their number in
//! a `suppressed` field. A client can so cost the log at most [`BURST`] lines a second per call
//! site, whatever it does, and cannot use up the lines another peer's events need: each call
//! site keeps [`PEER_SLOTS`] budgets, and a peer's address picks one through a hash keyed at
//! random when the process starts (a peer cannot choose addresses that share a budget with a
//! given other one, beyond chance: 1 in [`PEER_SLOTS`]). A site reaches the subscriber at most
//! [`PEER_SLOTS`] × [`BURST`] times a second in all.

use std::hash::{BuildHasher, Hash};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

#[doc(hidden)]
pub use tracing as __tracing;

/// Events a call site of [`log_limited!`](crate::log_limited) passes per second.
pub const BURST: u32 = 10;

/// The rate limit of one call site: [`BURST`] events per whole second of a monotonic clock.
#[derive(Debug)]
pub struct Limit {
    /// The current second (high 32 bits) and the events passed in it (low 32 bits).
    window: AtomicU64,
    /// Events dropped since the last one that passed.
    suppressed: AtomicU64,
}

impl Default for Limit {
    fn default() -> Self {
        Limit::new()
    }
}

impl Limit {
    /// A limit with nothing passed yet.
    pub const fn new() -> Limit {
        Limit {
            window: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Takes a place for an event now: `Some(dropped)` (the events dropped since the last one
    /// that passed) when it may pass, `None` when it is dropped.
    pub fn take(&self) -> Option<u64> {
        self.take_at(now_secs())
    }

    /// [`Limit::take`] at second `sec` of the limit's clock.
    pub fn take_at(&self, sec: u32) -> Option<u64> {
        // Relaxed throughout: the counts order nothing else; a race between two threads at
        // the same site costs at most an event passed or dropped wrongly.
        let mut cur = self.window.load(Ordering::Relaxed);
        loop {
            let (at, n) = ((cur >> 32) as u32, cur as u32);
            let next = if at != sec {
                (u64::from(sec) << 32) | 1
            } else if n < BURST {
                cur + 1
            } else {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            match self
                .window
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.suppressed.swap(0, Ordering::Relaxed)),
                Err(now) => cur = now,
            }
        }
    }
}

/// Budgets of one call site of [`log_limited!`](crate::log_limited) with a peer: this many
/// [`Limit`]s, one picked per peer address.
pub const PEER_SLOTS: usize = 16;

/// The rate limits of one call site whose events a peer causes: [`PEER_SLOTS`] budgets of
/// [`BURST`] events a second, the peer's address (not its port: a peer opens connections from
/// as many ports as it likes) choosing one by a keyed hash.
#[derive(Debug)]
pub struct PeerLimit {
    slots: [Limit; PEER_SLOTS],
}

impl Default for PeerLimit {
    fn default() -> Self {
        PeerLimit::new()
    }
}

impl PeerLimit {
    /// Budgets with nothing passed yet.
    pub const fn new() -> PeerLimit {
        PeerLimit {
            slots: [const { Limit::new() }; PEER_SLOTS],
        }
    }

    /// [`Limit::take`] on the budget of `peer`.
    pub fn take(&self, peer: impl Peer) -> Option<u64> {
        self.take_at(peer, now_secs())
    }

    /// [`PeerLimit::take`] at second `sec` of the limit's clock.
    pub fn take_at(&self, peer: impl Peer, sec: u32) -> Option<u64> {
        self.slots[slot_of(peer.address())].take_at(sec)
    }
}

/// What identifies the peer an event is about: its IP address.
pub trait Peer {
    /// The peer's address.
    fn address(&self) -> IpAddr;
}

impl Peer for IpAddr {
    fn address(&self) -> IpAddr {
        *self
    }
}

impl Peer for SocketAddr {
    fn address(&self) -> IpAddr {
        self.ip()
    }
}

impl<T: Peer + ?Sized> Peer for &T {
    fn address(&self) -> IpAddr {
        (**self).address()
    }
}

/// The budget of `ip`: a hash keyed once per process (std's random `RandomState`).
fn slot_of(ip: IpAddr) -> usize {
    static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut h = KEY.get_or_init(Default::default).build_hasher();
    ip.hash(&mut h);
    (std::hash::Hasher::finish(&h) % PEER_SLOTS as u64) as usize
}

/// Whole seconds since the first call in the process (a monotonic clock).
fn now_secs() -> u32 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs() as u32
}

/// A `tracing` event at level `$lvl` (`ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE`) that passes
/// at most [`BURST`](crate::log::BURST) times a second from this call site; when some were
/// dropped before it, their number is in its field `suppressed`. The rest of the arguments are those
/// of `tracing::event!` after the level (fields, then the message). The limit is consulted
/// only when the level is enabled for the call site's module.
///
/// `log_limited!(peer: ADDR; LEVEL, ...)` is the form for events a remote peer causes: `ADDR`
/// (an `IpAddr` or a `SocketAddr`, see [`Peer`](crate::log::Peer)) picks the budget, so the
/// limit holds per call site and per peer address ([`PeerLimit`](crate::log::PeerLimit)). The
/// address is not logged by this form: name it in the fields as the event wants it.
#[macro_export]
macro_rules! log_limited {
    (peer: $peer:expr; $lvl:ident, $($arg:tt)+) => {{
        static LIMIT: $crate::log::PeerLimit = $crate::log::PeerLimit::new();
        if $crate::log::__tracing::enabled!($crate::log::__tracing::Level::$lvl) {
            $crate::__log_passed!(LIMIT.take($peer), $lvl, $($arg)+);
        }
    }};
    ($lvl:ident, $($arg:tt)+) => {{
        static LIMIT: $crate::log::Limit = $crate::log::Limit::new();
        if $crate::log::__tracing::enabled!($crate::log::__tracing::Level::$lvl) {
            $crate::__log_passed!(LIMIT.take(), $lvl, $($arg)+);
        }
    }};
}

/// The event of [`log_limited!`](crate::log_limited) once its limit answered `$taken`.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_passed {
    ($taken:expr, $lvl:ident, $($arg:tt)+) => {{
        match $taken {
            Some(0) => $crate::log::__tracing::event!(
                $crate::log::__tracing::Level::$lvl,
                $($arg)+
            ),
            Some(suppressed) => $crate::log::__tracing::event!(
                $crate::log::__tracing::Level::$lvl,
                suppressed,
                $($arg)+
            ),
            None => {}
        }
    }};
}

/// One event a [`Capture`] kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Its level.
    pub level: tracing::Level,
    /// Its target (the emitting module's path, unless it named another).
    pub target: String,
    /// Its message.
    pub message: String,
    /// Its other fields, in order, each as its `Display` (strings and `%` fields) or `Debug`
    /// (`?` fields) text.
    pub fields: Vec<(String, String)>,
}

impl Captured {
    /// The text of field `name`, if the event has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A subscriber that keeps in memory every event at `max` or more severe: for tests (and
/// embedders) checking what is logged. Spans are accepted and ignored.
#[derive(Debug, Clone)]
pub struct Capture {
    max: tracing::Level,
    events: std::sync::Arc<std::sync::Mutex<Vec<Captured>>>,
}

impl Capture {
    /// A capture of the events at `max` or more severe.
    pub fn new(max: tracing::Level) -> Capture {
        Capture {
            max,
            events: Default::default(),
        }
    }

    /// The first event with `message` for which `f` holds, waiting for it at most `timeout`
    /// (events logged on other threads arrive when they do).
    pub fn wait_for(
        &self,
        message: &str,
        timeout: std::time::Duration,
        f: impl Fn(&Captured) -> bool,
    ) -> Option<Captured> {
        let end = Instant::now() + timeout;
        loop {
            let found = self
                .events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|e| e.message == message && f(e))
                .cloned();
            if found.is_some() || Instant::now() >= end {
                return found;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The events kept so far, oldest first.
    pub fn events(&self) -> Vec<Captured> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

struct Fields<'a>(&'a mut Captured);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        self.put(f, v.to_string());
    }

    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        self.put(f, format!("{v:?}"));
    }
}

impl Fields<'_> {
    fn put(&mut self, f: &tracing::field::Field, v: String) {
        if f.name() == "message" {
            self.0.message = v;
        } else {
            self.0.fields.push((f.name().to_string(), v));
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, e: &tracing::Event<'_>) {
        let mut c = Captured {
            level: *e.metadata().level(),
            target: e.metadata().target().to_string(),
            message: String::new(),
            fields: Vec::new(),
        };
        e.record(&mut Fields(&mut c));
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_events_past_the_burst_and_counts_them_for_the_next_second() {
        let l = Limit::new();
        for i in 0..BURST {
            assert_eq!(l.take_at(7), Some(0), "event {i} of second 7");
        }
        assert_eq!(l.take_at(7), None);
        assert_eq!(l.take_at(7), None);
        assert_eq!(
            l.take_at(8),
            Some(2),
            "the first of second 8 says two were dropped"
        );
        assert_eq!(l.take_at(8), Some(0));
    }

    /// An address whose budget is not that of `of`.
    fn other_slot_than(of: IpAddr) -> IpAddr {
        (1..=255u8)
            .map(|i| IpAddr::from([10, 0, 1, i]))
            .find(|&ip| slot_of(ip) != slot_of(of))
            .expect("16 slots: some of 255 addresses fall elsewhere")
    }

    #[test]
    fn rejects_one_peers_flood_using_up_another_peers_budget() {
        let l = PeerLimit::new();
        let hostile: IpAddr = [10, 0, 0, 66].into();
        let honest = other_slot_than(hostile);
        for port in 0..(BURST as u16 * 5) {
            // Any port of the hostile address: the budget is the address's.
            let _ = l.take_at(SocketAddr::new(hostile, 1000 + port), 3);
        }
        assert_eq!(
            l.take_at(hostile, 3),
            None,
            "the flood used its own budget up"
        );
        for i in 0..BURST {
            assert_eq!(
                l.take_at(honest, 3),
                Some(0),
                "honest event {i} of second 3"
            );
        }
        assert_eq!(
            l.take_at(honest, 3),
            None,
            "the honest peer has its own BURST"
        );
        assert_eq!(
            l.take_at(hostile, 4),
            Some(BURST as u64 * 4 + 1),
            "the hostile peer's next second says how many of its events were dropped"
        );
    }

    #[test]
    fn accepts_another_peers_event_through_the_macro_during_a_flood() {
        let cap = Capture::new(tracing::Level::INFO);
        let hostile: IpAddr = [192, 0, 2, 1].into();
        let honest = other_slot_than(hostile);
        tracing::subscriber::with_default(cap.clone(), || {
            for (i, peer) in std::iter::repeat(hostile)
                .take(BURST as usize * 3)
                .chain([honest])
                .enumerate()
            {
                crate::log_limited!(peer: peer; WARN, %peer, i, "violation");
            }
        });
        let ev = cap.events();
        let from = |ip: IpAddr| {
            ev.iter()
                .filter(|e| e.field("peer") == Some(&ip.to_string()))
                .count()
        };
        assert!(
            from(hostile) < BURST as usize * 3,
            "the flood was limited: {ev:?}"
        );
        assert_eq!(
            from(honest),
            1,
            "the honest peer's one event passed: {ev:?}"
        );
    }

    #[test]
    fn accepts_limited_events_captured_with_their_fields() {
        let cap = Capture::new(tracing::Level::INFO);
        tracing::subscriber::with_default(cap.clone(), || {
            for i in 0..BURST + 5 {
                crate::log_limited!(INFO, peer = %"10.0.0.7:9", i, "refused");
            }
            tracing::debug!("filtered out");
        });
        let ev = cap.events();
        // Within one second of the clock all but BURST are dropped (a second boundary in the
        // loop lets a few more through, never all).
        assert!(
            ev.len() >= BURST as usize && ev.len() < (BURST + 5) as usize,
            "{ev:?}"
        );
        assert_eq!(ev[0].message, "refused");
        assert_eq!(ev[0].field("peer"), Some("10.0.0.7:9"));
        assert_eq!(
            ev[0].field("suppressed"),
            None,
            "none dropped before the first"
        );
        assert_eq!(ev[0].target, "rpcrdma_poller::log::tests");
    }
}
