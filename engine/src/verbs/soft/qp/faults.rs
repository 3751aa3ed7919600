//! Fault injection on a soft QP ([`SoftFaults`]): failing the n-th send, dropping the
//! connection, holding completions back ([`DelayMode`]), and what tests assert on.
//!
//! Normal operation: the faults are atomics the NIC reads as it executes; nothing happens until
//! one is set. Recovery: an injected failure takes the ordinary error path (both QPs ERROR,
//! flushed, `Disconnected`); held completions are released in order.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::QpShared;
use crate::verbs::{QpState, WcStatus};

/// How a QP's completions are held back (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayMode {
    /// Hold every completion until [`SoftFaults::release_completions`].
    Hold,
    /// Hold each completion until its CQ has been polled this many more times.
    Polls(u32),
}

// Fault injection
// ---------------------------------------------------------------------------------------------

/// Fault injection on one soft QP. Cloneable, usable from any thread.
#[derive(Clone)]
pub struct SoftFaults {
    pub(super) qp: Arc<QpShared>,
}

impl core::fmt::Debug for SoftFaults {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftFaults(qp {})", self.qp.qp_num)
    }
}

impl SoftFaults {
    /// The `n`-th send WR executed from now on (1 = the next one) completes with `status`
    /// instead of executing; a non-success status moves the QP to ERROR as any error does.
    pub fn fail_nth_send(&self, n: u64, status: WcStatus) {
        let qp = &self.qp;
        let executed = qp.with_engine(|e| e.executed);
        // Relaxed: read by the engine under the send-queue lock taken after this call.
        qp.fail_status.store(status.0, Ordering::Relaxed);
        qp.fail_at.store(executed + n.max(1), Ordering::Relaxed);
    }

    /// Drops the connection as a link failure would: both QPs go to ERROR, flush, and report
    /// `Disconnected`.
    pub fn drop_connection(&self) {
        self.qp.connection_down();
    }

    /// Holds this QP's completions (send and receive) back from its CQs.
    pub fn delay_completions(&self, mode: DelayMode) {
        let (m, n) = match mode {
            DelayMode::Hold => (1, 0),
            DelayMode::Polls(n) => (2, n),
        };
        // Relaxed then Release: the poll count is visible to whoever sees the mode.
        self.qp.delay_polls.store(n, Ordering::Relaxed);
        self.qp.delay_mode.store(m, Ordering::Release);
    }

    /// Stops holding completions and releases everything held, in order.
    pub fn release_completions(&self) {
        // Release: pairs with the Acquire in push_completion.
        self.qp.delay_mode.store(0, Ordering::Release);
        self.qp.release_held(true);
    }

    /// Completions currently held back.
    pub fn held_completions(&self) -> usize {
        self.qp.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True while the head send WR waits for a receive (RNR retry pending).
    pub fn rnr_waiting(&self) -> bool {
        // Acquire: pairs with set_work's AcqRel swap.
        self.qp.rnr_waiting.load(Ordering::Acquire)
    }

    /// Current QP state.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }
}
