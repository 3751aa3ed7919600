// Every check of the provider conformance suite as a `#[test]` of its own (the suite's one
// list, `conformance_checks!`), for the iWARP test files (in-process and across processes),
// which include this file after defining `run(name)`; `run` calls `run_named` with its
// environment.

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
    ($($name:ident $([$($need:ident)|+])?),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name));
            }
        )*
    };
}

rpcrdma_engine::conformance_checks!(conformance_tests);

