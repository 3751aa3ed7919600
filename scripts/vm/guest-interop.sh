#!/bin/bash
# scripts/vm/guest-interop.sh — runs INSIDE the VM (an extra run of guest-stage.sh, see
# scripts/ci-vm-stage.sh): our RPC-over-RDMA client against the Linux kernel's server
# (svcrdma, kernel nfsd listening on `rdma 20049`) over rxe0.
#
#   RPCRDMA_VM_PING=/path/to/rpcrdma-ping guest-interop.sh
#
# Starts kernel nfsd in the root netns (tmpfs export, rpcbind, rpc.mountd, rpc.nfsd, then
# `echo "rdma 20049" > /proc/fs/nfsd/portlist`), then runs `rpcrdma-ping --provider rdma`
# against 10.0.2.15:20049 (rxe0 loopback). Each ping check needs: exit 0; Linux's RFC 8797
# private data decoded; the credits Linux granted equal to its svc_rdma max_requests (we ask
# for more, so our own clamp cannot hide the value); every call answered; the call / Reply
# chunk shapes the ping announces; and Linux's own svcrdma counters
# (/proc/sys/sunrpc/svc_rdma/rdma_stat_{recv,read,write}) moving accordingly: recv +n for n
# calls, read (RDMA Reads Linux issued) only for long calls, write (RDMA Writes) only when a
# Reply chunk was offered (Linux sends its reply through an offered Reply chunk).
#
# Over siw the kernel server would run in netns peer, but the poller's Client needs type-2
# memory windows, which siw lacks (docs/interop.md): only rxe here.
set -u
. "$(dirname "$(readlink -f "$0")")/guest-checks.sh"
PING=${RPCRDMA_VM_PING:?RPCRDMA_VM_PING: the rpcrdma-ping binary}
ADDR=10.0.2.15
ASK=128 # credits we ask for: more than Linux grants (svc_rdma max_requests, 64 by default)
SYS=/proc/sys/sunrpc/svc_rdma
cd /tmp || exit 1
need_bin "$PING" || {
	finish
	exit 1
}

# ---- kernel nfsd on rdma 20049 ----------------------------------------------------------------
section "kernel nfsd (svcrdma) on rdma 20049, root netns, rxe0 $ADDR"
t0=$(now_ms)
{
	modprobe nfsd && modprobe rpcrdma &&
		mount -t nfsd nfsd /proc/fs/nfsd &&
		mkdir -p /srv/export && mount -t tmpfs tmpfs /srv/export &&
		echo "/srv/export *(rw,fsid=0,no_root_squash,insecure,no_subtree_check)" >/etc/exports &&
		rpcbind -w && exportfs -ra && rpc.mountd && rpc.nfsd 2 &&
		echo "rdma 20049" >/proc/fs/nfsd/portlist
} >"$CW/nfsd.log" 2>&1
rc=$?
ports=$(sort -u /proc/fs/nfsd/portlist 2>/dev/null | paste -sd, -)
if [ "$rc" -ne 0 ] || ! grep -q '^rdma 20049$' /proc/fs/nfsd/portlist 2>/dev/null; then
	verdict nfsd-rdma-20049 "$t0" 1 "kernel nfsd did not start on rdma 20049 (status $rc, portlist: ${ports:-none})"
	show_log "nfsd setup" "$CW/nfsd.log"
	finish
	exit 1
fi
MAXREQ=$(cat "$SYS/max_requests" 2>/dev/null || echo '?')
verdict nfsd-rdma-20049 "$t0" 0 "portlist: $ports; svc_rdma max_requests $MAXREQ, max_req_size $(cat "$SYS/max_req_size" 2>/dev/null)"

stat3() { echo "$(cat "$SYS/rdma_stat_recv") $(cat "$SYS/rdma_stat_read") $(cat "$SYS/rdma_stat_write")"; }

