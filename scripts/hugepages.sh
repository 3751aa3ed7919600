#!/bin/bash
# scripts/hugepages.sh — reserve N 2 MiB hugepages (needs root).
#
#   scripts/hugepages.sh N        make sure at least N pages are reserved
#                                 (never lowers the count; 0 releases them all)
#
# Prints the hugepage counters before and after. If the kernel hands out fewer
# than N pages, it compacts memory and tries once more, then explains what is
# in the way, puts the count back to what it was and exits 1. Hugepages reserved here back hugetlbfs mappings and
# MAP_HUGETLB (2 MiB) allocations, e.g. for registered buffer pools.
# Exit status: 0 reserved (at least N pages); 1 could not; 2 usage.
set -uo pipefail
SYS=/sys/kernel/mm/hugepages/hugepages-2048kB
usage() {
	sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
}
[ $# -eq 1 ] || usage
case "$1" in '' | *[!0-9]*) usage ;; esac
N=$1

counters() {
	local total free rsvd surp
	total=$(awk '/^HugePages_Total:/{print $2}' /proc/meminfo)
	free=$(awk '/^HugePages_Free:/{print $2}' /proc/meminfo)
	rsvd=$(awk '/^HugePages_Rsvd:/{print $2}' /proc/meminfo)
	surp=$(awk '/^HugePages_Surp:/{print $2}' /proc/meminfo)
	printf '%-7s 2 MiB hugepages: total %s, free %s, reserved %s, surplus %s (%s MiB); MemAvailable %s MiB\n' \
		"$1" "$(cat "$SYS/nr_hugepages" 2>/dev/null || echo "$total")" "$free" "$rsvd" "$surp" \
		$(($(cat "$SYS/nr_hugepages" 2>/dev/null || echo 0) * 2)) \
		$(($(awk '/^MemAvailable:/{print $2}' /proc/meminfo) / 1024))
}
explain() {
	echo "hugepages: FAILED: $1" >&2
	shift
	local l
	for l in "$@"; do echo "  - $l" >&2; done
	exit 1
}

if [ ! -d "$SYS" ]; then
	explain "this kernel offers no 2 MiB hugepages ($SYS is missing)" \
		"the kernel needs CONFIG_HUGETLBFS/CONFIG_HUGETLB_PAGE (grep hugetlbfs /proc/filesystems: $(grep -c hugetlbfs /proc/filesystems) match)"
fi
counters before
if [ "$(id -u)" != 0 ]; then
	explain "reserving hugepages needs root (you are uid $(id -u))" "run: sudo $0 $N"
fi
have=$(cat "$SYS/nr_hugepages")
if [ "$have" -ge "$N" ] && [ "$N" -ne 0 ]; then
	echo "hugepages: $have already reserved (>= $N); nothing to do"
	exit 0
fi
avail_mib=$(($(awk '/^MemAvailable:/{print $2}' /proc/meminfo) / 1024))
if [ $(((N - have) * 2)) -gt "$avail_mib" ]; then
	explain "$N hugepages need $(((N - have) * 2)) MiB more, only $avail_mib MiB are available" \
		"nothing was changed; ask for fewer pages or free memory first"
fi
if ! err=$(echo "$N" 2>&1 >"$SYS/nr_hugepages"); then
	explain "cannot write $SYS/nr_hugepages: $err" \
		"a container or sandbox may mount /sys read-only or deny this; reserve the pages on the host (or boot with hugepages=$N)"
fi
got=$(cat "$SYS/nr_hugepages")
if [ "$got" -lt "$N" ]; then
	echo "hugepages: got $got of $N; compacting memory and trying again"
	echo 1 >/proc/sys/vm/compact_memory 2>/dev/null
	echo "$N" >"$SYS/nr_hugepages" 2>/dev/null
	got=$(cat "$SYS/nr_hugepages")
fi
if [ "$got" -lt "$N" ]; then
	# do not leave the machine short of memory for a request that failed anyway
	echo "$have" >"$SYS/nr_hugepages" 2>/dev/null
	counters after
	explain "only $got of $N hugepages could be reserved (back to $(cat "$SYS/nr_hugepages"))" \
		"each needs 2 MiB of physically contiguous free memory: asked for $((N * 2)) MiB, $(($(awk '/^MemAvailable:/{print $2}' /proc/meminfo) / 1024)) MiB available" \
		"memory may be too fragmented: free page cache (sync; echo 3 > /proc/sys/vm/drop_caches) and retry, or reserve at boot (kernel parameter hugepages=$N)" \
		"a cgroup/container memory limit may be lower than the request"
fi
counters after
if ! grep -q hugetlbfs /proc/mounts; then
	echo "note: no hugetlbfs mounted; MAP_HUGETLB works without one, file-backed use needs: mount -t hugetlbfs nodev /dev/hugepages"
fi
echo "hugepages: $got reserved"
