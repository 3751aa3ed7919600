//! The code a Terminate message carries (RFC 5040 "Terminate Message"): layer, error type and
//! error code, shared by the layers that report errors (DDP, RFC 5041; RDMAP, RFC 5040; MPA,
//! RFC 5044) so that each maps its errors without depending on the layer above.
//!
//! Normal operation: a decoder's error names its [`TermCode`]; the provider writes it into the
//! Terminate it sends. Recovery: nothing to recover; plain values.

/// Terminate layer: RDMAP.
pub const LAYER_RDMAP: u8 = 0x0;
/// Terminate layer: DDP.
pub const LAYER_DDP: u8 = 0x1;
/// Terminate layer: lower layer protocol (MPA).
pub const LAYER_LLP: u8 = 0x2;

/// A Terminate code: layer, error type and error code (RFC 5040, RFC 5041, RFC 5044; the IANA RDDP
/// registries of RFC 6580).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermCode {
    /// Layer (4 bits): [`LAYER_RDMAP`], [`LAYER_DDP`], [`LAYER_LLP`].
    pub layer: u8,
    /// Error type (4 bits).
    pub etype: u8,
    /// Error code.
    pub ecode: u8,
}

impl TermCode {
    /// A code.
    pub const fn new(layer: u8, etype: u8, ecode: u8) -> Self {
        TermCode {
            layer,
            etype,
            ecode,
        }
    }
}
