# shellcheck shell=bash
# scripts/vm/nfs-v41.sh — sourced by nfs-server.sh (inside the VM): the Linux NFSv4.1 and NFSv4.2
# client (xprtrdma, RFC 8881 sessions, RFC 8167 backchannel, RFC 7862 minor version 2) against
# `rpcrdma-nfsd --nfs4`.
#
#   run_v41 DEV BACKEND      part v41/DEV/BACKEND (DEV rxe or siw; BACKEND memory or dir)
#   run_v41_deleg            part v41/deleg (two clients over siw, A vers=4.2 and B vers=4.1:
#                            delegation recall, locks, NFSv3)
#
# run_v41: our server with --nfs4 on the NFS/RDMA default port 20049 (so that a mount without
#   port= reaches it; ours only: nothing else holds 20049 at this point of the boot), then
#   1. mount -o vers=4.1,proto=rdma,port=20049 SERVER:/export (the export through the pseudo
#      file system): /proc/self/mountstats must say "xprt: rdma" and "vers=4.1";
#   2. nfs-workload.sh churn --fio (RPCRDMA_NFSD_V41_CHURN iterations, default 60: the final
#      tree checked against a local reference, then fio with verify=crc32c); with
#      RPCRDMA_NFSD_V41_WORKLOAD=full instead nfs-workload.sh full --no-ls with a umount + mount
#      in the middle (the 1007-file checksummed tree, rename / link / symlink / chmod / truncate
#      / fsync, parallel writers, fio, rm -rf: several times longer under TCG); the client's
#      xprtrdma counters must show Read and Write chunks;
#   3. an NFSv3 mount of the same export beside the NFSv4.1 one: a file written through each is
#      read back through the other, and both list the same names; on the dir backend then a
#      tmpfs mounted inside the export (in the server's mount namespace): `ls` of the NFSv4.1
#      mount lists it (its attributes as rdattr_error) and `ls` into it is refused; and a
#      process on the server's host appends to a file the client holds a read delegation of:
#      recalled, the client reads the line once it closed the file (v41_local_change);
#   4. a plain `mount -o proto=rdma SERVER:/export` (no vers=, no port=): the client asks for
#      4.2 first and the server accepts it: the mount must settle on vers=4.2 over rdma and see
#      the files of 3.; on it the NFSv4.2 space operations (v42_space):
#      a. fallocate -l 8M (ALLOCATE): the size is 8388608; 1 MiB of data written at 1 MiB, then
#         fallocate -p -o 1M -l 1M (DEALLOCATE): the first 2 MiB read back as zeros (caches
#         dropped), the size unchanged;
#      b. an 8 MiB sparse file (truncate, 4 octets written at 5 MiB) copied with
#         cp --sparse=always --reflink=never, which finds the data with lseek SEEK_DATA /
#         SEEK_HOLE (SEEK; the answers shown from strace when the guest has it): the copy is
#         the same;
#      c. 3 MiB of random data copied with cp --sparse=never (FICLONE, then copy_file_range:
#         CLONE where the export clones, else COPY, which the server does 1 MiB a call): the
#         copy is the same; cp --reflink=always (CLONE) makes the same file where the export
#         clones (the memory backend; the dir backend on XFS or btrfs) and fails "Operation not
#         supported" elsewhere, as against the kernel nfsd on such a file system;
#      d. the client's per-op counters of the mount (mountstats) show ALLOCATE, DEALLOCATE, SEEK
#         and CLONE sent at least once each, and COPY where the export does not clone
#         (DEALLOCATE also for the holes cp punches in its copy); their errors column (the 9th
#         number) 0 for ALLOCATE, DEALLOCATE and COPY, for CLONE 0 where the export clones and
#         the one NOTSUPP elsewhere (after which the client copies), and for SEEK at most the
#         lseeks that ended in ENXIO (cp's last SEEK_DATA, past the last
#         data: NFS4_OK with sr_eof, as RFC 7862 says, which the client counts as no error, or
#         NFS4ERR_NXIO, as Linux nfsd answers it);
#      e. user extended attributes (RFC 8276, v42_xattrs) with setfattr / getfattr: where the
#         export keeps them (the memory backend; the dir backend when its file system takes
#         user.* attributes, which the guest's tmpfs does not before Linux 6.6) a value of 5
#         and one of 60000 octets (a long call and a Reply chunk) set, read back (caches
#         dropped: GETXATTR), listed (LISTXATTRS), one removed (REMOVEXATTR: then "No such
#         attribute"), uid 1000's setfattr on root's 0644 file refused; the client's per-op
#         counters show the four operations without errors; elsewhere setfattr fails with
#         "Operation not supported", as against the kernel nfsd on the same file system;
#      f. the creating process's umask (mode_umask, RFC 8275, v42_umask): a file, a directory
#         and a file opened with O_EXCL (EXCLUSIVE4_1) made under umask 027 are 0640, 0750 and
#         0640; on the dir backend a file made under umask 077
#         in a directory given a default ACL (u::rwx,g::rwx,o::rx) on the server's side is 0664:
#         the ACL decides, not the umask (a client that applied the umask itself would make it
#         0600);
#   the server's counters: nfs4_clients and nfs4_sessions > 0 while mounted; exit status 0 after
#   SIGTERM.
# run_v41_deleg: two kernel clients of one server (memory backend, in netns peer, bound to every
#   address there): client A mounts 10.0.3.2 with vers=4.2, client B 10.0.3.3 (a second address
#   of sw1) with vers=4.1, both from the root netns over siw0 (the kernel client's siw
#   connections are made by a kernel worker in the root netns, so a client in another netns
#   cannot use siw); a server address of its own makes B a client of its own, and a UTS
#   namespace with its own host name gives it its own NFSv4 client owner string (else the server
#   would see one client, A's, twice); the server's callbacks to A are CB_COMPOUNDs of minor
#   version 2 (A's EXCHANGE_ID), B's would be of minor version 1 (the Linux client finds the
#   session of a CB_SEQUENCE only among its clients of the CB_COMPOUND's minor version, so A's
#   recall going through shows the minor version right):
#   1. delegation: A writes f, then opens it for reading and keeps it open (OPEN: a read
#      delegation, nfs4_delegations = 1); B appends to f (OPEN for write): the server sends
#      CB_RECALL to A over A's RDMA connection, A returns the delegation (DELEGRETURN), B's write
#      goes through; counters nfs4_recalls and nfs4_delegreturns >= 1, A reads B's line;
#   2. locks (flock(2), which the Linux NFS client sends as whole-file LOCKs): while A holds an
#      exclusive lock B's `flock -n` (exclusive and shared) fails, once A released it succeeds;
#      while A holds a shared lock B gets a shared one and not an exclusive one; while B holds an
#      exclusive lock A's `flock -n` fails, once B released it succeeds;
#   3. NFSv3 beside a delegation: A writes g and keeps it open for reading (a read delegation);
#      an NFSv3 mount of the same export (vers=3,proto=rdma,nolock, from the root netns: a client
#      of its own) overwrites g: the server sends CB_RECALL to A and answers the NFSv3 call
#      NFS3ERR_JUKEBOX until A's DELEGRETURN, the NFSv3 client retries after 5 s and the write
#      goes through (within 120 s); counters deleg.waits >= 1, nfs4_recalls and
#      nfs4_delegreturns up; once A closed g it reads the NFSv3 content (the stale one of its
#      cache had the delegation not been recalled).
# Output as every part of nfs-server.sh ("## nfs-server v41/...: PASS|FAIL"). Ours only: in
# `kernel` mode the parts SKIP (the kernel nfsd of this boot serves NFSv3 only).
# Knobs: RPCRDMA_NFSD_V41 (runs, default "rxe/memory siw/dir"; empty: none), RPCRDMA_NFSD_V41_DELEG
# (0: leave out part v41/deleg, about 35 s; default 1), RPCRDMA_NFSD_V41_WORKLOAD (churn, full),
# RPCRDMA_NFSD_V41_CHURN (60), RPCRDMA_NFSD_V41_DEBUG (1: the client's callback and state
# messages, nfs_debug 0x0100, printed after part v41/deleg).

