//! pcap export of RDMA traffic as RoCEv2 frames, readable by tshark / Wireshark.
//!
//! Three layers:
//! - [`PcapWriter`]: the classic pcap file format (24-octet global header, 16-octet record
//!   headers, microsecond timestamps, link type Ethernet), written by hand.
//! - [`build_frame`]: one RoCEv2 packet: Ethernet II, IPv4 (or IPv6), UDP to port 4791, the
//!   InfiniBand Base Transport Header (BTH), the extended header of the opcode (RETH, AETH or
//!   IETH), the payload padded to 4 octets (BTH PadCnt) and a zero ICRC.
//! - [`RoceSynth`]: turns the soft provider's [`TraceEvent`]s (one per message) into packets:
//!   messages are split at the MTU into FIRST / MIDDLE / LAST (or ONLY) opcodes with
//!   consecutive PSNs, RDMA READ responses reuse the request's PSNs, and SENDs / WRITEs are
//!   answered by an ACK (or the NAK their status implies). [`PcapTrace`] installs it on a
//!   [`SoftFabric`] and writes a file.
//!
//! Normal operation: PSNs are tracked per requester QP starting from the PSN of its first
//! traced message, then advanced by the number of packets this module emits (so any MTU gives
//! consistent sequences); MSNs per responder QP count completed messages. MAC addresses are
//! derived from the IP addresses (`02:00:` + the IPv4 address / the last 4 octets of IPv6);
//! the UDP source port is `0xC000 | ((src_qpn ^ dst_qpn) & 0x3FFF)` (the flow entropy RoCEv2
//! recommends), the same in both directions.
//!
//! Recovery: I/O errors are returned (the soft-fabric hook keeps the first one and stops
//! writing; [`PcapTrace::finish`] reports it). Events with inconsistent lengths are written with
//! the octets available (short payloads are zero-padded), never rejected.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rpcrdma_engine::verbs::soft::{SoftFabric, TraceEvent, TraceOp};
use rpcrdma_engine::verbs::WcStatus;

/// UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// pcap link type of Ethernet (`LINKTYPE_ETHERNET`).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Default pcap snapshot length.
pub const DEFAULT_SNAPLEN: u32 = 65535;
/// Octets of the BTH.
pub const BTH_LEN: usize = 12;
/// Octets of the RETH.
pub const RETH_LEN: usize = 16;
/// Octets of the AETH.
pub const AETH_LEN: usize = 4;
/// Octets of the IETH.
pub const IETH_LEN: usize = 4;
/// Octets of the ICRC.
pub const ICRC_LEN: usize = 4;
/// The default partition key.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// RC opcodes of the BTH (IBA vol. 1, table 38; transport "RC" = 0b000).
pub mod opcode {
    /// SEND First.
    pub const SEND_FIRST: u8 = 0x00;
    /// SEND Middle.
    pub const SEND_MIDDLE: u8 = 0x01;
    /// SEND Last.
    pub const SEND_LAST: u8 = 0x02;
    /// SEND Only.
    pub const SEND_ONLY: u8 = 0x04;
    /// RDMA WRITE First (RETH).
    pub const RDMA_WRITE_FIRST: u8 = 0x06;
    /// RDMA WRITE Middle.
    pub const RDMA_WRITE_MIDDLE: u8 = 0x07;
    /// RDMA WRITE Last.
    pub const RDMA_WRITE_LAST: u8 = 0x08;
    /// RDMA WRITE Only (RETH).
    pub const RDMA_WRITE_ONLY: u8 = 0x0a;
    /// RDMA READ Request (RETH).
    pub const RDMA_READ_REQUEST: u8 = 0x0c;
    /// RDMA READ Response First (AETH).
    pub const RDMA_READ_RESPONSE_FIRST: u8 = 0x0d;
    /// RDMA READ Response Middle.
    pub const RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0e;
    /// RDMA READ Response Last (AETH).
    pub const RDMA_READ_RESPONSE_LAST: u8 = 0x0f;
    /// RDMA READ Response Only (AETH).
    pub const RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
    /// Acknowledge (AETH).
    pub const ACKNOWLEDGE: u8 = 0x11;
    /// SEND Last with Invalidate (IETH).
    pub const SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
    /// SEND Only with Invalidate (IETH).
    pub const SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
}

