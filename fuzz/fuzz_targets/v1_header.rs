//! RPC-over-RDMA Version One transport header decoder (chunk-list validation and views) on
//! arbitrary bytes. Whatever decodes must be fully walkable and must re-encode to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_engine::proto::chunks::ChunkLimits;
use rpcrdma_engine::proto::v1;

fuzz_target!(|data: &[u8]| {
    let limits = ChunkLimits::DEFAULT;
    match v1::decode(data, &limits) {
        Ok(h) => {
            assert!(h.header_len <= data.len());
            assert_eq!(h.payload.len(), data.len() - h.header_len);
            if let Some(c) = h.chunks() {
                let mut n = 0usize;
                for s in c.reads.iter() {
                    assert_eq!(s.position % 4, 0);
                    n += 1;
                }
                for w in c.writes.iter() {
                    n += w.segments().count();
                }
                if let Some(r) = &c.reply {
                    n += r.segments().count();
                }
                assert_eq!(n, c.segments().count());
                let _ = c.single_handle();
                let _ = c.distinct_handles();
            }
            let _ = h.check_call();
            let _ = h.check_reply();
        }
        Err(e) => {
            let _ = e.response();
        }
    }
});
