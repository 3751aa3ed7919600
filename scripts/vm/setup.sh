#!/bin/bash
# scripts/vm/setup.sh — build everything the RDMA test VM needs, from nothing.
#
# Idempotent: each finished step leaves a stamp in $RPCRDMA_VM_CACHE/stamps and
# is skipped next time; a second run with everything in place takes ~0 s and
# needs no network. Host requirements: Debian 12 (bookworm) x86_64 with apt;
# root for "apt-get update" and for installing missing host tools.
#
# Steps (state in $RPCRDMA_VM_CACHE, default ~/.cache/rpcrdma-vm; see lib.sh):
#   0. host tools (file, gcc, make, xz, binutils, iproute2, libelf1): apt-get
#      install of those missing (on this machine kind: none)
#   1. apt-get update (once per bootstrap; see RPCRDMA_VM_APT_UPDATE)
#   2. one "apt-get download" of: qemu-system-x86 and the libraries the host
#      lacks (not installed: a backports qemu-utils on these hosts conflicts),
#      Debian's current 6.1 kernel, its headers/kbuild/source, and the guest
#      userspace (rdma-core with the rxe and siw providers, perftest, rping,
#      nfs-kernel-server, busybox, kmod, tcpdump; see vm_guest_pkgs in lib.sh),
#      and cpio when the host has none (unpacked into the cache, not installed)
#   3. unpack (dpkg-deb -x) qemu, kernel (+ the uncompressed vmlinux, which
#      boots faster), guest packages
#   4. siw.ko built out of tree (Debian's 6.1 config has CONFIG_RDMA_SIW unset),
#      in the background while 3 runs
#   5. build-initramfs.sh -> out/initrd
#
# Knobs:
#   RPCRDMA_VM_CACHE=dir        state directory
#   RPCRDMA_VM_APT_UPDATE=auto  auto: "apt-get update" once when something must
#                               be downloaded; 1: always; 0: never
#   RPCRDMA_VM_KERNEL=pkg       kernel package (default: what linux-image-amd64 depends on)
#   RPCRDMA_VM_KERNEL_DEB=file  a kernel package file fetched by hand instead (a later Debian
#                               kernel, e.g. linux-image-6.18.15+deb13-amd64 from
#                               trixie-backports: its modules compressed, under /usr/lib); use a
#                               cache of its own (RPCRDMA_VM_CACHE). siw.ko is built only for the
#                               apt kernel: with such a file the guest has siw only if the kernel
#                               ships it (set RPCRDMA_VM_SIW=0 otherwise)
#   RPCRDMA_VM_TCPDUMP=1        put tcpdump in the guest (0: leave it out)
#   RPCRDMA_VM_EXTRA_BINS="..." more host binaries for the guest (see build-initramfs.sh)
# Exit status: 0 ready; 1 failed (with a banner saying why).
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/lib.sh"
# shellcheck disable=SC2034 # read by vm_log/vm_die in lib.sh
VM_TAG=vm-setup

mkdir -p "$VM_CACHE"/{stamps,logs}
exec 9>"$VM_CACHE/.lock"
if ! flock -n 9; then
	vm_log "another setup holds $VM_CACHE/.lock; waiting"
	flock 9
fi

if vm_is_ready; then
	vm_log "ready (cache $VM_CACHE, kernel $(cat "$VM_CACHE/stamps/kernel"))"
	exit 0
fi
vm_log "bootstrapping into $VM_CACHE"
cd "$VM_CACHE"
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
	vm_die "this host has no apt-get/dpkg-deb" "the VM stage needs a Debian 12 (bookworm) x86_64 host"
[ "$(dpkg --print-architecture)" = amd64 ] || vm_die "host architecture is $(dpkg --print-architecture), not amd64"

stamp() { echo "$2" >"stamps/$1"; }
done_step() { [ -s "stamps/$1" ]; }
guest_current() { [ "$(cat stamps/guest 2>/dev/null)" = "$GUEST_KEY" ]; }           # same package list
siw_current() { [ -s stamps/siw ] && [ "$(cut -d' ' -f1 stamps/siw)" = "$KVER" ]; }          # built for this kernel

