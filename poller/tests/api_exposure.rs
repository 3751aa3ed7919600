//! Memory no peer can reach (issue 13 §2.2, §2.3), probed by hostile raw soft-provider QPs
//! against the real `Server` and `Client` on devices without type-2 memory windows (siw, some
//! RoCE NICs).
//!
//! RFC 8166 §3.4 (the Read-Write model): "the Requester exposes memory ... the Responder
//! never exposes its memory" — a responder only issues RDMA Reads and Writes, so nothing a
//! server registers needs a remote right. A hostile client that knows (or guesses: the soft
//! keys, like many NICs', are small and sequential) the key of the server's pools must get a
//! remote access error. A client on such a device can only offer chunks through persistent
//! STags, whose reach is endpoint-wide; it is refused unless the endpoint opts in
//! (`PersistentStags::EndpointWide`), and then the reach is exactly what docs/rdma-provider.md
//! says ("What a peer can reach"): the payload pool readable and writable, the reply pool
//! writable only, a connection's RPC-header buffers readable only — not its receive buffers.

mod api_common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use api_common::{program, reactor_config, ECHO, PROG};
use rpcrdma_engine::verbs::conformance::Buf;
use rpcrdma_engine::verbs::soft::{SoftConfig, SoftDevice, SoftFabric, SoftProvider};
use rpcrdma_engine::verbs::{
    Access, CmEventKind, CompletionQueue, ConnRequest, Device, Listener, Provider, QpInit,
    QpOptions, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcStatus,
};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    Client, ClientError, ClientOptions, EndpointConfig, PersistentStags, ReactorSet, Server,
};

type P = SoftProvider;
type Endpoint = rpcrdma_poller::Endpoint<P>;
type Qp = <P as Provider>::Qp;
type Cq = <P as Provider>::Cq;
type Pd = <P as Provider>::Pd;

static PORT: AtomicU16 = AtomicU16::new(33000);

const DEADLINE: Duration = Duration::from_secs(20);

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn no_windows() -> SoftConfig {
    let mut d = SoftConfig::default();
    d.caps.mw_type2 = false;
    d.caps.send_with_invalidate = false;
    d
}

/// A small endpoint (pools of 1 MiB, so a hostile peer can read a whole one quickly).
fn ecfg(persistent_stags: PersistentStags) -> EndpointConfig {
    EndpointConfig {
        max_conns_per_reactor: 8,
        max_credits: 16,
        buffers: 64,
        reply_buffers: 64,
        buffer_size: 16 * 1024,
        hugepages: false,
        persistent_stags,
        ..EndpointConfig::default()
    }
}

fn fresh_addr(last: u8) -> SocketAddr {
    SocketAddr::new(ip(last), PORT.fetch_add(1, Ordering::Relaxed))
}

/// A raw QP with its own PD and CQ (the hostile side).
struct Raw {
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn poll_wc(cq: &mut Cq, what: &str) -> rpcrdma_engine::verbs::Completion {
    let mut wc = [rpcrdma_engine::verbs::Completion::default(); 1];
    let end = Instant::now() + DEADLINE;
    loop {
        if cq.poll(&mut wc).expect("poll cq") == 1 {
            return wc[0];
        }
        assert!(Instant::now() < end, "no completion for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn wait_established(qp: &mut Qp) {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(ev) = qp.poll_event().expect("cm event") {
            assert_eq!(ev.kind, CmEventKind::Established, "{ev:?}");
            return;
        }
        assert!(Instant::now() < end, "hostile connection not established");
        std::thread::sleep(Duration::from_micros(200));
    }
}

impl Raw {
    /// A hostile client: a raw QP on `dev` connected to the server at `addr`.
    fn connect(dev: &SoftDevice, addr: SocketAddr) -> Raw {
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(64).expect("cq");
        let mut qp = dev
            .connect(
                addr,
                QpInit {
                    pd: &pd,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    opts: QpOptions::default(),
                },
                &[],
            )
            .expect("connect");
        wait_established(&mut qp);
        Raw { pd, cq, qp }
    }

