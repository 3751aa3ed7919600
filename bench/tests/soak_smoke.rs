//! The fault-injection soak (`rpcrdma_bench::soak`, issue 13 §3) for a few seconds under
//! `cargo test`: a fixed seed, every call kind, every fault kind, and every invariant of the
//! soak checked (exactly once, right bytes, documented errors only, pools and memory windows
//! back to their start, no hang, no panic). The 2-minute run is a `.ci/run` step of its own.

use std::time::Duration;

use rpcrdma_bench::soak::{run, wire::Kind, SoakConfig};

#[test]
fn accepts_short_soak_with_every_invariant_held() {
    let cfg = SoakConfig {
        duration: Duration::from_secs(6),
        seed: 0x5eed,
        clients: 8,
        ..SoakConfig::default()
    };
    let r = run(&cfg);
    println!("{r}");
    assert!(r.passed(), "{r}");
    // The run exercised what it claims to: every kind of call completed OK (also an
    // invariant of the run itself), and faults of the kinds that need live QPs were injected.
    for k in Kind::ALL {
        assert!(
            r.counts.get(&k).is_some_and(|c| c.ok > 0),
            "no OK {k:?}\n{r}"
        );
    }
    let f = r.faults;
    assert!(f.drop > 0 && f.fail_send > 0 && f.hold + f.delay > 0, "{r}");
    assert!(
        r.clients.connection_losses > 0 && r.clients.retransmits > 0,
        "{r}"
    );
    // Pools and windows: start == end (the run checks it too; here explicitly).
    assert_eq!(r.res[0].pools, r.res[2].pools, "{r}");
    assert_eq!(r.res[0].keys, r.res[2].keys, "{r}");
}
