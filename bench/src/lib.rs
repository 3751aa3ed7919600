//! rpcrdma-bench (work in progress).
