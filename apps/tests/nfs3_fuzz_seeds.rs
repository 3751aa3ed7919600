//! The checked-in `nfs3_args` fuzz seeds (`fuzz/seeds/nfs3_args/procNN`: the procedure number,
//! then arguments laid out by hand from RFC 1813 in `fuzz/seeds/make.py`) decode with the
//! procedure they name, so each seed starts the fuzzer inside that procedure's decoder.

use rpcrdma_apps::nfs::v3::proto;

#[test]
fn accepts_every_nfs3_seed_with_its_procedure() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs3_args");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let buf = std::fs::read(e.path()).unwrap();
        let want: u32 = name.trim_start_matches("proc").parse().unwrap();
        let (&p, body) = buf.split_first().unwrap();
        assert_eq!(u32::from(p), want, "{name}");
        let args = proto::decode_args(want, body);
        assert!(args.is_ok(), "{name}: {args:?}");
        n += 1;
    }
    assert_eq!(n, 22, "one seed per NFSv3 procedure");
}
