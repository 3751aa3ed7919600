# shellcheck shell=bash
# scripts/vm/nfs-cache.sh — sourced by nfs-server.sh (inside the VM): what the Linux client keeps
# in its caches from our server, against the kernel's nfsd on the same workload (part `cache`).
#
#   run_cache
#
# Two halves, over rxe, the mount options of every other part:
# 1. The reply comparison (RPCRDMA_NFS3_COMPARE_BIN, `rpcrdma-nfs3-compare`): the kernel nfsd
#    (tmpfs export /srv/kexport) and ours (memory backend, then dir backend) run at once; the
#    tool sends the same NFSv3 calls to both in a fresh directory of each export and compares
#    what the replies carry (docs/nfs-server.md section 8). Its exit status fails the part when
#    a field that must match differs. In `kernel` mode ours is the kernel nfsd's second export.
# 2. Client call counts: for the kernel nfsd, ours with the memory backend and ours with the dir
#    backend, one after the other, the client's NFSv3 calls per procedure (/proc/net/rpc/nfs)
#    in each phase of a metadata workload on a tree of RPCRDMA_CACHE_DIRS x RPCRDMA_CACHE_FILES
#    small files (default 10 x 30):
#      untar    tar -xf of the tree (after dropping the client's caches)
#      diff     diff -r of the source tree against the untarred one (no cache drop: what the
#               client kept from the untar)
#      stat     find TREE | xargs stat
#      walk     the same again (a full-tree walk on warm caches)
#      remount  umount, mount, the same walk (dentries and attributes come from READDIRPLUS)
#    Printed: "cache LABEL PHASE PROC N" per count, then a table of READ, GETATTR, LOOKUP,
#    READDIR, READDIRPLUS per phase with the ratio ours / kernel. The goal is ours within 10 %
#    of the kernel nfsd for READ, GETATTR and LOOKUP; a row over it is printed as a note, not a
#    failure (GETATTR counts follow the attribute cache timeouts, so the VM's speed moves them).
# Knobs: RPCRDMA_NFSD_CACHE (1: run the part), RPCRDMA_CACHE_DIRS, RPCRDMA_CACHE_FILES,
# RPCRDMA_CACHE_LABELS ("kernel memory dir"), RPCRDMA_CACHE_ACTIMEO (mount with actimeo=S),
# RPCRDMA_NFS3_COMPARE_BIN.

CACHE_STATE=/run/nfs-cache
CACHE_PROCS="read getattr lookup readdir readdirplus"
declare -A CACHE_N=()

# cache_tree: the source tree and its tarball, once per boot
cache_tree() {
	local d s nd=${RPCRDMA_CACHE_DIRS:-10} nf=${RPCRDMA_CACHE_FILES:-30}
	[ -s "$CACHE_STATE/tree.tar" ] && return 0
	rm -rf "$CACHE_STATE/src"
	mkdir -p "$CACHE_STATE/src/tree" || return 1
	for ((d = 0; d < nd; d++)); do
		mkdir "$CACHE_STATE/src/tree/d$d" || return 1
		s=$(((d * 613 + 11) % 1500 + 1))
		head -c $((s * nf)) /dev/urandom | split -b "$s" -d -a 4 - "$CACHE_STATE/src/tree/d$d/m-" || return 1
	done
	tar -C "$CACHE_STATE/src" -cf "$CACHE_STATE/tree.tar" tree || return 1
	echo "cache tree: $(find "$CACHE_STATE/src/tree" -type f | wc -l) files in $nd directories"
}

# cache_events: the client's event counters of the mount (/proc/self/mountstats "events:")
CACHE_EVENTS="inoderevalidates dentryrevalidates datainvalidates attrinvalidates"
cache_events() { mstats "$MNT" | awk '$1 == "events:" {print $2, $3, $4, $5; exit}'; }

# cache_phase LABEL PHASE CMD...: runs CMD, records the client's calls per procedure, its cache
# events (revalidations of inodes and dentries, page caches and attributes it dropped) and the
# phase's duration
cache_phase() {
	local label=$1 ph=$2 a b e0 e1 i=0 n rc t0
	shift 2
	read -ra a <<<"$(nfs3_line)"
	read -ra e0 <<<"$(cache_events)"
	t0=$(now_ms)
	"$@"
	rc=$?
	read -ra b <<<"$(nfs3_line)"
	read -ra e1 <<<"$(cache_events)"
	[ "$rc" -eq 0 ] || failc "cache-$label-$ph" "exit status $rc"
	for n in $CACHE_EVENTS; do
		echo "cache-event $label $ph $n $((${e1[i]:-0} - ${e0[i]:-0}))"
		i=$((i + 1))
	done
	echo "cache-time $label $ph $(($(now_ms) - t0)) ms"
	i=0
	for n in $NFS3_NAMES; do
		case " $CACHE_PROCS " in *" $n "*)
			CACHE_N[$label.$ph.$n]=$((b[i] - a[i]))
			echo "cache $label $ph $n $((b[i] - a[i]))"
			;;
		esac
		i=$((i + 1))
	done
}

cache_walk() { find "$1" -print0 | xargs -0 stat -c '%i %s %Y %Z %h' >/dev/null; }

