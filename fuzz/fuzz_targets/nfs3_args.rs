//! NFSv3 wire codec (rpcrdma-apps `nfs::v3::proto`) on arbitrary bytes: the first octet picks the
//! procedure (0..=23, so two unknown numbers are tried too), the rest is fed to the argument,
//! result and directory-listing decoders. Whatever decodes must re-encode and decode to the
//! same value (pad octets on the input may be non-zero and trailing octets are ignored, so
//! values are compared, not bytes).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::v3::proto;
use rpcrdma_engine::xdr::XdrWriter;

fuzz_target!(|data: &[u8]| {
    let Some((&p, body)) = data.split_first() else {
        return;
    };
    let proc_num = u32::from(p % 24);
    let mut out = vec![0u8; body.len() + 64];
    if let Ok(args) = proto::decode_args(proc_num, body) {
        let mut w = XdrWriter::new(&mut out);
        proto::encode_args(&mut w, &args).expect("decoded arguments re-encode");
        let n = w.finish();
        // WRITE data may end the stream without its XDR pad (a Read chunk's roundup is not
        // conveyed, RFC 8166 §3.4.5 (from memory)); the re-encoding writes the pad.
        assert!(n <= body.len() + 3);
        assert_eq!(proto::decode_args(proc_num, &out[..n]), Ok(args));
    }
    if let Ok(res) = proto::decode_res(proc_num, body) {
        let mut w = XdrWriter::new(&mut out);
        proto::encode_res(&mut w, &res).expect("decoded result re-encodes");
        let n = w.finish();
        assert!(n <= body.len());
        assert_eq!(proto::decode_res(proc_num, &out[..n]), Ok(res));
    }
    for plus in [false, true] {
        if let Ok(l) = proto::decode_readdir_res(body, plus) {
            assert!(l.entries.len() <= body.len() / 24);
        }
    }
});
