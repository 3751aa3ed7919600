//! One connection of a [`TcpRpcServer`](super::TcpRpcServer): record reassembly that works on
//! blocking and non-blocking sockets alike ([`RecordReader`], RFC 5531 §11 record marking),
//! the connection's deadline, its pending reply, and which connection a newcomer evicts when
//! the limits are reached ([`pick_victim`]).
//!
//! Normal operation: the server's loop calls [`Conn::on_ready`] when the socket is ready. A
//! connection reads records until one is complete, answers it with [`super::handle_record`]
//! and writes the reply (none when the service dropped the call) without blocking; while a
//! reply is not fully written it reads nothing more, so it holds at most one record being
//! read (at most `max_record` octets, allocated as they arrive) and one reply. Its deadline
//! ([`Conn::deadline`]) depends on what it is doing: the first record must start within
//! `first_record_timeout` of the accept, a started record must be complete within
//! `record_timeout` of its first octet, a reply fully written within `write_timeout`, and
//! between records the connection may stay idle for `idle_timeout`. Progress inside a record
//! or a reply never moves its deadline.
//!
//! Recovery: a deadline passed, a record over the bound, a record that cannot be answered, a
//! service that panics, or a socket error closes this connection only, with the [`Close`]
//! reason the server counts.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use super::{frame, handle_record, Answer, RpcService, ServerConfig, LAST_FRAGMENT};

/// Largest read into a record at once (from a buffer on the stack): a record's buffer grows
/// with the octets received, not with the length its fragment header claims.
const READ_CHUNK: usize = 16 * 1024;

/// Records one connection serves per readiness report before the others get their turn.
const RECORDS_PER_TURN: usize = 16;

/// Reassembles one record from its fragments, keeping its state across reads that would
/// block, so one parser serves blocking clients and the non-blocking server.
#[derive(Debug, Default)]
pub struct RecordReader {
    mark: [u8; 4],
    mark_len: usize,
    /// Octets of the current fragment's body still to read.
    frag_left: usize,
    /// The current fragment's mark is read and its body is being read.
    in_body: bool,
    /// The current fragment is the record's last.
    last: bool,
    /// An octet of a record not yet complete has been read.
    started: bool,
    record: Vec<u8>,
}

impl RecordReader {
    /// A reader between records.
    pub fn new() -> RecordReader {
        RecordReader::default()
    }

    /// Whether part of a record has been read and its end has not.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Reads until a record is complete (`Ok(Some)`) or the stream ends cleanly between
    /// records (`Ok(None)`). The end of stream inside a record is
    /// [`io::ErrorKind::UnexpectedEof`]; a record whose fragments add up to more than `max`
    /// octets is [`io::ErrorKind::InvalidData`] before that fragment's body is read. Any error
    /// of `r` (a non-blocking socket's `WouldBlock`) is returned with the state kept, so the
    /// next call goes on where this one stopped.
    pub fn read_from<R: Read>(&mut self, r: &mut R, max: usize) -> io::Result<Option<Vec<u8>>> {
        loop {
            if !self.in_body {
                let n = read_some(r, &mut self.mark[self.mark_len..])?;
                if n == 0 {
                    if self.started {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    return Ok(None);
                }
                self.started = true;
                self.mark_len += n;
                if self.mark_len < self.mark.len() {
                    continue;
                }
                self.mark_len = 0;
                self.start_fragment(max)?;
            }
            if self.frag_left > 0 {
                let mut chunk = [0u8; READ_CHUNK];
                let want = self.frag_left.min(READ_CHUNK);
                let n = read_some(r, &mut chunk[..want])?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                self.record.extend_from_slice(&chunk[..n]);
                self.frag_left -= n;
                if self.frag_left > 0 {
                    continue;
                }
            }
            self.in_body = false;
            if self.last {
                self.started = false;
                return Ok(Some(std::mem::take(&mut self.record)));
            }
        }
    }

    /// Takes the fragment header just read, refusing a record over `max`.
    fn start_fragment(&mut self, max: usize) -> io::Result<()> {
        let word = u32::from_be_bytes(self.mark);
        let len = (word & !LAST_FRAGMENT) as usize;
        let total = self.record.len().saturating_add(len);
        if total > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("RPC record of at least {total} octets exceeds the bound {max}"),
            ));
        }
        self.frag_left = len;
        self.last = word & LAST_FRAGMENT != 0;
        self.in_body = true;
        Ok(())
    }
}

/// One `read` that retries on EINTR.
fn read_some<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Why the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// The peer closed it, reset it, or the socket failed.
    Peer,
    /// A record over the bound, one that is not a decodable CALL, or a service that panicked.
    BadRecord,
    /// No record started within `first_record_timeout` of the accept.
    FirstRecordTimeout,
    /// A started record not complete within `record_timeout`.
    RecordTimeout,
    /// No record started within `idle_timeout` of the last one.
    IdleTimeout,
    /// A reply not fully written within `write_timeout`.
    WriteTimeout,
    /// Closed to make room for a newcomer.
    Evicted,
}

