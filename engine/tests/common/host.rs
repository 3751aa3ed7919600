//! The harness's hosts: one arena of bytes each, with registrations and memory windows, and
//! the [`HostMemory`] view the engine reads and writes through (only registered memory).

use rpcrdma_engine::conn::{HostMemory, LocalBuf};
use rpcrdma_engine::verbs::{Access, Sge};

#[derive(Debug, Clone, Copy)]
pub struct Region {
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub access: Access,
}

#[derive(Debug, Clone, Copy)]
pub struct Mw {
    pub rkey: u32,
    pub bound: Option<(u64, u32, Access)>,
}

/// A host: one arena of bytes, registrations, memory windows.
pub struct Host {
    pub name: &'static str,
    pub base: u64,
    pub mem: Vec<u8>,
    next: u64,
    pub regions: Vec<Region>,
    pub mws: Vec<Mw>,
    key_base: u32,
}

impl Host {
    pub fn new(name: &'static str, base: u64, size: usize, key_base: u32) -> Host {
        Host {
            name,
            base,
            mem: vec![0; size],
            next: 0,
            regions: Vec::with_capacity(256),
            mws: Vec::with_capacity(256),
            key_base,
        }
    }

    /// Allocates and registers `len` octets (64-aligned) with `access`.
    pub fn alloc(&mut self, len: u32, access: Access) -> LocalBuf {
        let addr = self.base + self.next;
        let rounded = (u64::from(len.max(1)) + 63) & !63;
        assert!(
            self.next + rounded <= self.mem.len() as u64,
            "{}: arena exhausted",
            self.name
        );
        self.next += rounded;
        let idx = self.regions.len() as u32;
        let lkey = self.key_base + 0x100 + idx;
        let rkey = (self.key_base << 8) + 0x10_0000 + idx;
        self.regions.push(Region {
            addr,
            len: u64::from(len),
            lkey,
            rkey,
            access,
        });
        LocalBuf::new(addr, len, lkey)
    }

    /// Allocates `n` memory windows; returns their initial rkeys.
    pub fn alloc_mws(&mut self, n: usize) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        for _ in 0..n {
            let i = self.mws.len() as u32;
            let rkey = ((self.key_base + 0x4000 + i) << 8) | 0x11;
            self.mws.push(Mw { rkey, bound: None });
            out.push(rkey);
        }
        out
    }

    fn off(&self, addr: u64, len: usize) -> Option<usize> {
        let o = addr.checked_sub(self.base)? as usize;
        if o.checked_add(len)? <= self.mem.len() {
            Some(o)
        } else {
            None
        }
    }

    fn region_by_lkey(&self, lkey: u32) -> Option<&Region> {
        self.regions.iter().find(|r| r.lkey == lkey)
    }

    /// A local SGE is valid: its lkey names a registration containing it (with LOCAL_WRITE
    /// when the device writes it).
    pub fn local_ok(&self, sge: &Sge, write: bool) -> bool {
        match self.region_by_lkey(sge.lkey) {
            Some(r) => {
                sge.addr >= r.addr
                    && sge.addr + u64::from(sge.len) <= r.addr + r.len
                    && (!write || r.access.contains(Access::LOCAL_WRITE))
            }
            None => false,
        }
    }

    /// Whether a peer may access `[addr, addr + len)` under `rkey` with `access`.
    pub fn remote_ok(&self, rkey: u32, addr: u64, len: u32, access: Access) -> bool {
        let inside = |a: u64, l: u64| addr >= a && addr + u64::from(len) <= a + l;
        for mw in &self.mws {
            if mw.rkey == rkey {
                if let Some((a, l, acc)) = mw.bound {
                    return acc.contains(access) && inside(a, u64::from(l));
                }
                return false;
            }
        }
        for r in &self.regions {
            if r.rkey == rkey {
                return r.access.contains(access) && inside(r.addr, r.len);
            }
        }
        false
    }

    /// True when `rkey` allows any remote access at all (one octet anywhere it covers).
    pub fn rkey_live(&self, rkey: u32) -> bool {
        self.mws
            .iter()
            .any(|m| m.rkey == rkey && m.bound.is_some_and(|(_, _, a)| a.is_remote()))
            || self
                .regions
                .iter()
                .any(|r| r.rkey == rkey && r.access.is_remote())
    }

    /// Windows currently bound.
    pub fn bound_windows(&self) -> usize {
        self.mws.iter().filter(|m| m.bound.is_some()).count()
    }

    /// Invalidates the bound window with `rkey`.
    pub fn invalidate(&mut self, rkey: u32) -> bool {
        for mw in &mut self.mws {
            if mw.rkey == rkey && mw.bound.is_some() {
                mw.bound = None;
                return true;
            }
        }
        false
    }

    pub fn read(&self, buf: LocalBuf) -> &[u8] {
        let o = self
            .off(buf.addr, buf.len as usize)
            .expect("read outside arena");
        &self.mem[o..o + buf.len as usize]
    }

    pub fn read_at(&self, addr: u64, len: usize) -> &[u8] {
        let o = self.off(addr, len).expect("read outside arena");
        &self.mem[o..o + len]
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let o = self.off(addr, data.len()).expect("write outside arena");
        self.mem[o..o + data.len()].copy_from_slice(data);
    }

    pub fn fill(&mut self, buf: LocalBuf, v: u8) {
        let o = self
            .off(buf.addr, buf.len as usize)
            .expect("fill outside arena");
        self.mem[o..o + buf.len as usize].fill(v);
    }

    /// A buffer holding `data`.
    pub fn buf_with(&mut self, data: &[u8], access: Access) -> LocalBuf {
        let b = self.alloc(data.len() as u32, access);
        self.write(b.addr, data);
        b
    }
}

impl HostMemory for Host {
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        // Only registered memory is reachable.
        let r = self
            .regions
            .iter()
            .find(|r| addr >= r.addr && addr + len as u64 <= r.addr + r.len.max(1))?;
        let _ = r;
        let o = self.off(addr, len)?;
        Some(&self.mem[o..o + len])
    }

    fn bytes_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        self.regions
            .iter()
            .find(|r| addr >= r.addr && addr + len as u64 <= r.addr + r.len.max(1))?;
        let o = self.off(addr, len)?;
        Some(&mut self.mem[o..o + len])
    }

    fn remote_key(&self, lkey: u32) -> Option<u32> {
        let r = self.region_by_lkey(lkey)?;
        r.access.is_remote().then_some(r.rkey)
    }
}