V41_PORT=20049
# v41_check_mount DIR WANT-VERS LABEL [MOUNTSTATS-FILE]: mountstats shows the RDMA transport and
# that version
v41_check_mount() {
	local blk vers xprt
	blk=$(mstats "$1" "${4:-/proc/self/mountstats}")
	xprt=$(awk '$1 == "xprt:" {print $2; exit}' <<<"$blk")
	vers=$(awk '$1 == "opts:" {print $2; exit}' <<<"$blk" | tr ',' '\n' | sed -n 's/^vers=//p')
	if [ "$xprt" = rdma ] && [ "$vers" = "$2" ]; then
		pass "$3" "mountstats: xprt: rdma, vers=$vers"
	else
		failc "$3" "mountstats: xprt: ${xprt:-none}, vers=${vers:-none} (expected rdma, $2)"
		return 1
	fi
}
# v41_mount DIR OPTIONS [PREFIX...]: mount -t nfs -o OPTIONS $SRV_ADDR:/export DIR (run under PREFIX)
v41_mount() {
	local d=$1 o=$2 out t0
	shift 2
	"$@" mkdir -p "$d"
	t0=$(now_ms)
	if ! out=$(timeout -k 5 90 "$@" mount -t nfs -o "$o" "$SRV_ADDR:/export" "$d" 2>&1); then
		failc mount "mount -t nfs -o $o $SRV_ADDR:/export $d failed: $out"
		return 1
	fi
	pass mount "mount -t nfs -o $o $SRV_ADDR:/export $d ($(($(now_ms) - t0)) ms)"
}
v41_server() { # DEV BACKEND [SERVER-ARGS...]: our server with --nfs4 on port 20049 (reads V41_STATE)
	# No client records kept (--v4-state-dir none) unless V41_STATE names a directory: each
	# part's server starts without a grace period, whatever the part before it left mounted.
	if ! PORT=$V41_PORT srv_start "$1" "$2" --nfs4 --v4-state-dir "${V41_STATE:-none}" "${@:3}"; then
		failc server-start "the server did not start (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		return 1
	fi
	pass server-start "$SRV_ADDR nfs port $SRV_PORT (NFSv3, NFSv4.1 and NFSv4.2), mount port $SRV_MPORT"
}
v41_tail() { # the server's and the kernel's log tails when the part failed
	[ "$PFAIL" -ne 0 ] || return 0
	echo "---- server log (tail):"
	grep -v '^nfsd-stat ' "$SRV_LOG" | tail -n 30 | sed 's/^/  | /'
	echo "---- kernel log (tail):"
	dmesg | grep -v 'speed is unknown' | tail -n 20 | sed 's/^/  | /'
}

# v41_both M4 M3: a file written through each mount is read back through the other; the
# listings of both are the same
v41_both() {
	local m4=$1 m3=$2 a b
	printf 'through NFSv4.1 %s\n' "$RANDOM" >"$m4/from-v41" && printf 'through NFSv3 %s\n' "$RANDOM" >"$m3/from-v3" ||
		{ failc v3-v41-write "writing through one of the mounts failed"; return; }
	mkdir "$m4/dir-v41" && echo inside >"$m4/dir-v41/f" || failc v3-v41-write "mkdir through NFSv4.1 failed"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	if cmp -s "$m4/from-v41" "$m3/from-v41" && cmp -s "$m3/from-v3" "$m4/from-v3" &&
		[ "$(cat "$m3/dir-v41/f")" = inside ]; then
		pass v3-v41-files "a file written through each mount reads back the same through the other"
	else
		failc v3-v41-files "contents differ: $(cat "$m3/from-v41" 2>&1) / $(cat "$m4/from-v3" 2>&1)"
	fi
	a=$(cd "$m4" && find . | sort)
	b=$(cd "$m3" && find . | sort)
	if [ "$a" = "$b" ] && [ -n "$a" ]; then
		pass v3-v41-listing "both mounts list the same $(wc -l <<<"$a") names"
	else
		failc v3-v41-listing "listings differ: $(diff <(echo "$a") <(echo "$b") | head -n 4 | tr '\n' ' ')"
	fi
}

