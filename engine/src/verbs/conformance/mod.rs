//! The provider conformance suite: checks, generic over the provider, of every rule the verbs
//! boundary promises (see `docs/verbs.md`), positive and negative.
//!
//! A provider plugs in through an [`Env`]: two devices (client and server side, possibly the
//! same), fresh listen addresses, and how to wait (yield for the soft provider, sleep a little
//! on real hardware). Each check builds its own connection(s) through the boundary's connection
//! manager, so CM behaviour is covered too. [`run_all`] runs every check and hands each outcome
//! to its caller (`rpcrdma-verbs-check` prints `PASS name` / `FAIL name: reason` / `SKIP name
//! (why)`); the soft provider's test file runs
//! each check as its own `#[test]`.
//!
//! Per-device expectations: where real devices legitimately differ, a check picks what it
//! expects from the [`Profile`] of the devices under test (the soft provider, rxe, other IB /
//! RoCE devices, siw, other iWARP devices), and every alternative names the section of
//! `docs/rdma-provider.md` that documents it. The soft provider's expectations are always the
//! exact behaviour of `docs/verbs.md`. A check that needs something a device lacks (type-2
//! memory windows, RNR retry, SRQs) declares it ([`Needs`]) and is reported as skipped, with the
//! reason, instead of failing.
//!
//! Error checks end the way a ULP would: after the first error completion the requester calls
//! `disconnect`, then the check looks for `Disconnected` and flushes on both sides. On iWARP a
//! remote error is not reported on the WR that caused it: the responder terminates the
//! connection, and the checks look for exactly that (both sides `Disconnected` without any call
//! from the ULP, later WRs flushed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    vendor, Access, CmEvent, CmEventKind, Completion, CompletionQueue, ConnRequest, Device,
    DeviceCaps, Keys, Listener, MemoryWindow, ProtectionDomain, Provider, QpInit, QpOptions,
    QpState, QueuePair, RecvWr, Registrar, SendFlags, SendOp, SendWr, Sge, SharedReceiveQueue,
    Transport, VerbsError, WcFlags, WcOpcode, WcStatus, PRIVATE_DATA_ACCEPT_MAX,
    PRIVATE_DATA_CONNECT_MAX, PRIVATE_DATA_REJECT_MAX, REJECT_CONSUMER, RNR_RETRY_INFINITE,
};

/// Outcome of one check: `Err` carries the reason.
pub type CheckResult = Result<(), String>;

/// What a provider supplies to run the suite.
pub trait Env {
    /// The provider under test.
    type P: Provider;
    /// Device of the active (client) side.
    fn client(&self) -> &<Self::P as Provider>::Device;
    /// Device of the passive (server) side.
    fn server(&self) -> &<Self::P as Provider>::Device;
    /// A fresh address the server device can listen on.
    fn listen_addr(&mut self) -> SocketAddr;
    /// Called in every wait loop iteration (yield / short sleep).
    fn idle(&mut self) {
        std::thread::yield_now();
    }
    /// How long to wait for something that must happen.
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    /// Wait-loop iterations used to conclude that something does *not* happen.
    fn settle_iterations(&self) -> u32 {
        200
    }
    /// Called when a check takes a documented device-specific path (which one, and what the
    /// device did), so a run's log shows it. Default: ignored.
    fn note(&mut self, _what: &str) {}
}

/// One named check.
pub struct Check<E: Env> {
    /// Name (also the soft provider's test name).
    pub name: &'static str,
    /// The check.
    pub run: fn(&mut E) -> CheckResult,
    /// What the devices must support for the check to run.
    pub needs: Needs,
}

/// Which device behaviour the checks expect where devices legitimately differ (each difference
/// is documented in `docs/rdma-provider.md` section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// The soft provider: exactly the behaviour of `docs/verbs.md`.
    Soft,
    /// Soft-RoCE (`rdma_rxe`): IB transport plus the rxe differences (section 2.3).
    Rxe,
    /// Any other InfiniBand / RoCE device: IB transport, statuses where IB devices differ.
    Ib,
    /// Soft-iWARP (`siw`): iWARP plus the siw differences (section 2.4).
    Siw,
    /// Any other iWARP device: iWARP semantics (section 2.4), no siw quirks.
    Iwarp,
}

