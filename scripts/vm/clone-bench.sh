#!/bin/bash
# scripts/vm/clone-bench.sh — what CLONE saves a Linux NFSv4.2 client's `cp` against COPY, over
# rxe in the QEMU VM, in one boot (docs/performance-nfs.md, "CLONE against COPY").
#
#   cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfsd
#   scripts/vm/run-in-vm.sh scripts/vm/clone-bench.sh BIN...
#
# For the memory backend, then the dir backend on an XFS image with reflink (a loop device in the
# guest), for each rpcrdma-nfsd BIN (a build without CLONE answers NFS4ERR_NOTSUPP and the client
# copies with COPY, 1 MiB a call): the server with --nfs4 on rxe0 (10.0.2.15), a vers=4.2 mount,
# a 64 MiB file of random data, then three times (caches dropped first) `cp` of it and `sync`,
# timed; the copies compared; the client's CLONE and COPY counters from mountstats. Prints one
# RESULT line per backend and build. TCG is emulated: compare the builds in one boot only.
set -u
now_ms() { echo $(($(date +%s%N) / 1000000)); }
modprobe rpcrdma 2>/dev/null
echo "load average (guest): $(cat /proc/loadavg)"
for be in memory xfs; do
for bin in "$@"; do
	arg=memory
	if [ "$be" = xfs ]; then
		modprobe loop; modprobe xfs
		truncate -s 512M /srv/x.img && mkfs.xfs -q -f -m reflink=1 /srv/x.img && mkdir -p /srv/x &&
			l=$(losetup -f --show /srv/x.img) && mount -t xfs "$l" /srv/x || { echo "no xfs"; continue; }
		arg=dir:/srv/x
	fi
	"$bin" --provider rdma --bind 10.0.2.15 --port 20049 --mount-port 20050 --export '/export:*(rw,no_root_squash)' \
		--backend "$arg" --no-rpcbind --nfs4 --v4-state-dir none >/tmp/srv.log 2>&1 &
	pid=$!
	for _ in $(seq 100); do grep -q '^rpcrdma-nfsd: ready' /tmp/srv.log && break; sleep 0.2; done
	mkdir -p /mnt/c
	mount -t nfs -o vers=4.2,proto=rdma,port=20049 10.0.2.15:/export /mnt/c || { cat /tmp/srv.log; exit 1; }
	head -c 67108864 /dev/urandom >/mnt/c/big && sync
	ms=()
	for r in 1 2 3; do
		echo 3 >/proc/sys/vm/drop_caches
		t0=$(now_ms)
		cp /mnt/c/big "/mnt/c/copy$r" && sync
		ms+=($(($(now_ms) - t0)))
	done
	cmp /mnt/c/big /mnt/c/copy3 && same=same || same=DIFFERENT
	ops=$(awk '$1 == "CLONE:" || $1 == "COPY:" {printf "%s %s ", $1, $2}' /proc/self/mountstats)
	echo "RESULT $be $(basename "$(dirname "$bin")")/$(basename "$bin"): cp of 64 MiB ${ms[*]} ms ($same; $ops)"
	rm -f /mnt/c/big /mnt/c/copy*
	umount /mnt/c
	kill "$pid"; wait "$pid" 2>/dev/null
	if [ "$be" = xfs ]; then umount /srv/x; losetup -d "$l"; rm -f /srv/x.img; fi
done
done
