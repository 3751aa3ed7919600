//! iWARP over TCP: MPA (RFC 5044) with the enhanced connection setup of RFC 6581, DDP (RFC 5041)
//! and RDMAP (RFC 5040), laid out as Linux siw sends them, and the connection layer below a
//! future user-space iWARP provider. There is no provider yet (no queue pairs, no placement into
//! registered memory, no `Provider` implementation).
//!
//! Normal operation: [`handshake`] runs the MPA Request/Reply exchange as a sans-IO state machine
//! ([`mpa::encode_rr`], [`mpa::decode_rr`] underneath), settling CRC use and the RFC 6581 IRD/ORD
//! values; afterwards each RDMAP message is one or more DDP segments ([`rdmap::encode`] writes one
//! into a caller's slice, [`stream::encode_message`] splits a message at the peer's maximum ULPDU),
//! each segment one MPA FPDU ([`mpa::seal_fpdu`]). On receive, [`stream::RxStream`] reassembles
//! FPDUs from whatever `read` returned ([`mpa::decode_fpdu`] finds each and checks its CRC) and
//! [`rdmap::decode`] reads the DDP and RDMAP headers, borrowing the payload. [`socket`] drives
//! all of it over non-blocking `std::net` TCP sockets.
//!
//! Recovery: all decoders are bounds-checked and return small `Copy` errors; each error maps to
//! the RFC 5040 Terminate code the provider sends before it closes the stream
//! ([`rdmap::RdmapError::terminate_code`], [`stream::StreamError::terminate_code`]; MPA codes:
//! [`mpa::TERM_ECODE_CRC`] and friends). A failed handshake closes the TCP connection.

pub mod crc32c;
pub mod ddp;
pub mod handshake;
pub mod mpa;
pub mod rdmap;
pub mod socket;
pub mod stream;
pub mod term;
