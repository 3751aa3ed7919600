//! The checks every provider makes on a verbs call's arguments before the call reaches its
//! device (SPDK's `rdma_provider` common code style): the rules `ibv_post_send`,
//! `ibv_post_recv`, `ibv_reg_mr`, `ibv_create_cq`, `ibv_create_srq`, `rdma_create_qp` and the
//! rdma_cm calls with private data refuse with `EINVAL` because of the arguments themselves,
//! judged against the QP's options and the device's [`DeviceCaps`]. The soft, iWARP and rdma
//! providers call these; what only one of them checks (the soft provider reads memory
//! through the addresses it is given, the rdma provider converts to C integers) stays in the
//! provider, as do checks of a QP's state and queue occupancy, which each provider makes first,
//! in its own terms. The software providers, which check keys themselves where a device would,
//! also share the rules of those checks: a range inside a registration ([`in_bounds`]) and what
//! a memory-window bind needs of its region ([`mw_bind`]).
//!
//! Normal operation: each function returns `Ok` for well-formed arguments; it reads its
//! arguments, nothing else (no allocation, no lock), so it costs a few compares on the data
//! path ([`send_wr`], [`recv_wr`]).
//!
//! Recovery: a refused call is returned as [`VerbsError`] `EINVAL` of the call named; nothing
//! was created or queued, the QP is unchanged, and the caller may go on.

use super::{
    errno, Access, DeviceCaps, Provider, QpOptions, RecvWr, SendFlags, SendOp, SendWr, VerbsCall,
    VerbsError,
};

#[inline]
fn einval(call: VerbsCall) -> Result<(), VerbsError> {
    Err(VerbsError::new(call, errno::EINVAL))
}

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
    let einval = einval(VerbsCall::PostSend);
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
        SendOp::LocalInv { .. } | SendOp::BindMw(_) => false,
    };
    if wr.flags.contains(SendFlags::INLINE) {
        let total: u64 = wr.sgl.iter().map(|s| u64::from(s.len)).sum();
        if !carries_data || total > u64::from(opts.max_inline_data) {
            return einval;
        }
    }
    Ok(())
}

/// Checks a receive request's SGE count against `max_sge` (the QP's `max_recv_sge`, or the
/// SRQ's `max_sge`); `call` is `PostRecv` or `PostSrqRecv`.
#[inline]
pub fn recv_wr(wr: &RecvWr<'_>, max_sge: u32, call: VerbsCall) -> Result<(), VerbsError> {
    if wr.sgl.len() > max_sge as usize {
        return einval(call);
    }
    Ok(())
}

/// Checks a memory registration (`ibv_reg_mr`) of `len` octets with `access`: remote write
/// requires local write (IBA; the kernel's `ib_check_mr_access` answers `EINVAL` too), and
/// at most [`DeviceCaps::max_mr_size`] octets.
pub fn reg_mr(len: u64, access: Access, caps: &DeviceCaps) -> Result<(), VerbsError> {
    if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
        return einval(VerbsCall::RegMr);
    }
    if len > caps.max_mr_size {
        return einval(VerbsCall::RegMr);
    }
    Ok(())
}

/// Whether `[addr, addr + len)` lies inside `[base, base + size)` (no wrap-around on either):
/// the bounds check of every access under a key, local or remote, region or window.
#[inline]
pub fn in_bounds(base: u64, size: u64, addr: u64, len: u64) -> bool {
    match addr.checked_add(len) {
        Some(end) => addr >= base && end <= base.saturating_add(size),
        None => false,
    }
}

/// Whether a type-2 memory-window bind over `[addr, addr + len)` with the remote rights
/// `access` is allowed by the region it covers (`mr_access`, `[mr_base, mr_base + mr_len)`):
/// a non-empty range inside the region, which was registered with `MW_BIND`, and remote write
/// through the window only over a region with local write (IBA C10-72..75; the kernel's
/// `ib_check_mr_access` rule for regions). A refused bind completes `MW_BIND_ERR`.
pub fn mw_bind(
    (mr_base, mr_len, mr_access): (u64, u64, Access),
    addr: u64,
    len: u64,
    access: Access,
) -> bool {
    len != 0
        && in_bounds(mr_base, mr_len, addr, len)
        && mr_access.contains(Access::MW_BIND)
        && (!access.contains(Access::REMOTE_WRITE) || mr_access.contains(Access::LOCAL_WRITE))
}

/// Checks a completion queue's depth: 1 to [`DeviceCaps::max_cqe`] entries.
pub fn cq_depth(depth: u32, caps: &DeviceCaps) -> Result<(), VerbsError> {
    if depth == 0 || depth > caps.max_cqe {
        return einval(VerbsCall::CreateCq);
    }
    Ok(())
}

