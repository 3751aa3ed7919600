//! The NFSv4.1 client record file (rpcrdma-apps `nfs::v4::server::clientdb`, read from
//! `--v4-state-dir` at start-up) on arbitrary bytes. The first octet picks the mode:
//!
//! - top bit set: the rest is a whole file for `decode`;
//! - bit 6 set: the rest follows the magic and the target appends the right checksum, so the
//!   fuzzer reaches the record parser rather than stopping at the checksum;
//! - otherwise: the rest is a list of records (per record: a 16-bit owner length, an 8-bit
//!   principal length, then those octets), which `encode` writes and `decode` reads back.
//!
//! Nothing may panic; whatever decodes re-encodes to the same octets; a file with a correct
//! magic and checksum is never refused for them; a list of records within the bounds comes
//! back whole, and one outside them is refused with the error its first fault names.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::v4::server::clientdb::{
    checksum, decode, encode, DbError, Record, MAX_FILE, MAX_RECORDS, OWNER_MAX, PRINCIPAL_MAX,
};

/// The file's magic (format version 1).
const MAGIC: &[u8; 8] = b"RNFS4CL1";

/// Records laid out as the third mode frames them.
fn records(mut b: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    while b.len() >= 3 {
        let owner = usize::from(u16::from_be_bytes([b[0], b[1]])) % (OWNER_MAX + 2);
        let principal = usize::from(b[2]) % (PRINCIPAL_MAX + 2);
        b = &b[3..];
        let take = |b: &mut &[u8], n: usize| {
            let n = n.min(b.len());
            let (h, t) = b.split_at(n);
            *b = t;
            h.to_vec()
        };
        let owner = take(&mut b, owner);
        let principal = take(&mut b, principal);
        out.push(Record { owner, principal });
    }
    out
}

/// The error `decode` must give for `recs` written by `encode` as `file`, if any.
fn fault(recs: &[Record], file: &[u8]) -> Option<DbError> {
    if file.len() as u64 > MAX_FILE {
        return Some(DbError::TooLarge);
    }
    if recs.len() > MAX_RECORDS {
        return Some(DbError::Count);
    }
    for (i, r) in recs.iter().enumerate() {
        if r.owner.len() > OWNER_MAX || r.principal.len() > PRINCIPAL_MAX || r.owner.is_empty() {
            return Some(DbError::Length);
        }
        if recs[..i].iter().any(|o| o.owner == r.owner) {
            return Some(DbError::Duplicate);
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 0x80 != 0 {
        if let Ok(recs) = decode(rest) {
            assert_eq!(encode(&recs), rest, "a decoded file re-encodes to itself");
        }
    } else if mode & 0x40 != 0 {
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(rest);
        let sum = checksum(&file);
        file.extend_from_slice(&sum);
        match decode(&file) {
            Ok(recs) => assert_eq!(encode(&recs), file),
            Err(e) => assert!(
                !matches!(e, DbError::Magic | DbError::Checksum),
                "refused for {e:?} with a valid magic and checksum"
            ),
        }
    } else {
        let recs = records(rest);
        let file = encode(&recs);
        let got = decode(&file);
        match fault(&recs, &file) {
            None => assert_eq!(got, Ok(recs)),
            Some(e) => assert_eq!(got, Err(e)),
        }
    }
});
