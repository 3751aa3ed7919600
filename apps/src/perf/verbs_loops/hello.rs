//! The private data of a verbs test's connection: the client's [`Hello`] (test, sizes,
//! iterations or duration, its buffer's address, rkey and slot size) in the connect request and
//! the server's [`Reply`] (its buffer's coordinates) in the accept, both big-endian.
//!
//! Normal operation: encoded once per connection, decoded by the other side. Recovery: a
//! short, unknown-version or inconsistent message decodes to an error; the server rejects the
//! connection, the client ends the run.

use super::super::{PerfError, Test, MAX_ITERS, MAX_SIZE, MIN_ITERS};

use super::{area_for, FLAG_DURATION, HELLO_LEN, HELLO_VERSION, MAGIC, MAX_QPS, REPLY_LEN};

/// The connect private data: what the server needs to mirror the client's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The test.
    pub test: Test,
    /// Duration mode.
    pub duration_ms: Option<u32>,
    /// Index of this QP.
    pub qp_index: u16,
    /// QPs the client opens.
    pub qps: u16,
    /// Inline threshold.
    pub inline: u16,
    /// First size.
    pub first_size: u32,
    /// Last size (sizes double from the first).
    pub last_size: u32,
    /// Iterations per size.
    pub iters: u32,
    /// Client buffer base address.
    pub addr: u64,
    /// Client buffer rkey.
    pub rkey: u32,
    /// Client slot area.
    pub area: u32,
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get64(b: &[u8], at: usize) -> u64 {
    (u64::from(get32(b, at)) << 32) | u64::from(get32(b, at + 4))
}

impl Hello {
    /// Encodes (big-endian): magic, version, test, flags, qp_index(8), qps(16), inline(16),
    /// first, last, iters, duration_ms, addr(64), rkey, area.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        put32(&mut b, 0, MAGIC);
        b[4] = HELLO_VERSION;
        b[5] = self.test.code();
        b[6] = if self.duration_ms.is_some() {
            FLAG_DURATION
        } else {
            0
        };
        b[7] = self.qp_index as u8;
        b[8..10].copy_from_slice(&self.qps.to_be_bytes());
        b[10..12].copy_from_slice(&self.inline.to_be_bytes());
        put32(&mut b, 12, self.first_size);
        put32(&mut b, 16, self.last_size);
        put32(&mut b, 20, self.iters);
        put32(&mut b, 24, self.duration_ms.unwrap_or(0));
        b[28..36].copy_from_slice(&self.addr.to_be_bytes());
        put32(&mut b, 36, self.rkey);
        put32(&mut b, 40, self.area);
        b
    }

    /// Decodes and validates untrusted private data.
    pub fn decode(b: &[u8]) -> Result<Hello, PerfError> {
        let bad = |why: &str| PerfError::Protocol(format!("bad connect private data: {why}"));
        if b.len() < HELLO_LEN {
            return Err(bad("too short (not an rpcrdma-perf client?)"));
        }
        if get32(b, 0) != MAGIC {
            return Err(bad("wrong magic (not an rpcrdma-perf client?)"));
        }
        if b[4] != HELLO_VERSION {
            return Err(bad("unknown version"));
        }
        let test = Test::from_code(b[5]).ok_or_else(|| bad("unknown test"))?;
        let duration_ms = (b[6] & FLAG_DURATION != 0).then(|| get32(b, 24));
        let h = Hello {
            test,
            duration_ms,
            qp_index: u16::from(b[7]),
            qps: u16::from_be_bytes([b[8], b[9]]),
            inline: u16::from_be_bytes([b[10], b[11]]),
            first_size: get32(b, 12),
            last_size: get32(b, 16),
            iters: get32(b, 20),
            addr: get64(b, 28),
            rkey: get32(b, 36),
            area: get32(b, 40),
        };
        let (first, last) = (u64::from(h.first_size), u64::from(h.last_size));
        if h.qps == 0 || u32::from(h.qps) > MAX_QPS || h.qp_index >= h.qps {
            return Err(bad("QP count or index out of range"));
        }
        if first == 0 || last > MAX_SIZE || last < first || !(last / first).is_power_of_two() {
            return Err(bad("sizes out of range"));
        }
        if h.last_size % h.first_size != 0 {
            return Err(bad("sizes are not a doubling series"));
        }
        if u64::from(h.area) != area_for(last) {
            return Err(bad("slot area does not match the sizes"));
        }
        match h.duration_ms {
            Some(0) => return Err(bad("zero duration")),
            Some(_) if first != last => return Err(bad("duration mode with several sizes")),
            None if !(MIN_ITERS..=MAX_ITERS).contains(&u64::from(h.iters)) => {
                return Err(bad("iterations out of range"))
            }
            _ => {}
        }
        Ok(h)
    }

    /// The sizes the client runs.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = u64::from(self.first_size);
        while s <= u64::from(self.last_size) {
            v.push(s);
            s *= 2;
        }
        v
    }
}

/// The accept private data: the server buffer's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Server buffer base address.
    pub addr: u64,
    /// Server buffer rkey.
    pub rkey: u32,
    /// Server slot area.
    pub area: u32,
}

impl Reply {
    /// Encodes (big-endian): magic, addr(64), rkey, area.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        put32(&mut b, 0, MAGIC);
        b[4..12].copy_from_slice(&self.addr.to_be_bytes());
        put32(&mut b, 12, self.rkey);
        put32(&mut b, 16, self.area);
        b
    }

    /// Decodes untrusted private data; the area must be the one expected.
    pub fn decode(b: &[u8], want_area: u64) -> Result<Reply, PerfError> {
        if b.len() < REPLY_LEN || get32(b, 0) != MAGIC {
            return Err(PerfError::Protocol(
                "bad accept private data (not an rpcrdma-perf server?)".into(),
            ));
        }
        let r = Reply {
            addr: get64(b, 4),
            rkey: get32(b, 12),
            area: get32(b, 16),
        };
        if u64::from(r.area) != want_area {
            return Err(PerfError::Protocol(format!(
                "server slot area {} differs from ours {want_area}",
                r.area
            )));
        }
        Ok(r)
    }
}