/// Checks a shared receive queue's limits: 1 to [`DeviceCaps::max_srq_wr`] receives of at most
/// [`DeviceCaps::max_sge`] SGEs.
pub fn srq(max_wr: u32, max_sge: u32, caps: &DeviceCaps) -> Result<(), VerbsError> {
    if max_wr == 0 || max_wr > caps.max_srq_wr || max_sge > caps.max_sge {
        return einval(VerbsCall::CreateSrq);
    }
    Ok(())
}

/// Checks a QP's requested options against the device (`call`: the call that creates the QP):
/// 1 to [`DeviceCaps::max_qp_wr`] sends; without an SRQ (`srq` false) at most `max_qp_wr`
/// receives; at most [`DeviceCaps::max_sge`] SGEs per send and per receive; at most
/// [`DeviceCaps::max_inline_data`] inline octets.
pub fn qp_opts(
    o: &QpOptions,
    srq: bool,
    caps: &DeviceCaps,
    call: VerbsCall,
) -> Result<(), VerbsError> {
    if o.max_send_wr == 0
        || o.max_send_wr > caps.max_qp_wr
        || (!srq && o.max_recv_wr > caps.max_qp_wr)
        || o.max_send_sge > caps.max_sge
        || o.max_recv_sge > caps.max_sge
        || o.max_inline_data > caps.max_inline_data
    {
        return einval(call);
    }
    Ok(())
}

/// Clamps a QP's RDMA Read depths to the device's: `initiator_depth` to
/// [`DeviceCaps::max_qp_init_rd_atom`], `responder_resources` to
/// [`DeviceCaps::max_qp_rd_atom`] (a device limit above 255 does not clamp).
pub fn clamp_read_depths(o: &mut QpOptions, caps: &DeviceCaps) {
    let cap = |v: u32| u8::try_from(v).unwrap_or(u8::MAX);
    o.initiator_depth = o.initiator_depth.min(cap(caps.max_qp_init_rd_atom));
    o.responder_resources = o.responder_resources.min(cap(caps.max_qp_rd_atom));
}

/// The options a QP is created with once [`qp_opts`] accepted `o`: with an SRQ (`srq` true) no
/// receive queue of its own (`max_recv_wr` 0), and the read depths clamped to the device
/// ([`clamp_read_depths`]).
pub fn qp_opts_in_force(mut o: QpOptions, srq: bool, caps: &DeviceCaps) -> QpOptions {
    if srq {
        o.max_recv_wr = 0;
    }
    clamp_read_depths(&mut o, caps);
    o
}