run_v41() {
	local dev=$1 be=$2 m4=/mnt/v41 m3=/mnt/v41-v3 wl rc remount o41
	part_begin "v41/$dev/$be" "the NFSv4.1 and NFSv4.2 client against $KIND --nfs4, $be backend, over $dev"
	if [ "$KIND" = kernel ]; then
		echo "SKIP v41/$dev/$be: the kernel nfsd of this boot serves NFSv3 only"
		part_end
		return
	fi
	v41_server "$dev" "$be" || {
		part_end
		return
	}
	o41="vers=4.1,proto=rdma,port=$V41_PORT"
	if v41_mount "$m4" "$o41" && v41_check_mount "$m4" 4.1 mount-v41; then
		remount="umount $m4 && mount -t nfs -o $o41 $SRV_ADDR:/export $m4"
		wl=$(mktemp)
		if [ "${RPCRDMA_NFSD_V41_WORKLOAD:-churn}" = full ]; then
			timeout -k 10 "$RUN_TIMEOUT" "$HERE/nfs-workload.sh" full "$m4" --remount "$remount" --no-ls | tee "$wl"
		else
			RPCRDMA_NFS_CHURN_N=${RPCRDMA_NFSD_V41_CHURN:-60} timeout -k 10 "$RUN_TIMEOUT" "$HERE/nfs-workload.sh" churn "$m4" --fio | tee "$wl"
		fi
		rc=${PIPESTATUS[0]}
		[ "$rc" -ne 124 ] || echo "FAIL workload: timed out after $RUN_TIMEOUT s"
		grep -q '^workload: .* 0 failed' "$wl" || failc workload "$(grep '^workload:' "$wl" || echo "no summary (exit $rc)")"
		PNOTES="$(grep '^workload:' "$wl" | head -n 1)"
		rm -f "$wl"
		client_stats "$m4"
		# the chunks, as the client counted them (the server's chunks.* count NFSv3 calls)
		for v in read_chunks write_chunks; do
			[ "${CLI[$v]:-0}" -gt 0 ] || failc "client-$v" "xprtrdma counted ${CLI[$v]:-no} $v"
		done
		if counters; then
			show_counters
			cnt_positive nfs4_clients nfs4_sessions
		else
			failc counters "no nfsd-stat lines after SIGUSR1"
		fi
		# NFSv3 and NFSv4.1 of the same export at once
		if do_mount "$m3"; then
			v41_both "$m4" "$m3"
			do_umount "$m3"
		fi
		if [ "$be" = dir ]; then
			v41_mount_point "$m4"
			v41_local_change "$m4"
		fi
		do_umount "$m4"
		# version negotiation: no vers=, no port= (the client asks for 4.2 first)
		if v41_mount "$m4" proto=rdma && v41_check_mount "$m4" 4.2 mount-negotiated; then
			if [ "$(cat "$m4/dir-v41/f" 2>&1)" = inside ]; then
				pass negotiated-read "the files written before read back"
			else
				failc negotiated-read "$m4/dir-v41/f: $(cat "$m4/dir-v41/f" 2>&1)"
			fi
			v42_space "$m4" "$be"
			v42_xattrs "$m4" "$be"
			v42_umask "$m4" "$be"
			rm -rf "${m4:?}"/* || failc negotiated-rm "rm -rf failed"
			do_umount "$m4"
		fi
	fi
	srv_stop
	v41_tail
	part_end
}

# v42_space M4 BACKEND: the NFSv4.2 space operations on the vers=4.2 mount at M4: ALLOCATE
# (fallocate), DEALLOCATE (fallocate -p), SEEK (cp --sparse=always --reflink=never: lseek
# SEEK_DATA / SEEK_HOLE), CLONE and COPY (cp of a file of data: FICLONE, copy_file_range), then
# the client's own per-op counters of the mount
v42_space() {
	local m4=$1 be=$2 out sz tf seeks='' nxio=0
	local trace=()
	# a. ALLOCATE: 8 MiB reserved; DEALLOCATE: a hole punched over data
	if out=$(fallocate -l 8M "$m4/alloc" 2>&1) && sz=$(stat -c %s "$m4/alloc") && [ "$sz" = 8388608 ]; then
		pass v42-allocate "fallocate -l 8M: size $sz, $(stat -c %b "$m4/alloc") blocks"
	else
		failc v42-allocate "fallocate -l 8M $m4/alloc: ${out:-size ${sz:-?}, expected 8388608}"
	fi
	# 1 MiB of data at 1 MiB (written back before the punch), then the hole over it
	if ! { head -c 1048576 /dev/zero | tr '\0' x | dd of="$m4/alloc" bs=64k seek=16 iflag=fullblock conv=notrunc status=none && sync; } ||
		cmp -s -n 2097152 "$m4/alloc" /dev/zero; then
		failc v42-data "writing 1 MiB at 1 MiB of $m4/alloc failed"
	fi
	if out=$(fallocate -p -o 1M -l 1M "$m4/alloc" 2>&1); then
		pass v42-deallocate "fallocate -p -o 1M -l 1M: the hole punched"
	else
		failc v42-deallocate "fallocate -p -o 1M -l 1M $m4/alloc: $out"
	fi
	echo 3 >/proc/sys/vm/drop_caches
	if out=$(cmp -n 2097152 "$m4/alloc" /dev/zero 2>&1) && sz=$(stat -c %s "$m4/alloc") && [ "$sz" = 8388608 ]; then
		pass v42-hole-zeros "the first 2 MiB read back as zeros (the punched data gone), size $sz"
	else
		failc v42-hole-zeros "cmp -n 2097152 $m4/alloc /dev/zero: ${out:-equal, but size ${sz:-?} (expected 8388608)}"
	fi
	# b. SEEK: a sparse file copied by cp, which looks for its data with SEEK_DATA / SEEK_HOLE
	if ! out=$({ truncate -s 8M "$m4/sparse" && printf data | dd of="$m4/sparse" bs=1 seek=5242880 conv=notrunc status=none && sync; } 2>&1); then
		failc v42-sparse "the sparse file $m4/sparse: $out"
	fi
	echo 3 >/proc/sys/vm/drop_caches # st_blocks (cp's test for a sparse file) from the server
	tf=$(mktemp)
	command -v strace >/dev/null && trace=(strace -o "$tf" -e trace=lseek)
	if out=$("${trace[@]}" cp --sparse=always --reflink=never "$m4/sparse" "$m4/sparse.copy" 2>&1) &&
		out=$(cmp "$m4/sparse" "$m4/sparse.copy" 2>&1); then
		# "lseek(3, 0, SEEK_DATA) = 5242880" -> "0 SEEK_DATA = 5242880"
		seeks=$(sed -nE 's/^lseek\([0-9]+, ([0-9]+), (SEEK_DATA|SEEK_HOLE)\) += (-1 [A-Z]+|[0-9]+).*/\1 \2 = \3/p' "$tf" | paste -sd ';' -)
		nxio=$(grep -c 'SEEK_\(DATA\|HOLE\).*ENXIO' "$tf")
		pass v42-sparse-copy "cp --sparse=always: the copy is the same (blocks: source $(stat -c %b "$m4/sparse"), copy $(stat -c %b "$m4/sparse.copy"))${seeks:+; lseek: $seeks}"
	else
		failc v42-sparse-copy "cp --sparse=always $m4/sparse $m4/sparse.copy, cmp: $out"
		nxio=$(grep -c 'SEEK_\(DATA\|HOLE\).*ENXIO' "$tf")
	fi
	rm -f "$tf"
	[ "${#trace[@]}" -gt 0 ] || nxio=1 # without strace: cp's one last SEEK_DATA past the data
	# c. COPY or CLONE: cp of 3 MiB of data within the mount (cp asks FICLONE first, then
	#    copy_file_range, which the client sends as CLONE first too): where the export clones
	#    (the memory backend; the dir backend on XFS or btrfs) CLONE, elsewhere one CLONE
	#    refused NOTSUPP (the client stops asking) and COPY (the server copies 1 MiB a call, the
	#    client asks for the rest)
	local clones=0 fs
	fs=$(stat -f -c %T "$NFSD_DIR" 2>/dev/null)
	if [ "$be" = memory ] || [ "$fs" = xfs ] || [ "$fs" = btrfs ]; then clones=1; fi
	if out=$({ head -c 3145728 /dev/urandom >"$m4/data" && sync && cp --sparse=never "$m4/data" "$m4/data.copy" &&
		echo 3 >/proc/sys/vm/drop_caches && cmp "$m4/data" "$m4/data.copy"; } 2>&1); then
		pass v42-copy "cp --sparse=never of 3 MiB: the copy is the same"
	else
		failc v42-copy "cp $m4/data $m4/data.copy, cmp: $out"
	fi
	out=$({ cp --reflink=always "$m4/data" "$m4/data.clone" && echo 3 >/proc/sys/vm/drop_caches &&
		cmp "$m4/data" "$m4/data.clone"; } 2>&1)
	case "$clones:$?:$out" in
	1:0:*) pass v42-clone "cp --reflink=always of 3 MiB: the clone is the same" ;;
	0:1:*"not supported"*) pass v42-clone "cp --reflink=always refused where the export's file system ($fs) cannot clone: $out" ;;
	*) failc v42-clone "cp --reflink=always $m4/data $m4/data.clone (backend $be, file system ${fs:-?}): ${out:-copied}" ;;
	esac
	# d. the client's per-op counters of this mount; SEEK's errors at most the lseeks that
	#    ended in ENXIO; CLONE's none where the export clones, else the one NOTSUPP
	if [ "$clones" = 1 ]; then
		op_counts "$m4" ALLOCATE:0 DEALLOCATE:0 SEEK:"$nxio" CLONE:0
	else
		op_counts "$m4" ALLOCATE:0 DEALLOCATE:0 SEEK:"$nxio" COPY:0 CLONE:1
	fi
	if [ -z "$OPS_BAD" ]; then
		pass v42-client-ops "mountstats per-op: $OPS_LINES"
	else
		failc v42-client-ops "${OPS_BAD# } mountstats per-op: $OPS_LINES"
	fi
}

