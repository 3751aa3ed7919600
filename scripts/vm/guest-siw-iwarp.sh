#!/bin/bash
# scripts/vm/guest-siw-iwarp.sh — runs INSIDE the VM (an extra run of guest-stage.sh, see
# scripts/ci-vm-stage.sh): interop between the user-space iWARP provider (`--provider iwarp`,
# RDMAP/DDP/MPA over an ordinary TCP socket) and the Linux kernel's soft-iWARP (siw, reached
# through `--provider rdma`), server and client as two processes.
#
#   RPCRDMA_VM_PERF=/path/to/rpcrdma-perf guest-siw-iwarp.sh
#
# siw opens its TCP connections from the kernel, on the siw device's own address, so the two
# ends sit on the two sides of the veth pair the stage already has (docs/vm.md):
#   siw-server  server `ip netns exec peer rpcrdma-perf T --provider rdma` (siw1, 10.0.3.2),
#               client `rpcrdma-perf T --provider iwarp 10.0.3.2` (a TCP socket from 10.0.3.1):
#               the kernel answers our MPA Request;
#   iwarp-server server `ip netns exec peer rpcrdma-perf T --provider iwarp --bind 10.0.3.2`,
#               client `rpcrdma-perf T --provider rdma 10.0.3.2` (siw0, root netns): we answer
#               the kernel's MPA Request (revision 2, enhanced, C clear: Linux siw's defaults).
# Tests each way: send_lat, write_lat, read_lat (2 octets, -n $LAT_N), rpc_lat with inline
# calls (2 octets, -n $RPC_N) and rpc_lat -s 6000 (a Read chunk, a Write chunk and a Reply chunk
# per call, -n $CHUNK_N). The RPC clients get --persistent-stags (siw has no type-2 memory
# windows, docs/rdma-provider.md; a client on the iWARP provider, which has them, binds windows
# and the flag exposes nothing). Each check needs both processes
# to exit 0 and the client to print the perftest header and a result row for the size and -n
# it ran; the RPC checks also need "RPCs completed : n, errors 0" on the client and "RPCs
# served : n calls, n replies (less at most the window of final replies), errors 0,
# connections 1" on the server (served_ok in guest-checks.sh).
#
# The iWARP provider asks for CRC32c (C set) and siw honours it, so every FPDU both ways
# carries a CRC the receiver verifies; a CRC or framing error would end the connection with a
# Terminate and fail the check. The check mpa-WAY proves the negotiation: tcpdump captures sw0
# during each way's send_lat, and the MPA Request and Reply on the wire must carry, octets 16
# and 17 (flags, revision): siw-server: Request 0x50 2 (ours: C, enhanced), Reply 0x50 2 (siw
# echoes the flags: C kept); iwarp-server: Request 0x10 2 (siw's: enhanced, C clear), Reply
# 0x50 2 (ours: C set, so CRCs both ways). SKIP when the guest has no tcpdump
# (RPCRDMA_VM_TCPDUMP=0).
set -u
. "$(dirname "$(readlink -f "$0")")/guest-checks.sh"
PERF=${RPCRDMA_VM_PERF:?RPCRDMA_VM_PERF: the rpcrdma-perf binary}
LAT_N=${RPCRDMA_VM_LAT_N:-100}
RPC_N=${RPCRDMA_VM_RPC_N:-100}
CHUNK_N=${RPCRDMA_VM_CHUNK_N:-32}
SIW_PEER=10.0.3.2
cd /tmp || exit 1
need_bin "$PERF" || {
	finish
	exit 1
}

# xcheck WAY NAME TEST KIND SIZE N ARGS...: one test between siw and the iWARP provider.
# WAY siw-server: siw1 serves, our client connects; iwarp-server: we serve, siw0 connects.
xcheck() {
	local way=$1 name=$2 t=$3 kind=$4 size=$5 n=$6 t0 row reason='' rpc=0 cargs=()
	shift 6
	case $t in rpc_*) rpc=1 cargs=(--persistent-stags) ;; esac
	local sp=(--provider rdma) cp=(--provider iwarp)
	[ "$way" = iwarp-server ] && sp=(--provider iwarp --bind "$SIW_PEER") cp=(--provider rdma)
	t0=$(now_ms)
	pair "$name" ip netns exec peer timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" "${sp[@]}" -n "$n" "$@" \
		-- "$PERF" "$t" "${cp[@]}" "${cargs[@]}" -n "$n" "$@" "$SIW_PEER"
	if [ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; then
		reason="client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC"
	elif ! row=$(result_line "$CW/client.log" "$kind" "$size" "$n"); then
		reason="the client printed no perftest result row for $size B x $n"
	elif [ "$rpc" = 1 ] && ! grep -q "^ RPCs completed  : $n, errors 0, credits granted [1-9]" "$CW/client.log"; then
		reason="the client's counters are not \"RPCs completed : $n, errors 0\""
	elif [ "$rpc" = 1 ] && ! served_ok "$CW/server.log" "$n" "$(window_of "$@")"; then
		reason="the server's counters are not \"$n calls, $n replies, errors 0, connections 1\": $(grep '^ RPCs served' "$CW/server.log")"
	fi
	if [ -n "$reason" ]; then
		verdict "$name" "$t0" 1 "$reason${PAIR_NOTE:+; $PAIR_NOTE}"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	else
		verdict "$name" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ')$([ "$rpc" = 1 ] && sed -n 's/^ RPCs served     :/ | server:/p' "$CW/server.log")"
	fi
}

