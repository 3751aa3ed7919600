//! The iWARP wire layer over TCP: MPA (RFC 5044) with the enhanced connection setup of RFC 6581,
//! DDP (RFC 5041) and RDMAP (RFC 5040), laid out as Linux siw sends them. This is the wire layer
//! of a future user-space iWARP provider; there is no provider (sockets, queue pairs, placement)
//! yet.
//!
//! Normal operation: an MPA Request/Reply exchange ([`mpa::encode_rr`], [`mpa::decode_rr`])
//! opens the stream and settles CRC use and the RFC 6581 IRD/ORD values; afterwards each RDMAP
//! message is one or more DDP segments ([`rdmap::encode`] writes one into a caller's slice), each
//! segment one MPA FPDU ([`mpa::seal_fpdu`]). On receive, [`mpa::decode_fpdu`] finds an FPDU and
//! checks its CRC, [`rdmap::decode`] reads the DDP and RDMAP headers, borrowing the payload.
//!
//! Recovery: all decoders are bounds-checked and return small `Copy` errors; each error maps to
//! the RFC 5040 Terminate code the provider sends before it closes the stream
//! ([`rdmap::RdmapError::terminate_code`]; MPA errors: [`mpa::TERM_ECODE_CRC`] and friends).

pub mod crc32c;
pub mod ddp;
pub mod mpa;
pub mod rdmap;
pub mod term;