/// AETH syndromes used here.
pub mod syndrome {
    /// ACK with the credit field "invalid" (0b00_11111).
    pub const ACK: u8 = 0x1f;
    /// RNR NAK (timer 0).
    pub const RNR_NAK: u8 = 0x20;
    /// NAK: invalid request.
    pub const NAK_INVALID_REQUEST: u8 = 0x61;
    /// NAK: remote access error.
    pub const NAK_REMOTE_ACCESS: u8 = 0x62;
    /// NAK: remote operational error.
    pub const NAK_REMOTE_OPERATIONAL: u8 = 0x63;
}

/// IB path MTU: the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mtu {
    /// 256 octets.
    M256,
    /// 512 octets.
    M512,
    /// 1024 octets (typical RoCE on a 1500-octet Ethernet MTU).
    M1024,
    /// 2048 octets.
    M2048,
    /// 4096 octets.
    #[default]
    M4096,
}

impl Mtu {
    /// The MTU of `n` octets, if it is one of the five IB MTUs.
    pub const fn from_bytes(n: u32) -> Option<Mtu> {
        match n {
            256 => Some(Mtu::M256),
            512 => Some(Mtu::M512),
            1024 => Some(Mtu::M1024),
            2048 => Some(Mtu::M2048),
            4096 => Some(Mtu::M4096),
            _ => None,
        }
    }

