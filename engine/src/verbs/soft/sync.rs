//! The atomics and slot cells of the soft provider's lock-free rings (the QP receive ring, the
//! CQ ring): `core`'s in every normal build, loom's model-checked ones under `--cfg loom`
//! (scripts/loom.sh), so the same code is what loom explores. The cell's `with`/`with_mut` take
//! the access as a closure (loom's API), which lets loom track every slot read and write.
//!
//! Normal operation: zero-cost wrappers. Recovery: nothing to recover.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};

/// `core::cell::UnsafeCell` with loom's closure API.
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }

    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One round of a retry loop. Under loom it yields to the model's scheduler (a spinning thread
/// would otherwise be explored forever).
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// `loom::model` with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS` says otherwise.
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}
