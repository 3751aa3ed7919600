//! Scatter/gather lists as the iWARP provider's queues keep them: copied out of a work request
//! when it is posted (the consumer's list need not outlive the post), and a posted receive.
//!
//! Normal operation: [`Sgl::new`] copies at most `MAX_SGE` entries (the boundary's validation
//! refused longer lists before); placement and gathering read them back as a slice.
//!
//! Recovery: nothing here fails; the entries are checked against the STag table when used.

use super::device::MAX_SGE;
use crate::verbs::Sge;

/// A scatter/gather list copied from a work request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sgl {
    pub(crate) sges: [Sge; MAX_SGE],
    pub(crate) n: usize,
}

impl Sgl {
    pub(crate) fn new(sgl: &[Sge]) -> Sgl {
        let mut sges = [Sge::default(); MAX_SGE];
        let n = sgl.len().min(MAX_SGE);
        sges[..n].copy_from_slice(&sgl[..n]);
        Sgl { sges, n }
    }

    pub(crate) fn as_slice(&self) -> &[Sge] {
        &self.sges[..self.n]
    }

    pub(crate) fn total(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.len)).sum()
    }
}

/// A posted receive: in a QP's own receive queue or in a shared receive queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RqEntry {
    pub(crate) wr_id: u64,
    pub(crate) sgl: Sgl,
}