# ---- apt helpers -------------------------------------------------------------
APT_OPTS=(-q -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)
APT_UPDATED=0
unreachable() { # LOG HEADLINE
	vm_die "$2" \
		"The Debian package archive could not be used; the VM stage cannot be built." \
		"This is a problem of the machine/network, not of the project." \
		"apt sources: $(grep -rhE '^[^#]*(https?|file)://' /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null | grep -oE '(https?|file)://[^ ]+' | sort -u | tr '\n' ' ')" \
		"last lines of $1:" "$(tail -n 8 "$1" 2>/dev/null | sed 's/^/    /')"
}
apt_update() {
	[ "$APT_UPDATED" = 1 ] && return 0
	if [ "$(id -u)" != 0 ]; then
		vm_log "not root: skipping apt-get update (package lists may be stale)"
		APT_UPDATED=1
		return 0
	fi
	vm_log "apt-get update"
	apt-get "${APT_OPTS[@]}" update >logs/apt-update.log 2>&1 || unreachable logs/apt-update.log "apt-get update failed"
	APT_UPDATED=1
}
# (no "cmd | grep -q" under pipefail: grep's early exit would fail the pipe)
have_candidate() { grep -q 'Candidate: [0-9]' <<<"$(apt-cache policy "$1" 2>/dev/null)"; }

# ---- 0. host tools ------------------------------------------------------------
need=()
for c in file:file gcc:gcc make:make xz:xz-utils strip:binutils ip:iproute2 rdma:iproute2 ss:iproute2 \
	flock:util-linux sha256sum:coreutils; do
	command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
grep -q 'ok installed' <<<"$(dpkg-query -W -f='${Status}' libelf1 2>/dev/null)" || need+=(libelf1)
if [ "${#need[@]}" -gt 0 ]; then
	mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
	[ "$(id -u)" = 0 ] || vm_die "missing host packages: ${need[*]}" "run as root, or: apt-get install ${need[*]}"
	[ "${RPCRDMA_VM_APT_UPDATE:-auto}" = 0 ] || apt_update
	vm_log "apt-get install ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y --no-install-recommends "${need[@]}" \
		>logs/apt-install.log 2>&1 || unreachable logs/apt-install.log "apt-get install ${need[*]} failed"
fi

# ---- 1./2. what to download ------------------------------------------------------
# a different kernel asked for: redo the kernel step (and so siw.ko and the initramfs)
KDEB=${RPCRDMA_VM_KERNEL_DEB:+$(readlink -f "$RPCRDMA_VM_KERNEL_DEB")}
if [ -n "$KDEB" ]; then
	[ -f "$KDEB" ] || vm_die "RPCRDMA_VM_KERNEL_DEB=$RPCRDMA_VM_KERNEL_DEB is not a file"
	RPCRDMA_VM_KERNEL=$(dpkg-deb -f "$KDEB" Package) || vm_die "$KDEB is not a Debian package"
fi
if [ -n "${RPCRDMA_VM_KERNEL:-}" ] && [ "linux-image-$(cat stamps/kernel 2>/dev/null)" != "$RPCRDMA_VM_KERNEL" ]; then
	rm -f stamps/kernel
fi
GUEST_KEY=$(vm_guest_pkgs | sha256sum | cut -c1-16)
KVER=$(cat stamps/kernel 2>/dev/null || true)
case "${RPCRDMA_VM_APT_UPDATE:-auto}" in
1) apt_update ;;
0) ;;
*) done_step qemu && done_step kernel && guest_current && siw_current || apt_update ;;
esac

if done_step kernel; then
	KVER=$(cat stamps/kernel)
	KPKG=linux-image-$KVER
