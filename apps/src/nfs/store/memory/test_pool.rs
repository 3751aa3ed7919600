//! A registered buffer pool for unit tests: an endpoint on the software provider (one
//! reactor), kept alive as long as the pool is used.
//!
//! Normal operation: [`TestPool::new`] builds a fabric, one device, a reactor set and an
//! endpoint whose payload pool has the buffers asked for (256 KiB each, no hugepages).
//! Recovery: none; the reactor set stops when the fixture is dropped.

use std::net::{IpAddr, Ipv4Addr};

use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_poller::{
    BackoffConfig, BufPool, Cores, Endpoint, EndpointConfig, PinPolicy, ReactorConfig, ReactorSet,
};

/// Size of each test buffer.
pub(crate) const TEST_BUF: usize = 256 * 1024;

/// A pool and what keeps it registered.
pub(crate) struct TestPool {
    /// The endpoint's payload pool.
    pub(crate) pool: BufPool,
    _ep: Endpoint<SoftProvider>,
    _set: ReactorSet,
    _fabric: SoftFabric,
}

impl TestPool {
    /// A pool of `count` buffers of [`TEST_BUF`] octets.
    pub(crate) fn new(count: usize) -> TestPool {
        let fabric = SoftFabric::new();
        let dev = fabric.open(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)));
        let mut rc = ReactorConfig::new(Cores::Count(1));
        rc.pin = PinPolicy::Off;
        rc.backoff = BackoffConfig::shared_cores();
        rc.name = "testpool".into();
        let set = ReactorSet::start(&rc).expect("reactors");
        let cfg = EndpointConfig {
            max_conns_per_reactor: 1,
            max_credits: 4,
            buffers: count,
            reply_buffers: 4,
            buffer_size: TEST_BUF,
            reply_buffer_size: 4096,
            workers: 0,
            worker_ring: 4,
            hugepages: false,
            ..EndpointConfig::default()
        };
        let ep = Endpoint::<SoftProvider>::new(&set, dev, cfg).expect("endpoint");
        TestPool {
            pool: ep.buffers().clone(),
            _ep: ep,
            _set: set,
            _fabric: fabric,
        }
    }
}