    /// Octets.
    pub const fn bytes(self) -> usize {
        match self {
            Mtu::M256 => 256,
            Mtu::M512 => 512,
            Mtu::M1024 => 1024,
            Mtu::M2048 => 2048,
            Mtu::M4096 => 4096,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// pcap file
// ---------------------------------------------------------------------------------------------

/// The 24-octet pcap global header (little-endian, microsecond timestamps, version 2.4).
pub fn global_header(snaplen: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone (8..12) and sigfigs (12..16) are 0.
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// A classic pcap file being written.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
    frames: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header to `out`.
    pub fn new(mut out: W, snaplen: u32) -> io::Result<PcapWriter<W>> {
        out.write_all(&global_header(snaplen))?;
        Ok(PcapWriter {
            out,
            snaplen,
            frames: 0,
        })
    }

    /// Appends one frame captured at `ts` (since the Unix epoch); frames longer than the
    /// snapshot length are truncated (the record keeps the original length).
    pub fn write_frame(&mut self, ts: Duration, frame: &[u8]) -> io::Result<()> {
        let incl = frame.len().min(self.snaplen as usize);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&(incl as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(&frame[..incl])?;
        self.frames += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

// ---------------------------------------------------------------------------------------------
// One RoCEv2 packet
// ---------------------------------------------------------------------------------------------

/// The extended transport header following the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtHeader {
    /// None (SEND, WRITE Middle/Last, READ Response Middle).
    None,
    /// RDMA Extended Transport Header: virtual address, R_Key, DMA length.
    Reth {
        /// Virtual address.
        va: u64,
        /// R_Key.
        rkey: u32,
        /// DMA length.
        len: u32,
    },
    /// ACK Extended Transport Header: syndrome and MSN (24 bits).
    Aeth {
        /// Syndrome.
        syndrome: u8,
        /// Message sequence number.
        msn: u32,
    },
    /// Invalidate Extended Transport Header: the R_Key to invalidate.
    Ieth {
        /// R_Key.
        rkey: u32,
    },
}

impl ExtHeader {
    /// Octets on the wire.
    pub const fn len(&self) -> usize {
        match self {
            ExtHeader::None => 0,
            ExtHeader::Reth { .. } => RETH_LEN,
            ExtHeader::Aeth { .. } => AETH_LEN,
            ExtHeader::Ieth { .. } => IETH_LEN,
        }
    }

    /// True for [`ExtHeader::None`].
    pub const fn is_empty(&self) -> bool {
        matches!(self, ExtHeader::None)
    }
}

/// Everything a RoCEv2 packet header needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    /// Source IP.
    pub src_ip: IpAddr,
    /// Destination IP.
    pub dst_ip: IpAddr,
    /// UDP source port.
    pub udp_src_port: u16,
    /// IPv4 identification.
    pub ip_id: u16,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH solicited event bit.
    pub solicited: bool,
    /// BTH partition key.
    pub pkey: u16,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// BTH acknowledge request bit.
    pub ack_req: bool,
    /// BTH packet sequence number (24 bits).
    pub psn: u32,
    /// Extended header.
    pub ext: ExtHeader,
}

/// The MAC address used for `ip`: `02:00:` followed by the IPv4 address (or the last four
/// octets of an IPv6 address).
pub fn mac_for(ip: IpAddr) -> [u8; 6] {
    let o = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

fn ones_complement_sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Appends the frame of one packet carrying `payload` to `buf` (cleared first).
pub fn build_frame(buf: &mut Vec<u8>, h: &PacketHeader, payload: &[u8]) {
    buf.clear();
    let pad = (4 - payload.len() % 4) % 4;
    let ib_len = BTH_LEN + h.ext.len() + payload.len() + pad + ICRC_LEN;
    let udp_len = 8 + ib_len;
    let (src, dst) = match (h.src_ip, h.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (IpAddr::V4(s), IpAddr::V4(d)),
        (s, d) => (IpAddr::V6(to_v6(s)), IpAddr::V6(to_v6(d))),
    };
    // Ethernet II.
    buf.extend_from_slice(&mac_for(dst));
    buf.extend_from_slice(&mac_for(src));
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            buf.extend_from_slice(&0x0800u16.to_be_bytes());
            let ip_start = buf.len();
            buf.push(0x45); // version 4, IHL 5
            buf.push(0x00); // DSCP / ECN
            buf.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            buf.extend_from_slice(&h.ip_id.to_be_bytes());
            buf.extend_from_slice(&0x4000u16.to_be_bytes()); // DF, fragment offset 0
            buf.push(64); // TTL
            buf.push(17); // UDP
            buf.extend_from_slice(&[0, 0]); // checksum, filled below
            buf.extend_from_slice(&s.octets());
            buf.extend_from_slice(&d.octets());
            let c = fold(ones_complement_sum(0, &buf[ip_start..ip_start + 20]));
            buf[ip_start + 10..ip_start + 12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            buf.extend_from_slice(&0x86ddu16.to_be_bytes());
            buf.extend_from_slice(&[0x60, 0, 0, 0]); // version 6, class 0, flow 0
            buf.extend_from_slice(&(udp_len as u16).to_be_bytes());
            buf.push(17); // next header UDP
            buf.push(64); // hop limit
            buf.extend_from_slice(&s.octets());
            buf.extend_from_slice(&d.octets());
        }
        _ => unreachable!("addresses were made the same family above"),
    }
    // UDP.
    let udp_start = buf.len();
    buf.extend_from_slice(&h.udp_src_port.to_be_bytes());
    buf.extend_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    buf.extend_from_slice(&(udp_len as u16).to_be_bytes());
    buf.extend_from_slice(&[0, 0]); // checksum: 0 (none) over IPv4; computed below for IPv6
                                    // BTH.
    buf.push(h.opcode);
    buf.push((u8::from(h.solicited) << 7) | ((pad as u8) << 4)); // SE, M=0, PadCnt, TVer=0
    buf.extend_from_slice(&h.pkey.to_be_bytes());
    let qp = h.dest_qp & 0x00ff_ffff;
    buf.extend_from_slice(&qp.to_be_bytes()); // FECN/BECN/reserved 0, DestQP
    let psn = (h.psn & 0x00ff_ffff) | (u32::from(h.ack_req) << 31);
    buf.extend_from_slice(&psn.to_be_bytes()); // AckReq, reserved, PSN
    match h.ext {
        ExtHeader::None => {}
        ExtHeader::Reth { va, rkey, len } => {
            buf.extend_from_slice(&va.to_be_bytes());
            buf.extend_from_slice(&rkey.to_be_bytes());
            buf.extend_from_slice(&len.to_be_bytes());
        }
        ExtHeader::Aeth { syndrome, msn } => {
            buf.extend_from_slice(
                &((u32::from(syndrome) << 24) | (msn & 0x00ff_ffff)).to_be_bytes(),
            );
        }
        ExtHeader::Ieth { rkey } => buf.extend_from_slice(&rkey.to_be_bytes()),
    }
    buf.extend_from_slice(payload);
    buf.extend(core::iter::repeat(0).take(pad));
    buf.extend_from_slice(&[0; ICRC_LEN]);
    if let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) {
        let mut acc = ones_complement_sum(0, &s.octets());
        acc = ones_complement_sum(acc, &d.octets());
        acc += udp_len as u32;
        acc += 17;
        acc = ones_complement_sum(acc, &buf[udp_start..]);
        let mut c = fold(acc);
        if c == 0 {
            c = 0xffff;
        }
        buf[udp_start + 6..udp_start + 8].copy_from_slice(&c.to_be_bytes());
    }
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

// ---------------------------------------------------------------------------------------------
// Trace events to packets
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default, Clone, Copy)]
struct QpSeq {
    /// Next PSN this QP sends as requester (set by its first request).
    psn: Option<u32>,
    /// Messages this QP completed as responder.
    msn: u32,
    /// First PSN of the last RDMA READ this QP requested.
    read_psn: u32,
}

/// Turns soft-provider trace events into RoCEv2 frames (one [`RoceSynth`] per capture).
#[derive(Debug)]
pub struct RoceSynth {
    mtu: usize,
    acks: bool,
    ip_id: u16,
    qps: HashMap<u32, QpSeq>,
    chunk: Vec<u8>,
    frame: Vec<u8>,
}

/// Gathers consecutive octets out of a scatter list.
struct Gather<'a> {
    parts: &'a [&'a [u8]],
    idx: usize,
    off: usize,
}

