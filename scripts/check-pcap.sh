#!/usr/bin/env bash
# Checks that tshark decodes the RoCEv2 pcap traces rpcrdma writes.
#
# 1. rpcrdma-pcap-sample runs an RPC-over-RDMA Version One exchange over the soft provider
#    (a call with a Read list, a Write list and a Reply chunk answered by RDMA_NOMSG, then an
#    inline call and reply) and writes the trace plus the rpcordma field values it encoded;
#    tshark's rpcordma dissector must produce exactly those values, and the structural values
#    hard-coded below.
# 2. rpcrdma-perf send_lat / read_bw / write_bw with --pcap and a 1024-octet MTU: the BTH
#    opcodes (SEND First/Middle/Last, RDMA READ Request/Response First/Middle/Last, RDMA WRITE
#    Only, ACK) and PSN sequences must be what the message sizes imply, and nothing malformed.
#
# Installs tshark when missing (Debian/Ubuntu). Exits non-zero on any mismatch.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

if ! command -v tshark >/dev/null 2>&1; then
    echo "check-pcap: installing tshark" >&2
    export DEBIAN_FRONTEND=noninteractive
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq tshark >/dev/null
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
bad() {
    echo "check-pcap: FAIL: $*" >&2
    fail=1
}

cargo build -q -p rpcrdma-apps --bin rpcrdma-pcap-sample --bin rpcrdma-perf
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug

# tshark warns on stderr when run as root; keep stderr for real errors only.
ts() { tshark "$@" 2> >(grep -v 'Running as user "root"' >&2); }

# ---- 1. RPC-over-RDMA v1 fields -------------------------------------------------------------
"$BIN/rpcrdma-pcap-sample" "$TMP/rpc.pcap" "$TMP/expected.tsv"
ts -r "$TMP/rpc.pcap" -Y rpcordma -T fields \
    -e rpcordma.xid -e rpcordma.version -e rpcordma.flow_control -e rpcordma.msg_type \
    -e rpcordma.reads_count -e rpcordma.writes_count -e rpcordma.reply_count \
    -e rpcordma.rdma_handle -e rpcordma.rdma_length -e rpcordma.rdma_offset \
    >"$TMP/actual.tsv"
if ! diff -u "$TMP/expected.tsv" "$TMP/actual.tsv"; then
    bad "rpcordma fields differ from what was encoded (diff above: - expected, + tshark)"
fi
# Structure, independent of the sample tool's own report:
# xid, version, credits, msg_type, reads, writes, reply, segment lengths.
cut -f1-7,9 "$TMP/actual.tsv" >"$TMP/structure.tsv"
printf '%s\n' \
    $'0x52500001\t1\t32\t0\t1\t1\t1\t300,512,1024' \
    $'0x52500001\t1\t32\t1\t0\t1\t1\t200,40' \
    $'0x52500002\t1\t32\t0\t0\t0\t0\t' \
    $'0x52500002\t1\t32\t0\t0\t0\t0\t' >"$TMP/structure.expected"
if ! diff -u "$TMP/structure.expected" "$TMP/structure.tsv"; then
    bad "rpcordma message structure is not the expected call/reply sequence"
fi
# The RPC inside the inline call must decode too (NFS NULL call, program 100003 version 3).
if [ "$(ts -r "$TMP/rpc.pcap" -Y 'rpc.msgtyp == 0 && rpc.program == 100003' -T fields -e rpc.xid | head -n1)" != "0x52500002" ]; then
    bad "the inline RPC call was not decoded"
fi

# ---- 2. perf traces: opcodes and PSNs -------------------------------------------------------
opcodes() { ts -r "$1" -T fields -e infiniband.bth.opcode | sort -n | uniq -c | awk '{printf "%s:%s ", $2, $1}'; }
malformed() { ts -r "$1" -Y '_ws.malformed || _ws.expert.severity >= error' | wc -l; }

# send_lat, 5 round trips of 5000 octets at MTU 1024: every message is First, 3 Middle, Last,
# then an ACK; 10 messages.
"$BIN/rpcrdma-perf" send_lat -n 5 -s 5000 -m 1024 --pcap "$TMP/send.pcap" >/dev/null 2>&1
got=$(opcodes "$TMP/send.pcap")
[ "$got" = "0:10 1:30 2:10 17:10 " ] || bad "send_lat opcodes: $got"
[ "$(malformed "$TMP/send.pcap")" -eq 0 ] || bad "send_lat trace has malformed frames"
# PSNs of each direction's data packets are consecutive.
ts -r "$TMP/send.pcap" -Y 'infiniband.bth.opcode <= 2' -T fields \
    -e infiniband.bth.destqp -e infiniband.bth.psn |
    awk '{ if (($1 in last) && $2 != (last[$1] + 1) % 16777216) bad = 1; last[$1] = $2 }
         END { exit bad }' || bad "send_lat PSNs are not consecutive per QP"

# read_bw, 5 reads of 3000 octets: Request, then Response First, Middle, Last with the
# request's PSN and the next two.
"$BIN/rpcrdma-perf" read_bw -n 5 -s 3000 -m 1024 --pcap "$TMP/read.pcap" >/dev/null 2>&1
got=$(opcodes "$TMP/read.pcap")
[ "$got" = "12:6 13:6 14:6 15:6 " ] || bad "read_bw opcodes: $got"
ts -r "$TMP/read.pcap" -T fields -e infiniband.bth.opcode -e infiniband.bth.psn |
    awk '$1 == 12 { req = $2; next }
         $1 == 13 { if ($2 != req) bad = 1 }
         $1 == 14 { if ($2 != (req + 1) % 16777216) bad = 1 }
         $1 == 15 { if ($2 != (req + 2) % 16777216) bad = 1 }
         END { exit bad }' || bad "read_bw response PSNs do not follow the requests"
[ "$(malformed "$TMP/read.pcap")" -eq 0 ] || bad "read_bw trace has malformed frames"

# write_bw, 5 writes of 100 octets: WRITE Only with a RETH of length 100, each ACKed (the
# trailing READ is the data check reading the buffer back).
"$BIN/rpcrdma-perf" write_bw -n 5 -s 100 -m 1024 --pcap "$TMP/write.pcap" >/dev/null 2>&1
got=$(opcodes "$TMP/write.pcap")
[ "$got" = "10:5 12:1 16:1 17:5 " ] || bad "write_bw opcodes: $got"
lens=$(ts -r "$TMP/write.pcap" -Y 'infiniband.bth.opcode == 10' -T fields -e infiniband.reth.dmalen | sort -u)
[ "$lens" = "100" ] || bad "write_bw RETH lengths: $lens"
[ "$(malformed "$TMP/write.pcap")" -eq 0 ] || bad "write_bw trace has malformed frames"

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "check-pcap: OK (tshark $(tshark --version 2>/dev/null | head -n1 | awk '{print $3}'))"
