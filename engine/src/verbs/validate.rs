//! The checks every provider makes on a send-queue work request before queueing it (SPDK's
//! `rdma_provider` common code style): what `ibv_post_send` refuses with `EINVAL` because of
//! the request itself, independent of the QP's state and of its queue occupancy (each
//! provider checks those first, in its own terms, and then calls [`send_wr`]).
//!
//! Normal operation: [`send_wr`] returns `Ok` for a well-formed request; it reads the request,
//! the QP's options and the device's capabilities, nothing else (no allocation, no lock).
//!
//! Recovery: a refused request is returned as [`VerbsError`] `EINVAL` of
//! [`VerbsCall::PostSend`]; nothing was queued, the QP is unchanged, and the caller may post
//! other requests.

use super::{
    errno, DeviceCaps, Provider, QpOptions, SendFlags, SendOp, SendWr, VerbsCall, VerbsError,
};

/// Checks `wr` against the QP's options `opts` and the device's `caps`:
/// - at most `max_send_sge` SGEs;
/// - Send With Invalidate only on a device with [`DeviceCaps::send_with_invalidate`];
/// - an RDMA Read scatters into at most [`DeviceCaps::max_sge_rd`] SGEs (siw: 1);
/// - `INLINE` only on an opcode that carries data (Send, Send With Invalidate, RDMA Write),
///   with at most `max_inline_data` octets gathered.
#[inline]
pub fn send_wr<P: Provider>(
    wr: &SendWr<'_, P>,
    opts: &QpOptions,
    caps: &DeviceCaps,
) -> Result<(), VerbsError> {
    let einval = Err(VerbsError::new(VerbsCall::PostSend, errno::EINVAL));
    if wr.sgl.len() > opts.max_send_sge as usize {
        return einval;
    }
    let carries_data = match wr.op {
        SendOp::Send | SendOp::RdmaWrite { .. } => true,
        SendOp::SendWithInv { .. } => {
            if !caps.send_with_invalidate {
                return einval;
            }
            true
        }
        SendOp::RdmaRead { .. } => {
            if wr.sgl.len() > caps.max_sge_rd as usize {
                return einval;
            }
            false
        }
        SendOp::LocalInv { .. } | SendOp::BindMw { .. } => false,
    };
    if wr.flags.contains(SendFlags::INLINE) {
        let total: u64 = wr.sgl.iter().map(|s| u64::from(s.len)).sum();
        if !carries_data || total > u64::from(opts.max_inline_data) {
            return einval;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::soft::{SoftConfig, SoftProvider};
    use crate::verbs::Sge;

    type Wr<'a> = SendWr<'a, SoftProvider>;

    const SGE: Sge = Sge {
        addr: 0x1000,
        len: 16,
        lkey: 1,
    };

    fn caps() -> DeviceCaps {
        SoftConfig::default().caps
    }

    fn opts() -> QpOptions {
        QpOptions {
            max_send_sge: 2,
            max_inline_data: 32,
            ..QpOptions::default()
        }
    }

    fn einval(r: Result<(), VerbsError>) -> bool {
        r == Err(VerbsError::new(VerbsCall::PostSend, errno::EINVAL))
    }

    fn with_op<'a>(op: SendOp<'a, SoftProvider>, sgl: &'a [Sge], flags: SendFlags) -> Wr<'a> {
        SendWr {
            wr_id: 1,
            op,
            sgl,
            flags,
        }
    }

    #[test]
    fn accepts_well_formed_requests_of_every_data_opcode() {
        let (o, c) = (opts(), caps());
        let sgl = [SGE, SGE];
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 2,
        };
        let write = SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: 2,
        };
        let inline = SendFlags::SIGNALED | SendFlags::INLINE;
        for wr in [
            Wr::send(1, &sgl),
            with_op(SendOp::SendWithInv { rkey: 3 }, &sgl, inline),
            with_op(write, &sgl, inline),
            with_op(read, &sgl, SendFlags::SIGNALED),
            with_op(SendOp::LocalInv { rkey: 3 }, &[], SendFlags::SIGNALED),
        ] {
            assert_eq!(send_wr(&wr, &o, &c), Ok(()), "{wr:?}");
        }
    }

    #[test]
    fn rejects_more_sges_than_max_send_sge() {
        let sgl = [SGE; 3];
        assert!(einval(send_wr(&Wr::send(1, &sgl), &opts(), &caps())));
    }

    #[test]
    fn rejects_send_with_invalidate_on_a_device_without_it() {
        let mut c = caps();
        c.send_with_invalidate = false;
        let wr = with_op(SendOp::SendWithInv { rkey: 3 }, &[SGE], SendFlags::SIGNALED);
        assert!(einval(send_wr(&wr, &opts(), &c)));
    }

    #[test]
    fn rejects_rdma_read_into_more_sinks_than_max_sge_rd() {
        let mut c = caps();
        c.max_sge_rd = 1;
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 2,
        };
        let sgl = [SGE, SGE];
        assert!(einval(send_wr(
            &with_op(read, &sgl, SendFlags::SIGNALED),
            &opts(),
            &c
        )));
        assert_eq!(
            send_wr(&with_op(read, &sgl[..1], SendFlags::SIGNALED), &opts(), &c),
            Ok(())
        );
    }

    #[test]
    fn rejects_inline_on_opcodes_without_data_and_beyond_max_inline_data() {
        let (o, c) = (opts(), caps());
        let inline = SendFlags::SIGNALED | SendFlags::INLINE;
        let read = SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 2,
        };
        assert!(einval(send_wr(&with_op(read, &[SGE], inline), &o, &c)));
        let inv = SendOp::LocalInv { rkey: 3 };
        assert!(einval(send_wr(&with_op(inv, &[], inline), &o, &c)));
        let long = [Sge { len: 17, ..SGE }, SGE];
        assert!(einval(send_wr(
            &with_op(SendOp::Send, &long, inline),
            &o,
            &c
        )));
        let exact = [SGE, SGE];
        assert_eq!(
            send_wr(&with_op(SendOp::Send, &exact, inline), &o, &c),
            Ok(())
        );
    }
}