impl Gather<'_> {
    /// Appends the next `n` octets to `out` (zeros once the list runs out).
    fn take(&mut self, mut n: usize, out: &mut Vec<u8>) {
        while n > 0 {
            let Some(p) = self.parts.get(self.idx) else {
                out.extend(core::iter::repeat(0).take(n));
                return;
            };
            let avail = p.len() - self.off;
            if avail == 0 {
                self.idx += 1;
                self.off = 0;
                continue;
            }
            let k = avail.min(n);
            out.extend_from_slice(&p[self.off..self.off + k]);
            self.off += k;
            n -= k;
        }
    }
}

fn udp_port(a: u32, b: u32) -> u16 {
    0xc000 | ((a ^ b) & 0x3fff) as u16
}

fn nak_for(status: WcStatus) -> Option<u8> {
    Some(match status {
        WcStatus::REM_ACCESS_ERR => syndrome::NAK_REMOTE_ACCESS,
        WcStatus::REM_INV_REQ_ERR => syndrome::NAK_INVALID_REQUEST,
        WcStatus::REM_OP_ERR => syndrome::NAK_REMOTE_OPERATIONAL,
        WcStatus::RNR_RETRY_EXC_ERR => syndrome::RNR_NAK,
        _ => return None,
    })
}

impl RoceSynth {
    /// A synthesiser splitting messages at `mtu`, with ACKs.
    pub fn new(mtu: Mtu) -> RoceSynth {
        RoceSynth {
            mtu: mtu.bytes(),
            acks: true,
            ip_id: 1,
            qps: HashMap::new(),
            chunk: Vec::with_capacity(mtu.bytes()),
            frame: Vec::with_capacity(mtu.bytes() + 128),
        }
    }

    /// Turns the ACK / NAK packets on or off.
    pub fn with_acks(mut self, on: bool) -> RoceSynth {
        self.acks = on;
        self
    }

    /// Reserves `n` PSNs of requester `qpn` (starting at `hint` on its first request).
    fn take_psns(&mut self, qpn: u32, hint: u32, n: u32) -> u32 {
        let s = self.qps.entry(qpn).or_default();
        let p = s.psn.unwrap_or(hint & 0x00ff_ffff);
        s.psn = Some((p + n) & 0x00ff_ffff);
        p
    }

