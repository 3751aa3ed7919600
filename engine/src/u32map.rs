//! [`U32Map`]: a small fixed-capacity map from a `u32` key to a `u32` slot index, for the
//! lookups on the data path that must not hash through a general-purpose map: XID → call slot
//! in the requester, QP number → connection slot in a reactor.
//!
//! Normal operation: linear probing in a power-of-two table at most half full (Fibonacci
//! hashing of the key), sized once at creation; no allocation afterwards. Any `u32` is a valid
//! key (XIDs take every value); an empty entry is marked by its value, so slot indices must be
//! below `u32::MAX`.
//!
//! Recovery: none needed. A full table refuses the insert (the caller sized it for its
//! maximum); removal shifts the rest of the probe cluster back (no tombstones, so lookups never
//! slow down with churn).

/// Marks an empty entry in the value array.
const EMPTY: u32 = u32::MAX;

/// A fixed-capacity `u32 → u32` open-addressing map (see the module documentation).
#[derive(Debug, Clone)]
pub struct U32Map {
    keys: Box<[u32]>,
    vals: Box<[u32]>,
    mask: usize,
    len: usize,
}

impl U32Map {
    /// A table for up to `capacity` entries.
    pub fn new(capacity: usize) -> U32Map {
        let n = (capacity.max(1) * 2).next_power_of_two();
        U32Map {
            keys: vec![0; n].into_boxed_slice(),
            vals: vec![EMPTY; n].into_boxed_slice(),
            mask: n - 1,
            len: 0,
        }
    }

    #[inline]
    fn home(&self, key: u32) -> usize {
        // Fibonacci hashing: sequential keys (XIDs, QP numbers) spread over the table.
        (key.wrapping_mul(0x9e37_79b9) as usize) & self.mask
    }

    /// The slot stored for `key`.
    #[inline]
    pub fn get(&self, key: u32) -> Option<u32> {
        let mut i = self.home(key);
        loop {
            let v = self.vals[i];
            if v == EMPTY {
                return None;
            }
            if self.keys[i] == key {
                return Some(v);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Adds (or replaces) `key → slot`; `false` when the table is half full or `slot` is
    /// `u32::MAX`.
    pub fn insert(&mut self, key: u32, slot: u32) -> bool {
        if slot == EMPTY {
            return false;
        }
        let mut i = self.home(key);
        loop {
            if self.vals[i] == EMPTY {
                if (self.len + 1) * 2 > self.keys.len() {
                    return false;
                }
                self.keys[i] = key;
                self.vals[i] = slot;
                self.len += 1;
                return true;
            }
            if self.keys[i] == key {
                self.vals[i] = slot;
                return true;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes `key`; returns its slot.
    pub fn remove(&mut self, key: u32) -> Option<u32> {
        let mut i = self.home(key);
        loop {
            if self.vals[i] == EMPTY {
                return None;
            }
            if self.keys[i] == key {
                break;
            }
            i = (i + 1) & self.mask;
        }
        let val = self.vals[i];
        self.len -= 1;
        // Backward shift: move later entries of the cluster into the hole when their home
        // position allows it.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        while self.vals[j] != EMPTY {
            let h = self.home(self.keys[j]);
            // Distance from home to j, and from home to the hole (cyclic).
            let dj = j.wrapping_sub(h) & self.mask;
            let dh = hole.wrapping_sub(h) & self.mask;
            if dh <= dj {
                self.keys[hole] = self.keys[j];
                self.vals[hole] = self.vals[j];
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.vals[hole] = EMPTY;
        Some(val)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.vals.fill(EMPTY);
        self.len = 0;
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::U32Map;

    #[test]
    fn accepts_insert_get_remove() {
        let mut r = U32Map::new(8);
        for q in 0..8u32 {
            assert!(r.insert(0x11 + q * 16, q));
        }
        assert_eq!(r.len(), 8);
        for q in 0..8u32 {
            assert_eq!(r.get(0x11 + q * 16), Some(q));
        }
        assert_eq!(r.remove(0x11 + 3 * 16), Some(3));
        assert_eq!(r.get(0x11 + 3 * 16), None);
        for q in (0..8u32).filter(|&q| q != 3) {
            assert_eq!(r.get(0x11 + q * 16), Some(q), "key {q} lost after removal");
        }
    }

    #[test]
    fn accepts_every_key_value_including_max() {
        let mut r = U32Map::new(4);
        assert!(r.insert(u32::MAX, 1));
        assert!(r.insert(0, 2));
        assert_eq!((r.get(u32::MAX), r.get(0)), (Some(1), Some(2)));
        assert_eq!(r.remove(u32::MAX), Some(1));
        assert_eq!(r.get(u32::MAX), None);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.get(0), None);
    }

    #[test]
    fn rejects_overfull_table_and_reserved_slot() {
        let mut r = U32Map::new(2);
        assert!(r.insert(1, 0));
        assert!(r.insert(2, 1));
        assert!(!r.insert(3, 2));
        assert!(!r.insert(4, u32::MAX));
        assert_eq!(r.remove(9), None);
    }

    #[test]
    fn accepts_churn_against_model() {
        let mut r = U32Map::new(16);
        let mut model = std::collections::HashMap::new();
        let mut x = 12345u32;
        for step in 0..5000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            // Keys from a small range (many collisions) or anywhere in u32.
            let q = if x & 2 == 0 { (x >> 8) % 64 } else { x | 1 };
            if x & 1 == 0 && model.len() < 16 {
                assert!(r.insert(q, step));
                model.insert(q, step);
            } else {
                assert_eq!(r.remove(q), model.remove(&q));
            }
            for (k, v) in &model {
                assert_eq!(r.get(*k), Some(*v));
            }
            assert_eq!(r.len(), model.len());
        }
    }
}
