# shellcheck shell=bash
# scripts/vm/nfs-exports.sh — sourced by nfs-server.sh (inside the VM): the export access checks
# (part `exports`): what an export's options and the files' mode bits allow, enforced by the
# server, seen through the kernel client (NFSv3, proto=rdma over rxe, the dir backend on
# /srv/nfsd-dir so that the tree is prepared and inspected from the server's side).
#
#   run_exports
#
# Three configurations, one server start each; ours gets the options through its flags, the
# kernel nfsd (`kernel` mode, how the checks were validated) through /etc/exports:
#   default  ours: no export flag (the default `/export *(rw,root_squash,sec=sys)`); kernel:
#            `*(rw,root_squash)`. uid 1000 (setpriv --reuid=1000 --regid=1000 --clear-groups) may
#            write its own file, and is refused (EACCES / EPERM) writing a root-owned 0644 file,
#            creating or removing in a root-owned 0755 directory, chmod of a root-owned file;
#            root is squashed: what it creates in a 1777 directory belongs to 65534:65534, it
#            cannot write the root-owned 0644 file nor create in the 0755 directory.
#   ro       ours: `--export '/export:ro'` (bare options: `*(ro)`); kernel: `*(ro)`. Reads work;
#            CREATE and MKDIR answer EROFS; uid 1000 cannot write its own file.
#   list     ours: `--exports FILE` holding `/export 10.0.2.0/24(rw,all_squash,anonuid=1234,
#            anongid=1234)`; kernel: the same line in /etc/exports. The listed client
#            (10.0.2.15) mounts, and what root or uid 1000 creates belongs to 1234:1234; a client
#            not listed (10.0.3.2 in netns peer, routed to 10.0.2.15 over the veth pair) is refused
#            at MNT ("access denied").
# Every refusal is also checked on the server's side: the tree on /srv/nfsd-dir is unchanged.
# Switch: RPCRDMA_NFSD_EXPORTS=auto (default: on in `kernel` mode, on for ours when
# `rpcrdma-nfsd --help` lists --exports), 1 (always), 0 (never).

EXP_UID=1000
exp_as_user() { setpriv --reuid=$EXP_UID --regid=$EXP_UID --clear-groups "$@"; }

# exp_enabled: whether the part runs
exp_enabled() {
	case ${RPCRDMA_NFSD_EXPORTS:-auto} in
	0) return 1 ;;
	1) return 0 ;;
	esac
	[ "$KIND" = kernel ] && return 0
	[ "$HAS_EXPORTS" = 1 ]
}

# exp_tree: the tree on the server's side, owned and moded for the checks
exp_tree() {
	local d=$NFSD_DIR
	find "$d" -mindepth 1 -delete
	chown 0:0 "$d" && chmod 0755 "$d"
	echo root >"$d/rootfile" && chmod 0644 "$d/rootfile"
	mkdir -m 0755 "$d/rootdir" && echo victim >"$d/rootdir/victim"
	mkdir "$d/pub" && chmod 1777 "$d/pub"
	echo mine >"$d/userfile" && chown $EXP_UID:$EXP_UID "$d/userfile" && chmod 0644 "$d/userfile"
}

# exp_refused NAME EXPECTED-ERROR SERVER-SIDE-TEST CMD...: CMD must fail with that error text and
# the server's tree must still satisfy SERVER-SIDE-TEST (a shell condition)
exp_refused() {
	local name=$1 want=$2 test=$3 out
	shift 3
	if out=$("$@" 2>&1); then
		failc "$name" "allowed: $*"
	elif ! grep -q "$want" <<<"$out"; then
		failc "$name" "refused, but not with '$want': $out"
	elif ! eval "$test"; then
		failc "$name" "refused ($want), but the server's tree changed: $test is false"
	else
		pass "$name" "$want: $*"
	fi
}
exp_owner() { # NAME FILE-ON-SERVER WANT CMD...: CMD succeeds, the file belongs to WANT (uid:gid)
	local name=$1 f=$2 want=$3 got out
	shift 3
	if ! out=$("$@" 2>&1); then
		failc "$name" "$* failed: $out"
		return
	fi
	got=$(stat -c %u:%g "$f" 2>&1)
	if [ "$got" = "$want" ]; then pass "$name" "$* -> owner $got"; else failc "$name" "$* -> owner $got, expected $want"; fi
}

# exp_start CONFIG EXPORT-LINE-OPTIONS OURS-ARGS...: the server of one configuration, the tree
# fresh, mounted on $MNT
exp_start() {
	local cfg=$1 kopts=$2
	shift 2
	exp_tree
	if [ "$KIND" = kernel ]; then
		echo "$NFSD_DIR $kopts" >/etc/exports
		echo "exports ($cfg): $(cat /etc/exports)"
		knfsd_start root && exportfs -ra || return 1
	fi
	[ "$KIND" = kernel ] || echo "exports ($cfg): ${*:-(no export flag)}"
	SRV_EXPORT=("$@")
	if ! SRV_EXPORT_SET=1 SRV_KEEP=1 srv_start rxe dir; then
		failc "server-start-$cfg" "the server did not start (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		return 1
	fi
	do_mount "$MNT"
}
exp_stop() {
	mountpoint -q "$MNT" && do_umount "$MNT"
	srv_stop
}

