# shellcheck shell=bash
# scripts/vm/nfs-cache.sh — sourced by nfs-server.sh (inside the VM): whether our replies carry
# what the Linux client needs to keep its caches, against the kernel's nfsd (part `cache`).
#
#   run_cache
#
# Over rxe, with the mount options of every other part: the reply comparison
# (RPCRDMA_NFS3_COMPARE_BIN, `rpcrdma-nfs3-compare`): the kernel nfsd (tmpfs export
# /srv/kexport) and ours (memory backend, then dir backend) run at once; the tool sends the same
# NFSv3 calls to both in a fresh directory of each export and compares what the replies carry
# (docs/nfs-server.md section 9). Its exit status fails the part when a field that must match
# differs. In `kernel` mode ours is the kernel nfsd's second export. What the client then sends
# on a metadata workload (its calls per phase against both servers) is part `meta`
# (nfs-meta.sh).
# Knobs: RPCRDMA_NFSD_CACHE (1: run the part), RPCRDMA_NFS3_COMPARE_BIN.

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

run_cache() {
	local l
	[ "${RPCRDMA_NFSD_CACHE:-1}" = 1 ] || return 0
	part_begin cache "what the client caches: replies compared with the kernel nfsd's"
	for l in memory dir; do cache_compare "$l"; done
	part_end
}