# cache_counts LABEL: the workload against one server (kernel: the kernel nfsd's tmpfs export)
cache_counts() {
	local label=$1 be=$1 kind_save=$KIND
	[ "$label" = kernel ] && KIND=kernel be=memory
	if ! srv_start rxe "$be"; then
		KIND=$kind_save
		failc "cache-$label-server" "the server did not start"
		return
	fi
	# RPCRDMA_CACHE_ACTIMEO=S: attribute cache timeouts of S seconds (actimeo=S), so that
	# how long a phase takes (the server's speed) does not decide which attributes expire
	local MOUNT_EXTRA=${RPCRDMA_CACHE_ACTIMEO:+actimeo=$RPCRDMA_CACHE_ACTIMEO}
	if do_mount "$MNT"; then
		sync
		echo 3 >/proc/sys/vm/drop_caches
		cache_phase "$label" untar tar -xf "$CACHE_STATE/tree.tar" -C "$MNT"
		cache_phase "$label" diff diff -r "$CACHE_STATE/src/tree" "$MNT/tree"
		cache_phase "$label" stat cache_walk "$MNT/tree"
		cache_phase "$label" walk cache_walk "$MNT/tree"
		if do_umount "$MNT" && do_mount "$MNT"; then
			cache_phase "$label" remount cache_walk "$MNT/tree"
		fi
		rm -rf "$MNT/tree"
		do_umount "$MNT"
	fi
	srv_stop
	KIND=$kind_save
}

# cache_compare BACKEND: the comparison tool against the kernel nfsd and ours (both running)
cache_compare() {
	local be=$1 bin=${RPCRDMA_NFS3_COMPARE_BIN:-} kind_save=$KIND kport kmport out rc
	if [ -z "$bin" ] || [ ! -x "$bin" ]; then
		failc "compare-$be" "no rpcrdma-nfs3-compare in the VM (RPCRDMA_NFS3_COMPARE_BIN=$bin)"
		return
	fi
	KIND=kernel
	srv_start rxe memory || {
		KIND=$kind_save
		failc "compare-$be" "the kernel nfsd did not start"
		return
	}
	kport=$SRV_PORT kmport=$SRV_MPORT
	KIND=$kind_save
	if [ "$KIND" = kernel ]; then
		SRV_PORT=20049 SRV_MPORT=20048 SRV_PATH=$NFSD_DIR SRV_PID=''
	elif ! srv_start rxe "$be"; then
		failc "compare-$be" "our server did not start"
		return
	fi
	out=$LOGS/compare-$be.txt
	timeout -k 5 120 "$bin" --bind 10.0.2.15 \
		--reference "10.0.2.15:$kport" --reference-mount "10.0.2.15:$kmport" --reference-export "$KEXPORT" \
		--subject "10.0.2.15:$SRV_PORT" --subject-mount "10.0.2.15:$SRV_MPORT" --subject-export "$SRV_PATH" \
		--label "$be" >"$out" 2>&1
	rc=$?
	sed 's/^/  | /' "$out"
	if [ "$rc" -eq 0 ]; then
		pass "compare-$be" "$(grep '^compare: ' "$out" | tail -n 1)"
	else
		failc "compare-$be" "exit status $rc: $(grep '^compare: ' "$out" | tail -n 1)"
	fi
	srv_stop
}

cache_table() {
	local ph p k o r labels=${RPCRDMA_CACHE_LABELS-kernel memory dir} l over=0
	echo
	echo "client NFSv3 calls per phase (ratio: ours / kernel nfsd; goal: READ, GETATTR, LOOKUP within 10 %)"
	printf '  %-8s %-12s' phase procedure
	for l in $labels; do printf ' %8s' "$l"; done
	for l in $labels; do [ "$l" = kernel ] || printf ' %8s' "$l/k"; done
	echo
	for ph in untar diff stat walk remount; do
		for p in $CACHE_PROCS; do
			printf '  %-8s %-12s' "$ph" "${p^^}"
			for l in $labels; do printf ' %8s' "${CACHE_N[$l.$ph.$p]:-n/a}"; done
			k=${CACHE_N[kernel.$ph.$p]:-}
			for l in $labels; do
				[ "$l" = kernel ] && continue
				o=${CACHE_N[$l.$ph.$p]:-}
				r=$(awk -v k="$k" -v o="$o" 'BEGIN {if (k == "" || o == "") print "n/a"; else if (k + 0 > 0) printf "%.2f", o / k; else if (o + 0 == 0) print "1.00"; else print "inf"}')
				printf ' %8s' "$r"
				case $p in read | getattr | lookup)
					# over the goal: more than 10 % and more than 2 calls above the kernel nfsd
					if [ -n "$k" ] && [ -n "$o" ] && [ "$((o * 10))" -gt "$((k * 11))" ] && [ "$((o - k))" -gt 2 ]; then
						echo "note: cache $l $ph ${p^^}: $o calls against the kernel nfsd's $k (over the 10 % goal)" >>"$CACHE_STATE/notes"
						over=$((over + 1))
					fi
					;;
				esac
			done
			echo
		done
	done
	[ -s "$CACHE_STATE/notes" ] && cat "$CACHE_STATE/notes"
	PNOTES="$over count(s) over the 10 % goal"
}

run_cache() {
	local l
	[ "${RPCRDMA_NFSD_CACHE:-1}" = 1 ] || return 0
	part_begin cache "what the client caches: replies compared with the kernel nfsd's, call counts per workload phase"
	mkdir -p "$CACHE_STATE"
	: >"$CACHE_STATE/notes"
	for l in memory dir; do cache_compare "$l"; done
	if [ -z "${RPCRDMA_CACHE_LABELS-kernel memory dir}" ]; then
		echo "cache: no call counts (RPCRDMA_CACHE_LABELS is empty)"
	elif cache_tree; then
		for l in ${RPCRDMA_CACHE_LABELS-kernel memory dir}; do cache_counts "$l"; done
		cache_table
	else
		failc cache-tree "cannot make the source tree in $CACHE_STATE"
	fi
	part_end
}