    /// Counts one completed message at responder `qpn`; returns the new MSN.
    fn bump_msn(&mut self, qpn: u32) -> u32 {
        let s = self.qps.entry(qpn).or_default();
        s.msn = (s.msn + 1) & 0x00ff_ffff;
        s.msn
    }

    fn msn(&self, qpn: u32) -> u32 {
        self.qps.get(&qpn).map_or(0, |s| s.msn)
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        port: u16,
        opcode: u8,
        dest_qp: u32,
        psn: u32,
        ack_req: bool,
        ext: ExtHeader,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let h = PacketHeader {
            src_ip: src.ip(),
            dst_ip: dst.ip(),
            udp_src_port: port,
            ip_id: self.ip_id,
            opcode,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qp,
            ack_req,
            psn,
            ext,
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        build_frame(&mut self.frame, &h, &self.chunk);
        out(&self.frame)
    }

    /// Emits the frames of `ev` through `out`; returns how many.
    pub fn event(
        &mut self,
        ev: &TraceEvent<'_>,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<u32> {
        let mtu = self.mtu;
        let len = ev.len as usize;
        let pkts = len.div_ceil(mtu).max(1);
        let port = udp_port(ev.src_qpn, ev.dst_qpn);
        let mut gather = Gather {
            parts: ev.payload,
            idx: 0,
            off: 0,
        };
        let mut frames = 0u32;
        match ev.op {
            TraceOp::Send | TraceOp::SendWithInv | TraceOp::RdmaWrite => {
                let first_psn = self.take_psns(ev.src_qpn, ev.psn, pkts as u32);
                let write = ev.op == TraceOp::RdmaWrite;
                let inv = ev.op == TraceOp::SendWithInv;
                for k in 0..pkts {
                    let (first, last) = (k == 0, k + 1 == pkts);
                    let opcode = match (write, first, last) {
                        (false, true, true) if inv => opcode::SEND_ONLY_WITH_INVALIDATE,
                        (false, false, true) if inv => opcode::SEND_LAST_WITH_INVALIDATE,
                        (false, true, true) => opcode::SEND_ONLY,
                        (false, true, false) => opcode::SEND_FIRST,
                        (false, false, false) => opcode::SEND_MIDDLE,
                        (false, false, true) => opcode::SEND_LAST,
                        (true, true, true) => opcode::RDMA_WRITE_ONLY,
                        (true, true, false) => opcode::RDMA_WRITE_FIRST,
                        (true, false, false) => opcode::RDMA_WRITE_MIDDLE,
                        (true, false, true) => opcode::RDMA_WRITE_LAST,
                    };
                    let ext = if write && first {
                        ExtHeader::Reth {
                            va: ev.remote_addr,
                            rkey: ev.rkey,
                            len: ev.len,
                        }
                    } else if inv && last {
                        ExtHeader::Ieth { rkey: ev.inv_rkey }
                    } else {
                        ExtHeader::None
                    };
                    self.chunk.clear();
                    gather.take(mtu.min(len - k * mtu), &mut self.chunk);
                    let psn = (first_psn + k as u32) & 0x00ff_ffff;
                    self.emit(
                        ev.src, ev.dst, port, opcode, ev.dst_qpn, psn, last, ext, out,
                    )?;
                    frames += 1;
                }
                if self.acks {
                    let last_psn = (first_psn + pkts as u32 - 1) & 0x00ff_ffff;
                    let syn = if ev.status.is_success() {
                        self.bump_msn(ev.dst_qpn);
                        Some(syndrome::ACK)
                    } else {
                        nak_for(ev.status)
                    };
                    if let Some(syndrome) = syn {
                        let msn = self.msn(ev.dst_qpn);
                        self.chunk.clear();
                        self.emit(
                            ev.dst,
                            ev.src,
                            port,
                            opcode::ACKNOWLEDGE,
                            ev.src_qpn,
                            last_psn,
                            false,
                            ExtHeader::Aeth { syndrome, msn },
                            out,
                        )?;
                        frames += 1;
                    }
                }
            }
            TraceOp::RdmaReadRequest => {
                // A READ consumes one PSN per response packet.
                let psn = self.take_psns(ev.src_qpn, ev.psn, pkts as u32);
                self.qps.entry(ev.src_qpn).or_default().read_psn = psn;
                self.chunk.clear();
                let ext = ExtHeader::Reth {
                    va: ev.remote_addr,
                    rkey: ev.rkey,
                    len: ev.len,
                };
                let op = opcode::RDMA_READ_REQUEST;
                self.emit(ev.src, ev.dst, port, op, ev.dst_qpn, psn, true, ext, out)?;
                frames += 1;
            }
            TraceOp::RdmaReadResponse => {
                // src is the responder, dst_qpn the requester.
                let first_psn = self.qps.get(&ev.dst_qpn).map_or(0, |s| s.read_psn);
                let msn = self.bump_msn(ev.src_qpn);
                for k in 0..pkts {
                    let (first, last) = (k == 0, k + 1 == pkts);
                    let opcode = match (first, last) {
                        (true, true) => opcode::RDMA_READ_RESPONSE_ONLY,
                        (true, false) => opcode::RDMA_READ_RESPONSE_FIRST,
                        (false, false) => opcode::RDMA_READ_RESPONSE_MIDDLE,
                        (false, true) => opcode::RDMA_READ_RESPONSE_LAST,
                    };
                    let ext = if first || last {
                        ExtHeader::Aeth {
                            syndrome: syndrome::ACK,
                            msn,
                        }
                    } else {
                        ExtHeader::None
                    };
                    self.chunk.clear();
                    gather.take(mtu.min(len - k * mtu), &mut self.chunk);
                    let psn = (first_psn + k as u32) & 0x00ff_ffff;
                    self.emit(
                        ev.src, ev.dst, port, opcode, ev.dst_qpn, psn, false, ext, out,
                    )?;
                    frames += 1;
                }
            }
        }
        Ok(frames)
    }
}

// ---------------------------------------------------------------------------------------------
// Soft fabric capture
// ---------------------------------------------------------------------------------------------

struct Sink {
    writer: PcapWriter<Box<dyn Write + Send>>,
    synth: RoceSynth,
    error: Option<io::Error>,
}

/// A capture of a soft fabric's traffic into a pcap stream.
pub struct PcapTrace {
    sink: Arc<Mutex<Option<Sink>>>,
}

impl core::fmt::Debug for PcapTrace {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("PcapTrace")
    }
}

