//! Links libibverbs and librdmacm (found with pkg-config; the packages libibverbs-dev and
//! librdmacm-dev, or rdma-core-devel). No bindgen runs here: the bindings are in
//! `src/bindings_x86_64_linux.rs` (README.md says how they were made).

fn probe(lib: &str, package: &str, version: &str) {
    if let Err(e) = pkg_config::Config::new()
        .atleast_version(version)
        .statik(false)
        .probe(lib)
    {
        panic!(
            "rdma-sys: {lib} {version} or newer not found by pkg-config ({e}); install {package}"
        );
    }
}

fn main() {
    probe(
        "libibverbs",
        "libibverbs-dev (Debian) or rdma-core-devel (Fedora)",
        "1.8.28",
    );
    probe(
        "librdmacm",
        "librdmacm-dev (Debian) or rdma-core-devel (Fedora)",
        "1.2.28",
    );
}