    /// RDMA Read of `len` octets at `addr` under `rkey`: the status and the octets read.
    fn read(&mut self, addr: u64, rkey: u32, len: usize) -> (WcStatus, Vec<u8>) {
        let sink = Buf::<P>::new(&self.pd, len, Access::LOCAL_WRITE).expect("sink");
        let sgl = [sink.sge(0, len)];
        self.post(
            SendOp::RdmaRead {
                remote_addr: addr,
                rkey,
            },
            &sgl,
        );
        let wc = poll_wc(&mut self.cq, "an RDMA Read");
        (wc.status, sink.read(0, len))
    }

    /// RDMA Write of `data` to `addr` under `rkey`: the status.
    fn write(&mut self, addr: u64, rkey: u32, data: &[u8]) -> WcStatus {
        let src = Buf::<P>::new(&self.pd, data.len(), Access::LOCAL_WRITE).expect("source");
        src.write(0, data);
        let sgl = [src.sge(0, data.len())];
        self.post(
            SendOp::RdmaWrite {
                remote_addr: addr,
                rkey,
            },
            &sgl,
        );
        poll_wc(&mut self.cq, "an RDMA Write").status
    }

    fn post(&mut self, op: SendOp<'_, P>, sgl: &[rpcrdma_engine::verbs::Sge]) {
        let wr = SendWr {
            wr_id: 7,
            op,
            sgl,
            flags: SendFlags::SIGNALED,
        };
        self.qp.queue_send(&wr).expect("queue send");
        self.qp.flush_send().expect("flush send");
    }
}

/// A hostile server: accepts one connection with one receive posted, and hands back the first
/// message the client sends.
struct HostileServer {
    dev: SoftDevice,
    addr: SocketAddr,
    listener: <P as Provider>::Listener,
}

/// The chunk segments (handle, length, offset) of an RPC-over-RDMA Version One call header
/// (RFC 8166 §4.2: Read list items are position + segment, Write chunks and the Reply chunk
/// are counted segment arrays).
#[derive(Debug, Default)]
struct Chunks {
    reads: Vec<(u32, u32, u64)>,
    reply: Vec<(u32, u32, u64)>,
}

fn parse_chunks(h: &[u8]) -> Chunks {
    let word = |i: usize| -> u32 {
        let b = h.get(i * 4..i * 4 + 4).expect("header too short");
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    };
    let seg = |i: usize| {
        (
            word(i),
            word(i + 1),
            (u64::from(word(i + 2)) << 32) | u64::from(word(i + 3)),
        )
    };
    assert_eq!(word(1), 1, "RPC-over-RDMA version");
    let mut c = Chunks::default();
    let mut i = 4;
    while word(i) == 1 {
        c.reads.push(seg(i + 2));
        i += 6;
    }
    i += 1;
    while word(i) == 1 {
        let n = word(i + 1) as usize;
        i += 2 + 4 * n;
    }
    i += 1;
    if word(i) == 1 {
        let n = word(i + 1) as usize;
        for k in 0..n {
            c.reply.push(seg(i + 2 + 4 * k));
        }
    }
    c
}

impl HostileServer {
    fn listen(dev: SoftDevice, last: u8) -> HostileServer {
        let addr = fresh_addr(last);
        let listener = dev.listen(addr, 8).expect("listen");
        HostileServer {
            dev,
            addr,
            listener,
        }
    }

    /// Accepts the next connection and returns it with the first message it received.
    fn accept_first_message(&mut self) -> (Raw, Vec<u8>) {
        let end = Instant::now() + DEADLINE;
        let req = loop {
            if let Some(r) = self.listener.poll().expect("listener poll") {
                break r;
            }
            assert!(Instant::now() < end, "no connection to the hostile server");
            std::thread::sleep(Duration::from_micros(200));
        };
        let pd = self.dev.alloc_pd().expect("pd");
        let mut cq = self.dev.create_cq(64).expect("cq");
        let rbuf = Buf::<P>::new(&pd, 8192, Access::LOCAL_WRITE).expect("receive buffer");
        let sgl = [rbuf.sge(0, 8192)];
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts: QpOptions::default(),
        };
        // No private data: the client assumes 1024-octet inline thresholds (RFC 8797 §4), so
        // a call of a few KiB is a long call whose chunks name the client's memory.
        let qp = req
            .accept_prepared(init, &[], &mut |qp: &mut Qp| {
                qp.queue_recv(&RecvWr {
                    wr_id: 1,
                    sgl: &sgl,
                })?;
                qp.flush_recv()
            })
            .expect("accept");
        let wc = poll_wc(&mut cq, "the client's call");
        assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
        let msg = rbuf.read(0, wc.byte_len as usize);
        (Raw { pd, cq, qp }, msg)
    }
}

