//! Model-checked handshake between an NFSv3 or NLM access and an NFSv4.1 delegation grant
//! (`rpcrdma_apps::nfs::v4::server::deleg_slots::Slots`), run by scripts/loom.sh
//! (`RUSTFLAGS="--cfg loom"`; this file is empty in normal builds). Under that cfg the slots'
//! counts and stamps are loom's atomics.
//!
//! The access stamps its slot and reads the slot's count ([`Slots::access`]); the grant counts
//! its delegation in and reads the stamps ([`Slots::admits`]). Whatever the interleaving and
//! whatever store each load may return, they must not both miss each other: the access sees
//! the delegation (and recalls it) or the grant sees the stamp (and takes the delegation back).
//! `scripts/loom.sh --mutants` weakens either side's store and must see these models fail.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rpcrdma_apps::nfs::v4::server::deleg_slots::Slots;

/// `loom::model` with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// The grant at time 0 and an access keeping delegations off until `until`, on one slot
/// stamped `before` first: the access sees the delegation or the grant is refused.
fn access_and_grant(before: u64, until: u64) {
    model(move || {
        let s = Arc::new(Slots::new(1));
        if before > 0 {
            s.block(0, true, before);
        }
        let g = Arc::clone(&s);
        let grant = thread::spawn(move || {
            g.count_at(0, true);
            g.admits(0, false, 0)
        });
        let seen = s.access(0, true, until);
        let granted = grant.join().unwrap();
        assert!(seen || !granted, "an access and a grant missed each other");
    });
}

#[test]
fn rejects_an_access_and_a_grant_that_miss_each_other() {
    access_and_grant(0, 2_000);
}

#[test]
fn rejects_missing_each_other_after_an_earlier_stamp() {
    // An earlier access's stamp, already over: the grant may go on only if it sees neither.
    access_and_grant(1, 2_000);
}

#[test]
fn rejects_a_write_delegation_missing_a_read_access() {
    model(|| {
        let s = Arc::new(Slots::new(1));
        let g = Arc::clone(&s);
        let grant = thread::spawn(move || {
            g.count_at(0, true);
            g.admits(0, true, 0)
        });
        let seen = s.access(0, false, 2_000);
        let granted = grant.join().unwrap();
        assert!(
            seen || !granted,
            "a read and a write delegation missed each other"
        );
    });
}