impl Profile {
    /// The profile of a device pair: the soft provider by name, others by transport and vendor.
    pub fn of<P: Provider>(client: &DeviceCaps, server: &DeviceCaps) -> Profile {
        if P::NAME == "soft" {
            return Profile::Soft;
        }
        let both = |v: u32| client.vendor_id == v && server.vendor_id == v;
        if client.transport == Transport::Iwarp || server.transport == Transport::Iwarp {
            if both(vendor::SIW) {
                Profile::Siw
            } else {
                Profile::Iwarp
            }
        } else if both(vendor::RXE) {
            Profile::Rxe
        } else {
            Profile::Ib
        }
    }

    /// iWARP semantics (no RNR; remote errors terminate the connection).
    pub fn iwarp(self) -> bool {
        matches!(self, Profile::Siw | Profile::Iwarp)
    }
}

/// The profile of `env`'s devices.
pub fn profile<E: Env>(env: &E) -> Profile {
    Profile::of::<E::P>(env.client().caps(), env.server().caps())
}

/// What a check needs from both devices (a set of flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Needs(pub u8);

impl Needs {
    /// Nothing beyond RC queue pairs.
    pub const NONE: Needs = Needs(0);
    /// Type-2 memory windows ([`DeviceCaps::mw_type2`]).
    pub const MW_TYPE2: Needs = Needs(1);
    /// Send With Invalidate / Local Invalidate ([`DeviceCaps::send_with_invalidate`]).
    pub const SEND_WITH_INV: Needs = Needs(2);
    /// RNR retry (IB transport; iWARP has none).
    pub const RNR: Needs = Needs(4);
    /// Shared receive queues ([`DeviceCaps::max_srq`] > 0).
    pub const SRQ: Needs = Needs(8);

    /// True when every flag of `other` is set.
    pub const fn contains(self, other: Needs) -> bool {
        self.0 & other.0 == other.0
    }

    /// Why a check with these needs cannot run on the two devices (`None`: it can).
    pub fn missing(self, client: &DeviceCaps, server: &DeviceCaps) -> Option<&'static str> {
        let all = |f: fn(&DeviceCaps) -> bool| f(client) && f(server);
        if self.contains(Needs::MW_TYPE2) && !all(|c| c.mw_type2) {
            return Some("device has no type-2 memory windows");
        }
        if self.contains(Needs::SEND_WITH_INV) && !all(|c| c.send_with_invalidate) {
            return Some("device has no Send With Invalidate");
        }
        if self.contains(Needs::RNR) && !all(|c| c.transport == Transport::Ib) {
            return Some(
                "iWARP has no RNR retry (RFC 5040, RFC 5041): a Send that finds no receive is \
                 answered with a Terminate (DDP untagged buffer error, invalid MSN - no buffer \
                 available) and ends the connection, checked by rnr_retry_zero \
                 (docs/rdma-provider.md 2.4)",
            );
        }
        if self.contains(Needs::SRQ) && !all(|c| c.max_srq > 0) {
            return Some("device has no shared receive queues");
        }
        None
    }
}

impl core::ops::BitOr for Needs {
    type Output = Needs;
    fn bitor(self, rhs: Needs) -> Needs {
        Needs(self.0 | rhs.0)
    }
}

/// What running one check gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed.
    Pass,
    /// The check failed (the reason).
    Fail(String),
    /// The devices lack what the check needs (why).
    Skip(&'static str),
}

/// Why `check` cannot run on `env`'s devices (`None`: it can).
pub fn skip_reason<E: Env>(env: &E, check: &Check<E>) -> Option<&'static str> {
    check
        .needs
        .missing(env.client().caps(), env.server().caps())
}