fn pattern(tag: &[u8], n: usize) -> Vec<u8> {
    tag.iter().copied().cycle().take(n).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn echo(c: &Client, data: &[u8]) -> Result<Vec<u8>, ClientError> {
    let mut a = c.args().expect("args");
    a.put_opaque(data).expect("put");
    let r = c.call_blocking(Proc::new(PROG, 2, ECHO), a)?;
    Ok(r.results().to_vec())
}

fn start_server(set: &ReactorSet, dev: SoftDevice, addr: SocketAddr) -> (Endpoint, Server) {
    let ep = Endpoint::new(set, dev, ecfg(PersistentStags::Refuse)).expect("server ep");
    let s = Server::builder()
        .program(program(ep.buffers().clone()))
        .start(&ep, addr)
        .expect("server");
    (ep, s)
}

/// A server on a device without memory windows, an honest client (with windows) that got a
/// reply holding `secret`, and a device for hostile clients.
struct ServerWorld {
    set: ReactorSet,
    sep: Endpoint,
    server: Server,
    _cep: Endpoint,
    client: Client,
    hdev: SoftDevice,
    addr: SocketAddr,
    secret: Vec<u8>,
    _fabric: SoftFabric,
}

impl ServerWorld {
    fn new() -> ServerWorld {
        let fabric = SoftFabric::new();
        let sdev = fabric.open_with(ip(2), no_windows());
        let cdev = fabric.open_with(ip(1), SoftConfig::default());
        let hdev = fabric.open_with(ip(9), SoftConfig::default());
        let set = ReactorSet::start(&reactor_config(2)).expect("reactors");
        let addr = fresh_addr(2);
        let (sep, server) = start_server(&set, sdev, addr);
        let cep = Endpoint::new(&set, cdev, ecfg(PersistentStags::Refuse)).expect("client ep");
        let client = Client::connect(&cep, addr, ClientOptions::default()).expect("client");
        let secret = pattern(b"another client's reply ", 3000);
        assert_eq!(
            &echo(&client, &secret).expect("honest echo")[4..3004],
            &secret[..]
        );
        ServerWorld {
            set,
            sep,
            server,
            _cep: cep,
            client,
            hdev,
            addr,
            secret,
            _fabric: fabric,
        }
    }

    /// The honest client is still served; then everything stops.
    fn finish(self) {
        let more = pattern(b"still served ", 2000);
        assert_eq!(
            &echo(&self.client, &more).expect("echo after")[4..2004],
            &more[..]
        );
        drop(self.client);
        drop(self.server);
        let mut set = self.set;
        set.stop().expect("stop");
    }
}

/// §2.2: a server on a device without memory windows registers nothing with remote rights
/// (RFC 8166 §3.4: in the Read-Write model the Responder never exposes memory). A hostile
/// client connected to it that uses the key of the server's reply pool (read here from the
/// pool's registration; on the wire it is a small sequential number to guess) cannot RDMA-Read
/// another client's reply out of it: REM_ACCESS_ERR (IBTA: a tagged access outside the
/// rights of the key), nothing read, and the honest client is served before and after.
#[test]
fn rejects_hostile_client_reading_another_clients_reply_from_server_without_windows() {
    let w = ServerWorld::new();
    let replies = w.sep.reply_buffers().pool().region();
    let rkey = replies.keys().expect("registered").rkey;
    let (base, len) = (replies.as_ptr() as u64, replies.len());
    let mut h = Raw::connect(&w.hdev, w.addr);
    let (status, got) = h.read(base, rkey, len);
    assert!(
        !contains(&got, &w.secret[..64]),
        "a hostile client read another client's reply out of the server's reply pool ({status:?})"
    );
    assert_eq!(
        status,
        WcStatus::REM_ACCESS_ERR,
        "RDMA Read of the reply pool"
    );
    w.finish();
}

/// §2.2: as above, an RDMA Write under the key of the server's payload pool into a buffer the
/// server holds: REM_ACCESS_ERR and the buffer unchanged.
#[test]
fn rejects_hostile_client_writing_into_server_buffer_without_windows() {
    let w = ServerWorld::new();
    let mut held = w.sep.buffers().get().expect("a payload buffer");
    held.fill(0x5a);
    let (at, pkey) = (
        held.entry().addr,
        w.sep.buffers().pool().region().keys().unwrap().rkey,
    );
    let mut h = Raw::connect(&w.hdev, w.addr);
    let status = h.write(at, pkey, &[0xee; 256]);
    assert!(
        held[..256].iter().all(|&b| b == 0x5a),
        "a hostile client overwrote a server buffer ({status:?})"
    );
    assert_eq!(
        status,
        WcStatus::REM_ACCESS_ERR,
        "RDMA Write into the payload pool"
    );
    drop(held);
    w.finish();
}

/// §2.3: a client on a device without type-2 windows could only expose chunks through
/// endpoint-wide persistent STags; without the endpoint's explicit opt-in, `Client::connect`
/// refuses with `PersistentStagsRefused` (and the error says why).
#[test]
fn rejects_client_without_windows_unless_persistent_stags_opted_in() {
    let fabric = SoftFabric::new();
    let sdev = fabric.open_with(ip(2), SoftConfig::default());
    let cdev = fabric.open_with(ip(1), no_windows());
    let set = ReactorSet::start(&reactor_config(2)).expect("reactors");
    let addr = fresh_addr(2);
    let (_sep, server) = start_server(&set, sdev, addr);
    let cep = Endpoint::new(&set, cdev, ecfg(PersistentStags::Refuse)).expect("client ep");
    let r = Client::connect(&cep, addr, ClientOptions::default());
    assert!(
        matches!(r, Err(ClientError::PersistentStagsRefused)),
        "connect without windows and without opt-in: {:?}",
        r.as_ref().map(|c| c.state())
    );
    let msg = ClientError::PersistentStagsRefused.to_string();
    assert!(
        msg.contains("persistent_stags") && msg.contains("windows"),
        "{msg}"
    );
    drop(server);
    let mut set = set;
    set.stop().expect("stop");
}

/// An opted-in client endpoint without windows, connected to an honest server A to which it
/// sent `secret` as arguments.
struct ClientWorld {
    set: ReactorSet,
    fabric: SoftFabric,
    server: Server,
    _aep: Endpoint,
    cep: Endpoint,
    ca: Client,
    secret: Vec<u8>,
}

impl ClientWorld {
    fn new() -> ClientWorld {
        let fabric = SoftFabric::new();
        let adev = fabric.open_with(ip(2), SoftConfig::default());
        let cdev = fabric.open_with(ip(1), no_windows());
        let set = ReactorSet::start(&reactor_config(2)).expect("reactors");
        let a_addr = fresh_addr(2);
        let (aep, server) = start_server(&set, adev, a_addr);
        let cep =
            Endpoint::new(&set, cdev, ecfg(PersistentStags::EndpointWide)).expect("client ep");
        let ca = Client::connect(&cep, a_addr, ClientOptions::default()).expect("client to A");
        let secret = pattern(b"arguments for server A ", 3000);
        assert_eq!(&echo(&ca, &secret).expect("echo A")[4..3004], &secret[..]);
        ClientWorld {
            set,
            fabric,
            server,
            _aep: aep,
            cep,
            ca,
            secret,
        }
    }

    /// The same client endpoint calls a fresh hostile server B (on `.last`) with a long call;
    /// B accepts and parses the chunks that name the client's memory.
    fn probe(&self, last: u8) -> (Client, Raw, Chunks) {
        let mut b =
            HostileServer::listen(self.fabric.open_with(ip(last), SoftConfig::default()), last);
        let cb = Client::connect(&self.cep, b.addr, ClientOptions::default()).expect("to B");
        let mut a = cb.args().expect("args");
        a.put_opaque(&pattern(b"call to B ", 3000)).expect("put");
        cb.call(Proc::new(PROG, 2, ECHO), a, |_| {})
            .expect("call to B");
        let (raw, msg) = b.accept_first_message();
        let chunks = parse_chunks(&msg);
        assert!(chunks.reads.len() >= 2, "a long call: {chunks:?}");
        assert!(!chunks.reply.is_empty(), "a Reply chunk: {chunks:?}");
        (cb, raw, chunks)
    }

    /// The payload pool's (base, length).
    fn payload(&self) -> (u64, u64) {
        let r = self.cep.buffers().pool().region();
        (r.as_ptr() as u64, r.len() as u64)
    }

    /// A still serves the client; then everything stops.
    fn finish(self) {
        let more = pattern(b"A again ", 2000);
        assert_eq!(
            &echo(&self.ca, &more).expect("echo A after")[4..2004],
            &more[..]
        );
        drop(self.ca);
        drop(self.server);
        let mut set = self.set;
        set.stop().expect("stop");
    }
}

/// §2.3 with the opt-in, the documented reach (docs/rdma-provider.md, "What a peer can
/// reach"): a hostile server B learns the client's persistent STags from the chunks of a long
/// call made to it (the Read chunk names the RPC-header buffer and the argument buffer; the
/// Reply chunk the reply buffer). With the argument key it reads the arguments the same client
/// sent to another server A and writes into the payload pool (endpoint-wide, readable and
/// writable) — but it cannot read the reply pool (remote write only): REM_ACCESS_ERR. The
/// client keeps being served by A.
#[test]
fn accepts_opted_in_persistent_stags_reaching_payload_pool_but_not_reading_replies() {
    let w = ClientWorld::new();
    let (pbase, plen) = w.payload();
    let (cb, mut raw, chunks) = w.probe(3);
    let arg = *chunks
        .reads
        .iter()
        .find(|s| s.2 >= pbase && s.2 < pbase + plen)
        .expect("argument segment");
    let (status, got) = raw.read(pbase, arg.0, plen as usize);
    assert_eq!(
        status,
        WcStatus::SUCCESS,
        "documented: payload pool readable"
    );
    assert!(
        contains(&got, &w.secret[..64]),
        "documented: the arguments sent to A are in reach"
    );
    // Writable too (the pool's last octets: no buffer in use there).
    let status = raw.write(pbase + plen - 64, arg.0, &[0; 64]);
    assert_eq!(
        status,
        WcStatus::SUCCESS,
        "documented: payload pool writable"
    );
    let reply = chunks.reply[0];
    let (status, got) = raw.read(reply.2, reply.0, 256);
    assert!(
        got.iter().all(|&b| b == 0),
        "the reply pool was read ({status:?})"
    );
    assert_eq!(status, WcStatus::REM_ACCESS_ERR, "reply pool read");
    drop(cb);
    w.finish();
}

/// §2.3 with the opt-in: the key of a connection's RPC-header buffers (exposed read-only in
/// long calls) reaches those buffers only — not the connection's receive buffers below them,
/// which hold other servers' inline replies: REM_ACCESS_ERR.
#[test]
fn accepts_opted_in_persistent_stags_without_reaching_receive_buffers() {
    let w = ClientWorld::new();
    let (pbase, plen) = w.payload();
    let (cb, mut raw, chunks) = w.probe(4);
    let hdr = *chunks
        .reads
        .iter()
        .find(|s| s.2 < pbase || s.2 >= pbase + plen)
        .expect("RPC header segment");
    let (status, _) = raw.read(hdr.2, hdr.0, hdr.1 as usize);
    assert_eq!(status, WcStatus::SUCCESS, "documented: RPC header readable");
    let (status, got) = raw.read(hdr.2 - 4096, hdr.0, 4096);
    assert!(
        got.iter().all(|&b| b == 0),
        "memory below the RPC-header buffers was read ({status:?})"
    );
    assert_eq!(
        status,
        WcStatus::REM_ACCESS_ERR,
        "read below the RPC-header buffers"
    );
    drop(cb);
    w.finish();
}

/// The opt-in is spelled `persistent_stags = "endpoint_wide"` in a configuration file; unset,
/// it is `Refuse`; anything else is an error.
#[test]
fn accepts_persistent_stags_option_from_toml_refusing_by_default() {
    use rpcrdma_poller::Config;
    let c = Config::from_toml_str("[endpoint]\nworkers = 1").expect("toml");
    assert_eq!(c.endpoint.persistent_stags, PersistentStags::Refuse);
    let c =
        Config::from_toml_str("[endpoint]\npersistent_stags = \"endpoint_wide\"").expect("toml");
    assert_eq!(c.endpoint.persistent_stags, PersistentStags::EndpointWide);
    let back = Config::from_toml_str(&c.to_toml_string()).expect("round trip");
    assert_eq!(
        back.endpoint.persistent_stags,
        PersistentStags::EndpointWide
    );
    assert!(Config::from_toml_str("[endpoint]\npersistent_stags = \"yes\"").is_err());
}