exp_default() {
	local m=$MNT d=$NFSD_DIR out
	exp_start default "*(rw,root_squash,sec=sys,fsid=2,insecure,no_subtree_check)" || return
	if out=$(exp_as_user sh -c "echo more >>$m/userfile" 2>&1) && grep -q more "$d/userfile"; then
		pass user-write-own "uid $EXP_UID appended to its own 0644 file"
	else
		failc user-write-own "uid $EXP_UID could not write its own file: $out"
	fi
	exp_refused user-write-rootfile "Permission denied" '[ "$(cat $d/rootfile)" = root ]' \
		exp_as_user sh -c "echo bad >>$m/rootfile"
	exp_refused user-create-rootdir "Permission denied" '[ ! -e $d/rootdir/new ]' \
		exp_as_user touch "$m/rootdir/new"
	exp_refused user-remove-rootdir "Permission denied" '[ -e $d/rootdir/victim ]' \
		exp_as_user rm -f "$m/rootdir/victim"
	exp_refused user-chmod-rootfile "Operation not permitted" '[ "$(stat -c %a $d/rootfile)" = 644 ]' \
		exp_as_user chmod 0666 "$m/rootfile"
	exp_owner root-squash-create "$d/pub/byroot" 65534:65534 touch "$m/pub/byroot"
	exp_refused root-squash-write "Permission denied" '[ "$(cat $d/rootfile)" = root ]' \
		sh -c "echo bad >>$m/rootfile"
	exp_refused root-squash-create-rootdir "Permission denied" '[ ! -e $d/rootdir/r ]' \
		touch "$m/rootdir/r"
	exp_stop
}

exp_ro() {
	local m=$MNT d=$NFSD_DIR
	exp_start ro "*(ro,fsid=2,insecure,no_subtree_check)" --export /export:ro || return
	if [ "$(cat "$m/rootfile" 2>&1)" = root ]; then pass ro-read "a file of the ro export reads"; else failc ro-read "cannot read $m/rootfile"; fi
	exp_refused ro-create "Read-only file system" '[ ! -e $d/pub/new ]' touch "$m/pub/new"
	exp_refused ro-mkdir "Read-only file system" '[ ! -e $d/pub/newdir ]' mkdir "$m/pub/newdir"
	exp_refused ro-user-write-own "Read-only file system\|Permission denied" '[ "$(cat $d/userfile)" = mine ]' \
		exp_as_user sh -c "echo more >>$m/userfile"
	exp_stop
}

exp_list() {
	local m=$MNT d=$NFSD_DIR f=$LOGS/exports.list out peer=/mnt/unlisted
	local line="10.0.2.0/24(rw,all_squash,anonuid=1234,anongid=1234)"
	echo "/export $line" >"$f"
	exp_start list "${line%)},fsid=2,insecure,no_subtree_check)" --exports "$f" || return
	pass listed-client "10.0.2.15 in 10.0.2.0/24 mounted"
	exp_owner all-squash-root "$d/pub/r" 1234:1234 touch "$m/pub/r"
	exp_owner all-squash-user "$d/pub/u" 1234:1234 exp_as_user touch "$m/pub/u"
	# the unlisted client: 10.0.3.2 (netns peer) reaches 10.0.2.15 (a local address of the root
	# netns) through 10.0.3.1 on the veth pair; MNT over TCP must answer MNT3ERR_ACCES
	ip netns exec peer ip route replace 10.0.2.0/24 via 10.0.3.1
	# shellcheck disable=SC2046 # the command line, split into words on purpose
	if out=$(ip netns exec peer sh -c "mkdir -p $peer && timeout -k 5 60 $(mount_cmd $peer) && umount $peer" 2>&1); then
		failc unlisted-client "10.0.3.2 is not in 10.0.2.0/24, yet it mounted"
	elif grep -qi "access denied" <<<"$out"; then
		pass unlisted-client "10.0.3.2 refused at MNT: $out"
	else
		failc unlisted-client "mount failed, but not with 'access denied': $out"
	fi
	ip netns exec peer ip route del 10.0.2.0/24 via 10.0.3.1
	exp_stop
}

run_exports() {
	local saved
	if [ "${RPCRDMA_NFSD_EXPORTS:-auto}" = 0 ]; then
		echo "## nfs-server exports: SKIP (RPCRDMA_NFSD_EXPORTS=0)"
		return
	elif ! exp_enabled; then
		echo "## nfs-server exports: SKIP (rpcrdma-nfsd --help lists no --exports yet; RPCRDMA_NFSD_EXPORTS=1 forces the part)"
		return
	fi
	part_begin exports "export options and mode bits enforced by the $KIND server (dir backend, rxe)"
	saved=$(cat /etc/exports)
	exp_default
	exp_ro
	exp_list
	echo "$saved" >/etc/exports
	[ -z "${KNFSD_UP[root]:-}" ] || exportfs -ra
	find "$NFSD_DIR" -mindepth 1 -delete
	part_end
}
