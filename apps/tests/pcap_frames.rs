//! pcap / RoCEv2 frames: golden bytes written by hand from the pcap file format and the
//! RoCEv2 layout (Ethernet II, IPv4, UDP port 4791, IBA BTH / RETH / AETH / IETH, ICRC), and
//! the splitting of trace events into MTU-sized packets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use rpcrdma_apps::pcap::{
    build_frame, global_header, opcode, syndrome, ExtHeader, Mtu, PacketHeader, PcapWriter,
    RoceSynth,
};
use rpcrdma_engine::verbs::soft::{TraceEvent, TraceOp};
use rpcrdma_engine::verbs::WcStatus;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn hdr(opcode: u8, ext: ExtHeader) -> PacketHeader {
    PacketHeader {
        src_ip: IpAddr::V4(A),
        dst_ip: IpAddr::V4(B),
        udp_src_port: 0xc003,
        ip_id: 1,
        opcode,
        solicited: false,
        pkey: 0xffff,
        dest_qp: 0x12,
        ack_req: true,
        psn: 0x345,
        ext,
    }
}

#[test]
fn accepts_golden_send_only_frame() {
    let mut f = Vec::new();
    build_frame(&mut f, &hdr(opcode::SEND_ONLY, ExtHeader::None), b"RPCoRD");
    #[rustfmt::skip]
    let want: [u8; 66] = [
        // Ethernet II: destination MAC 02:00:<10.0.0.2>, source MAC 02:00:<10.0.0.1>, IPv4.
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x02,
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x01,
        0x08, 0x00,
        // IPv4: version 4 / IHL 5, DSCP/ECN 0, total length 52 (20 + 8 + 24).
        0x45, 0x00, 0x00, 0x34,
        // identification 1, flags DF / fragment offset 0.
        0x00, 0x01, 0x40, 0x00,
        // TTL 64, protocol 17 (UDP), header checksum: ~(0x4500 + 0x0034 + 0x0001 + 0x4000
        // + 0x4011 + 0x0a00 + 0x0001 + 0x0a00 + 0x0002) = ~0xd949 = 0x26b6.
        0x40, 0x11, 0x26, 0xb6,
        // source 10.0.0.1, destination 10.0.0.2.
        0x0a, 0x00, 0x00, 0x01,
        0x0a, 0x00, 0x00, 0x02,
        // UDP: source port 0xc003, destination 4791 (0x12b7), length 32, checksum 0.
        0xc0, 0x03, 0x12, 0xb7,
        0x00, 0x20, 0x00, 0x00,
        // BTH: opcode 0x04 (RC SEND Only); SE 0, M 0, PadCnt 2, TVer 0; P_Key 0xffff.
        0x04, 0x20, 0xff, 0xff,
        // reserved 8 bits, destination QP 0x000012.
        0x00, 0x00, 0x00, 0x12,
        // AckReq 1, reserved 7 bits, PSN 0x000345.
        0x80, 0x00, 0x03, 0x45,
        // payload "RPCoRD" and 2 pad octets.
        0x52, 0x50, 0x43, 0x6f,
        0x52, 0x44, 0x00, 0x00,
        // ICRC (not computed: zero).
        0x00, 0x00, 0x00, 0x00,
    ];
    assert_eq!(f, want);
}

