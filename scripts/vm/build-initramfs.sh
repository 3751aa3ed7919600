#!/bin/bash
# scripts/vm/build-initramfs.sh — pack the guest root into $RPCRDMA_VM_CACHE/out/initrd.
#
# Called by setup.sh (which fetched and unpacked everything first); run it by
# hand after editing guest-init.sh (run-in-vm.sh notices the change and runs
# setup.sh, which calls this). Contents:
#   * guest/        Debian packages unpacked by setup.sh: rdma-core userspace
#                   (libibverbs1, librdmacm1, ibverbs-providers with librxe and
#                   libsiw, ibverbs-utils, rdmacm-utils, perftest), nfs-kernel-server,
#                   busybox-static, kmod, tcpdump (RPCRDMA_VM_TCPDUMP=1)
#   * host binaries (same Debian 12 release): bash, dash, coreutils, util-linux,
#     iproute2 (ip, rdma, ss), procps, ... — real tools, busybox only fills gaps
#     (busybox's own "ip" has no netns support)
#   * their shared libraries, plus libgcc_s/libstdc++/libm/libz for host-built
#     test binaries (Rust binaries linked to libibverbs.so.1/librdmacm.so.1)
#   * mkfs.xfs and xfs_io when the host has xfsprogs (part v41/*/xfs of nfs-server.sh)
#   * the kernel modules rxe/siw/RDMA-CM/NFS/9p/virtio and XFS on a loop device need
#     (modprobe closure) and the out-of-tree siw.ko
#   * guest-init.sh as /init
# Knob: RPCRDMA_VM_EXTRA_BINS="/usr/bin/foo ..." more host binaries (with their libs).
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/lib.sh"
# shellcheck disable=SC2034 # read by vm_log/vm_die in lib.sh
VM_TAG=vm-initramfs
cd "$VM_CACHE"
export PATH=$VM_CACHE/tools:$PATH
[ -s stamps/kernel ] && [ -x guest/bin/kmod ] || vm_die "run setup.sh first (no kernel/guest packages in $VM_CACHE)"
KVER=$(cat stamps/kernel)
R=$VM_CACHE/initramfs
rm -rf "$R"
mkdir -p "$R"
T0=$(date +%s%N)

# ---- merged-/usr skeleton --------------------------------------------------------
mkdir -p "$R"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64} "$R"/{etc,proc,sys,dev,tmp,run,mnt,root,srv,var/lib/nfs,var/tmp}
ln -s usr/bin "$R/bin"
ln -s usr/sbin "$R/sbin"
ln -s usr/lib "$R/lib"
ln -s usr/lib64 "$R/lib64"
ln -s ../run "$R/var/run"
chmod 1777 "$R/tmp" "$R/var/tmp"

# ---- Debian packages (folded into /usr) -------------------------------------------
(cd guest && tar cf - --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/locale \
	--exclude=./usr/share/lintian --exclude=./usr/share/bug .) | (cd "$R" && tar xf - --keep-directory-symlink)

# ---- host userland ------------------------------------------------------------------
for b in /usr/bin/ip /usr/bin/rdma /usr/bin/ss /usr/bin/mount /usr/bin/umount /usr/sbin/losetup \
	/usr/bin/strace /usr/bin/flock /usr/bin/ldd /usr/sbin/mkfs.xfs /usr/sbin/xfs_io ${RPCRDMA_VM_EXTRA_BINS:-}; do
	if b=$(command -v "$b"); then cp -L "$b" "$R/usr/bin/"; fi
done
mkdir -p "$R/etc/iproute2"
cp -a /etc/iproute2/. "$R/etc/iproute2/" 2>/dev/null || true
HOST_PKGS="bash dash coreutils util-linux mount procps grep sed mawk findutils gzip tar psmisc hostname iputils-ping"
for p in $HOST_PKGS; do dpkg -L "$p" 2>/dev/null | grep -E '^/(usr/)?s?bin/' || true; done | sort -u |
	while read -r f; do
		[ -f "$f" ] || continue
		d=$R/usr/$(basename "$(dirname "$f")")
		[ -e "$d/$(basename "$f")" ] || cp -a "$f" "$d/"
	done