/// A reply being written.
#[derive(Debug)]
struct Pending {
    wire: Vec<u8>,
    done: usize,
    since: Instant,
}

/// One accepted connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    /// The peer's address as accepted (services see it canonical).
    peer: SocketAddr,
    /// The peer's IP address, IPv4-mapped IPv6 shown as IPv4: the per-address limit's key.
    pub(crate) ip: IpAddr,
    accepted: Instant,
    /// When it last completed something: the accept, a record read, a reply written.
    pub(crate) progress: Instant,
    served: u64,
    reader: RecordReader,
    record_started: Option<Instant>,
    out: Option<Pending>,
    /// Set when the server is to close it, and why.
    pub(crate) closing: Option<Close>,
}

impl Conn {
    /// A connection accepted at `now` on a non-blocking `stream`.
    pub(crate) fn new(stream: TcpStream, peer: SocketAddr, ip: IpAddr, now: Instant) -> Conn {
        Conn {
            stream,
            peer,
            ip,
            accepted: now,
            progress: now,
            served: 0,
            reader: RecordReader::new(),
            record_started: None,
            out: None,
            closing: None,
        }
    }

    /// Whether the server waits for the socket to be writable (a reply is pending) rather
    /// than readable.
    pub(crate) fn wants_write(&self) -> bool {
        self.out.is_some()
    }

    /// When the connection is closed if nothing completes before, and why (`None`: never,
    /// with a deadline too far to represent).
    pub(crate) fn deadline(&self, cfg: &ServerConfig) -> Option<(Instant, Close)> {
        let (from, limit, why) = if let Some(p) = &self.out {
            (p.since, cfg.write_timeout, Close::WriteTimeout)
        } else if let Some(t) = self.record_started {
            (t, cfg.record_timeout, Close::RecordTimeout)
        } else if self.served == 0 {
            (
                self.accepted,
                cfg.first_record_timeout,
                Close::FirstRecordTimeout,
            )
        } else {
            (self.progress, cfg.idle_timeout, Close::IdleTimeout)
        };
        from.checked_add(limit).map(|at| (at, why))
    }