#[test]
fn accepts_golden_write_first_and_ack_headers() {
    let mut f = Vec::new();
    let reth = ExtHeader::Reth {
        va: 0x0000_7f00_dead_b000,
        rkey: 0x1234_5678,
        len: 5000,
    };
    let mut h = hdr(opcode::RDMA_WRITE_FIRST, reth);
    h.ack_req = false;
    build_frame(&mut f, &h, &[1, 2, 3, 4]);
    #[rustfmt::skip]
    let want_ib: [u8; 36] = [
        // BTH: opcode 0x06 (RC RDMA WRITE First), PadCnt 0, P_Key 0xffff.
        0x06, 0x00, 0xff, 0xff,
        // destination QP 0x000012.
        0x00, 0x00, 0x00, 0x12,
        // AckReq 0, PSN 0x000345.
        0x00, 0x00, 0x03, 0x45,
        // RETH: virtual address 0x00007f00deadb000.
        0x00, 0x00, 0x7f, 0x00,
        0xde, 0xad, 0xb0, 0x00,
        // R_Key 0x12345678, DMA length 5000 (0x1388).
        0x12, 0x34, 0x56, 0x78,
        0x00, 0x00, 0x13, 0x88,
        // payload.
        0x01, 0x02, 0x03, 0x04,
        // ICRC.
        0x00, 0x00, 0x00, 0x00,
    ];
    assert_eq!(f.len(), 14 + 20 + 8 + 36);
    assert_eq!(&f[42..], &want_ib);
    // UDP length 8 + 36 = 44, IPv4 total length 64.
    assert_eq!(&f[16..18], &[0x00, 0x40]);
    assert_eq!(&f[38..40], &[0x00, 0x2c]);

    let ack = ExtHeader::Aeth {
        syndrome: syndrome::ACK,
        msn: 3,
    };
    let mut h = hdr(opcode::ACKNOWLEDGE, ack);
    h.ack_req = false;
    build_frame(&mut f, &h, &[]);
    #[rustfmt::skip]
    let want_ack: [u8; 20] = [
        // BTH: opcode 0x11 (RC Acknowledge).
        0x11, 0x00, 0xff, 0xff,
        0x00, 0x00, 0x00, 0x12,
        0x00, 0x00, 0x03, 0x45,
        // AETH: syndrome 0x1f (ACK, credits invalid), MSN 3.
        0x1f, 0x00, 0x00, 0x03,
        // ICRC.
        0x00, 0x00, 0x00, 0x00,
    ];
    assert_eq!(&f[42..], &want_ack);
}

#[test]
fn accepts_golden_pcap_headers() {
    let mut w = PcapWriter::new(Vec::new(), 65535).unwrap();
    w.write_frame(Duration::new(1, 2000), &[0xaa; 70]).unwrap();
    w.write_frame(Duration::new(2, 0), &[]).unwrap();
    assert_eq!(w.frames(), 2);
    let out = w.into_inner();
    #[rustfmt::skip]
    let want_hdr: [u8; 40] = [
        // magic 0xa1b2c3d4 (microseconds), little-endian.
        0xd4, 0xc3, 0xb2, 0xa1,
        // version 2.4.
        0x02, 0x00, 0x04, 0x00,
        // thiszone 0, sigfigs 0.
        0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
        // snaplen 65535, link type 1 (Ethernet).
        0xff, 0xff, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00,
        // record: ts_sec 1, ts_usec 2, captured 70, original 70.
        0x01, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00,
        0x46, 0x00, 0x00, 0x00,
        0x46, 0x00, 0x00, 0x00,
    ];
    assert_eq!(&out[..40], &want_hdr);
    assert_eq!(&out[..24], &global_header(65535));
    assert_eq!(out.len(), 24 + 16 + 70 + 16);
}

#[test]
fn accepts_snaplen_truncation() {
    let mut w = PcapWriter::new(Vec::new(), 64).unwrap();
    w.write_frame(Duration::ZERO, &[7; 100]).unwrap();
    let out = w.into_inner();
    // Captured 64, original 100.
    assert_eq!(&out[24 + 8..24 + 16], &[64, 0, 0, 0, 100, 0, 0, 0]);
    assert_eq!(out.len(), 24 + 16 + 64);
}

fn sum16(mut acc: u32, d: &[u8]) -> u32 {
    for c in d.chunks(2) {
        acc += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
    }
    acc
}

#[test]
fn accepts_ipv6_frames_with_udp_checksum() {
    let mut f = Vec::new();
    let mut h = hdr(opcode::SEND_ONLY, ExtHeader::None);
    let (s6, d6) = (
        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
    );
    h.src_ip = IpAddr::V6(s6);
    h.dst_ip = IpAddr::V6(d6);
    build_frame(&mut f, &h, b"abc");
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    assert_eq!(f[14] >> 4, 6);
    assert_eq!(f[20], 17, "next header UDP");
    let udp = &f[54..];
    assert_eq!(&udp[2..4], &[0x12, 0xb7]);
    // The UDP checksum over the pseudo header and the datagram verifies to 0xffff.
    let mut acc = sum16(0, &s6.octets());
    acc = sum16(acc, &d6.octets());
    acc += udp.len() as u32 + 17;
    acc = sum16(acc, udp);
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    assert_eq!(acc, 0xffff);
    assert_ne!(&udp[6..8], &[0, 0]);
}

