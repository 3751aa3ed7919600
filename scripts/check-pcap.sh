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
# 3. rpcrdma-perf rpc_lat with --pcap (RPC calls through the poller API): tshark's rpcordma
#    fields must show the message types and chunk lists each --chunks mode implies, every XID
#    once as a call and once as a reply, version 1 and 32 credits.
# 4. The iWARP provider on the wire: dumpcap captures loopback TCP while rpcrdma-perf rpc_lat
#    --provider iwarp runs as a server process and a client process (calls of 6000 octets:
#    the argument in a Read chunk, the result in a Write chunk). tshark's MPA, DDP/RDMAP and
#    rpcordma dissectors must find one MPA Request and one Reply (CRC on, RFC 6581 revision 2,
#    RFC 8797 private data), RDMAP Sends, Read Requests, Read Responses and RDMA Writes in the
#    numbers the calls imply (DDP tagged exactly for Writes and Read Responses), no Terminate,
#    every XID once as a call and once as a reply, version 1, 32 credits, RDMA_MSG with the
#    chunk lists of each direction, the RPC replies decoded, nothing malformed. Capturing
#    needs root (CI runs as root; otherwise sudo).
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

# ---- 3. rpc_lat traces: RPC-over-RDMA through the poller's Client/Server API -----------------
# rpcordma fields per message: msg_type, reads, writes, reply, segment lengths.
rpcfields() { ts -r "$1" -Y rpcordma -T fields -e rpcordma.msg_type -e rpcordma.reads_count \
    -e rpcordma.writes_count -e rpcordma.reply_count -e rpcordma.rdma_length; }
# Every XID twice (call, reply), version 1, 32 credits.
pairs() { ts -r "$1" -Y rpcordma -T fields -e rpcordma.xid -e rpcordma.version -e rpcordma.flow_control |
    awk '$2 != 1 || $3 != 32 { bad = 1 } { n[$1]++ } END { for (x in n) if (n[x] != 2) bad = 1; exit bad }'; }
rpc() { "$BIN/rpcrdma-perf" rpc_lat -n 5 --backoff shared_cores --pcap "$@" >/dev/null 2>&1; }
# 5 inline calls of 100 octets: RDMA_MSG both ways, no chunks.
rpc "$TMP/rpc1.pcap" -s 100
got=$(rpcfields "$TMP/rpc1.pcap" | sort | uniq -c | awk '{$1=$1; print}' | paste -sd';')
[ "$got" = "10 0 0 0 0" ] || bad "rpc_lat inline structure: $got"
pairs "$TMP/rpc1.pcap" || bad "rpc_lat inline: XIDs not paired, or version / credits wrong"
# 8192 octets, --chunks auto: the call's payload in a Read chunk, a Write chunk and a Reply
# chunk offered; the reply's payload in the Write chunk.
rpc "$TMP/rpc2.pcap" -s 8192 -m 1024
got=$(rpcfields "$TMP/rpc2.pcap" | sort | uniq -c | awk '{$1=$1; print}' | paste -sd';')
[ "$got" = "5 0 0 1 0 8192;5 0 1 1 1 8192,8192,8192" ] || bad "rpc_lat chunk structure: $got"
pairs "$TMP/rpc2.pcap" || bad "rpc_lat chunks: XIDs not paired, or version / credits wrong"
[ "$(malformed "$TMP/rpc2.pcap")" -eq 0 ] || bad "rpc_lat chunk trace has malformed frames"
# --chunks reply: empty calls offering a Reply chunk, answered by RDMA_NOMSG through it.
rpc "$TMP/rpc3.pcap" -s 8192 --chunks reply
got=$(rpcfields "$TMP/rpc3.pcap" | awk '{print $1, $2, $3, $4}' | sort | uniq -c | awk '{$1=$1; print}' | paste -sd';')
[ "$got" = "5 0 0 0 1;5 1 0 0 1" ] || bad "rpc_lat long reply structure: $got"

# ---- 4. iWARP provider traffic on loopback TCP -------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
# A loopback port nothing listens on (a connect to it is refused).
port=$((20000 + RANDOM % 20000))
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
N=5
$SUDO dumpcap -q -i lo -f "tcp port $port" -w "$TMP/iwarp.pcapng" 2>"$TMP/dumpcap.err" &
cap=$!
for _ in $(seq 100); do grep -q "Capturing on" "$TMP/dumpcap.err" && break; sleep 0.1; done
grep -q "Capturing on" "$TMP/dumpcap.err" || bad "dumpcap did not start: $(cat "$TMP/dumpcap.err")"
iw=(rpc_lat --provider iwarp -p "$port" -n "$N" -s 6000 --backoff shared_cores)
"$BIN/rpcrdma-perf" "${iw[@]}" >"$TMP/iwarp-server.out" 2>&1 &
srv=$!
for _ in $(seq 200); do grep -q "Waiting for client" "$TMP/iwarp-server.out" && break; sleep 0.1; done
timeout 120 "$BIN/rpcrdma-perf" "${iw[@]}" --persistent-stags 127.0.0.1 >"$TMP/iwarp-client.out" 2>&1 ||
    bad "rpc_lat --provider iwarp client failed: $(tail -n 3 "$TMP/iwarp-client.out")"
