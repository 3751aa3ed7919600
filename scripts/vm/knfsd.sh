# shellcheck shell=bash
# scripts/vm/knfsd.sh — the Linux kernel's nfsd inside the VM, for the guest payloads that compare
# our server with it (sourced by nfs-server.sh and nfs-meta.sh, not run).
#
#   knfsd_setup             modules (nfsd rpcrdma nfsv3), the tmpfs exports $KEXPORT and $NFSD_DIR,
#                           /etc/exports (rw, no_root_squash), the nfsd file system, rpcbind
#   knfsd_start root|peer   one kernel nfsd in that netns (NFSv3, 8 threads, rdma 20049, mountd tcp
#                           20048), once per boot; a later call for the same netns does nothing.
#                           With KNFSD_V4=1 (set before the first call: the versions are fixed
#                           when the nfsd starts) it serves NFSv4.x too, with a grace period of
#                           10 s (nfsv4gracetime; the default, the lease time, is 90 s, during
#                           which every OPEN is refused with NFS4ERR_GRACE)
#   knfsd_calls root|peer   the calls that nfsd has answered so far (/proc/net/rpc/nfsd "rpc")
#
# Once per boot because a second "rdma 20049" on the same instance panics Debian's 6.1 (see
# nfs-interop.sh). In netns peer the nfsd file system is mounted afresh inside `ip netns exec`
# (a private mount namespace), and rpc.mountd, a daemon, keeps that namespace alive. The nfsd's
# max_block_size is 1 MiB (its default is 512 KiB on a 2 GiB guest) so that it offers the client
# rsize = wsize = 1 MiB, as rpcrdma-nfsd does.
KEXPORT=${KEXPORT:-/srv/kexport}
NFSD_DIR=${NFSD_DIR:-/srv/nfsd-dir}
declare -A KNFSD_UP=()

knfsd_setup() {
	local d
	modprobe -a nfsd rpcrdma nfsv3 || return 1
	for d in "$KEXPORT" "$NFSD_DIR"; do
		mkdir -p "$d" || return 1
		mountpoint -q "$d" || mount -t tmpfs -o size=512m,mode=0755 tmpfs "$d" || return 1
	done
	cat >/etc/exports <<EOX
$KEXPORT *(rw,fsid=1,insecure,no_subtree_check,no_root_squash)
$NFSD_DIR *(rw,fsid=2,insecure,no_subtree_check,no_root_squash)
EOX
	mkdir -p /proc/fs/nfsd /var/lib/nfs/v4recovery /run/rpcbind
	mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd || return 1
	rpcbind -w 2>/dev/null || true
}

knfsd_start() {
	local ns=() t0
	[ -n "${KNFSD_UP[$1]:-}" ] && return 0
	[ "$1" = peer ] && ns=(ip netns exec peer)
	t0=$(date +%s%3N)
	# shellcheck disable=SC2016 # the inner script expands its own variables
	"${ns[@]}" bash -c '
		set -e
		v4=(-N 4)
		if [ "$1" = peer ]; then umount /proc/fs/nfsd 2>/dev/null || true; fi
		mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
		exportfs -ra
		[ "$2" != 1 ] || v4=()
		if [ "$(cat /proc/fs/nfsd/threads)" -gt 0 ]; then
			echo "kernel nfsd ($1): already running"
		else
			echo 1048576 >/proc/fs/nfsd/max_block_size
			rpc.mountd -p 20048 -N 4
			[ "$2" != 1 ] || echo 10 >/proc/fs/nfsd/nfsv4gracetime
			rpc.nfsd "${v4[@]}" 8
		fi
		grep -q "^rdma 20049" /proc/fs/nfsd/portlist || echo "rdma 20049" >/proc/fs/nfsd/portlist
		echo "kernel nfsd ($1): portlist $(tr "\n" " " </proc/fs/nfsd/portlist)versions $(cat /proc/fs/nfsd/versions), max_block_size $(cat /proc/fs/nfsd/max_block_size)"
	' knfsd "$1" "${KNFSD_V4:-0}" || return 1
	KNFSD_UP[$1]=1
	echo "kernel nfsd ($1) ready in $(($(date +%s%3N) - t0)) ms"
}

knfsd_calls() {
	local ns=()
	[ "$1" = peer ] && ns=(ip netns exec peer)
	"${ns[@]}" awk '$1 == "rpc" {print $2; exit}' /proc/net/rpc/nfsd
}