# ping NAME COUNT LONG(0|1) REPLY_CHUNK(0|1) ARGS...: NULL calls, checked as described above
ping() {
	local name=$1 n=$2 long=$3 rch=$4 t0 rc b a reason='' pd cr rtt dr drd dwr
	shift 4
	t0=$(now_ms)
	b=$(stat3)
	timeout -k 5 "$CHECK_TIMEOUT" "$PING" --provider rdma -c "$n" --credits "$ASK" "$@" "$ADDR" \
		>"$CW/ping.log" 2>&1
	rc=$?
	a=$(stat3)
	read -r b1 b2 b3 <<<"$b"
	read -r a1 a2 a3 <<<"$a"
	dr=$((a1 - b1)) drd=$((a2 - b2)) dwr=$((a3 - b3))
	pd=$(sed -n 's/^ private data    : server //p' "$CW/ping.log")
	cr=$(sed -n "s/^ credits         : asked $ASK, granted \([0-9]*\)$/\1/p" "$CW/ping.log")
	rtt=$(sed -n 's/^ rtt min\/avg\/max\/p50\/p99 = //p' "$CW/ping.log")
	if [ "$rc" -ne 0 ]; then
		reason="rpcrdma-ping exit $rc"
	elif [[ "$pd" != "RFC 8797 v1: "* ]]; then
		reason="Linux's RFC 8797 private data was not decoded (\"$pd\")"
	elif [ -z "$cr" ] || [ "$cr" != "$MAXREQ" ]; then
		reason="credits granted \"$cr\", expected svc_rdma max_requests $MAXREQ"
	elif ! grep -q "^ $n calls, $n replies, 0 failed" "$CW/ping.log"; then
		reason="not every call was answered"
	elif [ -z "$rtt" ]; then
		reason="no rtt line"
	elif [ "$long" = 1 ] && ! grep -q '^ call            : .*long call, RDMA_NOMSG + Position-Zero Read chunk' "$CW/ping.log"; then
		reason="the ping did not announce a long call"
	elif [ "$long" = 0 ] && ! grep -q '^ call            : .*inline, RDMA_MSG$' "$CW/ping.log"; then
		reason="the ping did not announce an inline call"
	elif [ "$rch" = 1 ] && ! grep -q '^ reply chunk     : offered' "$CW/ping.log"; then
		reason="the ping did not announce a Reply chunk"
	elif [ "$rch" = 0 ] && ! grep -q '^ reply chunk     : not offered' "$CW/ping.log"; then
		reason="the ping announced a Reply chunk"
	elif [ "$dr" -ne "$n" ]; then
		reason="Linux counted $dr received calls (rdma_stat_recv), expected $n"
	elif { [ "$long" = 1 ] && [ "$drd" -lt "$n" ]; } || { [ "$long" = 0 ] && [ "$drd" -ne 0 ]; }; then
		reason="Linux issued $drd RDMA Reads (rdma_stat_read) for $n calls, long call: $long"
	elif { [ "$rch" = 1 ] && [ "$dwr" -lt "$n" ]; } || { [ "$rch" = 0 ] && [ "$dwr" -ne 0 ]; }; then
		reason="Linux issued $dwr RDMA Writes (rdma_stat_write) for $n calls, Reply chunk: $rch"
	fi
	if [ -n "$reason" ]; then
		verdict "$name" "$t0" 1 "$reason"
		show_log rpcrdma-ping "$CW/ping.log"
	else
		verdict "$name" "$t0" 0 "server private data $pd; credits granted $cr; rtt min/avg/max/p50/p99 $rtt; \
svcrdma recv +$dr read +$drd write +$dwr"
	fi
}

section "rpcrdma-ping (rdma provider) -> Linux svcrdma: NULL calls, NFS program 100003"
ping null-nfs-v3 5 0 0 -P 100003 -v 3
ping null-nfs-v4 5 0 0 -P 100003 -v 4
section "chunks against Linux"
# arguments over the 1024-octet inline send size we advertise: RDMA_NOMSG + Position-Zero Read
# chunk (Linux pulls the call with RDMA Read; nfsd's NULL ignores the argument octets)
ping long-call 3 1 0 -v 3 --inline-send 1024 --arg-size 2000
# reply buffers larger than the inline receive size: a Reply chunk is offered (Linux writes the
# NULL reply into it and answers RDMA_NOMSG)
ping reply-chunk 3 0 1 -v 3 --reply-chunk
# both: 8 KiB of arguments over the 4096-octet inline size (buffers of 8 KiB offer a Reply chunk)
ping long-call-reply-chunk 3 1 1 -v 4 --arg-size 8192

section "program version Linux does not serve"
t0=$(now_ms)
timeout -k 5 "$CHECK_TIMEOUT" "$PING" --provider rdma -c 1 -v 5 "$ADDR" >"$CW/ping.log" 2>&1
rc=$?
mm=$(sed -n 's/^ NULL call seq 1: \(PROG_MISMATCH: .*\)$/\1/p' "$CW/ping.log")
if [ "$rc" -eq 1 ] && [ -n "$mm" ]; then
	verdict prog-mismatch-v5 "$t0" 0 "$mm"
else
	verdict prog-mismatch-v5 "$t0" 1 "expected exit 1 with PROG_MISMATCH (exit $rc)"
	show_log rpcrdma-ping "$CW/ping.log"
fi

# ---- RPC-over-RDMA Version Two against Linux (Version One only) -------------------------------
# Version Two against Linux 6.1, which implements Version One only: it answers a Version Two
# call with RDMA_ERROR / ERR_VERS (rdma_vers_low = rdma_vers_high = 1); the client falls back to
# Version One on that connection, sends the call again and completes every call. The ping
# prints what the connection uses after the calls ("in use ... (asked 2: fell back)").
v2_fallback() {
	local t0 rc
	t0=$(now_ms)
	timeout -k 5 "$CHECK_TIMEOUT" "$PING" --provider rdma --rpcrdma-version 2 -c 3 -v 3 "$ADDR" \
		>"$CW/ping.log" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ] && grep -q '^ 3 calls, 3 replies, 0 failed' "$CW/ping.log" &&
		grep -q '^ in use          : RPC-over-RDMA version 1 (asked 2: fell back)' "$CW/ping.log"; then
		verdict v2-err-vers-fallback "$t0" 0 "$(grep -h '^ in use' "$CW/ping.log")"
	else
		verdict v2-err-vers-fallback "$t0" 1 "Version Two ping to Linux: exit $rc, not every call answered or no fallback to Version One"
		show_log rpcrdma-ping "$CW/ping.log"
	fi
}
if [ "${RPCRDMA_VM_INTEROP_V2:-1}" = 1 ]; then
	v2_fallback
else
	skip v2-err-vers-fallback "RPCRDMA_VM_INTEROP_V2=0"
fi

finish
