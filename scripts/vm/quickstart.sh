# shellcheck shell=bash
# scripts/vm/quickstart.sh — sourced by nfs-server.sh (inside the VM): docs/quickstart.md's
# commands, run as written (part `quickstart`).
#
#   run_quickstart
#
# The page marks the blocks a guest can run with `<!-- vm: rxe -->`, `<!-- vm: siw-a -->` and
# `<!-- vm: siw-b -->` on the line before a ```sh block. This part sets the page's variables to
# fresh guest interfaces, so that nothing of the other parts' devices is touched, and runs:
# - the rxe blocks in order in one bash (`set -e -x`: the first failing command fails the
#   part), with NETDEV=qs0, a dummy interface holding IP=10.0.4.1;
# - the siw blocks as two hosts: A in the root namespace (NETDEV=qsa, 10.0.5.1) and B in the
#   `peer` namespace (NETDEV=qsb, 10.0.5.2) on a veth pair, A=10.0.5.1 on both; A's blocks in
#   one long-lived bash fed block by block (its background server and `wait` span blocks), B's
#   each in a bash in the peer namespace, in the page's order.
# The binaries (rpcrdma-perf beside rpcrdma-nfsd) are put first on PATH, as step 1 does. The
# kernel nfsd of the earlier parts is stopped first: the page's last block deletes its rxe
# device, and a listener of the kernel nfsd would hold it.
# Knobs: RPCRDMA_NFSD_QUICKSTART (1: run the part), RPCRDMA_QUICKSTART_DOC (the page).

# qs_parse DOC: the marked blocks in the page's order: QS_KIND[i] (rxe, siw-a, siw-b) and
# QS_TEXT[i] (the block's lines)
qs_parse() {
	local line kind='' inblock=0 text=''
	QS_KIND=() QS_TEXT=()
	while IFS= read -r line; do
		if [ "$inblock" = 1 ]; then
			if [ "$line" = '```' ]; then
				QS_KIND+=("$kind") QS_TEXT+=("$text")
				inblock=0 kind='' text=''
			else
				text+="$line"$'\n'
			fi
			continue
		fi
		case $line in
		'<!-- vm: '*' -->') kind=${line#<!-- vm: } kind=${kind% -->} ;;
		'```sh') [ -n "$kind" ] && inblock=1 ;;
		'') ;;
		*) kind='' ;;
		esac
	done <"$1"
}

# qs_rxe BINDIR: the rxe blocks in one shell
qs_rxe() {
	local bindir=$1 script=$LOGS/quickstart-rxe.sh rc i
	ip link add qs0 type dummy 2>/dev/null
	ip addr add 10.0.4.1/24 dev qs0 2>/dev/null
	ip link set qs0 up
	{
		echo "set -e -x"
		echo "export PATH=$bindir:\$PATH"
		echo "NETDEV=qs0 IP=10.0.4.1"
		echo "cd $LOGS"
		for i in "${!QS_KIND[@]}"; do
			[ "${QS_KIND[$i]}" = rxe ] && printf '%s' "${QS_TEXT[$i]}"
		done
	} >"$script"
	timeout -k 5 300 bash "$script" >"$LOGS/quickstart-rxe.log" 2>&1
	rc=$?
	sed 's/^/  | /' "$LOGS/quickstart-rxe.log"
	if [ "$rc" -ne 0 ]; then
		failc rxe "the page's rxe commands stopped with status $rc (log above)"
	elif ! grep -q "RPCs completed  : 1000, errors 0" "$LOGS/quickstart-rxe.log"; then
		failc rxe "the client did not complete 1000 calls without errors"
	elif ! grep -q "^hello over RDMA$" "$LOGS/quickstart-rxe.log" ||
		! grep -q "xprt:[[:space:]]*rdma" "$LOGS/quickstart-rxe.log"; then
		failc rxe "the mount did not show xprt: rdma and the file written through it"
	else
		pass rxe "device, two processes (1000 calls), kernel NFS mount over rdma, clean-up"
	fi
	ip link del qs0 2>/dev/null
}

