//! ONC RPC message header decoder (and AUTH_SYS bodies) on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::rpc;

fuzz_target!(|data: &[u8]| {
    let _ = rpc::msg_direction(data);
    let _ = rpc::peek_xid(data);
    if let Ok((msg, off)) = rpc::decode(data) {
        assert!(off <= data.len());
        if let rpc::RpcMsg::Call(call) = msg {
            let _ = rpc::AuthSys::parse(call.cred.body);
            // A decoded call re-encodes to a call that decodes to the same header (pad bytes on
            // the input may be non-zero, so compare headers, not bytes).
            let mut out = [0u8; 1024];
            if let Ok(n) = rpc::encode_call(&mut out, &call) {
                let (again, _) = rpc::decode_call(&out[..n]).expect("re-encoded call decodes");
                assert_eq!(again, call);
            }
        }
    }
});
