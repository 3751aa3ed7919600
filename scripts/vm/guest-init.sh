#!/bin/bash
# scripts/vm/guest-init.sh — /init (PID 1) of the RDMA test VM.
#
# Sets up the guest, runs the payload that run-in-vm.sh appended to the
# initramfs (/vm/cmd), prints its exit status between markers on the serial
# console, and powers off. Layout it creates (docs/vm.md):
#   eth0 10.0.2.15/24 (virtio-net, qemu user net, restricted)  rxe0 on eth0
#   veth sw0 10.0.3.1/24 (root netns) <-> sw1 10.0.3.2/24 (netns "peer")
#   siw0 on sw0, siw1 on sw1 (created inside netns peer)
#   the host directory from /vm/share mounted over virtio-9p at the same path
# Kernel command line: rpcrdma_vm.siw=0 skips siw; rpcrdma_vm.verbose=1 keeps
# kernel messages on the console and timestamps the steps below.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/rpcbind /run/lock /run/rpc_pipefs /run/nfs
mount -t configfs configfs /sys/kernel/config 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ulimit -l unlimited # memory registration pins pages
ulimit -c 0
hostname vm
ip link set lo up

SIW=1 VERBOSE=0
for a in $(cat /proc/cmdline); do
	case "$a" in
	rpcrdma_vm.siw=*) SIW=${a#*=} ;;
	rpcrdma_vm.verbose=*) VERBOSE=${a#*=} ;;
	esac
done
[ "$VERBOSE" = 1 ] || dmesg -n 1
# step MSG: note the guest uptime of each setup step in /run/vm-init.times
step() {
	local up _
	read -r up _ </proc/uptime
	echo "[vm-init ${up}s] $*" >>/run/vm-init.times
	if [ "$VERBOSE" = 1 ]; then echo "[vm-init ${up}s] $*"; fi
}
warn() { echo "vm-init: $*"; }
step "init started"

# one modprobe per batch: every exec is slow under TCG
modprobe -a virtio_pci virtio_net virtio_rng 9pnet_virtio 9p || warn "virtio modules FAILED"
SHARE=$(cat /vm/share 2>/dev/null)
if [ -n "$SHARE" ]; then
	mkdir -p "$SHARE"
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none share "$SHARE" ||
		warn "9p mount of $SHARE FAILED"
fi
step "virtio + 9p ready"

# ---- network ------------------------------------------------------------------------
if ! ip link show eth0 >/dev/null 2>&1; then
	warn "no eth0 (virtio-net); using a dummy device"
	modprobe dummy
	ip link add eth0 type dummy
fi
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2 2>/dev/null

# ---- RDMA ----------------------------------------------------------------------------
# rxe0: Soft-RoCE on eth0, root netns only (rxe in 6.1 is not netns aware); a
#       connection to 10.0.2.15 loops back inside rxe.
# siw0/siw1: soft-iWARP needs a real TCP path between two netdevs (siw on lo or
#       a dummy device with its own address fails), hence the veth pair with
#       one end in netns "peer". siw opens its TCP sockets in the namespace of
#       the process that creates the connection.
step "network up"
modprobe -a ib_uverbs rdma_ucm ib_umad || warn "RDMA core modules FAILED"
if modprobe rdma_rxe; then
	rdma link add rxe0 type rxe netdev eth0 || warn "rxe0 setup FAILED"
else
	warn "modprobe rdma_rxe FAILED"
fi
step "rxe0 ready"
if [ "$SIW" = 1 ]; then
	modprobe -a veth siw || warn "modprobe veth siw FAILED"
	ip netns add peer
	ip link add sw0 type veth peer name sw1
	ip link set sw1 netns peer
	ip addr add 10.0.3.1/24 dev sw0
	ip link set sw0 up
	ip -n peer link set lo up
	ip -n peer addr add 10.0.3.2/24 dev sw1
	ip -n peer link set sw1 up
	step "veth + netns + siw.ko ready"
	rdma link add siw0 type siw netdev sw0 || warn "siw0 setup FAILED"
	ip netns exec peer rdma link add siw1 type siw netdev sw1 || warn "siw1 setup FAILED"
fi
step "rdma ready: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"

# ---- payload -----------------------------------------------------------------------------
NONCE=$(cat /vm/nonce 2>/dev/null)
if [ -f /vm/cmd ]; then
	cd "$(cat /vm/cwd 2>/dev/null || echo /)" 2>/dev/null || cd /
	echo "@@RPCRDMA_VM_BEGIN $NONCE@@"
	(
		[ -f /vm/env ] && . /vm/env
		exec bash /vm/cmd
	) </dev/null 2>&1
	rc=$?
	cd /
	echo "@@RPCRDMA_VM_EXIT $NONCE $rc@@"
else
	echo "vm-init: no /vm/cmd: interactive shell, exit to power off"
	setsid cttyhack bash
fi
sync
[ -n "$SHARE" ] && umount "$SHARE" 2>/dev/null
poweroff -f