# op_counts M4 OP:MAXERR...: the client's per-op counters of the mount at M4 (mountstats: "OP:
# ops trans timeouts ... errors"): each OP sent at least once, with at most MAXERR errors ("-":
# any number). Sets OPS_LINES (the counters' lines) and OPS_BAD (what is off; empty: nothing).
op_counts() {
	local blk l n e op max spec
	blk=$(mstats "$1")
	shift
	OPS_LINES='' OPS_BAD=''
	for spec; do
		op=${spec%%:*} max=${spec#*:}
		l=$(awk -v o="$op:" '$1 == o {$1 = $1; print; exit}' <<<"$blk")
		OPS_LINES="$OPS_LINES${OPS_LINES:+; }${l:-$op: none}"
		read -r _ n _ _ _ _ _ _ _ e <<<"${l:-x 0}"
		if [ "${n:-0}" -lt 1 ]; then
			OPS_BAD="$OPS_BAD $op not sent;"
		elif [ "$max" != - ] && [ -n "$e" ] && [ "$e" -gt "$max" ]; then
			OPS_BAD="$OPS_BAD $op errors $e (at most $max);"
		fi
	done
}

# v42_xattrs M4 BACKEND: user extended attributes on the vers=4.2 mount at M4 (RFC 8276:
# GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR), or their absence where the export's file system
# keeps none (item 4e of run_v41)
v42_xattrs() {
	local m4=$1 be=$2 f=$1/xattrs out big want=yes
	if ! command -v setfattr >/dev/null; then
		failc v42-xattrs "no setfattr in the guest (Debian's attr package)"
		return
	fi
	echo data >"$f" && chmod 0644 "$f"
	if [ "$be" = dir ] && ! setfattr -n user.probe -v 1 "$NFSD_DIR" 2>/dev/null; then
		want=no
	fi
	setfattr -x user.probe "$NFSD_DIR" 2>/dev/null
	if [ $want = no ]; then
		if out=$(setfattr -n user.k -v hello "$f" 2>&1); then
			failc v42-xattrs "setfattr worked where $NFSD_DIR keeps no user.* attributes"
		elif [[ $out == *"Operation not supported"* ]]; then
			pass v42-xattrs "the export's file system keeps no user.* attributes: $out"
		else
			failc v42-xattrs "setfattr: $out (expected: Operation not supported)"
		fi
		return
	fi
	big=$(head -c 60000 /dev/zero | tr '\0' a)
	if out=$({ setfattr -n user.k -v hello "$f" && setfattr -n user.big -v "$big" "$f"; } 2>&1); then
		pass v42-setxattr "setfattr user.k (5 octets) and user.big (60000 octets)"
	else
		failc v42-setxattr "setfattr: $out"
	fi
	echo 3 >/proc/sys/vm/drop_caches
	if [ "$(getfattr --absolute-names --only-values -n user.k "$f" 2>&1)" = hello ] &&
		[ "$(getfattr --absolute-names --only-values -n user.big "$f" 2>&1)" = "$big" ]; then
		pass v42-getxattr "both values read back"
	else
		failc v42-getxattr "getfattr: $(getfattr --absolute-names -n user.k "$f" 2>&1 | tr '\n' ' ')"
	fi
	echo 3 >/proc/sys/vm/drop_caches
	out=$(getfattr --absolute-names -d -m '^user\.' "$f" 2>&1 | sed -n 's/^\(user\.[a-z]*\)=.*/\1/p' | sort | paste -sd ' ' -)
	if [ "$out" = "user.big user.k" ]; then
		pass v42-listxattrs "getfattr -d lists: $out"
	else
		failc v42-listxattrs "getfattr -d listed '$out' (expected user.big user.k)"
	fi
	if out=$(setfattr -x user.k "$f" 2>&1) && echo 3 >/proc/sys/vm/drop_caches &&
		out=$(getfattr --absolute-names -n user.k "$f" 2>&1; true) && [[ $out == *"No such attribute"* ]]; then
		pass v42-removexattr "setfattr -x user.k, then: $out"
	else
		failc v42-removexattr "setfattr -x user.k / getfattr: $out"
	fi
	if out=$(setpriv --reuid=1000 --regid=1000 --clear-groups setfattr -n user.u -v 1 "$f" 2>&1); then
		failc v42-xattr-perm "uid 1000 set an attribute of root's 0644 file"
	else
		pass v42-xattr-perm "uid 1000 refused: $out"
	fi
	# GETXATTR's one error: the read after the removal
	op_counts "$m4" GETXATTR:1 SETXATTR:0 LISTXATTRS:0 REMOVEXATTR:0
	if [ -z "$OPS_BAD" ]; then
		pass v42-xattr-ops "mountstats per-op: $OPS_LINES"
	else
		failc v42-xattr-ops "${OPS_BAD# } mountstats per-op: $OPS_LINES"
	fi
	rm -f "$f"
}

# run_v41_xfs DEV: CLONE through the kernel client to our server's dir backend on XFS with
# reflink (an image on a loop device in the guest): a 16 MiB file cloned with cp
# --reflink=always on the vers=4.2 mount reads back the same, and on the server's side the two
# files share their extents (the file system's used space grew by far less than 16 MiB; xfs_io
# fiemap flags the clone's extents shared); the client's CLONE counter shows no error.
run_v41_xfs() {
	local dev=$1 m4=/mnt/v41 xd=/srv/nfsd-xfs img=/srv/nfsd-xfs.img out u0 u1 flags loop
	part_begin "v41/$dev/xfs" "CLONE through the NFSv4.2 client to $KIND --nfs4, dir backend on XFS with reflink, over $dev"
	if [ "$KIND" = kernel ]; then
		echo "SKIP v41/$dev/xfs: the kernel nfsd of this boot serves NFSv3 only"
		part_end
		return
	fi
	if ! command -v mkfs.xfs >/dev/null || ! modprobe xfs 2>/dev/null; then
		failc xfs "no mkfs.xfs or xfs module in this guest (the host needs xfsprogs when the image is built)"
		part_end
		return
	fi
	modprobe loop 2>/dev/null
	if ! out=$({ truncate -s 320M "$img" && mkfs.xfs -q -m reflink=1 "$img" && mkdir -p "$xd" &&
		loop=$(losetup -f --show "$img") && mount -t xfs "$loop" "$xd"; } 2>&1); then
		failc xfs-mount "an XFS image with reflink at $xd: $out"
		losetup -j "$img" -O NAME -n | xargs -r -n 1 losetup -d
		rm -f "$img"
		part_end
		return
	fi
	if NFSD_DIR=$xd v41_server "$dev" dir; then
		if v41_mount "$m4" "vers=4.2,proto=rdma,port=$V41_PORT" && v41_check_mount "$m4" 4.2 mount-v42; then
			head -c 16777216 /dev/urandom >"$m4/big" && sync
			u0=$(df -k --output=used "$xd" | tail -n 1)
			if out=$({ cp --reflink=always "$m4/big" "$m4/big.clone" && sync && echo 3 >/proc/sys/vm/drop_caches &&
				cmp "$m4/big" "$m4/big.clone"; } 2>&1); then
				u1=$(df -k --output=used "$xd" | tail -n 1)
				flags=$(xfs_io -r -c 'fiemap -v' "$xd/big.clone" 2>/dev/null | awk 'NR > 2 {print $NF}' | sort -u | paste -sd ' ' -)
				if [ $((u1 - u0)) -lt 4096 ]; then
					pass v42-clone-xfs "cp --reflink=always of 16 MiB: the same; the server's XFS used $((u1 - u0)) KiB more (extent flags ${flags:-?})"
				else
					failc v42-clone-xfs "cp --reflink=always of 16 MiB took $((u1 - u0)) KiB on the server's XFS: copied, not shared"
				fi
			else
				failc v42-clone-xfs "cp --reflink=always $m4/big $m4/big.clone, cmp: $out"
			fi
			op_counts "$m4" CLONE:0
			if [ -z "$OPS_BAD" ]; then
				pass v42-clone-ops "mountstats per-op: $OPS_LINES"
			else
				failc v42-clone-ops "${OPS_BAD# } mountstats per-op: $OPS_LINES"
			fi
			rm -f "$m4/big" "$m4/big.clone"
			do_umount "$m4"
		fi
		srv_stop
		v41_tail
	fi
	umount "$xd"
	losetup -j "$img" -O NAME -n | xargs -r -n 1 losetup -d
	rm -f "$img"
	part_end
}

# v42_umask M4 BACKEND: the creating process's umask, which the client sends as mode_umask
# (RFC 8275) when the server lists it, instead of applying it itself (item 4f of run_v41)
v42_umask() {
	local m4=$1 be=$2 out d=$1/um-acl
	# noclobber: bash opens with O_EXCL, which the client sends as an EXCLUSIVE4_1 OPEN
	out=$( (umask 027 && : >"$m4/um-f" && mkdir "$m4/um-d" && set -C && : >"$m4/um-x" &&
		stat -c '%a' "$m4/um-f" "$m4/um-d" "$m4/um-x") 2>&1 | paste -sd ' ' -)
	if [ "$out" = "640 750 640" ]; then
		pass v42-umask "a file, a directory and an O_EXCL file made under umask 027: $out"
	else
		failc v42-umask "a file, a directory and an O_EXCL file made under umask 027: $out (expected 640 750 640)"
	fi
	rm -rf "$m4/um-f" "$m4/um-d" "$m4/um-x"
	[ "$be" = dir ] || return 0
	# a default ACL set on the server's side decides instead of the umask: a client that
	# applied umask 077 itself would make the file 0600
	mkdir "$d" && chmod 0777 "$d"
	if ! setfacl -d -m u::rwx,g::rwx,o::rx "$NFSD_DIR/um-acl" 2>/dev/null; then
		pass v42-umask-acl "skipped: $NFSD_DIR/um-acl takes no default ACL here"
		rm -rf "$d"
		return 0
	fi
	echo 3 >/proc/sys/vm/drop_caches
	out=$( (umask 077 && : >"$d/f" && stat -c '%a' "$d/f") 2>&1)
	if [ "$out" = 664 ]; then
		pass v42-umask-acl "a file made under umask 077 in a directory with default ACL u::rwx,g::rwx,o::rx: $out"
	else
		failc v42-umask-acl "a file made under umask 077 in a directory with a default ACL: $out (expected 664: the ACL, not the umask)"
	fi
	rm -rf "$d"
}

# v41_mount_point M4: a file system mounted inside the dir: export is listed (its attributes
# as rdattr_error, the name's file id as mounted_on_fileid) and not crossed (LOOKUP refused).
# Mounted in the server's mount namespace (`ip netns exec` gave it a copy of this one).
v41_mount_point() {
	local m4=$1 mp=$NFSD_DIR/mounted out
	local in_srv=(nsenter -t "$SRV_PID" -m --)
	if ! { mkdir -p "$mp" && "${in_srv[@]}" mount -t tmpfs -o size=1m tmpfs "$mp"; }; then
		failc mount-point "could not mount a tmpfs at $mp"
		return
	fi
	echo 3 >/proc/sys/vm/drop_caches
	if out=$(ls "$m4" 2>&1) && printf '%s\n' "$out" | grep -qx mounted; then
		pass mount-point-listed "a mount point inside the export is listed: $(printf '%s' "$out" | tr '\n' ' ')"
	else
		failc mount-point-listed "ls $m4: $out"
	fi
	if out=$(ls "$m4/mounted/" 2>&1); then
		failc mount-point-crossed "the client walked into a mount point inside the export: $out"
	else
		pass mount-point-crossed "not crossed: $out"
	fi
	if ! { "${in_srv[@]}" umount "$mp" && rmdir "$mp"; }; then
		failc mount-point "could not remove $mp"
	fi
}

# v41_read_delegated FILE TEXT: writes TEXT to FILE through an NFSv4 mount, drops the client's
# caches, then opens FILE for reading and reads a line, keeping it open as descriptor HELD (the
# OPEN gets a read delegation; `exec {HELD}<&-` closes it); sets d0 and r0 to the server's
# nfs4_delegations and nfs4_recalls counters then
v41_read_delegated() {
	printf '%s\n' "$2" >"$1"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	exec {HELD}<"$1"
	read -r _ <&"$HELD"
	counters && d0=${CNT[nfs4_delegations]:-0} r0=${CNT[nfs4_recalls]:-0}
}

# v41_local_change M4: a process on the server's host appends to a file the client holds a read
# delegation of (the dir backend: the server watches delegated files with fanotify); the server
# recalls the delegation, and the client, once it closed the file, reads the appended line (its
# cached copy, had the delegation not been recalled)
v41_local_change() {
	local m4=$1 d0 r0 i
	v41_read_delegated "$m4/local-f" 'from the client'
	if [ "${d0:-0}" -ge 1 ]; then pass local-delegation "the client holds a read delegation of local-f (nfs4_delegations=$d0)"; else failc local-delegation "nfs4_delegations=${d0:-?} after the OPEN of local-f for read"; fi
	nsenter -t "$SRV_PID" -m -- sh -c "printf 'from the host\n' >>'$NFSD_DIR/local-f'"
	for ((i = 0; i < 40; i++)); do
		counters && [ "${CNT[nfs4_recalls]:-0}" -gt "${r0:-0}" ] && break
		sleep 0.25
	done
	if [ "${CNT[nfs4_recalls]:-0}" -gt "${r0:-0}" ]; then
		pass local-recall "a process on the host appended: the delegation recalled (nfs4_recalls=${CNT[nfs4_recalls]}, before ${r0:-?})"
	else
		failc local-recall "no recall within 10 s of a process on the host appending (nfs4_recalls=${CNT[nfs4_recalls]:-?})"
	fi
	exec {HELD}<&-
	if [ "$(cat "$m4/local-f" 2>&1)" = "$(printf 'from the client\nfrom the host')" ]; then
		pass local-read "the client reads the host's line"
	else
		failc local-read "the client reads: $(tr '\n' '|' <"$m4/local-f" 2>&1) (its cached copy: the delegation not recalled)"
	fi
	rm -f "$m4/local-f"
}

# ---- two clients ----------------------------------------------------------------------------
# v41_addr: a second address of the server's netdev (sw1 in netns peer: 10.0.3.3), once per boot
v41_addr() {
	ip -n peer -4 addr show dev sw1 | grep -q ' 10\.0\.3\.3/' || ip -n peer addr add 10.0.3.3/24 dev sw1
}

run_v41_deleg() {
	local ma=/mnt/v41a mb=/mnt/v41b o42="vers=4.2,proto=rdma,port=$V41_PORT" o41="vers=4.1,proto=rdma,port=$V41_PORT" r0 d0 out
	part_begin v41/deleg "two NFSv4 clients, A vers=4.2 and B vers=4.1 (over siw0 to two addresses of one server), of $KIND --nfs4: delegation recall, locks"
	if [ "$KIND" = kernel ]; then
		echo "SKIP v41/deleg: the kernel nfsd of this boot serves NFSv3 only"
		part_end
		return
	fi
	if ! v41_addr; then
		failc address "10.0.3.3 could not be added to sw1 in netns peer"
		part_end
		return
	fi
	# every address of netns peer: 10.0.3.2 for client A, 10.0.3.3 for client B (both on siw1)
	v41_server "${RPCRDMA_NFSD_V41_DELEG_DEV:-siw}" memory --bind 0.0.0.0 || {
		part_end
		return
	}
	mkdir -p "$mb"
	# the client's callback and state messages in the kernel log (printed at the end)
	[ "${RPCRDMA_NFSD_V41_DEBUG:-0}" = 1 ] && echo 0x0100 >/proc/sys/sunrpc/nfs_debug
	# A (the delegation holder) over NFSv4.2: its callbacks are CB_COMPOUNDs of minor version 2
	if v41_mount "$ma" "$o42" && v41_check_mount "$ma" 4.2 mount-a &&
		SRV_ADDR=10.0.3.3 v41_mount "$mb" "$o41" unshare -u sh -c 'hostname v41-client-b; exec "$@"' sh &&
		v41_check_mount "$mb" 4.1 mount-b; then
		# 1. delegation
		v41_read_delegated "$ma/f" 'line from A'
		if [ "${d0:-0}" -ge 1 ]; then pass delegation "A holds a read delegation (nfs4_delegations=$d0, nfs4_clients=${CNT[nfs4_clients]:-?})"; else failc delegation "nfs4_delegations=${d0:-?} after A's OPEN for read (no back channel?)"; fi
		if out=$(timeout -k 5 120 sh -c "printf 'line from B\n' >>$mb/f" 2>&1); then
			pass b-write "B appended to f (OPEN for write) while A held it open"
		else
			failc b-write "B's append failed: $out"
		fi
		counters && show_counters
		if [ "${CNT[nfs4_recalls]:-0}" -gt "${r0:-0}" ] && [ "${CNT[nfs4_delegreturns]:-0}" -ge 1 ]; then
			pass recall "CB_RECALL sent to A (NFSv4.2) over its RDMA connection and DELEGRETURN back (nfs4_recalls=${CNT[nfs4_recalls]}, nfs4_delegreturns=${CNT[nfs4_delegreturns]}, nfs4_revoked=${CNT[nfs4_revoked]:-?})"
		else
			failc recall "nfs4_recalls=${CNT[nfs4_recalls]:-?} (before ${r0:-?}), nfs4_delegreturns=${CNT[nfs4_delegreturns]:-?}"
		fi
		exec {HELD}<&-
		if [ "$(cat "$ma/f")" = "$(printf 'line from A\nline from B')" ]; then
			pass a-reads-b "A reads B's line"
		else
			failc a-reads-b "A reads: $(tr '\n' '|' <"$ma/f")"
		fi
		# 2. locks (flock: whole-file LOCKs at the server)
		v41_locks "$ma" "$mb"
		# 3. NFSv3 beside a delegation
		v41_v3_recall "$ma" /mnt/v41-v3
	fi
	mountpoint -q "$mb" && do_umount "$mb"
	mountpoint -q "$ma" && do_umount "$ma"
	if [ "${RPCRDMA_NFSD_V41_DEBUG:-0}" = 1 ]; then
		echo 0 >/proc/sys/sunrpc/nfs_debug
		dmesg | grep -v 'speed is unknown\|_slot' | grep -iv 'rxe\|siw\|IPv6' | tail -n 150 | sed 's/^/  | /'
	fi
	srv_stop
	v41_tail
	part_end
}

# v41_hold PID-VAR MODE FILE [PREFIX...]: a background flock MODE on FILE (the lock held by flock
# itself, -o: the sleeping child does not keep it); v41_release PID: ends it, the lock goes
v41_hold() {
	local -n _p=$1
	"${@:4}" flock -o "$2" "$3" sleep 120 &
	_p=$!
	sleep 2
}
v41_release() {
	pkill -P "$1" 2>/dev/null
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	sleep 1
}
# v41_locks MA MB: flock(2) from both clients on one file conflicts as POSIX locks do
v41_locks() {
	local ma=$1 mb=$2 pid
	v41_hold pid -x "$ma/f"
	if flock -n -x "$mb/f" true 2>/dev/null; then failc lock-xx "B got an exclusive lock while A held one"; else pass lock-xx "A holds LOCK_EX: B's flock -n -x fails"; fi
	if flock -n -s "$mb/f" true 2>/dev/null; then failc lock-xs "B got a shared lock while A held an exclusive one"; else pass lock-xs "A holds LOCK_EX: B's flock -n -s fails"; fi
	v41_release "$pid"
	if flock -n -x "$mb/f" true; then pass lock-free "A released: B's flock -n -x succeeds"; else failc lock-free "B could not lock after A released"; fi
	v41_hold pid -s "$ma/f"
	if flock -n -s "$mb/f" true; then pass lock-ss "A holds LOCK_SH: B's flock -n -s succeeds"; else failc lock-ss "B could not share A's shared lock"; fi
	if flock -n -x "$mb/f" true 2>/dev/null; then failc lock-sx "B got an exclusive lock while A held a shared one"; else pass lock-sx "A holds LOCK_SH: B's flock -n -x fails"; fi
	v41_release "$pid"
	v41_hold pid -x "$mb/f"
	if flock -n -x "$ma/f" true 2>/dev/null; then failc lock-bx "A got an exclusive lock while B held one"; else pass lock-bx "B holds LOCK_EX: A's flock -n -x fails"; fi
	v41_release "$pid"
	if flock -n -x "$ma/f" true; then pass lock-bfree "B released: A's flock -n -x succeeds"; else failc lock-bfree "A could not lock after B released"; fi
}

# v41_v3_recall MA M3: an NFSv3 write of a file client A holds a read delegation of (A's mount
# at MA, the NFSv3 one at M3) waits for the recall (NFS3ERR_JUKEBOX, the client's retry 5 s
# later) and then goes through; A, once it closed the file, reads what NFSv3 wrote
v41_v3_recall() {
	local ma=$1 m3=$2 d0 r0 dr0 t0 ms out
	v41_read_delegated "$ma/g" 'old from A'
	dr0=${CNT[nfs4_delegreturns]:-0}
	if [ "${d0:-0}" -ge 1 ]; then pass v3-delegation "A holds a read delegation of g (nfs4_delegations=$d0)"; else failc v3-delegation "nfs4_delegations=${d0:-?} after A's OPEN of g for read"; fi
	# a client of its own: the NFSv3 mount of the same server from the root netns
	if do_mount "$m3"; then
		t0=$(now_ms)
		if out=$(timeout -k 5 120 sh -c "printf 'new from v3\n' >$m3/g" 2>&1); then
			ms=$(($(now_ms) - t0))
			pass v3-write "the NFSv3 client overwrote g while A held its delegation ($ms ms)"
		else
			ms=$(($(now_ms) - t0))
			failc v3-write "the NFSv3 overwrite of g failed after $ms ms: ${out:-timed out}"
		fi
		counters && show_counters
		if [ "${CNT[deleg.waits]:-0}" -ge 1 ]; then
			pass v3-jukebox "NFSv3 calls answered NFS3ERR_JUKEBOX while A's delegation was recalled: deleg.waits=${CNT[deleg.waits]}"
		else
			failc v3-jukebox "deleg.waits=${CNT[deleg.waits]:-missing} (expected >= 1)"
		fi
		if [ "${CNT[nfs4_recalls]:-0}" -gt "${r0:-0}" ] && [ "${CNT[nfs4_delegreturns]:-0}" -gt "${dr0:-0}" ]; then
			pass v3-recall "the NFSv3 write recalled A's delegation: nfs4_recalls=${CNT[nfs4_recalls]} (before ${r0:-?}), nfs4_delegreturns=${CNT[nfs4_delegreturns]} (before ${dr0:-?})"
		else
			failc v3-recall "nfs4_recalls=${CNT[nfs4_recalls]:-?} (before ${r0:-?}), nfs4_delegreturns=${CNT[nfs4_delegreturns]:-?} (before ${dr0:-?})"
		fi
	fi
	exec {HELD}<&-
	if [ "$(cat "$ma/g" 2>&1)" = 'new from v3' ]; then
		pass v3-a-reads "A reads the NFSv3 content of g"
	else
		failc v3-a-reads "A reads: $(tr '\n' '|' <"$ma/g" 2>&1) (expected 'new from v3'; 'old from A': its cache, the delegation not recalled)"
	fi
	mountpoint -q "$m3" && do_umount "$m3"
}