/// (opcode, dest QP, PSN, AckReq, octets after the BTH) of an IPv4 frame.
fn parse(f: &[u8]) -> (u8, u32, u32, bool, Vec<u8>) {
    let b = &f[42..];
    let qp = u32::from_be_bytes([0, b[5], b[6], b[7]]);
    let psn = u32::from_be_bytes([0, b[9], b[10], b[11]]);
    (b[0], qp, psn, b[8] & 0x80 != 0, b[12..b.len() - 4].to_vec())
}

fn ev<'a>(op: TraceOp, len: u32, psn: u32, payload: &'a [&'a [u8]]) -> TraceEvent<'a> {
    TraceEvent {
        op,
        src: SocketAddr::new(IpAddr::V4(A), 40000),
        dst: SocketAddr::new(IpAddr::V4(B), 18515),
        src_qpn: 0x11,
        dst_qpn: 0x12,
        psn,
        remote_addr: 0x5000,
        rkey: 0xabc,
        len,
        inv_rkey: 0,
        payload,
        status: WcStatus::SUCCESS,
    }
}

fn frames(s: &mut RoceSynth, e: &TraceEvent<'_>) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let n = s
        .event(e, &mut |f| {
            v.push(f.to_vec());
            Ok(())
        })
        .unwrap();
    assert_eq!(n as usize, v.len());
    v
}

#[test]
fn accepts_send_split_at_the_mtu_with_consecutive_psns() {
    let mut s = RoceSynth::new(Mtu::M1024);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let parts: [&[u8]; 2] = [&data[..1500], &data[1500..]];
    let f = frames(&mut s, &ev(TraceOp::Send, 5000, 100, &parts));
    assert_eq!(f.len(), 6);
    let p: Vec<_> = f.iter().map(|x| parse(x)).collect();
    let ops: Vec<u8> = p.iter().map(|x| x.0).collect();
    assert_eq!(ops, [0x00, 0x01, 0x01, 0x01, 0x02, 0x11]);
    for (k, x) in p[..5].iter().enumerate() {
        assert_eq!(x.1, 0x12);
        assert_eq!(x.2, 100 + k as u32);
        assert_eq!(x.3, k == 4, "AckReq on the last packet only");
    }
    // Payloads reassemble to the message (the last one carries no pad: 5000 - 4096 = 904).
    let joined: Vec<u8> = p[..5].iter().flat_map(|x| x.4.clone()).collect();
    assert_eq!(joined, data);
    // The ACK goes back to QP 0x11 with the last PSN and MSN 1.
    assert_eq!((p[5].1, p[5].2), (0x11, 104));
    assert_eq!(p[5].4, [syndrome::ACK, 0, 0, 1]);
    // The next message continues the sequence (the trace's own PSN is only the start).
    let g = frames(&mut s, &ev(TraceOp::Send, 10, 999, &[&[1; 10]]));
    assert_eq!(parse(&g[0]).0, opcode::SEND_ONLY);
    assert_eq!(parse(&g[0]).2, 105);
    assert_eq!(parse(&g[1]).4, [syndrome::ACK, 0, 0, 2], "MSN 2");
}

#[test]
fn accepts_send_with_invalidate_and_zero_length() {
    let mut s = RoceSynth::new(Mtu::M256).with_acks(false);
    let data = [9u8; 300];
    let parts: [&[u8]; 1] = [&data];
    let mut e = ev(TraceOp::SendWithInv, 300, 7, &parts);
    e.inv_rkey = 0xdead_beef;
    let f = frames(&mut s, &e);
    assert_eq!(f.len(), 2);
    assert_eq!(parse(&f[0]).0, opcode::SEND_FIRST);
    let last = parse(&f[1]);
    assert_eq!(last.0, opcode::SEND_LAST_WITH_INVALIDATE);
    assert_eq!(&last.4[..4], &[0xde, 0xad, 0xbe, 0xef], "IETH");
    assert_eq!(last.4.len(), 4 + 44, "IETH + 44 octets + 0 pad");
    let f = frames(&mut s, &ev(TraceOp::Send, 0, 0, &[]));
    assert_eq!(f.len(), 1);
    assert_eq!(parse(&f[0]).0, opcode::SEND_ONLY);
    assert!(parse(&f[0]).4.is_empty());
}

#[test]
fn accepts_read_responses_reusing_the_request_psns() {
    let mut s = RoceSynth::new(Mtu::M1024);
    let req = frames(&mut s, &ev(TraceOp::RdmaReadRequest, 3000, 50, &[]));
    assert_eq!(req.len(), 1);
    let r = parse(&req[0]);
    assert_eq!(
        (r.0, r.1, r.2, r.3),
        (opcode::RDMA_READ_REQUEST, 0x12, 50, true)
    );
    // RETH: address 0x5000, rkey 0xabc, length 3000.
    assert_eq!(
        r.4,
        [0, 0, 0, 0, 0, 0, 0x50, 0, 0, 0, 0x0a, 0xbc, 0, 0, 0x0b, 0xb8]
    );
    let data = [5u8; 3000];
    let parts: [&[u8]; 1] = [&data];
    let mut resp = ev(TraceOp::RdmaReadResponse, 3000, 0, &parts);
    resp.src = SocketAddr::new(IpAddr::V4(B), 18515);
    resp.dst = SocketAddr::new(IpAddr::V4(A), 40000);
    resp.src_qpn = 0x12;
    resp.dst_qpn = 0x11;
    let f = frames(&mut s, &resp);
    let p: Vec<_> = f.iter().map(|x| parse(x)).collect();
    assert_eq!(
        p.iter().map(|x| (x.0, x.1, x.2)).collect::<Vec<_>>(),
        [
            (opcode::RDMA_READ_RESPONSE_FIRST, 0x11, 50),
            (opcode::RDMA_READ_RESPONSE_MIDDLE, 0x11, 51),
            (opcode::RDMA_READ_RESPONSE_LAST, 0x11, 52),
        ]
    );
    // First and Last carry an AETH (ACK, MSN 1); Middle none.
    assert_eq!(&p[0].4[..4], &[syndrome::ACK, 0, 0, 1]);
    assert_eq!(p[1].4.len(), 1024);
    assert_eq!(&p[2].4[..4], &[syndrome::ACK, 0, 0, 1]);
    // The requester's next request starts after the three response PSNs.
    let next = frames(&mut s, &ev(TraceOp::RdmaWrite, 8, 0, &[&[0; 8]]));
    assert_eq!(parse(&next[0]).2, 53);
}

#[test]
fn accepts_nak_for_remote_errors() {
    let mut s = RoceSynth::new(Mtu::M4096);
    let mut e = ev(TraceOp::RdmaWrite, 8, 1, &[&[0; 8]]);
    e.status = WcStatus::REM_ACCESS_ERR;
    let f = frames(&mut s, &e);
    assert_eq!(f.len(), 2);
    let w = parse(&f[0]);
    assert_eq!(w.0, opcode::RDMA_WRITE_ONLY);
    let nak = parse(&f[1]);
    assert_eq!(nak.0, opcode::ACKNOWLEDGE);
    assert_eq!(nak.4[0], syndrome::NAK_REMOTE_ACCESS);
    assert_eq!(&nak.4[1..], &[0, 0, 0], "MSN unchanged");
    // A local error has no response packet.
    e.status = WcStatus::WR_FLUSH_ERR;
    assert_eq!(frames(&mut s, &e).len(), 1);
}

#[test]
fn accepts_mtu_values() {
    for (n, m) in [
        (256, Mtu::M256),
        (512, Mtu::M512),
        (1024, Mtu::M1024),
        (2048, Mtu::M2048),
        (4096, Mtu::M4096),
    ] {
        assert_eq!(Mtu::from_bytes(n), Some(m));
        assert_eq!(m.bytes(), n as usize);
    }
    assert_eq!(Mtu::from_bytes(1500), None);
}
