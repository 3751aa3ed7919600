//! Changes of one object made through the directory store, one at a time: a table of 64
//! mutexes, one chosen by a hash of the object's handle (`Serial`). A change holds its
//! directory's (RENAME: both directories', in table order) from the `fstat` that takes the
//! attributes before to the one that takes them after, so the weak cache consistency data
//! (RFC 1813 §2.6) and NFSv4.1's `change_info4` (RFC 8881 §3.3.6, `atomic`) hold no other
//! change made through this server between them, as Linux nfsd's hold none while it keeps the
//! directory's inode locked. A process on the host that changes the exported tree directly
//! takes no lock here. A SETATTR holds its object's, and so does a WRITE (whose reply carries
//! the attributes after only) for the `pwrite` and the `fstat`s around it, not for the
//! `fsync` of a stable WRITE: no SETATTR's attributes before and after hold another client's
//! WRITE between them, as Linux nfsd's SETATTR holds the inode lock its writes take (and its
//! WRITE syncs after releasing it).
//!
//! Normal operation: an uncontended mutex per change. Recovery: a poisoned mutex (a panic
//! while one was held) guards no data and is taken as it is.

use std::sync::{Mutex, MutexGuard};

use crate::nfs::types::Fh;

/// Mutexes in the table: changes of different objects rarely wait for each other.
const STRIPES: usize = 64;

/// The table of mutexes changes of one object hold.
#[derive(Debug)]
pub(super) struct Serial {
    stripes: [Mutex<()>; STRIPES],
}

/// The mutex (or mutexes) a change holds while it lasts.
pub(super) struct Held<'a> {
    _first: MutexGuard<'a, ()>,
    _second: Option<MutexGuard<'a, ()>>,
}

impl Serial {
    pub(super) fn new() -> Serial {
        Serial {
            stripes: std::array::from_fn(|_| Mutex::new(())),
        }
    }

    /// The index of `fh`'s mutex (FNV-1a of the handle's octets).
    fn index(fh: &Fh) -> usize {
        let h = fh
            .as_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        (h % STRIPES as u64) as usize
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, ()> {
        self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds `fh`'s mutex.
    pub(super) fn one(&self, fh: &Fh) -> Held<'_> {
        Held {
            _first: self.lock(Self::index(fh)),
            _second: None,
        }
    }

    /// Holds the mutexes of `a` and `b` (one when they share it), the lower index first, so
    /// two changes holding two never wait for each other in a circle.
    pub(super) fn two(&self, a: &Fh, b: &Fh) -> Held<'_> {
        let (i, j) = (Self::index(a), Self::index(b));
        let (lo, hi) = (i.min(j), i.max(j));
        Held {
            _first: self.lock(lo),
            _second: (hi != lo).then(|| self.lock(hi)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh(b: &[u8]) -> Fh {
        Fh::new(b).expect("a handle")
    }

    #[test]
    fn accepts_two_handles_sharing_a_mutex_without_waiting_for_itself() {
        let s = Serial::new();
        let a = fh(b"one handle");
        let _both = s.two(&a, &a);
        // A second pair in the other order, from another thread, waits for the first.
        let b = (0u8..=255)
            .map(|x| fh(&[x; 8]))
            .find(|b| Serial::index(b) != Serial::index(&a))
            .expect("a handle with another mutex");
        drop(_both);
        let _ab = s.two(&a, &b);
        std::thread::scope(|sc| {
            let t = sc.spawn(|| s.stripes[Serial::index(&b)].try_lock().is_err());
            assert!(t.join().expect("thread"), "b's mutex is held");
        });
    }
}
