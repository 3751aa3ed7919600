//! A hashed timer wheel for one reactor: fixed capacity, no clock of its own, no allocation after
//! creation.
//!
//! Normal operation: time is a `u64` count of nanoseconds given by the caller (the reactor's
//! clock). The wheel has `slots` buckets (a power of two) of `tick_ns` each; a timer due at
//! `deadline` goes into the bucket of tick `max(deadline / tick_ns, cursor)`, where `cursor` is the
//! first tick not yet fully expired. Timers live in a preallocated entry array linked into per-bucket
//! doubly-linked lists by index (intrusive lists), so [`TimerWheel::arm`] and
//! [`TimerWheel::cancel`] are O(1) and allocate nothing; a free list links unused entries.
//! [`TimerWheel::expire`] walks the buckets from the cursor to `now` (at most one revolution) and
//! fires every timer whose deadline is `<= now`, so a timer fires at the first `expire` call at or
//! after its deadline. Timers further away than one revolution (`slots * tick_ns`) simply stay in
//! their bucket and are skipped until their round comes (the "rounds" scheme of Varghese and Lauck).
//! Within one call, timers fire bucket by bucket in tick order (when the call covers less than one
//! revolution) and, within a bucket, in the order they were armed.
//!
//! Recovery: handles carry a generation, so cancelling or querying a handle whose timer has fired
//! or was cancelled (even if its entry was reused since) is a no-op. A full wheel refuses to arm
//! ([`TimerError::Full`]). Time going backwards fires nothing new and breaks nothing.

use core::fmt;

/// "No entry" in the intrusive links.
const NIL: u32 = u32::MAX;

/// The largest number of timers a wheel may hold.
pub const MAX_TIMERS: usize = 1 << 24;

/// The largest number of buckets a wheel may have.
pub const MAX_SLOTS: usize = 1 << 20;

/// Errors of the timer wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerError {
    /// Capacity 0 or above [`MAX_TIMERS`], slot count not a power of two in `1..=MAX_SLOTS`, or
    /// tick of 0 ns.
    BadConfig,
    /// Every entry is armed.
    Full,
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerError::BadConfig => "bad timer wheel configuration",
            TimerError::Full => "timer wheel is full",
        })
    }
}

impl std::error::Error for TimerError {}

/// Names one armed timer. Becomes stale (every use a no-op) once the timer fires or is cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    idx: u32,
    gen: u32,
}

impl TimerHandle {
    /// The handle as one `u64` (e.g. to keep in a connection's state word).
    pub const fn to_raw(self) -> u64 {
        ((self.gen as u64) << 32) | self.idx as u64
    }

    /// Rebuilds a handle from [`TimerHandle::to_raw`]; a made-up value is at worst stale.
    pub const fn from_raw(raw: u64) -> TimerHandle {
        TimerHandle {
            idx: raw as u32,
            gen: (raw >> 32) as u32,
        }
    }
}

/// Head and tail of one bucket's list.
#[derive(Clone, Copy)]
struct Bucket {
    head: u32,
    tail: u32,
}

/// One timer entry (armed or free).
#[derive(Clone, Copy)]
struct Entry<T: Copy> {
    /// When armed: the deadline (ns).
    deadline: u64,
    /// When armed: the tick whose bucket holds it (`>=` the cursor).
    at_tick: u64,
    /// When armed: the caller's token; `None` when free.
    token: Option<T>,
    /// Bumped every time the entry is freed.
    gen: u32,
    /// List links (bucket list when armed; `next` is the free list when free).
    prev: u32,
    next: u32,
}

/// A hashed timer wheel of at most `capacity` timers carrying a `Copy` token each.
pub struct TimerWheel<T: Copy = u64> {
    tick_ns: u64,
    mask: u64,
    buckets: Box<[Bucket]>,
    entries: Box<[Entry<T>]>,
    free: u32,
    /// First tick whose bucket may still hold due timers.
    cursor: u64,
    armed: usize,
}