# mpa_capture: starts tcpdump on sw0 (returns once it listens); CAP_PID is 0 without tcpdump
mpa_capture() {
	CAP_PID=0
	command -v tcpdump >/dev/null || return 0
	: >"$CW/cap.err"
	tcpdump -i sw0 -n -U --immediate-mode -w "$CW/mpa.pcap" tcp 2>"$CW/cap.err" &
	CAP_PID=$!
	local i
	for ((i = 0; i < 50; i++)); do
		grep -q "listening on" "$CW/cap.err" && return 0
		sleep 0.1
	done
}
# mpa_frame HEXKEY: "flags revision" (two hex octets) of each MPA frame with that key in the
# capture (tcpdump -x prints each packet's octets as 16-bit hex groups: joined per packet)
mpa_frame() {
	tcpdump -n -r "$CW/mpa.pcap" -x 2>/dev/null | awk '
		/^[0-9]/ { if (h != "") print h; h = ""; next }
		{ for (i = 2; i <= NF; i++) h = h $i }
		END { if (h != "") print h }' | grep -o "$1...." | sed "s/^$1//"
}
# mpa_check WAY REQUEST_FLAGS REPLY_FLAGS (each "FFRR", flags and revision in hex)
mpa_check() {
	local t0 req rep
	t0=$(now_ms)
	if [ "$CAP_PID" = 0 ]; then
		skip "mpa-$1" "no tcpdump in the VM (RPCRDMA_VM_TCPDUMP=0)"
		return
	fi
	kill -INT "$CAP_PID" 2>/dev/null
	wait "$CAP_PID" 2>/dev/null
	req=$(mpa_frame 4d504120494420526571204672616d65 | tr '\n' ' ')
	rep=$(mpa_frame 4d504120494420526570204672616d65 | tr '\n' ' ')
	if [ "$req" = "$2 " ] && [ "$rep" = "$3 " ]; then
		verdict "mpa-$1" "$t0" 0 "MPA Request flags/rev $2, Reply $3 (CRC32c both ways)"
	else
		verdict "mpa-$1" "$t0" 1 "MPA Request flags/rev '${req% }', Reply '${rep% }' on sw0; expected one Request $2 and one Reply $3"
		sed 's/^/  | /' "$CW/cap.err"
	fi
}

if [ ! -e /sys/class/infiniband/siw0 ] || [ ! -e /sys/class/infiniband/siw1 ]; then
	echo "FAIL preflight: siw0 / siw1 missing in the VM (have: $(ls /sys/class/infiniband | tr '\n' ' '))"
	NFAIL=$((NFAIL + 1))
	finish
	exit 1
fi
for way in siw-server iwarp-server; do
	case $way in
	siw-server) section "kernel siw serves (siw1, $SIW_PEER, netns peer) <- iWARP provider client (root netns)" ;;
	*) section "iWARP provider serves ($SIW_PEER, netns peer) <- kernel siw client (siw0, root netns)" ;;
	esac
	mpa_capture
	xcheck "$way" "send_lat-$way" send_lat lat 2 "$LAT_N"
	case $way in
	siw-server) mpa_check "$way" 5002 5002 ;;
	*) mpa_check "$way" 1002 5002 ;;
	esac
	for t in write_lat read_lat; do
		xcheck "$way" "$t-$way" "$t" lat 2 "$LAT_N"
	done
	xcheck "$way" "rpc_lat-$way" rpc_lat lat 2 "$RPC_N"
	xcheck "$way" "rpc_lat-chunks-$way" rpc_lat lat 6000 "$CHUNK_N" -s 6000
done
finish