    /// Serves what the socket has: finishes the pending reply, then reads and answers up to
    /// [`RECORDS_PER_TURN`] records. `Some(reason)` when the connection is to be closed.
    pub(crate) fn on_ready(
        &mut self,
        service: &dyn RpcService,
        cfg: &ServerConfig,
        now: Instant,
    ) -> Option<Close> {
        match self.flush(now) {
            Err(_) => return Some(Close::Peer),
            Ok(false) => return None,
            Ok(true) => {}
        }
        for _ in 0..RECORDS_PER_TURN {
            let record = match self.reader.read_from(&mut self.stream, cfg.max_record) {
                Ok(Some(record)) => record,
                Ok(None) => return Some(Close::Peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.reader.started() && self.record_started.is_none() {
                        self.record_started = Some(now);
                    }
                    return None;
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => return Some(Close::BadRecord),
                Err(_) => return Some(Close::Peer),
            };
            self.record_started = None;
            self.served += 1;
            self.progress = now;
            let reply = catch_unwind(AssertUnwindSafe(|| {
                handle_record(service, self.peer, &record)
            }));
            let reply = match reply {
                Ok(Answer::Reply(r)) => r,
                // Dropped by the service: the client sends the call again.
                Ok(Answer::Nothing) => continue,
                Ok(Answer::Close) | Err(_) => return Some(Close::BadRecord),
            };
            let Ok(wire) = frame(&reply) else {
                return Some(Close::BadRecord);
            };
            self.out = Some(Pending {
                wire,
                done: 0,
                since: now,
            });
            match self.flush(now) {
                Err(_) => return Some(Close::Peer),
                Ok(false) => return None,
                Ok(true) => {}
            }
        }
        None
    }

    /// Writes what it can of the pending reply: `Ok(true)` when none is left.
    fn flush(&mut self, now: Instant) -> io::Result<bool> {
        let Some(p) = &mut self.out else {
            return Ok(true);
        };
        while p.done < p.wire.len() {
            match self.stream.write(&p.wire[p.done..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => p.done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        self.out = None;
        self.progress = now;
        Ok(true)
    }
}

/// The connection a newcomer evicts, given each open connection's peer address and last
/// progress. With `same_peer`, the newcomer's address is at its own limit: its connection
/// that has gone longest without completing anything (the oldest idle one, or the slowest in
/// the middle of a record or reply) goes. Otherwise the server is full: the same choice among
/// the connections of the address that holds the most, so one address holding many sockets
/// loses them before anyone else loses one. `None` when there is no candidate.
pub(crate) fn pick_victim(conns: &[(IpAddr, Instant)], same_peer: Option<IpAddr>) -> Option<usize> {
    let mut held: HashMap<IpAddr, usize> = HashMap::new();
    for (ip, _) in conns {
        *held.entry(*ip).or_insert(0) += 1;
    }
    let most = held.values().copied().max().unwrap_or(0);
    conns
        .iter()
        .enumerate()
        .filter(|(_, (ip, _))| match same_peer {
            Some(peer) => *ip == peer,
            None => held.get(ip) == Some(&most),
        })
        .min_by_key(|(_, (_, progress))| *progress)
        .map(|(i, _)| i)
}

/// Milliseconds until `at` for poll(2), rounded up so a wake-up is never early; 0 if past.
pub(crate) fn poll_millis(now: Instant, at: Instant) -> i32 {
    let d = at.saturating_duration_since(now);
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
    i32::try_from(ms).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A reader that hands out `data` in the given pieces, `WouldBlock` between them, as a
    /// non-blocking socket does when a client trickles.
    struct Trickle<'a> {
        pieces: Vec<&'a [u8]>,
        stalled: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.stalled {
                self.stalled = false;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let Some(piece) = self.pieces.first_mut() else {
                return Err(io::ErrorKind::WouldBlock.into());
            };
            let n = piece.len().min(buf.len());
            buf[..n].copy_from_slice(&piece[..n]);
            *piece = &piece[n..];
            if piece.is_empty() {
                self.pieces.remove(0);
                self.stalled = true;
            }
            Ok(n)
        }
    }

    #[test]
    fn accepts_record_split_across_reads_that_would_block() {
        // Two fragments "ab" and "cde", cut inside both marks and both bodies.
        let wire = [0, 0, 0, 2, b'a', b'b', 0x80, 0, 0, 3, b'c', b'd', b'e'];
        let cuts = [1, 4, 5, 8, 11];
        let mut pieces = Vec::new();
        let mut at = 0;
        for c in cuts.into_iter().chain([wire.len()]) {
            pieces.push(&wire[at..c]);
            at = c;
        }
        let mut r = Trickle {
            pieces,
            stalled: false,
        };
        let mut rr = RecordReader::new();
        let mut blocked = 0;
        let record = loop {
            match rr.read_from(&mut r, 16) {
                Ok(Some(rec)) => break rec,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(rr.started(), "a record is under way");
                    blocked += 1;
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(record, b"abcde");
        assert_eq!(blocked, cuts.len());
        assert!(!rr.started());
    }

    #[test]
    fn accepts_partial_record_holding_only_what_arrived() {
        // A mark claiming 60 000 octets followed by 10: the buffer holds about 10, not 60 000.
        let mut wire = (60_000u32 | LAST_FRAGMENT).to_be_bytes().to_vec();
        wire.extend_from_slice(&[7; 10]);
        let mut r = Trickle {
            pieces: vec![&wire],
            stalled: false,
        };
        let mut rr = RecordReader::new();
        let e = rr.read_from(&mut r, 64 * 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(rr.record.len(), 10);
        assert!(rr.record.capacity() < 1024, "{}", rr.record.capacity());
    }

    #[test]
    fn accepts_victim_of_its_own_address_or_the_heaviest() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        // c's connection is the oldest overall, but b holds the most: b's oldest goes.
        let conns = [
            (a, at(5)),
            (b, at(9)),
            (c, at(1)),
            (b, at(3)),
            (b, at(7)),
            (a, at(2)),
        ];
        assert_eq!(pick_victim(&conns, None), Some(3));
        // At its own limit, a newcomer from a takes a's oldest, however many b holds.
        assert_eq!(pick_victim(&conns, Some(a)), Some(5));
        assert_eq!(pick_victim(&conns, Some(c)), Some(2));
        // One connection per address: the oldest of all.
        let one = [(a, at(5)), (b, at(4)), (c, at(6))];
        assert_eq!(pick_victim(&one, None), Some(1));
        assert_eq!(pick_victim(&[], None), None);
        assert_eq!(pick_victim(&one, Some("10.0.0.9".parse().unwrap())), None);
    }

    #[test]
    fn accepts_poll_wait_rounded_up() {
        let now = Instant::now();
        assert_eq!(poll_millis(now, now), 0);
        assert_eq!(poll_millis(now + Duration::from_millis(5), now), 0);
        assert_eq!(poll_millis(now, now + Duration::from_micros(1)), 1);
        assert_eq!(poll_millis(now, now + Duration::from_millis(7)), 7);
        assert_eq!(
            poll_millis(now, now + Duration::from_secs(1 << 40)),
            i32::MAX
        );
    }
}