elif [ -n "$KDEB" ]; then
	KPKG=$RPCRDMA_VM_KERNEL
	KVER=${KPKG#linux-image-}
	mkdir -p debs/kernel
	rm -f debs/kernel/*.deb
	cp "$KDEB" "debs/kernel/${KPKG}_file.deb"
else
	KPKG=${RPCRDMA_VM_KERNEL:-$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ && !k {k = $2} END {print k}' || true)}
	[ -n "$KPKG" ] && have_candidate "$KPKG" ||
		unreachable logs/apt-update.log "no Debian kernel package found (apt-cache depends linux-image-amd64)"
	KVER=${KPKG#linux-image-}
fi
# linux-source must be the very version the kernel was built from
if ls debs/kernel/"$KPKG"_*.deb >/dev/null 2>&1; then
	KSRCVER=$(dpkg-deb -f debs/kernel/"$KPKG"_*.deb Version)
else
	KSRCVER=$(apt-cache show --no-all-versions "$KPKG" 2>/dev/null | awk '/^Version:/ && !v {v = $2} END {print v}' || true)
fi
KMAJ=$(echo "$KVER" | cut -d. -f1,2)    # 6.1
KFLAV=${KVER##*-}                       # amd64
KABI=${KVER%-"$KFLAV"}                  # 6.1.0-56

want=()
if ! done_step qemu; then
	# Everything "apt-get install qemu-system-x86" would add to this host.
	mapfile -t q < <(apt-get install -s --no-install-recommends qemu-system-x86 2>/dev/null | awk '/^Inst /{print $2}')
	[ "${#q[@]}" -gt 0 ] || q=(qemu-system-x86 qemu-system-common qemu-system-data seabios ipxe-qemu libfdt1 libslirp0
		libcapstone4 libdaxctl1 libndctl6 libpmem1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libaio1
		liburing2 libvdeplug2 libusb-1.0-0 libusbredirparser1 libspice-server1 libcacard0 libbrlapi0.8)
	want+=("${q[@]/#/qemu:}")
fi
done_step kernel || [ -n "$KDEB" ] || want+=("kernel:$KPKG")
siw_current || [ -n "$KDEB" ] || want+=("kbuild:linux-headers-$KVER" "kbuild:linux-headers-$KABI-common" "kbuild:linux-kbuild-$KMAJ"
	"kbuild:linux-source-$KMAJ${KSRCVER:+=$KSRCVER}")
if ! guest_current; then for p in $(vm_guest_pkgs); do want+=("guest:$p"); done; fi
# cpio (to pack the initramfs) is unpacked into the cache rather than installed
if ! command -v cpio >/dev/null && ! done_step cpio; then want+=(tools:cpio); fi

# One apt-get download for all of it (into debs/all), then sort by group.
if [ "${#want[@]}" -gt 0 ]; then
	rm -rf debs/all
	mkdir -p debs/all
	chmod 777 debs/all # apt downloads as user _apt
	vm_log "apt-get download: ${#want[@]} packages"
	(cd debs/all && apt-get "${APT_OPTS[@]}" download "${want[@]#*:}") >logs/apt-download.log 2>&1 ||
		unreachable logs/apt-download.log "apt-get download failed"
	for g in $(printf '%s\n' "${want[@]%%:*}" | sort -u); do rm -rf "debs/$g"; done
	for w in "${want[@]}"; do
		g=${w%%:*} p=${w#*:}
		p=${p%%=*}
		mkdir -p "debs/$g"
		f=$(compgen -G "debs/all/${p}_*.deb" || true)
		[ -n "$f" ] && [ -f "$f" ] || unreachable logs/apt-download.log "package $p was not downloaded"
		ln -f "$f" "debs/$g/" # a package may be in two groups (libibverbs1)
	done
	rm -rf debs/all
	vm_log "downloaded $(du -sh debs | cut -f1)"
fi

# ---- 4. siw.ko (background: the source tarball takes ~15 s to decompress) -------
build_siw() {
	set -e
	rm -rf kbuild siw
	mkdir -p kbuild siw
	for f in debs/kbuild/linux-headers-*.deb debs/kbuild/linux-kbuild-*.deb; do dpkg-deb -x "$f" kbuild; done
	# only drivers/infiniband/sw/siw/ out of the 140 MB source tarball
	dpkg-deb --fsys-tarfile debs/kbuild/linux-source-"$KMAJ"_*.deb |
		tar -xOf - "./usr/src/linux-source-$KMAJ.tar.xz" | xz -dc |
		tar -xf - -C siw --strip-components=5 --wildcards "linux-source-$KMAJ/drivers/infiniband/sw/siw/*"
	[ -f siw/siw_main.c ] || { echo "siw sources not found in linux-source-$KMAJ"; return 1; }
	local kh=$VM_CACHE/kbuild/usr/src/linux-headers-$KVER
	# the headers' Makefile includes the -common tree by absolute /usr/src path
	sed -i "s#include /usr/src/#include $VM_CACHE/kbuild/usr/src/#" "$kh/Makefile"
	make -s -C "$kh" M="$VM_CACHE/siw" CONFIG_RDMA_SIW=m -j"$(nproc)" modules
	[ -f siw/siw.ko ]
}
SIW_PID=
if [ -n "$KDEB" ] && ! siw_current; then
	rm -rf siw
	stamp siw "$KVER none" # the kernel's own siw, if it has one, comes with its modules
elif ! siw_current; then
	vm_log "building siw.ko (background)"
	build_siw >logs/siw-build.log 2>&1 &
	SIW_PID=$!
fi

# ---- 3. unpack -----------------------------------------------------------------
if ! done_step qemu; then
	rm -rf qemu
	mkdir -p qemu
	for f in debs/qemu/*.deb; do dpkg-deb -x "$f" qemu; done
	[ -x qemu/usr/bin/qemu-system-x86_64 ] || vm_die "qemu-system-x86_64 missing after unpacking"
	rm -rf fw
	mkdir -p fw
	for d in qemu/usr/share/qemu qemu/usr/share/seabios qemu/usr/lib/ipxe/qemu; do
		for f in "$d"/*; do ln -sf "$(readlink -f "$f")" "fw/$(basename "$f")"; done
	done
	vm_qemu_env
	v=$("$QEMU" --version) || vm_die "unpacked qemu does not run" "$("$QEMU" --version 2>&1 | tail -3)"
	v=${v%%$'\n'*}
	stamp qemu "$v"
	vm_log "qemu: $v"
fi
if ! done_step kernel; then
	rm -rf kernel
	mkdir -p kernel
	dpkg-deb -x debs/kernel/"$KPKG"_*.deb kernel
	# later Debian kernels keep their modules under /usr/lib only
	[ -e kernel/lib ] || [ ! -d "kernel/usr/lib/modules/$KVER" ] || ln -s usr/lib kernel/lib
	[ -d "kernel/lib/modules/$KVER" ] || vm_die "kernel modules for $KVER missing after unpacking $KPKG"
	ln -sf "vmlinuz-$KVER" kernel/boot/vmlinuz
	# Uncompressed vmlinux (ELF with a PVH entry note) for a faster boot:
	# the payload of the bzImage is one xz stream.
	off=$(LC_ALL=C grep -m1 -obUaP '\xfd7zXZ\x00' kernel/boot/vmlinuz | cut -d: -f1 || true)
	off=${off%%$'\n'*}
	rm -f kernel/boot/vmlinux.xz
	if [ -n "$off" ] && tail -c +$((off + 1)) kernel/boot/vmlinuz >kernel/boot/vmlinux.xz &&
		xz -dc --single-stream kernel/boot/vmlinux.xz >kernel/boot/vmlinux.tmp 2>/dev/null &&
		[ "$(head -c4 kernel/boot/vmlinux.tmp | od -An -c | tr -d ' ')" = 177ELF ]; then
		mv kernel/boot/vmlinux.tmp kernel/boot/vmlinux
		rm -f kernel/boot/vmlinux.xz
	else
		rm -f kernel/boot/vmlinux.tmp kernel/boot/vmlinux.xz
		vm_log "note: could not extract vmlinux; booting the bzImage (slower)"
	fi
	stamp kernel "$KVER"
	vm_log "kernel $KVER ($KSRCVER)"
fi
if ! guest_current; then
	rm -rf guest
	mkdir -p guest
	for f in debs/guest/*.deb; do dpkg-deb -x "$f" guest; done
	stamp guest "$GUEST_KEY"
	vm_log "guest packages unpacked ($(ls debs/guest | wc -l))"
fi
if ! command -v cpio >/dev/null && ! done_step cpio; then
	rm -rf tools-root
	dpkg-deb -x debs/tools/cpio_*.deb tools-root
	stamp cpio "$(dpkg-deb -f debs/tools/cpio_*.deb Version)"
fi
mkdir -p tools
[ -x tools-root/bin/cpio ] && ln -sf "$VM_CACHE/tools-root/bin/cpio" tools/cpio
for n in depmod modprobe modinfo; do ln -sf "$VM_CACHE/guest/bin/kmod" "tools/$n"; done

if [ -n "$SIW_PID" ]; then
	wait "$SIW_PID" || vm_die "building siw.ko failed" "log: $VM_CACHE/logs/siw-build.log" \
		"$(tail -n 12 logs/siw-build.log | sed 's/^/    /')"
	stamp siw "$KVER $(sha256sum siw/siw.ko | cut -c1-16)"
	rm -f debs/kbuild/linux-source-*.deb # 140 MB, not needed any more
	vm_log "siw.ko built"
fi

# ---- 5. initramfs ------------------------------------------------------------------
if [ ! -f out/initrd ] || [ "$(cat stamps/initramfs 2>/dev/null)" != "$(vm_initramfs_key)" ]; then
	"$VM_SCRIPTS/build-initramfs.sh" || vm_die "build-initramfs.sh failed"
fi
vm_is_ready || vm_die "setup finished but the VM is not ready (stamps: $(ls stamps | tr '\n' ' '))"
vm_log "ready: $(du -sh "$VM_CACHE" | cut -f1) in $VM_CACHE"
