//! The checked-in fuzz seeds (`fuzz/seeds/<target>/`, written by `fuzz/seeds/make.py` from the
//! RFC layouts, independently of the engine's encoders) decode as their names say: every valid
//! message is accepted with the fields the generator put in, every invalid one is rejected with
//! the expected error. So the seeds are golden vectors too, and a seed that silently stopped
//! reaching the code it was written for (a layout drift) fails here, not in a fuzz run.

use std::path::PathBuf;

use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::{private_data, v1, v2};
use rpcrdma_engine::rpc;

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 5,
        "{target}: seeds missing (run fuzz/seeds/make.py)"
    );
    v
}

#[test]
fn accepts_v1_seeds_as_named() {
    for (name, buf) in seeds("v1_header") {
        let r = v1::decode(&buf, &ChunkLimits::DEFAULT);
        match name.as_str() {
            "bad_version" => assert!(
                matches!(r, Err(ref e) if matches!(e.kind, v1::HeaderErrorKind::BadVersion { vers: 7 })),
                "{name}: {r:?}"
            ),
            "short_header" => assert!(
                matches!(r, Err(ref e) if matches!(e.kind, v1::HeaderErrorKind::ShortHeader { len: 12 })),
                "{name}: {r:?}"
            ),
            _ => {
                let h = r.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(h.vers, 1, "{name}");
                assert_eq!(h.credits, 32, "{name}");
            }
        }
    }
}

#[test]
fn accepts_v2_seeds_as_named() {
    for (name, buf) in seeds("v2_header") {
        let r = v2::decode(&buf, &v2::Limits::DEFAULT);
        if name == "unknown_proc" {
            assert!(r.is_err(), "{name}: {r:?}");
        } else {
            let h = r.unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(h.credits, 32, "{name}");
        }
    }
}

#[test]
fn accepts_private_data_seeds_as_named() {
    for (name, buf) in seeds("private_data") {
        let d = private_data::decode(&buf);
        let f = private_data::find(&buf);
        match name.as_str() {
            "unknown_version" | "cut_short" => {
                assert!(d.is_err() && f.is_none(), "{name}: {d:?} {f:?}")
            }
            "behind_other_bytes" => {
                assert!(d.is_err(), "{name}");
                let pd = f.expect("found at offset 4");
                assert_eq!(
                    (pd.max_send_size, pd.max_recv_size),
                    (32 * 1024, 32 * 1024),
                    "{name}"
                );
            }
            _ => {
                let pd = d.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(f, Some(pd), "{name}");
                let want = match name.as_str() {
                    "max_sizes" => 256 * 1024,
                    "min_sizes" => 1024,
                    _ => 4096,
                };
                assert_eq!((pd.max_send_size, pd.max_recv_size), (want, want), "{name}");
                let r = matches!(name.as_str(), "remote_invalidate_4k" | "max_sizes");
                assert_eq!(pd.remote_invalidate, r, "{name}");
            }
        }
    }
}

#[test]
fn accepts_rpc_seeds_as_named() {
    for (name, buf) in seeds("rpc_msg") {
        let (msg, used) = rpc::decode(&buf).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(used <= buf.len(), "{name}");
        let is_call = matches!(msg, rpc::RpcMsg::Call(_));
        assert_eq!(is_call, name.starts_with("call_"), "{name}");
        if let rpc::RpcMsg::Call(c) = msg {
            if name.contains("auth_sys") {
                rpc::AuthSys::parse(c.cred.body).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            }
        }
    }
}
