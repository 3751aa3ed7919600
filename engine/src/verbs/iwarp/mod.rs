//! iWARP over TCP: MPA (RFC 5044) with the enhanced connection setup of RFC 6581, DDP (RFC 5041)
//! and RDMAP (RFC 5040), laid out as Linux siw sends them, the connection layer, and the
//! user-space iWARP provider on top ([`IwarpProvider`]: devices, STags, memory windows, CQs,
//! shared receive queues, queue pairs, listener; `device.rs`, `mw.rs`, `cq.rs`, `srq.rs`,
//! `provider.rs`, `qp.rs`, `qp/place.rs`).
//!
//! Normal operation: [`handshake`] runs the MPA Request/Reply exchange as a sans-IO state machine
//! ([`mpa::encode_rr`], [`mpa::decode_rr`] underneath), settling CRC use and the RFC 6581 IRD/ORD
//! values; afterwards each RDMAP message is one or more DDP segments ([`rdmap::encode`] writes one
//! into a caller's slice, [`stream::encode_message`] splits a message at the peer's maximum ULPDU),
//! each segment one MPA FPDU ([`mpa::seal_fpdu`]). On receive, [`stream::RxStream`] reassembles
//! FPDUs from whatever `read` returned ([`mpa::decode_fpdu`] finds each and checks its CRC) and
//! [`rdmap::decode`] reads the DDP and RDMAP headers, borrowing the payload. [`socket`] drives
//! all of it over non-blocking `std::net` TCP sockets. The provider's queue pairs turn work
//! requests into RDMAP messages on an endpoint and place what arrives straight into registered
//! memory after the STag, bounds and access checks; every poll in the process drives them.
//!
//! Recovery: all decoders are bounds-checked and return small `Copy` errors; each error maps to
//! the RFC 5040 Terminate code the provider sends before it closes the stream
//! ([`rdmap::RdmapError::terminate_code`], [`stream::StreamError::terminate_code`]; MPA codes:
//! [`mpa::TERM_ECODE_CRC`] and friends). A failed handshake closes the TCP connection. In the
//! provider a fault sends that Terminate and puts the QP into ERROR (flush, `Disconnected`).

mod cq;
pub mod crc32c;
pub mod ddp;
mod device;
pub mod handshake;
pub mod mpa;
mod mw;
mod provider;
mod qp;
pub mod rdmap;
mod sgl;
pub mod socket;
mod srq;
mod stag;
pub mod stream;
pub mod term;

pub use cq::IwarpCq;
pub use device::{IwarpProvider, MAX_SGE, VENDOR_ID};
pub use mw::IwarpMw;
#[cfg(feature = "conformance")]
pub use provider::IwarpEnv;
pub use provider::{IwarpConnRequest, IwarpDevice, IwarpListener, IwarpPd, MrHandle};
pub use qp::IwarpQp;
pub use srq::IwarpSrq;
