//! The checked-in `nlm` fuzz seeds (`fuzz/seeds/nlm/`, laid out by hand from the XNFS NLM
//! version 4 XDR in `fuzz/seeds/make.py`) mean what their names say: the lock-table sequences
//! run through the table and its reference model without a difference, and each call gets
//! the status Linux lockd gives it over the NFSv3 fuzz fixture (a file, a directory, a stale
//! and a forged handle). So the seeds start the fuzzer inside each part and serve as golden
//! vectors of the service.

use std::path::PathBuf;

use rpcrdma_apps::nfs::nlm::proto::{self, Stat};
use rpcrdma_apps::nfs::nlm::{detached, model};
use rpcrdma_apps::nfs::rpc_tcp::Handled;
use rpcrdma_apps::nfs::v3::harness::Harness;
use rpcrdma_engine::rpc::AcceptStat;

fn seed(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nlm");
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn accepts_the_lock_table_seeds_as_the_model_answers_them() {
    for name in [
        "table_block_and_grant",
        "table_split_and_merge",
        "table_deadlock",
        "table_free_all",
        "table_stale_waiter",
    ] {
        let s = seed(name);
        assert_eq!(s[0], 0, "{name}");
        model::check(&s[1..]).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// The accept status and the NLM status of seed `name`'s call.
fn answer(name: &str) -> (Handled, Option<Stat>) {
    let s = seed(name);
    assert_eq!(s[0], 1, "{name}");
    let (p, st, out) = detached::call(&Harness::new(), s[1], &s[2..]);
    let stat = match p {
        proto::TEST => proto::decode_testres(&out).ok().map(|r| r.1),
        proto::SHARE | proto::UNSHARE => proto::decode_shareres(&out).ok().map(|r| r.1),
        proto::FREE_ALL => None,
        _ => proto::decode_res(&out).ok().map(|r| r.1),
    };
    (st, stat)
}

#[test]
fn accepts_the_service_seeds_with_linux_lockds_statuses() {
    let ok = Handled::Reply(AcceptStat::Success);
    for (name, want) in [
        ("lock_file", Stat::GRANTED),
        ("nm_lock_file", Stat::GRANTED),
        ("test_file", Stat::GRANTED),
        ("unlock_file", Stat::GRANTED),
        ("cancel_file", Stat::GRANTED),
        ("share_file", Stat::GRANTED),
        ("unshare_file", Stat::GRANTED),
        // The fixture's file has mode 0 and root's owner: uid 1000 may not read it.
        ("lock_file_uid1000", Stat::FAILED),
        ("lock_dir", Stat::FAILED),
        ("lock_stale", Stat::STALE_FH),
        ("lock_forged", Stat::STALE_FH),
        ("lock_fbig", Stat::FBIG),
        ("lock_reclaim_no_grace", Stat::DENIED_GRACE_PERIOD),
    ] {
        assert_eq!(answer(name), (ok, Some(want)), "{name}");
    }
    assert_eq!(answer("free_all"), (ok, None));
    assert_eq!(answer("lock_trailing").0, AcceptStat::GarbageArgs.into());
}

#[test]
fn accepts_the_status_monitor_seeds_as_written() {
    use rpcrdma_apps::nfs::nlm::{nsm, records};
    let s = seed("records_bad_sum");
    assert_eq!(s[0], 2);
    assert_eq!(
        records::decode(&s[1..]),
        Err(records::RecordsError::Corrupt)
    );
    let s = seed("sm_notify");
    assert_eq!(s[0], 3);
    assert_eq!(nsm::decode_notify(&s[1..]), Some((&b"client-1"[..], 5)));
}
