//! MPA connection setup (RFC 5044 "Connection Setup", with the enhanced connection setup of
//! RFC 6581) as a sans-IO state machine, for the initiator and the responder of an iWARP stream.
//!
//! Normal operation: the caller feeds octets read from TCP with [`Handshake::handle_input`]
//! (which takes only the octets of the MPA frame and says how many; what follows are the first
//! FPDUs, for [`super::stream::RxStream`]), sends what [`Handshake::poll_output`] gives, and calls
//! [`Handshake::handle_timeout`] at [`Handshake::poll_timeout`]; time is a `u64` nanosecond count
//! the caller supplies. The initiator sends an MPA Request — revision 2 with the RFC 6581 IRD/ORD
//! word, C set unless configured otherwise, the caller's private data (at most
//! [`MAX_ULP_PRIVATE_DATA`] octets, so that the whole PD_Length stays within the 256 octets Linux
//! siw accepts; RFC 8797 private data is the typical payload) — and waits for the Reply. The
//! responder waits for the Request, then reports [`Status::RequestReceived`] with the peer's
//! settings and private data; the caller answers [`Handshake::accept`] (a Reply with its own
//! private data) or [`Handshake::reject`] (a Reply with R set). CRCs are used when either side set
//! C, and the responder's Reply carries the decision in its C (RFC 5044). A responder answers a
//! revision-1 Request with a revision-1 Reply and an enhanced revision-2 Request with an enhanced
//! revision-2 Reply; an initiator takes a revision-1 Reply (no IRD/ORD word, RFC 6581 backward
//! compatibility) as well as an enhanced revision-2 one. When done, [`Handshake::negotiated`] gives CRC use, the peer's IRD/ORD and
//! revision, and [`Handshake::peer_private_data`] the peer's private data.
//!
//! Recovery: a malformed or over-long frame, the wrong key, a revision not spoken, a revision-2
//! frame without the IRD/ORD word, markers requested (M), octets beyond the Request before the
//! Reply was sent, or the deadline passing end the state machine in [`Status::Failed`] with a
//! [`HandshakeError`]; the caller closes the TCP connection (RFC 5044: an invalid MPA
//! Request/Reply closes the stream). A responder that received M answers with a rejecting Reply
//! first (what Linux siw does); its output is still given by [`Handshake::poll_output`].

use super::mpa::{self, FrameKind, IrdOrd, MpaError, RrFrame};

/// The longest private data a caller may send: siw's 256 octets less the IRD/ORD word.
pub const MAX_ULP_PRIVATE_DATA: usize = 256 - mpa::IRD_ORD_LEN;
/// Largest MPA Request/Reply on the wire (RFC 5044 PD_Length limit).
const MAX_FRAME: usize = mpa::RR_HDR_LEN + mpa::MAX_PRIVATE_DATA;
/// Default time from start to completion: RFC 5044 leaves the value to the implementation.
pub const DEFAULT_TIMEOUT_NS: u64 = 10_000_000_000;

/// What this side asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// This side's IRD (inbound RDMA Read Requests it can hold), sent in the RFC 6581 word.
    pub ird: u16,
    /// This side's ORD (outbound RDMA Read Requests it may have outstanding).
    pub ord: u16,
    /// Whether this side sets C (wants CRCs).
    pub want_crc: bool,
    /// Nanoseconds from start until the exchange must be over.
    pub timeout_ns: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ird: 16,
            ord: 16,
            want_crc: true,
            timeout_ns: DEFAULT_TIMEOUT_NS,
        }
    }
}

/// Errors that end the handshake. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer's frame is malformed (bad key, revision, PD_Length; RFC 5044 connection setup).
    Mpa(MpaError),
    /// A valid frame of the wrong kind (a Reply to a responder, a Request to an initiator).
    WrongKey,
    /// A revision-2 frame without the RFC 6581 IRD/ORD word.
    MissingIrdOrd,
    /// The peer requires markers, which this implementation does not send.
    MarkersRequired,
    /// The peer sent octets after its Request before the Reply was sent.
    UnexpectedData,
    /// The deadline passed.
    Timeout,
    /// The caller's private data is over [`MAX_ULP_PRIVATE_DATA`].
    PrivateDataTooLong(usize),
    /// `accept` or `reject` outside [`Status::RequestReceived`].
    NotAwaitingDecision,
}

