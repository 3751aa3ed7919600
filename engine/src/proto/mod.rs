//! Transport-header codecs: RPC-over-RDMA Version One (RFC 8166), Version Two (the seed draft),
//! the chunk lists both share, and RFC 8797 connection private data.

pub mod chunks;
pub mod private_data;
pub mod v1;
pub mod v2;
