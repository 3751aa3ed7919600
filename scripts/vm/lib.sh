# shellcheck shell=bash
# Shared helpers for scripts/vm/*.sh (sourced, not run).
#
# All state lives in one cache directory, $RPCRDMA_VM_CACHE
# (default: ${XDG_CACHE_HOME:-$HOME/.cache}/rpcrdma-vm):
#   debs/        downloaded .deb files (apt-get download)
#   qemu/        qemu-system-x86 and the libraries it needs, unpacked (dpkg-deb -x)
#   fw/          symlinks to the qemu/seabios/ipxe firmware files (qemu -L)
#   kernel/      Debian's linux-image-*-amd64, unpacked (vmlinuz + modules)
#   kbuild/      linux-headers + linux-kbuild, unpacked (to build siw.ko)
#   siw/         siw sources from linux-source + the out-of-tree siw.ko
#   guest/       guest userspace packages (rdma-core, perftest, nfs, ...), unpacked
#   tools/       kmod (depmod/modprobe) and cpio links used by the builders
#   initramfs/   the guest root tree;  out/initramfs.cpio(.gz) the packed image
#   stamps/      one file per finished setup step (its content is the step's key)
#   logs/        apt and build logs of the last setup

VM_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_CACHE=${RPCRDMA_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/rpcrdma-vm}
VM_T0=${VM_T0:-$(date +%s)}
export PATH=$VM_CACHE/tools:$PATH # cpio unpacked by setup.sh when the host has none

# Guest layout (guest-init.sh sets it up; docs/vm.md describes it).
# shellcheck disable=SC2034 # used by the scripts that source this file
{
	VM_RXE_ADDR=10.0.2.15     # eth0, rxe0 (root netns, loopback inside rxe)
	VM_SIW_ADDR=10.0.3.1      # sw0, siw0 (root netns)
	VM_SIW_PEER_ADDR=10.0.3.2 # sw1, siw1 (netns "peer")
}

# busy_loops N: starts N busy loops in the background (N "cpus": one per CPU; guest side, to
# run a workload beside a CPU hog) and prints their process ids, one per line
busy_loops() {
	local n=$1 i
	[ "$n" = cpus ] && n=$(nproc)
	for ((i = 0; i < n; i++)); do
		bash -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
		echo $!
	done
}

vm_log() { printf '[%s +%ss] %s\n' "${VM_TAG:-rpcrdma-vm}" "$(($(date +%s) - VM_T0))" "$*" >&2; }

# vm_die HEADLINE [DETAIL...]: print a banner that cannot be missed in a CI log, exit 1.
vm_die() {
	{
		echo
		echo "############################################################################"
		echo "## ${VM_TAG:-rpcrdma-vm}: FAILED: $1"
		shift
		local l x
		for l in "$@"; do
			while IFS= read -r x; do echo "##   $x"; done <<<"$l"
		done
		echo "############################################################################"
	} >&2
	exit 1
}

# The guest's Debian packages (apt-get download + dpkg-deb -x): rdma-core
# userspace with the rxe and siw providers, perftest, rping, the kernel NFS
# server's tools, acl (getfacl, setfacl: scripts/vm/nfs-acl.sh), attr (getfattr, setfattr:
# scripts/vm/nfs-v41.sh), busybox (fills
# gaps), kmod; fio (scripts/vm/nfs-fio.sh) with every library its binary links
# (Debian links the rbd/rados/gluster/nbd/pmem engines into /usr/bin/fio with
# BIND_NOW, so all of them must load: the image grows from 70 to 136 MB, a
# trivial boot from 3.9-4.2 s to 4.3-4.5 s on an idle host); tcpdump unless
# RPCRDMA_VM_TCPDUMP=0. The list is the key of setup.sh's guest step and part
# of the initramfs key: a changed list downloads the packages again and
# rebuilds the image.
vm_guest_pkgs() {
	echo libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils rdmacm-utils perftest rdma-core \
		libnl-3-200 libnl-route-3-200 libpci3 infiniband-diags libibumad3 libibmad5 libibnetdisc5 \
		busybox-static kmod nfs-kernel-server nfs-common rpcbind libnfsidmap1 libwrap0 keyutils acl attr
	echo fio libaio1 libnuma1 libgfapi0 libglusterfs0 libgfrpc0 libgfxdr0 libnbd0 libdaxctl1 libndctl6 \
		libpmem1 libpmemblk1 librados2 librbd1 libboost-thread1.74.0 libboost-iostreams1.74.0 libfmt9 \
		libxml2 libicu72 libssl3 libcryptsetup12 libjson-c5 libargon2-1 libkmod2 libbz2-1.0
	if [ "${RPCRDMA_VM_TCPDUMP:-1}" = 1 ]; then echo tcpdump libpcap0.8; fi
}

# Files whose content determines the initramfs; a change rebuilds it.
vm_initramfs_key() {
	{
		vm_guest_pkgs
		cat "$VM_SCRIPTS/build-initramfs.sh" "$VM_SCRIPTS/guest-init.sh"
		echo "extra=${RPCRDMA_VM_EXTRA_BINS:-}"
		cat "$VM_CACHE/stamps/kernel" "$VM_CACHE/stamps/guest" "$VM_CACHE/stamps/siw" 2>/dev/null
	} | sha256sum | cut -c1-16
}

# True when every setup step is done and the initramfs is current.
vm_is_ready() {
	local s
	for s in qemu kernel guest siw; do [ -s "$VM_CACHE/stamps/$s" ] || return 1; done
	[ -f "$VM_CACHE/out/initrd" ] && [ -e "$VM_CACHE/kernel/boot/vmlinuz" ] &&
		[ "$(cat "$VM_CACHE/stamps/initramfs" 2>/dev/null)" = "$(vm_initramfs_key)" ]
}

# Sets QEMU and the library path for the unpacked (not installed) qemu.
# shellcheck disable=SC2034 # QEMU is used by the callers
vm_qemu_env() {
	QEMU=$VM_CACHE/qemu/usr/bin/qemu-system-x86_64
	export LD_LIBRARY_PATH="$VM_CACHE/qemu/usr/lib/x86_64-linux-gnu:$VM_CACHE/qemu/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
