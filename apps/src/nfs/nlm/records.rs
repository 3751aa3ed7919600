//! The NLM hosts on stable storage: which clients held locks before a restart (and so are
//! told of it with SM_NOTIFY, [`super::nsm`]), and the server's status-monitor state number,
//! as Linux's `rpc.statd` keeps them under /var/lib/nfs/sm.
//!
//! Normal operation: one file, `nlm-hosts`, in the state directory: a magic, the state
//! number, the hosts (address and `caller_name`), a checksum. [`store`] writes it whole and
//! atomically (a temporary file in the same directory, mode 0600, not following a symbolic
//! link, written, `fsync`ed, renamed over the old one, the directory `fsync`ed). A host is
//! written once per run, when it first takes a lock; the list is emptied once the hosts of
//! the run before were told.
//!
//! Recovery: the file is untrusted input: one larger than [`MAX_FILE`] is refused before it
//! is read; the magic, the count (at most [`MAX_HOSTS`]), every length (a name at most
//! [`NAME_MAX`] octets), an address family other than 4 or 6, octets left over and the
//! checksum are checked, and any failure is an error: no client is told, which loses nothing
//! that would not be lost without the file (the server warns). A missing file is no host and
//! state 0.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use super::locks::HostKey;
use crate::nfs::handle_mac::siphash24;
use crate::nfs::v4::server::clientdb::{read_bounded, write_atomic, Bounded};

/// The file's name in the state directory.
pub const FILE: &str = "nlm-hosts";
const TMP: &str = "nlm-hosts.tmp";
const MAGIC: &[u8; 8] = b"RNLMHS1\0";
/// Most hosts kept.
pub const MAX_HOSTS: usize = 4096;
/// Longest `caller_name` kept (`LM_MAXSTRLEN`).
pub const NAME_MAX: usize = 1024;
/// Largest file accepted.
pub const MAX_FILE: u64 = (8 + 4 + 4 + MAX_HOSTS * (1 + 16 + 2 + NAME_MAX) + 8) as u64;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// The status-monitor state number of the last start (odd: up).
    pub state: u32,
    /// The hosts that took locks.
    pub hosts: Vec<HostKey>,
}

/// Why the file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsError {
    /// Reading failed.
    Io(String),
    /// Over [`MAX_FILE`].
    TooLarge,
    /// Not a file of this format, cut short, or its checksum does not match.
    Corrupt,
}

fn checksum(b: &[u8]) -> u64 {
    siphash24(0x6e6c_6d2d_686f_7374, 0x7270_6372_646d_6100, b)
}

/// The file's octets for `r` (at most [`MAX_HOSTS`] hosts, names cut to [`NAME_MAX`]).
pub fn encode(r: &Records) -> Vec<u8> {
    let hosts = &r.hosts[..r.hosts.len().min(MAX_HOSTS)];
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&r.state.to_be_bytes());
    b.extend_from_slice(&(hosts.len() as u32).to_be_bytes());
    for h in hosts {
        match h.addr {
            IpAddr::V4(a) => {
                b.push(4);
                b.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b.push(6);
                b.extend_from_slice(&a.octets());
            }
        }
        let name = &h.name[..h.name.len().min(NAME_MAX)];
        b.extend_from_slice(&(name.len() as u16).to_be_bytes());
        b.extend_from_slice(name);
    }
    let sum = checksum(&b);
    b.extend_from_slice(&sum.to_be_bytes());
    b
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], RecordsError> {
    if b.len() < n {
        return Err(RecordsError::Corrupt);
    }
    let (x, rest) = b.split_at(n);
    *b = rest;
    Ok(x)
}

fn u32_of(b: &mut &[u8]) -> Result<u32, RecordsError> {
    let x = take(b, 4)?;
    Ok(u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

/// Reads the file's octets back.
pub fn decode(all: &[u8]) -> Result<Records, RecordsError> {
    let body_len = all.len().checked_sub(8).ok_or(RecordsError::Corrupt)?;
    let (body, sum) = all.split_at(body_len);
    if checksum(body).to_be_bytes() != sum {
        return Err(RecordsError::Corrupt);
    }
    let mut b = body;
    if take(&mut b, 8)? != MAGIC {
        return Err(RecordsError::Corrupt);
    }
    let state = u32_of(&mut b)?;
    let n = u32_of(&mut b)? as usize;
    if n > MAX_HOSTS {
        return Err(RecordsError::Corrupt);
    }
    let mut hosts = Vec::with_capacity(n);
    for _ in 0..n {
        let addr = match take(&mut b, 1)?[0] {
            4 => {
                let o: [u8; 4] = take(&mut b, 4)?
                    .try_into()
                    .map_err(|_| RecordsError::Corrupt)?;
                IpAddr::V4(Ipv4Addr::from(o))
            }
            6 => {
                let o: [u8; 16] = take(&mut b, 16)?
                    .try_into()
                    .map_err(|_| RecordsError::Corrupt)?;
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => return Err(RecordsError::Corrupt),
        };
        let l = take(&mut b, 2)?;
        let len = usize::from(u16::from_be_bytes([l[0], l[1]]));
        if len > NAME_MAX {
            return Err(RecordsError::Corrupt);
        }
        let name = take(&mut b, len)?.to_vec();
        hosts.push(HostKey { addr, name });
    }
    if !b.is_empty() {
        return Err(RecordsError::Corrupt);
    }
    Ok(Records { state, hosts })
}

/// The records kept in `dir` (none and state 0 when there is no file).
pub fn load(dir: &Path) -> Result<Records, RecordsError> {
    let found = read_bounded(&dir.join(FILE), MAX_FILE);
    match found.map_err(|e| RecordsError::Io(e.to_string()))? {
        Bounded::Data(b) => decode(&b),
        Bounded::Missing => Ok(Records::default()),
        Bounded::TooLarge => Err(RecordsError::TooLarge),
    }
}

/// Replaces the records kept in `dir` with `r`, atomically and durably.
pub fn store(dir: &Path, r: &Records) -> std::io::Result<()> {
    write_atomic(dir, FILE, TMP, &encode(r))
}

/// The next state number after `old`: odd (the monitor is up) and larger.
pub fn next_state(old: u32) -> u32 {
    if old % 2 == 1 {
        old.wrapping_add(2)
    } else {
        old.wrapping_add(1)
    }
}
