#!/bin/bash
# scripts/vm/smoke.sh — guest payload: prove the VM's kernel RDMA works end to end.
#
#   scripts/vm/run-in-vm.sh scripts/vm/smoke.sh
#
# Checks: the devices (rxe0, siw0, siw1) and the userspace providers (librxe,
# libsiw) are there; rping over rxe0 (loopback on 10.0.2.15) and over siw
# (server in netns peer on 10.0.3.2, client in the root netns); ib_send_lat
# -n 100 over rxe0; the rdma_cm listener of a server in netns peer is visible
# with "ss" (stage.sh waits on that); tcpdump (when present) sees the iWARP
# traffic on sw0. Prints "smoke: N passed, N failed"; exits 1 if any failed.
pass=0 fail=0
T="timeout 60"
header() {
	local up _
	read -r up _ </proc/uptime
	printf '\n==== %s [uptime %ss]\n' "$*" "$up"
}
check() { # STATUS NAME
	if [ "$1" -eq 0 ]; then
		echo "PASS: $2"
		pass=$((pass + 1))
	else
		echo "FAIL($1): $2"
		fail=$((fail + 1))
	fi
}
# pair NAME SERVER-CMD CLIENT-CMD: start the server, give it a second, run the client
pair() {
	local name=$1 slog=/tmp/smoke-server.$$.log sp c s
	$T bash -c "$2" >"$slog" 2>&1 &
	sp=$!
	sleep 1
	$T bash -c "$3" 2>&1 | tail -n "${TAILN:-3}"
	c=${PIPESTATUS[0]}
	wait "$sp"
	s=$?
	if [ "$s" -ne 0 ]; then
		echo "--- server ($s):"
		tail -n 5 "$slog"
	fi
	check $((c | s)) "$name"
}

header "devices and providers"
ibv_devices
rdma link
devs=$(ibv_devices | awk 'NR > 2 {print $1}' | sort | tr '\n' ' ')
[ "$devs" = "rxe0 siw0 siw1 " ]
check $? "ibv_devices lists rxe0 siw0 siw1 (got: $devs)"
ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so >/dev/null
check $? "ibverbs-providers: librxe and libsiw present"
libs=$(ldd "$(command -v rping)") && echo "$libs" | grep -E 'libibverbs.so.1|librdmacm.so.1' &&
	grep -q 'librdmacm.so.1 => /' <<<"$libs" && ! grep -q 'not found' <<<"$libs"
check $? "rping resolves libibverbs.so.1 and librdmacm.so.1"

header "rxe0: Soft-RoCE, loopback on eth0 10.0.2.15"
ibv_devinfo -d rxe0 | grep -E 'transport|state|link_layer|active_mtu'
TAILN=2 pair "rping over rxe0" "rping -s -a 10.0.2.15 -C 5" "rping -c -a 10.0.2.15 -C 5 -v"
pair "ib_send_lat -n 100 over rxe0" "ib_send_lat -d rxe0 -x 1 -n 100" "ib_send_lat -d rxe0 -x 1 -n 100 10.0.2.15"

header "siw: siw0 10.0.3.1 (root netns) <-> siw1 10.0.3.2 (netns peer)"
if command -v tcpdump >/dev/null; then
	tcpdump -i sw0 -n -U --immediate-mode -w /tmp/siw.pcap tcp 2>/tmp/tcpdump.log &
	tdp=$!
	sleep 1
fi
TAILN=2 pair "rping over siw (server in netns peer)" "ip netns exec peer rping -s -a 10.0.3.2 -C 5" "rping -c -a 10.0.3.2 -C 5 -v"
# the listener a server in netns peer opens is a kernel TCP socket there
ip netns exec peer rping -s -a 10.0.3.2 -p 7471 -C 1 >/dev/null 2>&1 &
lp=$!
seen=1
for _ in $(seq 50); do
	if grep -q 7471 <<<"$(ip netns exec peer ss -Hltn 'sport = :7471')"; then
		seen=0
		break
	fi
	sleep 0.1
done
kill "$lp" 2>/dev/null
wait "$lp" 2>/dev/null
check $seen "ss in netns peer sees an rdma_cm listener on siw1"
if [ -n "${tdp:-}" ]; then
	kill -INT "$tdp"
	wait "$tdp"
	n=$(tcpdump -n -r /tmp/siw.pcap 2>/dev/null | wc -l)
	echo "tcpdump on sw0: $n packets; first ones:"
	tcpdump -n -r /tmp/siw.pcap 2>/dev/null | head -n 3
	[ "$n" -gt 0 ]
	check $? "tcpdump captures the iWARP (MPA/TCP) traffic on sw0"
fi

header "done"
echo "smoke: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
