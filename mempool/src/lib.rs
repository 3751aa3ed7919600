//! rpcrdma-mempool: hugepage regions, fixed-size object pools with per-core caches, and STags.
#![warn(missing_docs)]

pub mod reg;

pub use reg::{Access, Keys, Registrar};