# qs_siw BINDIR: the siw blocks as hosts A (root netns) and B (netns peer), in page order
qs_siw() {
	local bindir=$1 fifo=$LOGS/quickstart-a.fifo alog=$LOGS/quickstart-siw-a.log
	local blog=$LOGS/quickstart-siw-b.log st=$LOGS/quickstart-a.status ai=0 bi=0 i rc=0 apid n
	ip link add qsa type veth peer name qsb || { failc siw "no veth pair"; return; }
	ip link set qsb netns peer
	ip addr add 10.0.5.1/24 dev qsa && ip link set qsa up
	ip netns exec peer ip addr add 10.0.5.2/24 dev qsb && ip netns exec peer ip link set qsb up
	rm -f "$fifo" && mkfifo "$fifo"
	# Host A: one bash (-e: a failing command ends it) reading blocks from the fifo; each
	# block is followed by a line that writes 0 to the status file.
	(cd "$LOGS" && exec 3<>"$fifo" && PATH=$bindir:$PATH NETDEV=qsa A=10.0.5.1 bash -e -x <&3 >"$alog" 2>&1) &
	apid=$!
	exec 4>"$fifo"
	: >"$blog"
	for i in "${!QS_KIND[@]}"; do
		case ${QS_KIND[$i]} in
		siw-a)
			rm -f "$st"
			printf '%secho 0 >%s\n' "${QS_TEXT[$i]}" "$st" >&4
			ai=$((ai + 1))
			for ((n = 0; n < 1200; n++)); do
				[ -s "$st" ] && break
				kill -0 "$apid" 2>/dev/null || break
				sleep 0.25
			done
			rc=$(cat "$st" 2>/dev/null)
			[ "$rc" = 0 ] || { rc=1; failc siw "host A's block $ai failed (or timed out): log below"; break; }
			;;
		siw-b)
			printf '%s' "${QS_TEXT[$i]}" >"$LOGS/quickstart-b.sh"
			bi=$((bi + 1))
			(cd "$LOGS" && PATH=$bindir:$PATH NETDEV=qsb A=10.0.5.1 timeout -k 5 300 \
				ip netns exec peer bash -e -x "$LOGS/quickstart-b.sh") >>"$blog" 2>&1
			rc=$?
			[ "$rc" = 0 ] || { failc siw "host B's block $bi stopped with status $rc: log below"; break; }
			;;
		esac
	done
	echo "exit" >&4
	exec 4>&-
	wait "$apid" 2>/dev/null
	sed 's/^/  A | /' "$alog"
	sed 's/^/  B | /' "$blog"
	if [ "$rc" = 0 ]; then
		if grep -q "RPCs completed  : 1000, errors 0" "$blog" &&
			grep -q "RPCs served     : 1000 calls" "$alog"; then
			pass siw "two hosts (netns), devices, 1000 calls A <- B"
		else
			failc siw "the client's or the server's counters are not 1000 calls without errors"
		fi
	fi
	ip netns exec peer rdma link delete siw_qsb 2>/dev/null
	rdma link delete siw_qsa 2>/dev/null
	ip link del qsa 2>/dev/null
	rm -f "$fifo"
}

# qs_stop_mountd: ends every rpc.mountd (the kernel nfsd's, started by knfsd.sh)
qs_stop_mountd() {
	local c p
	for c in /proc/[0-9]*/comm; do
		[ "$(cat "$c" 2>/dev/null)" = rpc.mountd ] || continue
		p=${c#/proc/} p=${p%/comm}
		kill "$p" 2>/dev/null
	done
	sleep 0.5
}

run_quickstart() {
	local doc=${RPCRDMA_QUICKSTART_DOC:-$HERE/../../docs/quickstart.md} bindir
	[ "${RPCRDMA_NFSD_QUICKSTART:-1}" = 1 ] || return 0
	part_begin quickstart "docs/quickstart.md's commands as written (rxe, siw between two netns, kernel NFS mount)"
	bindir=$(dirname "$BIN")
	if [ "$KIND" != ours ]; then
		PNOTES="skipped: the page runs our binaries"
	elif [ ! -r "$doc" ] || [ ! -x "$bindir/rpcrdma-perf" ]; then
		failc setup "no $doc or no $bindir/rpcrdma-perf in the VM"
	else
		# The kernel nfsd of the earlier parts (both namespaces) holds listeners on every RDMA
		# device, and its rpc.mountd the MOUNT port the page uses.
		rpc.nfsd 0 >/dev/null 2>&1
		ip netns exec peer rpc.nfsd 0 >/dev/null 2>&1
		qs_stop_mountd
		qs_parse "$doc"
		qs_rxe "$bindir"
		qs_siw "$bindir"
	fi
	part_end
}
