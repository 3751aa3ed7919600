#!/bin/bash
# scripts/vm/nfs-fio.sh — the fio jobs of the side-by-side comparison, run INSIDE the VM on a
# mounted NFS directory (scripts/vm/nfs-server.sh runs them against the kernel nfsd and against
# rpcrdma-nfsd in the same boot, interleaved, and prints the ratios).
#
#   nfs-fio.sh DIR LABEL [JOB...]          JOB: seqwrite seqread randwrite randread (default: all)
#
# The jobs work on one file DIR/fio-perf.dat of RPCRDMA_NFS_FIO_SIZE (default 64m), which is left
# in place for the next call (the caller removes it); run seqwrite first, it lays the file out:
#   seqwrite   1 MiB sequential writes   iodepth 2   -> bandwidth
#   seqread    1 MiB sequential reads    iodepth 2   -> bandwidth
#   randwrite  4 KiB random writes       iodepth 4   -> IOPS, completion latency p50 / p99
#   randread   4 KiB random reads        iodepth 4   -> IOPS, completion latency p50 / p99
# all with direct=1 (O_DIRECT: every I/O is one NFS READ/WRITE of exactly that size on the
# wire, no client page cache in the way, so the numbers measure server + transport; a buffered
# read would be answered from the client's cache after the first pass), ioengine=libaio,
# time_based: RPCRDMA_NFS_FIO_RUNTIME s (default 5) after a 1 s ramp. fio lays the file out
# first when a read job finds it short (not timed).
# Output: for each job one line
#   fio-result LABEL JOB iops=N bw_kib=N clat_p50_us=N clat_p99_us=N err=N
# (terse output version 3 parsed with awk; clat percentiles in microseconds), and the raw terse
# line prefixed "fio-terse LABEL JOB " for the record. Exit 1 if a job failed.
set -u
if [ $# -lt 2 ] || [ ! -d "$1" ]; then
	echo "usage: nfs-fio.sh DIR LABEL [seqwrite|seqread|randwrite|randread...]" >&2
	exit 2
fi
DIR=$1 LABEL=$2
shift 2
RT=${RPCRDMA_NFS_FIO_RUNTIME:-5}
SIZE=${RPCRDMA_NFS_FIO_SIZE:-64m}
rc=0

# terse v3 (as fio 3.33 prints it): 1 version; 2 fio version; 3 job name; 4 group; 5 error; the
# read block from field 6: io KiB, bw KiB/s, IOPS, runtime ms, slat min/max/mean/dev, clat
# min/max/mean/dev, 20 clat percentiles "P%=usec", lat x4, bw min/max/agg%/mean/dev (41 fields);
# the write block from field 47, same layout.
parse() { # DIR(read|write) TERSE-LINE -> "iops=.. bw_kib=.. clat_p50_us=.. clat_p99_us=.."
	awk -F';' -v d="$1" '{
		b = (d == "read") ? 6 : 47
		p50 = "?"; p99 = "?"
		for (i = b + 12; i < b + 32; i++) {
			split($i, kv, "=")
			if (kv[1] == "50.000000%") p50 = kv[2]
			if (kv[1] == "99.000000%") p99 = kv[2]
		}
		printf "iops=%d bw_kib=%d clat_p50_us=%s clat_p99_us=%s err=%s\n", $(b + 2), $(b + 1), p50, p99, $5
	}' <<<"$2"
}

job() { # NAME RW BS IODEPTH
	local out st line dir
	out=$(timeout -k 5 $((RT + 120)) fio --name="$1" --directory="$DIR" --filename=fio-perf.dat --size="$SIZE" \
		--rw="$2" --bs="$3" --iodepth="$4" --ioengine=libaio --direct=1 --time_based --runtime="$RT" \
		--ramp_time=1 --output-format=terse --terse-version=3 2>&1)
	st=$?
	line=$(grep '^3;' <<<"$out" | tail -n 1)
	if [ "$st" -ne 0 ] || [ -z "$line" ]; then
		echo "fio-result $LABEL $1 FAILED (exit $st): $(tail -n 3 <<<"$out" | tr '\n' ' ')"
		rc=1
		return
	fi
	case $2 in *write*) dir='write' ;; *) dir='read' ;; esac
	echo "fio-terse $LABEL $1 $line"
	echo "fio-result $LABEL $1 $(parse "$dir" "$line")"
}

[ $# -gt 0 ] || set -- seqwrite seqread randwrite randread
for j in "$@"; do
	case $j in
	seqwrite) job seqwrite write 1m 2 ;;
	seqread) job seqread read 1m 2 ;;
	randwrite) job randwrite randwrite 4k 4 ;;
	randread) job randread randread 4k 4 ;;
	*)
		echo "nfs-fio.sh: unknown job $j" >&2
		exit 2
		;;
	esac
done
exit "$rc"
