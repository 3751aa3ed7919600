//! One iWARP stream over a non-blocking TCP socket: connect or accept, the MPA connection setup
//! (RFC 5044 "Connection Setup", RFC 6581), then RDMAP messages (RFC 5040) carried in DDP
//! segments (RFC 5041) framed as MPA FPDUs (RFC 5044). No call blocks and no thread is started:
//! the owner calls [`Endpoint::poll`] from its own loop.
//!
//! Normal operation: [`Endpoint::connect`] starts a non-blocking TCP connect and, once it has
//! completed, sends the MPA Request; [`Listener::accept`] takes a pending connection, and its
//! endpoint waits for the Request, then reports [`State::AwaitingDecision`] with the peer's
//! private data ([`Endpoint::peer_private_data`]) until the owner calls [`Endpoint::accept`] or
//! [`Endpoint::reject`]. [`Endpoint::poll`] writes what is queued (keeping what a partial write
//! left), reads what arrived into the [`RxStream`] (which hands the handshake its octets first,
//! then reassembles FPDUs) and advances the handshake. Once [`State::Established`],
//! [`Endpoint::send`] queues a Send segmented at the configured maximum ULPDU and
//! [`Endpoint::recv`] hands every complete, decoded RDMAP segment to a closure, borrowing from the
//! receive buffer. A `WouldBlock` from `read`, `write`, `accept` or the connect is never an error:
//! the next `poll` carries on.
//!
//! Recovery: a CRC or framing error in the FPDU stream, or a segment RDMAP refuses, makes the
//! endpoint queue a Terminate carrying the code the error names (RFC 5040 "Terminate Message";
//! LLP layer, MPA type, CRC error for a bad CRC), flush it, and close the socket; the state then
//! says why ([`Closed`]). A Terminate from the peer, the peer closing TCP, a failed handshake or
//! an I/O error close the socket without one. A closed endpoint stays closed.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

use super::handshake::{self, Handshake, HandshakeError, Status};
use super::mpa;
use super::rdmap::{self, Message, Terminate};
use super::stream::{self, RxStream, SegmentError, StreamError, TxBuffer};
use super::term::TermCode;

/// Default largest ULPDU sent: its FPDU fills a 1 460-octet TCP segment (Ethernet MSS).
pub const DEFAULT_MULPDU: usize = 1454;
/// The MSN of the first message on each untagged queue (RFC 5041).
const FIRST_MSN: u32 = 1;
/// The MSN Linux siw puts in its Terminates (queue 2).
const TERMINATE_MSN: u32 = 1;

/// Sizes and handshake settings of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    /// MPA connection setup settings (IRD/ORD, CRC wanted, deadline).
    pub handshake: handshake::Config,
    /// Largest ULPDU this side sends (segmentation size).
    pub mulpdu: usize,
    /// Largest ULPDU this side accepts (sizes the receive buffer).
    pub max_rx_ulpdu: usize,
    /// Octets of the transmit buffer: a message whose segments do not fit is refused.
    pub tx_capacity: usize,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            handshake: handshake::Config::default(),
            mulpdu: DEFAULT_MULPDU,
            max_rx_ulpdu: mpa::MAX_ULPDU,
            tx_capacity: 128 * 1024,
        }
    }
}

/// Why an endpoint closed. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The MPA connection setup failed.
    Handshake(HandshakeError),
    /// The connection was rejected (by the peer, or by this side's [`Endpoint::reject`]).
    Rejected,
    /// This side found an error in the FPDU stream and sent a Terminate with this code.
    Terminated(TermCode),
    /// The peer sent a Terminate with this code.
    PeerTerminated(TermCode),
    /// The peer closed the TCP connection.
    PeerClosed,
    /// This side closed the connection ([`Endpoint::shutdown`]).
    Local,
    /// A socket call failed.
    Io(io::ErrorKind),
}

/// Where an endpoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The TCP connect has not completed yet.
    Connecting,
    /// The MPA Request/Reply exchange is under way.
    Handshaking,
    /// Responder: the Request is in; call [`Endpoint::accept`] or [`Endpoint::reject`].
    AwaitingDecision,
    /// RDMAP messages flow.
    Established,
    /// Flushing the last octets (a Terminate or a rejecting Reply), then closing.
    Closing(Closed),
    /// Closed.
    Closed(Closed),
}

