//! CRC32c (Castagnoli), the MPA FPDU check of RFC 5044 (the same CRC as the iSCSI digests of
//! RFC 3720 and RFC 7143).
//!
//! Normal operation: [`crc32c`] (one call over a contiguous buffer) or [`Crc32c`] (incremental,
//! for a frame gathered from several pieces) gives the CRC value; on the wire it is the four
//! octets `value.to_le_bytes()` — the byte order of the RFC 3720 Appendix B.4 examples ("32 bytes
//! of zeroes ... CRC: aa 36 91 8a") and of Linux siw (`put_unaligned_le32(~crc)`). Table driven,
//! one 256-entry table built at compile time, reflected polynomial 0x82F63B78, initial value and
//! final XOR all ones.
//!
//! Recovery: none needed — a pure function; the caller compares and reports a mismatch
//! ([`super::mpa::MpaError::CrcMismatch`]).

/// The reflected Castagnoli polynomial (0x1EDC6F41 bit-reversed).
pub const POLY_REFLECTED: u32 = 0x82F6_3B78;

const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = make_table();

/// An incremental CRC32c computation.
#[derive(Debug, Clone, Copy)]
pub struct Crc32c(u32);

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh computation (register all ones).
    #[inline]
    pub const fn new() -> Self {
        Crc32c(!0)
    }

    /// Feeds `data`.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        let mut crc = self.0;
        for &b in data {
            crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
        self.0 = crc;
    }

    /// The CRC value of everything fed so far.
    #[inline]
    pub const fn value(&self) -> u32 {
        !self.0
    }
}

/// CRC32c of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = Crc32c::new();
    c.update(data);
    c.value()
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3720 Appendix B.4 (repeated in RFC 7143): CRC32c examples.
    #[test]
    fn accepts_rfc3720_vector_32_zeros() {
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        // B.4 lists the CRC octets as transmitted: aa 36 91 8a.
        assert_eq!(crc32c(&[0u8; 32]).to_le_bytes(), [0xaa, 0x36, 0x91, 0x8a]);
    }

    #[test]
    fn accepts_rfc3720_vector_32_ones() {
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
    }

    #[test]
    fn accepts_rfc3720_vector_ascending() {
        let v: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&v), 0x46DD_794E);
    }

    #[test]
    fn accepts_rfc3720_vector_descending() {
        let v: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(crc32c(&v), 0x113F_DB5C);
    }

    #[test]
    fn accepts_split_updates() {
        let v: Vec<u8> = (0u8..200).collect();
        for cut in [0, 1, 7, 100, 200] {
            let mut c = Crc32c::new();
            c.update(&v[..cut]);
            c.update(&v[cut..]);
            assert_eq!(c.value(), crc32c(&v));
        }
    }

    #[test]
    fn rejects_single_bit_flip() {
        let mut v = [0u8; 32];
        let good = crc32c(&v);
        v[17] ^= 0x10;
        assert_ne!(crc32c(&v), good);
    }
}
