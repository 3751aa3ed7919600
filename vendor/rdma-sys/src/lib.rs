//! rdma-core bindings (libibverbs, librdmacm): rdma-sys 0.3.0 with the output of its bindgen
//! step checked in (`bindings_x86_64_linux.rs`), plus its Rust versions of the header's
//! static inline functions (`verbs.rs`), opcodes and hand-written types.
#![allow(warnings)]
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]
#![allow(deref_nullptr)]
#![allow(clippy::all)]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!(
    "the checked-in rdma-sys bindings are for x86_64 Linux; on another target use crates.io \
     rdma-sys 0.3 (bindgen at build time, libclang 15 or older) or regenerate the bindings \
     (vendor/rdma-sys/README.md)"
);

use libc::*;

include!("bindings_x86_64_linux.rs");

mod opcode;
mod types;
mod verbs;

pub use self::opcode::*;
pub use self::types::*;
pub use self::verbs::*;