/// Checks private data of a connect, accept or reject (`call`: `Connect`, `Accept` or
/// `Reject`) against the device's limit for that call ([`DeviceCaps::max_private_data_connect`],
/// `_accept` or `_reject`; any other call is held to the connect limit, the smallest).
pub fn private_data(data: &[u8], caps: &DeviceCaps, call: VerbsCall) -> Result<(), VerbsError> {
    let max = match call {
        VerbsCall::Accept => caps.max_private_data_accept,
        VerbsCall::Reject => caps.max_private_data_reject,
        _ => caps.max_private_data_connect,
    };
    if data.len() > max as usize {
        return einval(call);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::soft::{SoftConfig, SoftProvider};
    use crate::verbs::{Access, RecvWr, Sge};

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
    #[test]
    fn rejects_receives_with_more_sges_than_the_queue_takes() {
        let sgl = [SGE, SGE];
        let wr = RecvWr {
            wr_id: 1,
            sgl: &sgl,
        };
        assert_eq!(recv_wr(&wr, 2, VerbsCall::PostRecv), Ok(()));
        let e = recv_wr(&wr, 1, VerbsCall::PostSrqRecv);
        assert_eq!(
            e,
            Err(VerbsError::new(VerbsCall::PostSrqRecv, errno::EINVAL))
        );
    }

    #[test]
    fn rejects_remote_write_without_local_write_and_oversized_regions() {
        let c = caps();
        let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        assert_eq!(reg_mr(4096, rw, &c), Ok(()));
        let e = Err(VerbsError::new(VerbsCall::RegMr, errno::EINVAL));
        assert_eq!(reg_mr(4096, Access::REMOTE_WRITE, &c), e);
        assert_eq!(reg_mr(c.max_mr_size + 1, Access::LOCAL_WRITE, &c), e);
        assert_eq!(reg_mr(c.max_mr_size, Access::LOCAL_WRITE, &c), Ok(()));
    }

    #[test]
    fn rejects_out_of_bounds_ranges_and_binds_the_region_does_not_allow() {
        assert!(in_bounds(100, 50, 100, 50) && in_bounds(100, 50, 149, 1));
        assert!(!in_bounds(100, 50, 99, 2) && !in_bounds(100, 50, 149, 2));
        assert!(!in_bounds(0, u64::MAX, u64::MAX, 2), "a wrapping range");
        let mr = (0x1000, 4096, Access::LOCAL_WRITE | Access::MW_BIND);
        let rw = Access::REMOTE_WRITE | Access::REMOTE_READ;
        assert!(mw_bind(mr, 0x1000, 4096, rw));
        assert!(!mw_bind(mr, 0x1000, 0, rw), "an empty window");
        assert!(!mw_bind(mr, 0x1800, 4096, rw), "beyond the region");
        assert!(!mw_bind(
            (0x1000, 4096, Access::LOCAL_WRITE),
            0x1000,
            64,
            rw
        ));
        let ro = (0x1000, 4096, Access::MW_BIND);
        assert!(
            !mw_bind(ro, 0x1000, 64, rw),
            "remote write over a read-only region"
        );
        assert!(mw_bind(ro, 0x1000, 64, Access::REMOTE_READ));
    }

    #[test]
    fn rejects_queue_sizes_outside_the_device_limits() {
        let c = caps();
        assert_eq!(cq_depth(1, &c), Ok(()));
        assert!(cq_depth(0, &c).is_err() && cq_depth(c.max_cqe + 1, &c).is_err());
        assert_eq!(srq(c.max_srq_wr, c.max_sge, &c), Ok(()));
        assert!(srq(0, 1, &c).is_err() && srq(c.max_srq_wr + 1, 1, &c).is_err());
        assert!(srq(1, c.max_sge + 1, &c).is_err());
        let o = QpOptions::default();
        assert_eq!(qp_opts(&o, false, &c, VerbsCall::Connect), Ok(()));
        let e = Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        for bad in [
            QpOptions {
                max_send_wr: 0,
                ..o
            },
            QpOptions {
                max_send_wr: c.max_qp_wr + 1,
                ..o
            },
            QpOptions {
                max_recv_wr: c.max_qp_wr + 1,
                ..o
            },
            QpOptions {
                max_send_sge: c.max_sge + 1,
                ..o
            },
            QpOptions {
                max_recv_sge: c.max_sge + 1,
                ..o
            },
            QpOptions {
                max_inline_data: c.max_inline_data + 1,
                ..o
            },
        ] {
            assert_eq!(qp_opts(&bad, false, &c, VerbsCall::Accept), e, "{bad:?}");
        }
        // With an SRQ the QP's own receive depth is not used.
        let srq_opts = QpOptions {
            max_recv_wr: c.max_qp_wr + 1,
            ..o
        };
        assert_eq!(qp_opts(&srq_opts, true, &c, VerbsCall::Connect), Ok(()));
    }

    #[test]
    fn accepts_read_depths_clamped_to_the_device() {
        let mut c = caps();
        c.max_qp_init_rd_atom = 4;
        c.max_qp_rd_atom = 1000;
        let mut o = QpOptions {
            initiator_depth: 16,
            responder_resources: 200,
            ..QpOptions::default()
        };
        clamp_read_depths(&mut o, &c);
        assert_eq!((o.initiator_depth, o.responder_resources), (4, 200));
    }

    #[test]
    fn accepts_options_in_force_without_own_receive_queue_under_an_srq() {
        let mut c = caps();
        c.max_qp_init_rd_atom = 4;
        let o = QpOptions {
            max_recv_wr: 64,
            initiator_depth: 16,
            ..QpOptions::default()
        };
        let own = qp_opts_in_force(o, false, &c);
        assert_eq!((own.max_recv_wr, own.initiator_depth), (64, 4));
        let shared = qp_opts_in_force(o, true, &c);
        assert_eq!((shared.max_recv_wr, shared.initiator_depth), (0, 4));
        assert_eq!(shared.max_send_wr, o.max_send_wr);
    }

    #[test]
    fn rejects_private_data_over_the_limit() {
        let c = DeviceCaps {
            max_private_data_reject: 56,
            ..caps()
        };
        assert_eq!(private_data(&[0; 56], &c, VerbsCall::Connect), Ok(()));
        let e = Err(VerbsError::new(VerbsCall::Reject, errno::EINVAL));
        assert_eq!(private_data(&[0; 57], &c, VerbsCall::Reject), e);
        // Each call is held to its own limit.
        let accept = vec![0; c.max_private_data_accept as usize];
        assert_eq!(private_data(&accept, &c, VerbsCall::Accept), Ok(()));
        assert!(private_data(&accept, &c, VerbsCall::Connect).is_err());
    }
}