/// Runs one check, unless the devices lack what it needs.
pub fn run_check<E: Env>(env: &mut E, check: &Check<E>) -> Outcome {
    if let Some(why) = skip_reason(env, check) {
        return Outcome::Skip(why);
    }
    match (check.run)(env) {
        Ok(()) => Outcome::Pass,
        Err(e) => Outcome::Fail(e),
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

pub(super) fn e2s(e: VerbsError) -> String {
    format!("{e}")
}

mod cm;
mod errors;
mod mw;
mod pair;
mod queues;
mod rdma_rw;
mod send_recv;
mod wake;

pub use cm::*;
pub use errors::*;
pub use mw::*;
pub use pair::*;
pub use queues::*;
pub use rdma_rw::*;
pub use send_recv::*;
pub use wake::*;

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

macro_rules! checks {
    ($($name:ident $([$($need:ident)|+])?),* $(,)?) => {
        /// Every check, in order, with what it needs.
        pub fn all_checks<E: Env>() -> Vec<Check<E>> {
            vec![$(Check {
                name: stringify!($name),
                run: $name::<E>,
                needs: Needs(0 $($(| Needs::$need.0)+)?),
            }),*]
        }
    };
}

/// Calls `$callback!` with every check of the suite, in order, each with what it needs
/// (`name` or `name[NEED | NEED]`): the one list behind [`all_checks`] and behind the test
/// files that give each check a `#[test]` of its own.
#[macro_export]
macro_rules! conformance_checks {
    ($callback:ident) => {
        $callback!(
            send_recv_basic,
            send_recv_multi_sge,
            recv_too_small,
            recv_wrong_pd,
            send_bad_lkey,
            rdma_write_in_bounds,
            rdma_write_out_of_bounds,
            rdma_write_wrong_rkey,
            rdma_write_missing_access,
            rdma_write_wrong_pd,
            rdma_write_after_dereg,
            rdma_read_in_bounds,
            rdma_read_depths_of_a_linux_requester,
            rdma_read_out_of_bounds,
            rdma_read_missing_access,
            rdma_read_wrong_rkey,
            rdma_read_sink_needs_local_write,
            mw_bind_and_access[MW_TYPE2],
            mw_rebind_rotates_key[MW_TYPE2 | SEND_WITH_INV],
            mw_bind_requires_mw_bind_access[MW_TYPE2],
            mw_bind_twice_fails[MW_TYPE2],
            mw_local_inv_blocks_access[MW_TYPE2 | SEND_WITH_INV],
            mw_bound_to_qp[MW_TYPE2],
            send_with_inv[MW_TYPE2 | SEND_WITH_INV],
            send_with_inv_bad_key[SEND_WITH_INV],
            rnr_retry_zero,
            rnr_retry_waits_for_recv[RNR],
            rnr_retry_exhausted[RNR],
            flush_on_error_both_sides,
            disconnect_flushes_both,
            ordering_write_then_send,
            fence_read_then_send,
            unsignaled_is_silent,
            queue_depth_enforced,
            unsignaled_hold_send_slots,
            cq_overflow,
            doorbell_per_batch,
            srq_shared_by_two_qps[SRQ],
            private_data_exchange,
            private_data_limits,
            reject_with_private_data,
            connect_without_listener,
            post_before_established,
            recv_posted_before_accept,
            completion_wakes_sleeper,
        );
    };
}

conformance_checks!(checks);

/// Counts of a suite run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Checks that passed.
    pub passed: usize,
    /// Checks that failed.
    pub failed: usize,
    /// Checks skipped because the devices lack what they need.
    pub skipped: usize,
}

/// Runs every check, handing each check's name and outcome to `each` (a caller prints
/// `PASS name` / `FAIL name: reason` / `SKIP name (why)`, or collects them), and counts them.
pub fn run_all<E: Env>(env: &mut E, mut each: impl FnMut(&str, &Outcome)) -> Summary {
    let mut sum = Summary::default();
    for c in all_checks::<E>() {
        let out = run_check(env, &c);
        match &out {
            Outcome::Pass => sum.passed += 1,
            Outcome::Fail(_) => sum.failed += 1,
            Outcome::Skip(_) => sum.skipped += 1,
        }
        each(c.name, &out);
    }
    sum
}
