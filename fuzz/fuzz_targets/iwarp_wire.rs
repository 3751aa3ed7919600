//! iWARP wire layer (engine::verbs::iwarp): MPA Request/Reply, a stream of MPA FPDUs and the
//! DDP/RDMAP messages in them. The first octet picks CRC on/off; the rest is decoded both as an
//! MPA Request/Reply and as a stream of FPDUs. Whatever decodes must re-encode to a buffer that
//! decodes to the same value, and every error must map to a Terminate code of a defined layer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::verbs::iwarp::{mpa, rdmap};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let crc = mode & 1 != 0;
    let mut out = [0u8; 2048];

    if let Ok(f) = mpa::decode_rr(rest) {
        // Reserved flag bits are ignored on receive, so compare values, not bytes.
        let n = mpa::encode_rr(&f, &mut out).expect("a decoded frame re-encodes");
        assert_eq!(n, f.encoded_len());
        assert_eq!(mpa::decode_rr(&out[..n]), Ok(f));
    }

    let mut stream = rest;
    while let Ok(f) = mpa::decode_fpdu(stream, crc, 1024) {
        assert!(f.len <= stream.len() && f.len % 4 == 0);
        stream = &stream[f.len..];
        match rdmap::decode(f.ulpdu) {
            Ok(m) => {
                let n = rdmap::encode(&m, &mut out).expect("a decoded message re-encodes");
                assert_eq!(n, rdmap::encoded_len(&m));
                assert_eq!(rdmap::decode(&out[..n]), Ok(m));
            }
            Err(e) => assert!(e.terminate_code().layer <= rdmap::LAYER_LLP),
        }
    }
});
