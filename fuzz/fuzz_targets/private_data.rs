//! RFC 8797 private data: decode at offset 0 and search at any offset.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::proto::private_data;

fuzz_target!(|data: &[u8]| {
    if let Ok(pd) = private_data::decode(data) {
        // Reserved flag bits are ignored on receive, so compare values, not bytes.
        assert_eq!(private_data::decode(&pd.encode()), Ok(pd));
    }
    if let Some(pd) = private_data::find(data) {
        let n = private_data::negotiate(&private_data::PrivateData::V1_DEFAULTS, Some(&pd));
        assert!(n.send_inline >= 1024 && n.recv_inline >= 1024);
    }
});