timeout 60 tail --pid="$srv" -f /dev/null || { kill "$srv"; bad "the iwarp server did not exit"; }
wait "$srv" || bad "rpc_lat --provider iwarp server failed: $(tail -n 3 "$TMP/iwarp-server.out")"
sleep 0.5
$SUDO kill -INT "$cap"
wait "$cap" || true
iwts() { ts -r "$TMP/iwarp.pcapng" --enable-heuristic iwarp_mpa_tcp "$@"; }
# MPA: one Request and one Reply, CRC on, markers off, revision 2 (RFC 6581), RFC 8797 private
# data (its format identifier f6ab0e18).
got=$(iwts -Y 'iwarp_mpa.req || iwarp_mpa.rep' -T fields -e iwarp_mpa.req -e iwarp_mpa.rep \
    -e iwarp_mpa.crc_flag -e iwarp_mpa.marker_flag -e iwarp_mpa.rev -e iwarp_mpa.privatedata |
    awk -F'\t' '{ t = ($1 != "") ? "req" : "rep"; pd = ($6 ~ /f6ab0e18/) ? "rfc8797" : "other";
                  printf "%s:%s:%s:%s:%s ", t, $3, $4, $5, pd }')
[ "$got" = "req:1:0:2:rfc8797 rep:1:0:2:rfc8797 " ] || bad "iwarp MPA Request/Reply: $got"
# RDMAP opcodes of every DDP segment (0 Write, 1 Read Request, 2 Read Response, 3 Send,
# 7 Terminate) with their DDP tagged flags: tagged exactly for Writes and Read Responses.
iwts -T fields -e iwarp_rdma.opcode -e iwarp_ddp.tagged_flag >"$TMP/iwarp-ops.tsv"
got=$(awk -F'\t' -v n="$N" '
    $1 == "" { next }
    { k = split($1, op, ","); if (split($2, tg, ",") != k) bad = 1
      for (i = 1; i <= k; i++) { o = op[i] + 0; c[o]++; all++
          if ((o == 0 || o == 2) != (tg[i] == "1" || tg[i] == "True")) bad = 1 } }
    END { printf "send=%d readreq=%d write=%s readresp=%s other=%d tags=%s",
              c[3], c[1], (c[0] >= n) ? "ok" : c[0], (c[2] >= n) ? "ok" : c[2],
              all - c[0] - c[1] - c[2] - c[3], bad ? "bad" : "ok" }' \
    "$TMP/iwarp-ops.tsv")
[ "$got" = "send=$((2 * N)) readreq=$N write=ok readresp=ok other=0 tags=ok" ] ||
    bad "iwarp RDMAP messages: $got"
# RPC-over-RDMA inside the Sends: calls RDMA_MSG with one Read, one Write and a Reply chunk of
# 6000 octets; replies RDMA_MSG with the Write chunk.
got=$(iwts -Y rpcordma -T fields -e rpcordma.msg_type -e rpcordma.reads_count \
    -e rpcordma.writes_count -e rpcordma.reply_count -e rpcordma.rdma_length |
    sort | uniq -c | awk '{$1=$1; print}' | paste -sd';')
[ "$got" = "$N 0 0 1 0 6000;$N 0 1 1 1 6000,6000,6000" ] || bad "iwarp rpcordma structure: $got"
iwts -Y rpcordma -T fields -e rpcordma.xid -e rpcordma.version -e rpcordma.flow_control |
    awk -v n="$N" '$2 != 1 || $3 != 32 { bad = 1 } { c[$1]++ }
        END { for (x in c) { k++; if (c[x] != 2) bad = 1 } exit bad || k != n }' ||
    bad "iwarp rpcordma: XIDs not paired, or version / credits wrong"
got=$(iwts -Y 'rpc.msgtyp == 1' -T fields -e rpc.xid | tr ',' '\n' | sort -u | wc -l)
[ "$got" -eq "$N" ] || bad "iwarp: $got RPC replies decoded, want $N"
[ "$(iwts -Y '_ws.malformed || _ws.expert.severity >= error' | wc -l)" -eq 0 ] ||
    bad "iwarp capture has malformed frames"

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "check-pcap: OK (tshark $(tshark --version 2>/dev/null | head -n1 | awk '{print $3}'))"
