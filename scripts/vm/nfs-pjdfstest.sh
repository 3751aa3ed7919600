# shellcheck shell=bash
# scripts/vm/nfs-pjdfstest.sh — sourced by nfs-server.sh (inside the VM): the POSIX conformance
# suite pjdfstest (the Rust rewrite from crates.io, built on the host by pjdfstest-build.sh) run
# as root on the kernel client's NFS mount (over rxe, the mount options of every other part) of
# one server: NFSv3 (vers=3,proto=rdma) or NFSv4.2 (vers=4.2,proto=rdma).
#
#   run_pjdfstest kernel|memory|dir [3|4.2]
#
# kernel: the kernel's own nfsd, tmpfs export with no_root_squash (the reference; over NFSv4.2
# the nfsd must have been started with KNFSD_V4=1, knfsd.sh); memory, dir: ours with that
# backend (with --nfs4 for 4.2; the kernel nfsd's other tmpfs export in `kernel` mode). The
# configuration: pjdfstest.toml over NFSv3, pjdfstest42.toml over NFSv4.2 (the same plus the
# posix_fallocate cases: the client's fallocate sends ALLOCATE). Part pjdfstest/LABEL (NFSv3) or
# pjdfstest41/LABEL (NFSv4.2) passes when the suite ran to its summary line and the server
# stopped cleanly: which cases may fail is decided on the host, by comparing with the reference
# (scripts/vm/pjdfstest-table.sh and its list of tolerated failures, pjdfstest-known.txt for
# NFSv3, pjdfstest41-known.txt for NFSv4.2).
# Output: the suite's own lines go to $LOGS/pjdfstest[41]-LABEL.txt; the console gets one line
# per case, "TAG LABEL ok|FAILED|skipped CASE", and for a failed or skipped case
# "TAG-why LABEL CASE REASON" (the first line of its message), TAG `pjd` (NFSv3) or `pjd41`.
# Needs: RPCRDMA_PJDFSTEST_BIN (the binary), pjdfstest.toml and pjdfstest42.toml beside this
# file; the guest's /etc/passwd gets the suite's user "tests" (1000:1000). Knob:
# RPCRDMA_PJDFSTEST_TIMEOUT (per run, s, default 600).

pjd_users() {
	grep -q '^tests:' /etc/passwd || echo 'tests:x:1000:1000:pjdfstest:/nonexistent:/usr/sbin/nologin' >>/etc/passwd
	grep -q '^tests:' /etc/group || echo 'tests:x:1000:' >>/etc/group
}

# pjd_lines LABEL FILE [TAG]: the suite's output as "TAG ..." / "TAG-why ..." lines (busybox
# awk; TAG default pjd); the reason is the first line of a case's message, with an assertion's
# "left:" / "right:" values
pjd_lines() {
	sed 's/\x1b\[[0-9;]*m//g' "$2" | awk -v l="$1" -v t="${3:-pjd}" '
		function flush() { if (why != "") print t "-why " l " " last " " why; why = "" }
		/^[A-Za-z0-9_:]+ +(ok|FAILED|skipped)$/ {
			flush()
			print t " " l " " $NF " " $1
			last = ($NF == "ok") ? "" : $1
			next
		}
		/^\t/ && last != "" && why == "" {
			sub(/^\t+/, "")
			why = $0
			next
		}
		/^ *(left|right): / && why != "" {
			sub(/^ +/, "")
			why = why ", " $0
			next
		}
		{ flush(); last = "" }
		END { flush() }'
}

run_pjdfstest() {
	local label=$1 be=$1 vers=${2:-3} bin=${RPCRDMA_PJDFSTEST_BIN:-} out rc sec=/run/pjd-secondary kind_save=$KIND
	local tmo=${RPCRDMA_PJDFSTEST_TIMEOUT:-600} summary part=pjdfstest tag=pjd extra=() conf=pjdfstest.toml
	if [ "$vers" != 3 ]; then
		part=pjdfstest41 tag=pjd41 extra=(--nfs4 --v4-state-dir none) conf=pjdfstest42.toml
	fi
	part_begin "$part/$label" "pjdfstest as root on the NFSv$vers mount (rxe) of the $label server"
	if [ -z "$bin" ] || [ ! -x "$bin" ]; then
		failc pjdfstest "no pjdfstest binary in the VM (RPCRDMA_PJDFSTEST_BIN=$bin)"
		part_end
		return
	fi
	pjd_users
	mkdir -p "$sec" # the second file system of the EXDEV cases: the guest's root
	if [ "$label" = kernel ]; then
		KIND=kernel be=memory
	fi
	[ "$KIND" = ours ] || extra=()
	if ! srv_start rxe "$be" "${extra[@]}"; then
		KIND=$kind_save
		failc server-start "the server did not start (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		part_end
		return
	fi
	KIND=$kind_save
	if MOUNT_VERS=$vers do_mount "$MNT"; then
		out=$LOGS/$part-$label.txt
		(cd / && NO_COLOR=1 RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 timeout -k 10 "$tmo" \
			"$bin" -c "$HERE/$conf" -p "$MNT" -s "$sec" >"$out" 2>&1)
		rc=$?
		pjd_lines "$label" "$out" "$tag"
		summary=$(sed 's/\x1b\[[0-9;]*m//g' "$out" | grep '^Summary: ')
		if [ -n "$summary" ]; then
			pass pjdfstest "ran to its end (exit $rc): ${summary#Summary: }"
			PNOTES="suite: ${summary#Summary: } (compared in the pjdfstest table)"
		else
			[ "$rc" -ne 124 ] || echo "FAIL pjdfstest: timed out after $tmo s"
			failc pjdfstest "no summary line (exit $rc); the end of its output:"
			tail -n 15 "$out" | sed 's/^/  | /'
		fi
		find "$MNT" -mindepth 1 -delete 2>/dev/null
		do_umount "$MNT"
	fi
	srv_stop
	part_end
}