ln -sf dash "$R/usr/bin/sh"
for a in $("$R/usr/bin/busybox" --list); do
	[ -e "$R/usr/bin/$a" ] || [ -e "$R/usr/sbin/$a" ] || ln -s busybox "$R/usr/bin/$a"
done

# ---- kernel modules --------------------------------------------------------------------
MODS="rdma_rxe ib_uverbs rdma_ucm rdma_cm ib_cm iw_cm ib_umad ib_core rpcrdma
      nfsd nfs nfsv4 nfsv3 lockd sunrpc auth_rpcgss
      9p 9pnet_virtio virtio_net virtio_pci virtio_console virtio_rng dummy veth
      crc32_generic crc32c_generic crc32c_intel libcrc32c udp_tunnel ip6_udp_tunnel af_packet
      xfs loop"
depmod -b kernel "$KVER"
MD=$R/usr/lib/modules/$KVER
mkdir -p "$MD"
for m in $MODS; do
	# a module this kernel lacks (later kernels fold the crc32 ones into the core) is left out
	modprobe -d "$VM_CACHE/kernel" -S "$KVER" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}' || true
done | sort -u | while read -r f; do
	rel=${f#"$VM_CACHE"/kernel/lib/modules/"$KVER"/}
	mkdir -p "$MD/$(dirname "$rel")"
	# strip drops the appended module signature: the kernel then skips the
	# (slow under TCG) signature check; it only taints itself, as for siw.ko.
	# A compressed module (later kernels: .ko.xz, .ko.zst) is unpacked first.
	case "$f" in
	*.ko.xz) xz -dc "$f" >"$R/module.tmp" && f=$R/module.tmp rel=${rel%.xz} ;;
	*.ko.zst) zstd -qdc "$f" >"$R/module.tmp" && f=$R/module.tmp rel=${rel%.zst} ;;
	esac
	strip --strip-debug -o "$MD/$rel" "$f"
	rm -f "$R/module.tmp"
done
cp kernel/lib/modules/"$KVER"/modules.{order,builtin,builtin.modinfo} "$MD/" 2>/dev/null || true
sed -i 's/\.ko\.\(xz\|zst\)$/.ko/' "$MD/modules.order" 2>/dev/null || true
SIW=siw
if [ -f siw/siw.ko ]; then
	mkdir -p "$MD/extra"
	strip --strip-debug -o "$MD/extra/siw.ko" siw/siw.ko
elif ! modprobe -d "$VM_CACHE/kernel" -S "$KVER" --show-depends siw >/dev/null 2>&1; then
	SIW= # a kernel file without siw (setup.sh, RPCRDMA_VM_KERNEL_DEB): the guest has rxe only
	vm_log "no siw for kernel $KVER: the guest has rxe only"
fi
depmod -b "$R" "$KVER"
for m in rdma_rxe $SIW ib_uverbs rdma_ucm veth 9p virtio_net; do
	modprobe -d "$R" -S "$KVER" --show-depends "$m" >/dev/null 2>&1 || vm_die "module $m missing from the initramfs"
done

