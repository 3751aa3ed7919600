//! Shared test helpers: a registrar that hands out fixed keys.
#![allow(dead_code)]

use rpcrdma_mempool::{
    Access, HugePagePolicy, Keys, Pool, PoolConfig, Region, RegionOptions, Registrar,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub const LKEY: u32 = 0x1111_2222;
pub const RKEY: u32 = 0x3333_4444;

/// Counts live registrations (incremented on register, decremented on drop).
pub static LIVE_REGISTRATIONS: AtomicUsize = AtomicUsize::new(0);

/// Stands in for a protection domain: returns fixed keys.
pub struct DummyRegistrar {
    pub keys: Keys,
    pub fail: bool,
}

impl Default for DummyRegistrar {
    fn default() -> Self {
        DummyRegistrar {
            keys: Keys {
                lkey: LKEY,
                rkey: RKEY,
            },
            fail: false,
        }
    }
}

/// The registration: remembers what it covers; reads the memory when dropped (so a drop after
/// the unmap would crash the test).
#[derive(Debug)]
pub struct DummyRegistration {
    pub addr: usize,
    pub len: usize,
    pub access: Access,
}

impl Drop for DummyRegistration {
    fn drop(&mut self) {
        // SAFETY: the region promises to drop its registration before unmapping.
        let _ = unsafe { std::ptr::read_volatile(self.addr as *const u8) };
        LIVE_REGISTRATIONS.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Registrar for DummyRegistrar {
    type Registration = DummyRegistration;
    type Error = &'static str;

    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<(DummyRegistration, Keys), &'static str> {
        if self.fail {
            return Err("dummy registrar told to fail");
        }
        LIVE_REGISTRATIONS.fetch_add(1, Ordering::SeqCst);
        Ok((
            DummyRegistration {
                addr: addr as usize,
                len,
                access,
            },
            self.keys,
        ))
    }
}

/// A registered normal-page region of at least `len` octets (not locked: tests stay under any
/// RLIMIT_MEMLOCK).
pub fn region(len: usize) -> Arc<Region> {
    let opts = RegionOptions {
        hugepages: HugePagePolicy::Never,
        lock: false,
        ..RegionOptions::default()
    };
    let r = Region::new(len, &opts).expect("normal-page region");
    r.register(
        &DummyRegistrar::default(),
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    )
    .expect("dummy registration");
    Arc::new(r)
}

/// A pool in its own region.
pub fn pool(count: usize, obj_size: usize, align: usize, cache_size: usize) -> Pool {
    let cfg = PoolConfig {
        count,
        obj_size,
        align,
        cache_size,
        max_caches: 8,
    };
    let r = region(cfg.region_len().unwrap());
    Pool::new(&r, &cfg).expect("pool")
}
