//! Fixed-capacity containers used by the connection: a FIFO ring and an index stack.
//!
//! Normal operation: both are sized once, when the connection is created, and never grow; a
//! push on a full container is refused (returns `false`) instead of allocating.
//!
//! Recovery: the connection sizes every container so that a refused push means an internal
//! accounting error; callers treat it as a connection failure, never as a panic.

/// A FIFO ring of `Copy` values with a capacity fixed at creation.
#[derive(Debug)]
pub(crate) struct Ring<T: Copy> {
    buf: Vec<T>,
    head: usize,
    len: usize,
}

impl<T: Copy> Ring<T> {
    /// A ring holding up to `cap` values; `fill` initialises the storage.
    pub(crate) fn new(cap: usize, fill: T) -> Self {
        Self {
            buf: vec![fill; cap.max(1)],
            head: 0,
            len: 0,
        }
    }

    /// Values queued.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `i` (below twice the capacity) wrapped into the storage: a compare, not a division.
    #[inline]
    fn wrap(&self, i: usize) -> usize {
        if i >= self.buf.len() {
            i - self.buf.len()
        } else {
            i
        }
    }

    /// Appends `v`; `false` (and nothing stored) when full.
    #[inline]
    pub(crate) fn push(&mut self, v: T) -> bool {
        match self.push_slot() {
            Some(slot) => {
                *slot = v;
                true
            }
            None => false,
        }
    }

    /// Appends a value written in place: the slot it goes to (holding a stale value the
    /// caller overwrites), `None` (and nothing appended) when full.
    #[inline]
    pub(crate) fn push_slot(&mut self) -> Option<&mut T> {
        if self.len == self.buf.len() {
            return None;
        }
        let at = self.wrap(self.head + self.len);
        let slot = self.buf.get_mut(at)?;
        self.len += 1;
        Some(slot)
    }

    /// Removes the oldest value.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.buf[self.head];
        self.head = self.wrap(self.head + 1);
        self.len -= 1;
        Some(v)
    }

    /// Removes the values oldest first, handing each to `f` by reference (no copy out);
    /// stops after the first value `f` fails on (that one is removed too) and returns the
    /// error.
    #[inline]
    pub(crate) fn drain_with<E>(
        &mut self,
        mut f: impl FnMut(&T) -> Result<(), E>,
    ) -> Result<(), E> {
        while self.len > 0 {
            let r = f(&self.buf[self.head]);
            self.head = self.wrap(self.head + 1);
            self.len -= 1;
            r?;
        }
        Ok(())
    }
}

/// A stack of slot indices (free lists), capacity fixed at creation.
#[derive(Debug)]
pub(crate) struct IndexStack {
    items: Vec<u32>,
}

impl IndexStack {
    /// A stack holding `0..n`, popping 0 first.
    pub(crate) fn full(n: usize) -> Self {
        let mut items = Vec::with_capacity(n);
        for i in (0..n).rev() {
            items.push(i as u32);
        }
        Self { items }
    }

    /// Takes an index.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<u32> {
        self.items.pop()
    }

    /// Returns an index. Refused (`false`) when the stack is already full, which can only
    /// happen on a double free.
    #[inline]
    pub(crate) fn push(&mut self, i: u32) -> bool {
        if self.items.len() == self.items.capacity() {
            return false;
        }
        self.items.push(i);
        true
    }

    /// Indices available.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ring_fifo_and_refuses_overflow() {
        let mut r = Ring::new(2, 0u32);
        assert!(r.push(1));
        assert!(r.push(2));
        assert!(!r.push(3));
        assert_eq!(r.pop(), Some(1));
        assert!(r.push(4));
        assert_eq!(r.pop(), Some(2));
        assert_eq!(r.pop(), Some(4));
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn accepts_ring_slots_and_drain_in_order_across_the_wrap() {
        let mut r = Ring::new(3, 0u32);
        assert!(r.push(1));
        assert_eq!(r.pop(), Some(1));
        for v in [2, 3, 4] {
            *r.push_slot().expect("room") = v;
        }
        assert!(r.push_slot().is_none());
        let mut seen = Vec::new();
        assert_eq!(
            r.drain_with(|&v| {
                seen.push(v);
                if v == 3 {
                    Err(v)
                } else {
                    Ok(())
                }
            }),
            Err(3)
        );
        assert_eq!(seen, [2, 3]);
        assert_eq!(r.len(), 1);
        let rest = r.drain_with(|&v| {
            seen.push(v);
            Ok::<(), ()>(())
        });
        assert_eq!(rest, Ok(()));
        assert_eq!(seen, [2, 3, 4]);
        assert!(r.is_empty());
    }

    #[test]
    fn rejects_double_free_in_index_stack() {
        let mut s = IndexStack::full(2);
        assert_eq!(s.pop(), Some(0));
        assert!(s.push(0));
        assert!(!s.push(1));
        assert_eq!(s.len(), 2);
    }
}