impl From<MpaError> for HandshakeError {
    fn from(e: MpaError) -> Self {
        HandshakeError::Mpa(e)
    }
}

impl core::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            HandshakeError::Mpa(e) => write!(f, "{e}"),
            HandshakeError::WrongKey => write!(f, "MPA frame of the wrong kind"),
            HandshakeError::MissingIrdOrd => write!(f, "MPA revision 2 without IRD/ORD"),
            HandshakeError::MarkersRequired => write!(f, "peer requires MPA markers"),
            HandshakeError::UnexpectedData => write!(f, "data before the MPA Reply"),
            HandshakeError::Timeout => write!(f, "MPA connection setup timed out"),
            HandshakeError::PrivateDataTooLong(n) => write!(f, "private data of {n} octets"),
            HandshakeError::NotAwaitingDecision => write!(f, "no MPA Request to answer"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// Which side of the connection setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the Request (the active side, `connect`).
    Initiator,
    /// Answers with the Reply (the passive side, `accept`).
    Responder,
}

/// Where the handshake stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Waiting for the peer's frame (or for the output to be taken).
    InProgress,
    /// Responder: the Request is in; call [`Handshake::accept`] or [`Handshake::reject`].
    RequestReceived,
    /// Done: FPDUs may flow (after the output is sent).
    Established,
    /// Initiator: the peer rejected (R set); responder: this side rejected.
    Rejected,
    /// Ended by an error.
    Failed(HandshakeError),
}

/// The outcome of a completed exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// FPDUs carry CRCs (either side set C).
    pub crc: bool,
    /// The peer's revision (1 or 2).
    pub peer_revision: u8,
    /// The peer's RFC 6581 IRD/ORD word (revision 2).
    pub peer_ird_ord: Option<IrdOrd>,
}

/// The MPA connection setup state machine of one stream.
#[derive(Debug)]
pub struct Handshake {
    role: Role,
    cfg: Config,
    status: Status,
    deadline: u64,
    out: [u8; MAX_FRAME],
    out_len: usize,
    out_at: usize,
    inb: [u8; MAX_FRAME],
    in_len: usize,
    negotiated: Option<Negotiated>,
    /// The peer's Request carried the IRD/ORD word (the Reply answers in kind).
    peer_enhanced: bool,
    peer_crc: bool,
    peer_revision: u8,
}

impl Handshake {
    fn new(role: Role, now: u64, cfg: Config) -> Self {
        Handshake {
            role,
            cfg,
            status: Status::InProgress,
            deadline: now.saturating_add(cfg.timeout_ns),
            out: [0; MAX_FRAME],
            out_len: 0,
            out_at: 0,
            inb: [0; MAX_FRAME],
            in_len: 0,
            negotiated: None,
            peer_enhanced: false,
            peer_crc: false,
            peer_revision: 0,
        }
    }

    /// An initiator whose Request (revision 2, enhanced, C as configured) carrying
    /// `private_data` is ready in [`Handshake::poll_output`].
    pub fn initiator(now: u64, cfg: Config, private_data: &[u8]) -> Result<Self, HandshakeError> {
        check_private_data(private_data)?;
        let mut h = Handshake::new(Role::Initiator, now, cfg);
        let frame = RrFrame {
            kind: FrameKind::Request,
            markers: false,
            crc: cfg.want_crc,
            reject: false,
            revision: mpa::REV_2,
            ird_ord: Some(h.own_ird_ord()),
            ulp_private_data: private_data,
        };
        h.out_len = mpa::encode_rr(&frame, &mut h.out)?;
        Ok(h)
    }

    /// A responder waiting for the Request.
    pub fn responder(now: u64, cfg: Config) -> Self {
        Handshake::new(Role::Responder, now, cfg)
    }

