//! The provider conformance suite on the soft provider, one `#[test]` per check, plus
//! soft-only checks: the exact statuses the soft provider picks where hardware varies, and
//! fault injection.

use rpcrdma_engine::verbs::conformance::{self as c, CheckResult, Env};
use rpcrdma_engine::verbs::soft::SoftEnv;

fn run(check: fn(&mut SoftEnv) -> CheckResult) {
    let mut env = SoftEnv::new();
    if let Err(e) = check(&mut env) {
        panic!("{e}");
    }
}

macro_rules! conformance_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(c::$name::<SoftEnv>);
            }
        )*

        /// Every check of the suite has a test here.
        #[test]
        fn every_check_is_listed() {
            let listed = [$(stringify!($name)),*];
            for check in c::all_checks::<SoftEnv>() {
                assert!(listed.contains(&check.name), "check {} has no test", check.name);
            }
        }
    };
}

conformance_tests!(
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
    rdma_read_out_of_bounds,
    rdma_read_missing_access,
    rdma_read_wrong_rkey,
    rdma_read_sink_needs_local_write,
    mw_bind_and_access,
    mw_rebind_rotates_key,
    mw_bind_requires_mw_bind_access,
    mw_bind_twice_fails,
    mw_local_inv_blocks_access,
    mw_bound_to_qp,
    send_with_inv,
    send_with_inv_bad_key,
    rnr_retry_zero,
    rnr_retry_waits_for_recv,
    rnr_retry_exhausted,
    flush_on_error_both_sides,
    disconnect_flushes_both,
    ordering_write_then_send,
    fence_read_then_send,
    unsignaled_is_silent,
    queue_depth_enforced,
    unsignaled_hold_send_slots,
    cq_overflow,
    doorbell_per_batch,
    srq_shared_by_two_qps,
    private_data_exchange,
    private_data_limits,
    reject_with_private_data,
    connect_without_listener,
    post_before_established,
);

#[test]
fn run_all_passes() {
    let mut env = SoftEnv::new();
    let (pass, fail) = c::run_all(&mut env);
    assert_eq!(fail, 0);
    assert_eq!(pass, c::all_checks::<SoftEnv>().len());
    let _ = env.listen_addr();
}