impl PcapTrace {
    /// Creates `path` and captures `fabric` into it.
    pub fn create(fabric: &SoftFabric, path: &Path, mtu: Mtu) -> io::Result<PcapTrace> {
        let f = File::create(path)?;
        PcapTrace::install(fabric, Box::new(BufWriter::with_capacity(1 << 20, f)), mtu)
    }

    /// Captures `fabric` into `out` (the pcap global header is written at once). Fails when
    /// the fabric already has a trace hook.
    pub fn install(
        fabric: &SoftFabric,
        out: Box<dyn Write + Send>,
        mtu: Mtu,
    ) -> io::Result<PcapTrace> {
        let sink = Arc::new(Mutex::new(Some(Sink {
            writer: PcapWriter::new(out, DEFAULT_SNAPLEN)?,
            synth: RoceSynth::new(mtu),
            error: None,
        })));
        let hook_sink = Arc::clone(&sink);
        let installed = fabric.set_trace(Box::new(move |ev| {
            let mut g = hook_sink.lock().unwrap_or_else(|e| e.into_inner());
            let Some(s) = g.as_mut() else {
                return;
            };
            if s.error.is_some() {
                return;
            }
            let ts = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let Sink {
                writer,
                synth,
                error,
            } = s;
            if let Err(e) = synth.event(ev, &mut |f| writer.write_frame(ts, f)) {
                *error = Some(e);
            }
        }));
        if !installed {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the fabric already has a trace hook",
            ));
        }
        Ok(PcapTrace { sink })
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        let g = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map_or(0, |s| s.writer.frames())
    }

    /// Stops capturing (later events are ignored), flushes and returns the frame count or the
    /// first write error.
    pub fn finish(self) -> io::Result<u64> {
        let taken = self.sink.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut s) = taken else {
            return Ok(0);
        };
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        s.writer.flush()?;
        Ok(s.writer.frames())
    }
}