impl<T: Copy> TimerWheel<T> {
    /// A wheel of `capacity` timers and `slots` buckets of `tick_ns` nanoseconds each.
    ///
    /// Pick `slots * tick_ns` at or above the usual timeout (longer ones work, at the cost of being
    /// skipped over once per revolution) and `tick_ns` at the resolution you need.
    pub fn new(capacity: usize, slots: usize, tick_ns: u64) -> Result<Self, TimerError> {
        if capacity == 0
            || capacity > MAX_TIMERS
            || slots == 0
            || slots > MAX_SLOTS
            || !slots.is_power_of_two()
            || tick_ns == 0
        {
            return Err(TimerError::BadConfig);
        }
        let entries = (0..capacity)
            .map(|i| Entry {
                deadline: 0,
                at_tick: 0,
                token: None,
                gen: 0,
                prev: NIL,
                next: if i + 1 < capacity { i as u32 + 1 } else { NIL },
            })
            .collect();
        Ok(TimerWheel {
            tick_ns,
            mask: slots as u64 - 1,
            buckets: vec![
                Bucket {
                    head: NIL,
                    tail: NIL
                };
                slots
            ]
            .into_boxed_slice(),
            entries,
            free: 0,
            cursor: 0,
            armed: 0,
        })
    }

    /// Maximum number of armed timers.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.armed
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.armed == 0
    }

    /// Length of one tick (ns).
    pub fn tick_ns(&self) -> u64 {
        self.tick_ns
    }

    /// One revolution of the wheel (ns): timers further out than this are skipped once per
    /// revolution until due.
    pub fn span_ns(&self) -> u64 {
        (self.mask + 1).saturating_mul(self.tick_ns)
    }

    /// Arms a timer that fires at the first [`TimerWheel::expire`] with `now >= deadline`
    /// (a deadline in the past fires at the next call). O(1), no allocation.
    pub fn arm(&mut self, deadline: u64, token: T) -> Result<TimerHandle, TimerError> {
        let idx = self.free;
        if idx == NIL {
            return Err(TimerError::Full);
        }
        let i = idx as usize;
        self.free = self.entries[i].next;
        let e = &mut self.entries[i];
        e.deadline = deadline;
        e.token = Some(token);
        let gen = e.gen;
        self.link(idx, deadline);
        self.armed += 1;
        Ok(TimerHandle { idx, gen })
    }

    /// Cancels a timer; returns its token, or `None` (and does nothing) if the handle is stale.
    pub fn cancel(&mut self, h: TimerHandle) -> Option<T> {
        if !self.is_armed(h) {
            return None;
        }
        self.unlink(h.idx);
        Some(self.release(h.idx))
    }

    /// Moves an armed timer to a new deadline, keeping its handle; `false` if the handle is stale.
    pub fn rearm(&mut self, h: TimerHandle, deadline: u64) -> bool {
        if !self.is_armed(h) {
            return false;
        }
        self.unlink(h.idx);
        self.entries[h.idx as usize].deadline = deadline;
        self.link(h.idx, deadline);
        true
    }

    /// Whether the handle names a timer that is still armed.
    pub fn is_armed(&self, h: TimerHandle) -> bool {
        self.entries
            .get(h.idx as usize)
            .is_some_and(|e| e.gen == h.gen && e.token.is_some())
    }

    /// The token of an armed timer (`None` if the handle is stale).
    pub fn token(&self, h: TimerHandle) -> Option<T> {
        if self.is_armed(h) {
            self.entries[h.idx as usize].token
        } else {
            None
        }
    }

    /// The deadline of an armed timer (`None` if the handle is stale).
    pub fn deadline(&self, h: TimerHandle) -> Option<u64> {
        if self.is_armed(h) {
            Some(self.entries[h.idx as usize].deadline)
        } else {
            None
        }
    }

    /// Fires every timer with `deadline <= now`: unarms it, then passes its token to `fired`.
    /// Returns how many fired.
    pub fn expire<F: FnMut(T)>(&mut self, now: u64, fired: F) -> usize {
        self.expire_max(now, usize::MAX, fired)
    }

    /// Like [`TimerWheel::expire`] but fires at most `max` timers; the rest fire at the next call.
    pub fn expire_max<F: FnMut(T)>(&mut self, now: u64, max: usize, mut fired: F) -> usize {
        if self.armed == 0 {
            self.cursor = self.cursor.max(now / self.tick_ns);
            return 0;
        }
        let end = (now / self.tick_ns).max(self.cursor);
        // Ticks cursor..=cursor+extra; at most one revolution (every bucket once).
        let extra = (end - self.cursor).min(self.mask);
        let mut n = 0;
        for k in 0..=extra {
            let t = self.cursor + k;
            let b = (t & self.mask) as usize;
            let mut i = self.buckets[b].head;
            while i != NIL {
                let e = self.entries[i as usize];
                if e.deadline <= now {
                    if n == max {
                        // Resume at this bucket next time.
                        self.cursor = t;
                        return n;
                    }
                    self.unlink(i);
                    let token = self.release(i);
                    n += 1;
                    fired(token);
                }
                i = e.next;
            }
        }
        self.cursor = end;
        n
    }

    /// The earliest deadline of any armed timer (`None` when none is armed). Costs one pass over
    /// the buckets up to the first non-empty tick, and over every list when all timers are more
    /// than one revolution away.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.armed == 0 {
            return None;
        }
        // Timers sit at ticks >= cursor, and one at a later tick is due later than any at an
        // earlier tick, so the first tick holding a timer holds the earliest one.
        for k in 0..=self.mask {
            let t = self.cursor.wrapping_add(k);
            let mut best: Option<u64> = None;
            let mut i = self.buckets[(t & self.mask) as usize].head;
            while i != NIL {
                let e = &self.entries[i as usize];
                if e.at_tick == t {
                    best = Some(best.map_or(e.deadline, |d| d.min(e.deadline)));
                }
                i = e.next;
            }
            if best.is_some() {
                return best;
            }
        }
        // Everything is more than one revolution away.
        self.entries
            .iter()
            .filter(|e| e.token.is_some())
            .map(|e| e.deadline)
            .min()
    }

    /// Links entry `idx` at the tail of the bucket for `deadline`.
    fn link(&mut self, idx: u32, deadline: u64) {
        let t = (deadline / self.tick_ns).max(self.cursor);
        let b = (t & self.mask) as usize;
        let tail = self.buckets[b].tail;
        {
            let e = &mut self.entries[idx as usize];
            e.at_tick = t;
            e.prev = tail;
            e.next = NIL;
        }
        if tail == NIL {
            self.buckets[b].head = idx;
        } else {
            self.entries[tail as usize].next = idx;
        }
        self.buckets[b].tail = idx;
    }

    /// Unlinks armed entry `idx` from its bucket list.
    fn unlink(&mut self, idx: u32) {
        let e = self.entries[idx as usize];
        let b = (e.at_tick & self.mask) as usize;
        if e.prev == NIL {
            self.buckets[b].head = e.next;
        } else {
            self.entries[e.prev as usize].next = e.next;
        }
        if e.next == NIL {
            self.buckets[b].tail = e.prev;
        } else {
            self.entries[e.next as usize].prev = e.prev;
        }
    }

    /// Returns unlinked entry `idx` to the free list; gives back its token.
    fn release(&mut self, idx: u32) -> T {
        let free = self.free;
        let e = &mut self.entries[idx as usize];
        let token = e.token.take();
        e.gen = e.gen.wrapping_add(1);
        e.prev = NIL;
        e.next = free;
        self.free = idx;
        self.armed -= 1;
        match token {
            Some(t) => t,
            // Only armed entries are released (checked by every caller).
            None => unreachable!("released a free timer entry"),
        }
    }
}

impl<T: Copy> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("armed", &self.armed)
            .field("capacity", &self.capacity())
            .field("slots", &(self.mask + 1))
            .field("tick_ns", &self.tick_ns)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_arm_expire_cancel() {
        let mut w = TimerWheel::<u32>::new(4, 8, 10).unwrap();
        let a = w.arm(25, 1).unwrap();
        let b = w.arm(15, 2).unwrap();
        let c = w.arm(1_000, 3).unwrap();
        assert_eq!(w.next_deadline(), Some(15));
        assert_eq!(w.cancel(a), Some(1));
        assert_eq!(w.cancel(a), None);
        let mut got = Vec::new();
        assert_eq!(w.expire(14, |t| got.push(t)), 0);
        assert_eq!(w.expire(30, |t| got.push(t)), 1);
        assert_eq!(got, [2]);
        assert!(!w.is_armed(b));
        assert_eq!(w.next_deadline(), Some(1_000));
        assert_eq!(w.expire(1_000, |t| got.push(t)), 1);
        assert_eq!(got, [2, 3]);
        assert!(!w.is_armed(c));
        assert!(w.is_empty());
    }
}