# ---- shared libraries (ldd closure; the image's own libs take precedence) ---------------
# ldd prints the whole transitive closure, so one pass over the tree is enough.
LIBDIR=$R/usr/lib/x86_64-linux-gnu
copy_lib() {
	local base
	base=$(basename "$1")
	case "$1" in
	/lib64/* | /usr/lib64/*) [ -e "$R/usr/lib64/$base" ] || cp -L "$1" "$R/usr/lib64/$base" ;;
	*) [ -e "$LIBDIR/$base" ] || cp -L "$1" "$LIBDIR/$base" ;;
	esac
}
# always there for host-built test binaries (Rust: libgcc_s, libm; C++: libstdc++)
for l in libgcc_s.so.1 libstdc++.so.6 libm.so.6 libresolv.so.2 libnss_files.so.2 libnss_dns.so.2 libz.so.1; do
	if [ -e "/usr/lib/x86_64-linux-gnu/$l" ]; then copy_lib "/usr/lib/x86_64-linux-gnu/$l"; fi
done
rm -rf "$VM_CACHE/logs/ldd"
mkdir -p "$VM_CACHE/logs/ldd"
find "$R" -type f \( -perm -u+x -o -name '*.so*' \) ! -name '*.ko' -print0 |
	LD_LIBRARY_PATH="$LIBDIR:$LIBDIR/libibverbs" xargs -0 -n 40 -P "$(nproc)" \
		sh -c 'ldd "$@" >"$0/$$.txt" 2>/dev/null; true' "$VM_CACHE/logs/ldd"
cat "$VM_CACHE"/logs/ldd/*.txt >"$VM_CACHE/logs/ldd.txt"
rm -rf "$VM_CACHE/logs/ldd"
awk '/=> \//{print $3} /^\t\/lib64\//{print $1}' "$VM_CACHE/logs/ldd.txt" | sort -u | while read -r l; do
	case "$l" in "$R"/*) ;; *) copy_lib "$l" ;; esac
done
missing=$(awk '/^[^\t].*:$/{f=$0} /not found/{print "  " f " " $1}' "$VM_CACHE/logs/ldd.txt" | sed "s#$R##" | sort -u)
[ -z "$missing" ] || vm_log "warning: unresolved libraries:"$'\n'"$missing"
for b in bash ip rdma ibv_devices rping ib_send_lat; do
	[ -e "$R/usr/bin/$b" ] || [ -e "$R/usr/sbin/$b" ] || vm_die "$b missing from the initramfs"
	! grep -q "/$b: " <<<"$missing" || vm_die "$b has unresolved libraries"
done

# ---- /etc ---------------------------------------------------------------------------------
cat >"$R/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/bash
_rpc:x:100:65534::/run/rpcbind:/usr/sbin/nologin
statd:x:101:65534::/var/lib/nfs:/usr/sbin/nologin
tcpdump:x:102:102::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
cat >"$R/etc/group" <<'GROUP'
root:x:0:
tcpdump:x:102:
nogroup:x:65534:
GROUP
cp /etc/netconfig /etc/services /etc/protocols "$R/etc/" 2>/dev/null || true
echo 'hosts: files' >"$R/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n%s vm\n%s vm-siw\n%s peer\n' "$VM_RXE_ADDR" "$VM_SIW_ADDR" "$VM_SIW_PEER_ADDR" >"$R/etc/hosts"
echo vm >"$R/etc/hostname"
: >"$R/etc/exports"
: >"$R/etc/fstab"
ln -sf /proc/mounts "$R/etc/mtab"
mkdir -p "$R/var/lib/nfs/rpc_pipefs" "$R/var/lib/nfs/v4recovery" "$R/etc/exports.d"
install -m 0755 "$VM_SCRIPTS/guest-init.sh" "$R/init"

# ---- pack ------------------------------------------------------------------------------------
# The per-run payload is appended by run-in-vm.sh as a second cpio archive; the
# kernel only finds it at a 4-byte aligned offset, so pad this one to 512 bytes.
mkdir -p out
# Not compressed: no decompression step under TCG (gzip -1 would make it ~28 MB).
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >out/initrd.tmp
sz=$(stat -c %s out/initrd.tmp)
truncate -s $(((sz + 511) / 512 * 512)) out/initrd.tmp
mv out/initrd.tmp out/initrd
vm_initramfs_key >stamps/initramfs
T1=$(date +%s%N)
vm_log "initramfs: $(du -sh "$R" | cut -f1) tree, $(du -h out/initrd | cut -f1) image, $(((T1 - T0) / 1000000)) ms"
