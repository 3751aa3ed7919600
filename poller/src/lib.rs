//! rpcrdma-poller (work in progress).
