// Every check of the provider conformance suite as a `#[test]` of its own, for the iWARP
// test files (in-process and across processes), which include this file after defining
// `run(name)` and the environment type `CheckEnv` whose check list `every_check_is_listed`
// compares with; `run` calls `run_named` with its environment.

/// The checks the iWARP provider's devices cannot run (no RNR retry on iWARP).
const SKIPPED: [&str; 2] = ["rnr_retry_waits_for_recv", "rnr_retry_exhausted"];

/// Runs the check `name` on `env` (iWARP profile): passes, or is skipped when in [`SKIPPED`].
fn run_named<E: Env>(env: &mut E, name: &str) {
    assert_eq!(c::profile(env), c::Profile::Iwarp);
    let checks = c::all_checks::<E>();
    let check = checks
        .iter()
        .find(|k| k.name == name)
        .expect("listed check");
    match c::run_check(env, check) {
        c::Outcome::Pass => assert!(!SKIPPED.contains(&name), "{name} ran"),
        c::Outcome::Skip(why) => {
            assert!(SKIPPED.contains(&name), "{name} skipped: {why}");
            eprintln!("SKIP {name} ({why})");
        }
        c::Outcome::Fail(e) => panic!("{name}: {e}"),
    }
}

macro_rules! conformance_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name));
            }
        )*

        /// Every check of the suite has a test here.
        #[test]
        fn every_check_is_listed() {
            let listed = [$(stringify!($name)),*];
            for check in c::all_checks::<CheckEnv>() {
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
    rdma_read_depths_of_a_linux_requester,
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
    recv_posted_before_accept,
    completion_wakes_sleeper,
);

