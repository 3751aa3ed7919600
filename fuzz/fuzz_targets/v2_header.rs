//! RPC-over-RDMA Version Two transport header decoder on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::proto::v2;

fuzz_target!(|data: &[u8]| {
    match v2::decode(data, &v2::Limits::DEFAULT) {
        Ok(h) => {
            assert!(h.header_len <= data.len());
            if let v2::Body::Msg(c) | v2::Body::Nomsg(c) = &h.body {
                let _ = c.lists.segments().count();
                let _ = c.lists.single_handle();
            }
        }
        Err(e) => {
            let _ = e.kind;
        }
    }
});