    fn own_ird_ord(&self) -> IrdOrd {
        IrdOrd {
            ird: self.cfg.ird,
            ord: self.cfg.ord,
            ..IrdOrd::default()
        }
    }

    /// The role.
    pub const fn role(&self) -> Role {
        self.role
    }

    /// Where the handshake stands.
    pub const fn status(&self) -> Status {
        self.status
    }

    /// The outcome, once [`Status::Established`] (or the responder's accepted settings).
    pub const fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }

    /// The peer's private data after the IRD/ORD word (empty before its frame arrived).
    pub fn peer_private_data(&self) -> &[u8] {
        if self.in_len < mpa::RR_HDR_LEN || !self.frame_complete() {
            return &[];
        }
        mpa::decode_rr(&self.inb[..self.in_len]).map_or(&[], |f| f.ulp_private_data)
    }

    /// Whether the peer asked for CRCs (C set in its frame).
    pub const fn peer_wants_crc(&self) -> bool {
        self.peer_crc
    }

    /// Octets to send next, copied into `buf`; 0 when there are none.
    pub fn poll_output(&mut self, buf: &mut [u8]) -> usize {
        let n = (self.out_len - self.out_at).min(buf.len());
        buf[..n].copy_from_slice(&self.out[self.out_at..self.out_at + n]);
        self.out_at += n;
        n
    }

    /// Whether output is still waiting for [`Handshake::poll_output`].
    pub const fn has_output(&self) -> bool {
        self.out_at < self.out_len
    }

    /// When [`Handshake::handle_timeout`] should be called; `None` once over.
    pub const fn poll_timeout(&self) -> Option<u64> {
        match self.status {
            Status::InProgress | Status::RequestReceived => Some(self.deadline),
            _ => None,
        }
    }

    /// The clock reached `now`: past the deadline an unfinished handshake fails.
    pub fn handle_timeout(&mut self, now: u64) {
        let open = matches!(self.status, Status::InProgress | Status::RequestReceived);
        if open && now >= self.deadline {
            self.status = Status::Failed(HandshakeError::Timeout);
        }
    }

    fn frame_complete(&self) -> bool {
        mpa::rr_len(&self.inb[..self.in_len]).is_ok_and(|n| n == self.in_len)
    }

    /// Takes octets read from TCP: only those of the peer's frame are consumed; the count is
    /// returned and the rest belongs to the FPDU stream. Nothing is consumed once the frame is in.
    pub fn handle_input(&mut self, now: u64, bytes: &[u8]) -> usize {
        self.handle_timeout(now);
        if self.status != Status::InProgress || self.frame_complete() {
            if self.status == Status::RequestReceived && !bytes.is_empty() {
                self.status = Status::Failed(HandshakeError::UnexpectedData);
            }
            return 0;
        }
        let want = match mpa::rr_len(&self.inb[..self.in_len]) {
            Ok(n) => n,
            Err(MpaError::Incomplete { needed }) => needed,
            Err(e) => return self.fail(e.into(), 0),
        };
        let n = (want - self.in_len).min(bytes.len());
        self.inb[self.in_len..self.in_len + n].copy_from_slice(&bytes[..n]);
        self.in_len += n;
        match mpa::rr_len(&self.inb[..self.in_len]) {
            Ok(total) if total == self.in_len => {
                self.on_frame();
                n
            }
            // The header is now in: take the private data from the same input.
            Ok(_) if n < bytes.len() => n + self.handle_input(now, &bytes[n..]),
            Ok(_) => n,
            Err(MpaError::Incomplete { .. }) => n,
            Err(e) => self.fail(e.into(), n),
        }
    }

    fn fail(&mut self, e: HandshakeError, consumed: usize) -> usize {
        self.status = Status::Failed(e);
        consumed
    }

    /// The peer's frame is complete in `inb`.
    fn on_frame(&mut self) {
        let frame = match mpa::decode_rr(&self.inb[..self.in_len]) {
            Ok(f) => f,
            Err(e) => {
                self.fail(e.into(), 0);
                return;
            }
        };
        let want_kind = match self.role {
            Role::Initiator => FrameKind::Reply,
            Role::Responder => FrameKind::Request,
        };
        let checked = if frame.kind != want_kind {
            Err(HandshakeError::WrongKey)
        } else if frame.revision == mpa::REV_2 && frame.ird_ord.is_none() {
            Err(HandshakeError::MissingIrdOrd)
        } else {
            Ok(())
        };
        if let Err(e) = checked {
            self.fail(e, 0);
            return;
        }
        self.peer_crc = frame.crc;
        self.peer_revision = frame.revision;
        self.peer_enhanced = frame.ird_ord.is_some();
        let peer_ird_ord = frame.ird_ord;
        let (markers, reject) = (frame.markers, frame.reject);
        match self.role {
            Role::Initiator => self.on_reply(markers, reject, peer_ird_ord),
            Role::Responder => self.on_request(markers, peer_ird_ord),
        }
    }

    fn on_reply(&mut self, markers: bool, reject: bool, peer_ird_ord: Option<IrdOrd>) {
        if reject {
            self.status = Status::Rejected;
        } else if markers {
            self.status = Status::Failed(HandshakeError::MarkersRequired);
        } else {
            self.negotiated = Some(Negotiated {
                crc: mpa::negotiate_crc(self.cfg.want_crc, self.peer_crc),
                peer_revision: self.peer_revision,
                peer_ird_ord,
            });
            self.status = Status::Established;
        }
    }

    fn on_request(&mut self, markers: bool, peer_ird_ord: Option<IrdOrd>) {
        if markers {
            // Like siw: a rejecting Reply, then the stream is closed.
            let _ = self.write_reply(true, &[]);
            self.status = Status::Failed(HandshakeError::MarkersRequired);
            return;
        }
        self.negotiated = Some(Negotiated {
            crc: mpa::negotiate_crc(self.peer_crc, self.cfg.want_crc),
            peer_revision: self.peer_revision,
            peer_ird_ord,
        });
        self.status = Status::RequestReceived;
    }

    fn write_reply(&mut self, reject: bool, private_data: &[u8]) -> Result<(), HandshakeError> {
        let crc = mpa::negotiate_crc(self.peer_crc, self.cfg.want_crc);
        let frame = RrFrame {
            kind: FrameKind::Reply,
            markers: false,
            crc,
            reject,
            revision: if self.peer_enhanced {
                mpa::REV_2
            } else {
                mpa::REV_1
            },
            ird_ord: self.peer_enhanced.then(|| self.own_ird_ord()),
            ulp_private_data: private_data,
        };
        self.out_len = mpa::encode_rr(&frame, &mut self.out)?;
        self.out_at = 0;
        Ok(())
    }

    fn decide(&mut self, reject: bool, private_data: &[u8]) -> Result<(), HandshakeError> {
        if self.status != Status::RequestReceived {
            return Err(HandshakeError::NotAwaitingDecision);
        }
        check_private_data(private_data)?;
        self.write_reply(reject, private_data)?;
        self.status = if reject {
            Status::Rejected
        } else {
            Status::Established
        };
        Ok(())
    }

    /// Responder: the IRD and ORD the Reply's RFC 6581 word carries (the values negotiated
    /// from the peer's Request and the accepting QP's depths); call before [`Handshake::accept`].
    pub fn set_ird_ord(&mut self, ird: u16, ord: u16) {
        self.cfg.ird = ird;
        self.cfg.ord = ord;
    }

    /// Responder: accepts the Request with a Reply carrying `private_data`.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), HandshakeError> {
        self.decide(false, private_data)
    }

    /// Responder: rejects the Request with a Reply with R set carrying `private_data`.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), HandshakeError> {
        self.decide(true, private_data)
    }
}

fn check_private_data(pd: &[u8]) -> Result<(), HandshakeError> {
    if pd.len() > MAX_ULP_PRIVATE_DATA {
        Err(HandshakeError::PrivateDataTooLong(pd.len()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
