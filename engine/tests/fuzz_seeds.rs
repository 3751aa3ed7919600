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

#[test]
fn accepts_iwarp_seeds_as_named() {
    use rpcrdma_engine::verbs::iwarp::{mpa, rdmap};
    for (name, buf) in seeds("iwarp_wire") {
        let (mode, rest) = buf.split_first().expect("mode octet");
        let crc = mode & 1 != 0;
        match name.as_str() {
            "mpa_request_rev2" => {
                let f = mpa::decode_rr(rest).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(
                    (f.kind, f.revision, f.crc),
                    (mpa::FrameKind::Request, 2, true)
                );
                let w = f.ird_ord.expect("IRD/ORD word");
                assert_eq!((w.ird, w.ord), (16, 8), "{name}");
                let pd = private_data::decode(f.ulp_private_data()).unwrap();
                assert!(pd.remote_invalidate, "{name}");
            }
            "mpa_reply_reject_rev1" => {
                let f = mpa::decode_rr(rest).unwrap();
                assert!(f.kind == mpa::FrameKind::Reply && f.reject && f.ird_ord.is_none());
            }
            "mpa_request_markers" => {
                let f = mpa::decode_rr(rest).unwrap();
                assert_eq!(mpa::check_markers(&f), Err(mpa::MpaError::MarkersRequired));
            }
            "mpa_bad_key" => assert_eq!(mpa::decode_rr(rest), Err(mpa::MpaError::BadKey)),
            "mpa_pd_too_long" => assert_eq!(
                mpa::decode_rr(rest),
                Err(mpa::MpaError::BadPrivateDataLength(513))
            ),
            "fpdu_bad_crc" => assert!(matches!(
                mpa::decode_fpdu(rest, crc, 1024),
                Err(mpa::MpaError::CrcMismatch { .. })
            )),
            "fpdu_unknown_opcode" => {
                let f = mpa::decode_fpdu(rest, crc, 1024).unwrap();
                assert_eq!(
                    rdmap::decode(f.ulpdu),
                    Err(rdmap::RdmapError::UnknownOpcode(rdmap::Opcode(8)))
                );
            }
            "fpdu_stream_crc" | "fpdu_stream_no_crc" => {
                assert_eq!(crc, name == "fpdu_stream_crc");
                let mut stream = rest;
                let mut kinds = Vec::new();
                while !stream.is_empty() {
                    let f = mpa::decode_fpdu(stream, crc, 1024)
                        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
                    stream = &stream[f.len..];
                    let m = rdmap::decode(f.ulpdu).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                    kinds.push(match m {
                        rdmap::Message::Tagged { read_response, .. } => {
                            if read_response {
                                "read_response"
                            } else {
                                "write"
                            }
                        }
                        rdmap::Message::ReadRequest(_) => "read_request",
                        rdmap::Message::Send {
                            invalidate: Some(0xcafe_0001),
                            solicited: true,
                            ..
                        } => "send_se_inv",
                        rdmap::Message::Send { .. } => "send",
                        rdmap::Message::Terminate(_) => "terminate",
                    });
                }
                assert_eq!(
                    kinds,
                    [
                        "send",
                        "write",
                        "read_request",
                        "read_response",
                        "send_se_inv",
                        "terminate"
                    ],
                    "{name}"
                );
            }
            other => panic!("unexpected seed {other}"),
        }
    }
}