/// Errors of [`Endpoint::send`]. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// Not [`State::Established`].
    NotEstablished,
    /// The transmit buffer has no room now: poll, then retry.
    Full,
    /// The message can never be sent (too long for the transmit buffer, bad sizes).
    Segment(SegmentError),
}

/// A non-blocking TCP listener whose connections answer the MPA Request.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
}

impl Listener {
    /// Binds `addr` (port 0: any free port) and makes the socket non-blocking.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let inner = TcpListener::bind(addr)?;
        inner.set_nonblocking(true)?;
        Ok(Listener { inner })
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// A pending connection as a responder endpoint; `None` when there is none now.
    pub fn accept(&self, now: u64, cfg: EndpointConfig) -> io::Result<Option<Endpoint>> {
        match self.inner.accept() {
            Ok((sock, _)) => {
                sock.set_nonblocking(true)?;
                sock.set_nodelay(true)?;
                let hs = Handshake::responder(now, cfg.handshake);
                Ok(Some(Endpoint::new(sock, hs, State::Handshaking, cfg)))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One iWARP stream over TCP.
#[derive(Debug)]
pub struct Endpoint {
    sock: TcpStream,
    hs: Handshake,
    state: State,
    rx: RxStream,
    tx: TxBuffer,
    crc: bool,
    mulpdu: usize,
    send_msn: u32,
    /// The peer closed its side; octets already received are still delivered.
    peer_eof: bool,
}

/// Starts a non-blocking TCP connect (`connect(2)` returning `EINPROGRESS`).
fn connect_nonblocking(addr: SocketAddr) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let (family, len) = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            (libc::AF_INET, std::mem::size_of::<libc::sockaddr_in>())
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            (libc::AF_INET6, std::mem::size_of::<libc::sockaddr_in6>())
        }
    };
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe { libc::socket(family, kind, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket this function owns; TcpStream closes it on drop.
    let sock = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: ss holds a valid address of `len` octets.
    let rc = unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len as _) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    sock.set_nodelay(true)?;
    Ok(sock)
}

impl Endpoint {
    fn new(sock: TcpStream, hs: Handshake, state: State, cfg: EndpointConfig) -> Self {
        Endpoint {
            sock,
            hs,
            state,
            rx: RxStream::new(cfg.max_rx_ulpdu),
            tx: TxBuffer::new(cfg.tx_capacity),
            crc: false,
            mulpdu: cfg.mulpdu,
            send_msn: FIRST_MSN,
            peer_eof: false,
        }
    }

    /// Starts connecting to `addr` as the MPA initiator with `private_data` in the Request (at
    /// most [`handshake::MAX_ULP_PRIVATE_DATA`] octets).
    pub fn connect(
        addr: SocketAddr,
        now: u64,
        cfg: EndpointConfig,
        private_data: &[u8],
    ) -> io::Result<Self> {
        let hs = Handshake::initiator(now, cfg.handshake, private_data)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let sock = connect_nonblocking(addr)?;
        Ok(Endpoint::new(sock, hs, State::Connecting, cfg))
    }

    /// Where the endpoint stands.
    pub const fn state(&self) -> State {
        self.state
    }

    /// Whether FPDUs carry CRCs (settled by the handshake).
    pub const fn crc(&self) -> bool {
        self.crc
    }

    /// The MPA handshake (negotiated values, peer IRD/ORD).
    pub const fn handshake(&self) -> &Handshake {
        &self.hs
    }

    /// The peer's private data from its Request or Reply.
    pub fn peer_private_data(&self) -> &[u8] {
        self.hs.peer_private_data()
    }

    /// When [`Endpoint::poll`] must run at the latest (the handshake deadline).
    pub const fn poll_timeout(&self) -> Option<u64> {
        self.hs.poll_timeout()
    }

    /// Does all the I/O that can be done now without blocking and advances the handshake.
    pub fn poll(&mut self, now: u64) -> State {
        if self.state == State::Connecting {
            // The handshake deadline also bounds the TCP connect.
            self.hs.handle_timeout(now);
            if let Status::Failed(e) = self.hs.status() {
                self.close(Closed::Handshake(e));
                return self.state;
            }
            self.check_connected();
        }
        if matches!(self.state, State::Handshaking | State::AwaitingDecision) {
            self.hs.handle_timeout(now);
            self.step_handshake(now);
        }
        if !matches!(self.state, State::Connecting | State::Closed(_)) {
            self.flush();
            self.fill();
        }
        if self.state == State::Handshaking {
            self.step_handshake(now);
            self.flush();
        }
        if let State::Closing(why) = self.state {
            if self.tx.is_empty() {
                self.close(why);
            }
        }
        let opening = matches!(self.state, State::Handshaking | State::AwaitingDecision);
        if self.peer_eof && opening {
            self.close(Closed::PeerClosed);
        }
        self.state
    }

    fn check_connected(&mut self) {
        match self.sock.take_error() {
            Ok(Some(e)) | Err(e) => return self.close(Closed::Io(e.kind())),
            Ok(None) => {}
        }
        match self.sock.peer_addr() {
            Ok(_) => self.state = State::Handshaking,
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
            Err(e) => self.close(Closed::Io(e.kind())),
        }
    }

    /// Feeds the handshake and acts on its status.
    fn step_handshake(&mut self, now: u64) {
        let n = self.hs.handle_input(now, self.rx.unparsed());
        self.rx.consume(n);
        self.take_handshake_output();
        match self.hs.status() {
            Status::InProgress => {}
            Status::RequestReceived => self.state = State::AwaitingDecision,
            Status::Established => self.establish(),
            Status::Rejected => self.state = State::Closing(Closed::Rejected),
            Status::Failed(e) => self.state = State::Closing(Closed::Handshake(e)),
        }
    }

    fn take_handshake_output(&mut self) {
        while self.hs.has_output() {
            let n = self.hs.poll_output(self.tx.space());
            if n == 0 {
                break;
            }
            self.tx.commit(n);
        }
    }

    fn establish(&mut self) {
        self.crc = self.hs.negotiated().is_some_and(|n| n.crc);
        self.rx.set_crc(self.crc);
        self.state = State::Established;
    }

    /// Responder: the IRD/ORD the Reply carries (see [`Handshake::set_ird_ord`]).
    pub fn set_ird_ord(&mut self, ird: u16, ord: u16) {
        self.hs.set_ird_ord(ird, ord);
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The largest ULPDU this side sends.
    pub const fn mulpdu(&self) -> usize {
        self.mulpdu
    }

    /// Queues one RDMAP message (a Write or Read Response segment, a Read Request, a Send; the
    /// caller numbers the MSNs), segmented at the configured maximum ULPDU. `Full`: no room
    /// now; poll, then retry. Nothing is written until the next [`Endpoint::poll`].
    pub fn queue_message(&mut self, msg: &Message<'_>) -> Result<(), SendError> {
        if self.state != State::Established {
            return Err(SendError::NotEstablished);
        }
        match stream::encode_message(msg, self.mulpdu, self.crc, self.tx.space()) {
            Ok(n) => {
                self.tx.commit(n);
                Ok(())
            }
            Err(SegmentError::NoSpace { .. }) => Err(SendError::Full),
            Err(e) => Err(SendError::Segment(e)),
        }
    }

    /// Sends a Terminate with `code` (RFC 5040) and closes once it is written; an endpoint
    /// that is not established just closes.
    pub fn send_terminate(&mut self, code: TermCode) {
        if self.state == State::Established {
            self.terminate(code);
        } else if !matches!(self.state, State::Closed(_)) {
            self.close(Closed::Terminated(code));
        }
    }

    /// Closes the connection now (what is still queued is dropped; the peer reads the end of
    /// the stream).
    pub fn shutdown(&mut self) {
        if !matches!(self.state, State::Closed(_)) {
            self.close(Closed::Local);
        }
    }

    /// Responder: accepts the Request, answering with `private_data`.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), HandshakeError> {
        self.hs.accept(private_data)?;
        self.take_handshake_output();
        self.establish();
        Ok(())
    }

    /// Responder: rejects the Request, answering with `private_data`; closes after sending.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), HandshakeError> {
        self.hs.reject(private_data)?;
        self.take_handshake_output();
        self.state = State::Closing(Closed::Rejected);
        Ok(())
    }

    /// Writes queued octets until done or `WouldBlock`.
    fn flush(&mut self) {
        while !self.tx.is_empty() {
            match self.sock.write(self.tx.pending()) {
                Ok(0) => return self.close(Closed::PeerClosed),
                Ok(n) => self.tx.written(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.close(Closed::Io(e.kind())),
            }
        }
    }

    /// Reads until `WouldBlock` or the receive buffer is full.
    fn fill(&mut self) {
        if matches!(self.state, State::Closing(_)) || self.peer_eof {
            return;
        }
        loop {
            let spare = self.rx.spare();
            if spare.is_empty() {
                return;
            }
            match self.sock.read(spare) {
                Ok(0) => {
                    self.peer_eof = true;
                    return;
                }
                Ok(n) => self.rx.filled(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.close(Closed::Io(e.kind())),
            }
        }
    }

    fn close(&mut self, why: Closed) {
        let _ = self.sock.shutdown(Shutdown::Both);
        self.state = State::Closed(why);
    }

    /// Queues a Terminate with `code`, then closes once it is written.
    fn terminate(&mut self, code: TermCode) {
        let msg = Message::Terminate(Terminate {
            msn: TERMINATE_MSN,
            code,
            ddp_segment_len: None,
            ddp_header: None,
            rdmap_header: None,
        });
        // The Terminate is one short segment; with no room left it is not sent.
        if let Ok(n) = stream::encode_message(&msg, mpa::MAX_ULPDU, self.crc, self.tx.space()) {
            self.tx.commit(n);
        }
        self.state = State::Closing(Closed::Terminated(code));
        self.flush();
        if self.tx.is_empty() {
            self.close(Closed::Terminated(code));
        }
    }

    /// Queues a Send (RFC 5040) of `payload`, segmented at the configured maximum ULPDU, and
    /// writes what the socket takes now.
    pub fn send(&mut self, payload: &[u8]) -> Result<(), SendError> {
        self.queue_send(payload)?;
        self.flush();
        Ok(())
    }

    /// Test only: a Send whose last FPDU has one octet flipped before the CRC, so that the peer
    /// sees a CRC error.
    #[cfg(test)]
    pub(crate) fn send_corrupted(&mut self, payload: &[u8]) -> Result<(), SendError> {
        self.queue_send(payload)?;
        let p = self.tx.pending_mut();
        if let Some(i) = p.len().checked_sub(mpa::FPDU_CRC_LEN + 1) {
            p[i] ^= 0x5a;
        }
        self.flush();
        Ok(())
    }

    fn queue_send(&mut self, payload: &[u8]) -> Result<(), SendError> {
        if self.state != State::Established {
            return Err(SendError::NotEstablished);
        }
        let msg = Message::Send {
            solicited: false,
            invalidate: None,
            last: true,
            msn: self.send_msn,
            mo: 0,
            payload,
        };
        let len = stream::message_wire_len(&msg, self.mulpdu).map_err(SendError::Segment)?;
        if len > self.tx.capacity() {
            return Err(SendError::Segment(SegmentError::NoSpace {
                needed: len,
                capacity: self.tx.capacity(),
            }));
        }
        match stream::encode_message(&msg, self.mulpdu, self.crc, self.tx.space()) {
            Ok(n) => self.tx.commit(n),
            Err(SegmentError::NoSpace { .. }) => return Err(SendError::Full),
            Err(e) => return Err(SendError::Segment(e)),
        }
        self.send_msn = self.send_msn.wrapping_add(1);
        Ok(())
    }

    /// Hands every complete RDMAP segment received to `f`, in order; returns how many. A bad
    /// FPDU or segment sends a Terminate and closes; a Terminate from the peer closes.
    pub fn recv(&mut self, mut f: impl FnMut(Message<'_>)) -> Result<usize, Closed> {
        let mut count = 0;
        loop {
            if let State::Closing(why) | State::Closed(why) = self.state {
                return Err(why);
            }
            if self.state != State::Established {
                return Ok(count);
            }
            let failure = match self.rx.next_ulpdu() {
                Ok(None) if self.peer_eof => Failure::Eof,
                Ok(None) => return Ok(count),
                Err(e) => Failure::Stream(e),
                Ok(Some(u)) => match rdmap::decode(u) {
                    Ok(Message::Terminate(t)) => Failure::Peer(t.code),
                    Ok(m) => {
                        f(m);
                        count += 1;
                        continue;
                    }
                    Err(e) => Failure::Local(e.terminate_code()),
                },
            };
            match failure {
                Failure::Stream(e) => self.terminate(e.terminate_code()),
                Failure::Local(code) => self.terminate(code),
                Failure::Peer(code) => self.close(Closed::PeerTerminated(code)),
                Failure::Eof => self.close(Closed::PeerClosed),
            }
        }
    }
}

/// What ended a [`Endpoint::recv`] loop.
enum Failure {
    Stream(StreamError),
    Local(TermCode),
    Peer(TermCode),
    Eof,
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
