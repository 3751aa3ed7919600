//! The lock manager (NLM version 4) on arbitrary input; the first octet picks:
//! 0. a sequence of lock requests (4 octets each: LOCK, blocking LOCK, UNLOCK, CANCEL, TEST
//!    or FREE_ALL; who, which of two files, the range) run through the lock table and its
//!    octet-by-octet reference model (`apps::nfs::nlm::model::check`): locks, queues, grants
//!    and TEST holders equal after every step;
//! 1. one call to the NLM service over the NFSv3 fuzz fixture's exports
//!    (`apps::nfs::nlm::detached::call`; handle markers `00 00 00 04 FE FE FE n` name the
//!    fixture's root, directory, file, link, FIFO, a stale, a forged and an unsealed handle):
//!    the next octet picks the procedure and the credential, the rest are the arguments; no
//!    panic, and a call answered SUCCESS carries results that decode as the procedure's,
//!    with the arguments' cookie;
//! 2. a file of kept hosts (`apps::nfs::nlm::records::decode`): no panic, and a file that
//!    reads back encodes to the same octets (the format has one spelling);
//! 3. the status monitor's SM_NOTIFY arguments (`apps::nfs::nlm::nsm::decode_notify`): no
//!    panic, and what reads back reads back the same after encoding.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::nlm::{detached, model, nsm, proto, records};
use rpcrdma_apps::nfs::rpc_tcp::Handled;
use rpcrdma_apps::nfs::v3::harness::Harness;
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::xdr::XdrReader;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            if let Err(e) = model::check(body) {
                panic!("{e}");
            }
        }
        1 => service_call(body),
        2 => {
            if let Ok(r) = records::decode(body) {
                assert_eq!(records::encode(&r), body, "one spelling");
            }
        }
        _ => {
            if let Some((name, state)) = nsm::decode_notify(body) {
                let again = nsm::encode_notify(name, state);
                assert_eq!(nsm::decode_notify(&again), Some((name, state)));
            }
        }
    }
});

fn service_call(body: &[u8]) {
    let Some((&first, args)) = body.split_first() else {
        return;
    };
    let h = Harness::new();
    let (proc_num, st, out) = detached::call(&h, first, args);
    if st != Handled::Reply(AcceptStat::Success) {
        return;
    }
    let args = h.with_handles(args);
    let cookie = XdrReader::new(&args).get_opaque(proto::MAXNETOBJ_SZ).ok();
    let got = match proc_num {
        proto::TEST => proto::decode_testres(&out).map(|r| Some(r.0)),
        proto::LOCK | proto::NM_LOCK | proto::CANCEL | proto::UNLOCK => {
            proto::decode_res(&out).map(|r| Some(r.0))
        }
        proto::SHARE | proto::UNSHARE => proto::decode_shareres(&out).map(|r| Some(r.0)),
        _ => {
            assert!(out.is_empty(), "procedure {proc_num} has no results");
            Ok(None)
        }
    };
    if let Some(c) = got.expect("the results decode") {
        assert_eq!(Some(c), cookie, "the cookie is echoed");
    }
}
