#!/bin/bash
# scripts/vm/nfs-workload.sh — checksummed file-system workload on a mounted NFS directory, run
# INSIDE the VM (by scripts/vm/nfs-server.sh, or by hand).
#
#   nfs-workload.sh full DIR [--remount 'CMD'] [--no-fio] [--no-ls]
#   nfs-workload.sh churn DIR [--fio]
#
# full: everything below on DIR (the mount point of an EMPTY export), one verdict per check:
#   tree-write          50 directories x 20 files (varied small sizes: 50 x 2 sizes between 1 and
#                       7919 octets), and files of 0, 1, 4095, 4096, 4097, 1 MiB and 8 MiB + 3
#                       octets, all from /dev/urandom, copied onto DIR; a sha256 manifest of the
#                       local source; then every checksum verified on DIR (client cache)
#   remount             CMD (the caller's umount + mount of DIR), then the caches dropped
#   tree-verify         every checksum verified again, now read from the server; file count
#   ls-5000             5000 entries created in one directory; `ls -l` twice (caches dropped in
#                       between): exactly 5000 entries both times, the same names, the right ones;
#                       --no-ls skips it (the longest check under TCG)
#   rename, link, symlink, chmod, truncate, fsync: each checked through the client after the
#                       caches are dropped (so the answer comes from the server)
#   parallel-writers    4 background writers x 100 files, then every checksum
#   fio-verify          fio random 4 KiB and sequential 1 MiB writes with verify=crc32c (direct=1,
#                       so the read-back goes to the server); --no-fio skips it
#   rm-rf               the whole tree removed; DIR is empty afterwards
# churn: the fault-run workload (create, write, append, rename, remove, link, symlink, chmod,
#   mkdir, rmdir; RPCRDMA_NFS_CHURN_N iterations, default 200): run on DIR and, identically, on
#   a local tmpfs reference; no operation may fail, and the two final trees must match (names,
#   types, sizes, modes, link targets, sha256 of every file); with --fio, then fio-verify (above)
#   on DIR.
# Each check prints "PASS name (t s)[: note]" or "FAIL name (t s): reason"; the script ends with
# "workload: N passed, N failed" and exits 1 when something failed, 2 on usage errors.
#
# Sources are generated once per boot under $RPCRDMA_NFS_WL_STATE (default /run/nfs-workload,
# a tmpfs): every exec costs ~20 ms under TCG, so the tree is made with head|split (200
# processes) rather than one process per file.
set -u
export LC_ALL=C
STATE=${RPCRDMA_NFS_WL_STATE:-/run/nfs-workload}
NPASS=0 NFAIL=0 WHY='' NOTE=''
now_ms() { date +%s%3N; }
fail() {
	WHY=$*
	return 1
}
# check NAME FUNC [ARGS...]: run FUNC, print its verdict (FUNC sets WHY on failure, NOTE on pass)
check() {
	local name=$1 t0 t
	shift
	WHY='' NOTE=''
	t0=$(now_ms)
	if "$@"; then
		t=$(($(now_ms) - t0))
		printf 'PASS %s (%d.%d s)%s\n' "$name" $((t / 1000)) $((t % 1000 / 100)) "${NOTE:+: $NOTE}"
		NPASS=$((NPASS + 1))
	else
		t=$(($(now_ms) - t0))
		printf 'FAIL %s (%d.%d s): %s\n' "$name" $((t / 1000)) $((t % 1000 / 100)) "${WHY:-failed}"
		NFAIL=$((NFAIL + 1))
	fi
}
finish() {
	echo "workload: $NPASS passed, $NFAIL failed"
	[ "$NFAIL" -eq 0 ]
}
# drop the client's page, dentry and inode caches: the next access asks the server
drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# ---- local sources (once per boot) ----------------------------------------------------------
gen_sources() {
	local s=$STATE/src d a b
	[ -f "$STATE/src.done" ] && return 0
	rm -rf "$s"
	mkdir -p "$s/tree" "$s/special" || return 1
	for d in $(seq -w 0 49); do
		mkdir "$s/tree/d$d"
		a=$(((10#$d * 2731 + 97) % 7919 + 1))
		b=$(((10#$d * 613 + 11) % 1500 + 1))
		head -c $((a * 10)) /dev/urandom | split -b "$a" -d -a 2 - "$s/tree/d$d/f"
		head -c $((b * 10)) /dev/urandom | split -b "$b" -d -a 2 - "$s/tree/d$d/g"
	done
	for n in 0 1 4095 4096 4097 1048576 8388611; do head -c "$n" /dev/urandom >"$s/special/s$n"; done
	(cd "$s" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$STATE/manifest" || return 1
	[ "$(wc -l <"$STATE/manifest")" -eq 1007 ] || return 1
	# payload for the builtin-only writers (no exec per file): 8000 printable characters
	head -c 6000 /dev/urandom | base64 -w 0 >"$STATE/payload"
	touch "$STATE/src.done"
}

verify_manifest() { # DIR: every checksum of the manifest, on DIR
	local out
	out=$(cd "$1" && sha256sum --quiet -c "$STATE/manifest" 2>&1) ||
		fail "checksum mismatch: $(head -n 3 <<<"$out" | tr '\n' ' ')" || return
	local n
	n=$(find "$1/tree" "$1/special" -type f | wc -l)
	[ "$n" -eq 1007 ] || fail "$n files, expected 1007" || return
}

# ---- full ------------------------------------------------------------------------------------
t_tree_write() {
	mkdir "$W" || fail "mkdir $W" || return
	cp -r "$STATE/src/tree" "$STATE/src/special" "$W/" || fail "cp -r to $W failed" || return
	verify_manifest "$W" || return
	NOTE="1007 files ($(du -sk "$STATE/src" | cut -f1) KiB), 50 directories"
}
t_remount() {
	bash -c "$REMOUNT" || fail "remount command failed: $REMOUNT" || return
	drop_caches
	[ -d "$W" ] || fail "$W missing after the remount" || return
}
t_tree_verify() { verify_manifest "$W"; }

t_ls_5000() {
	local big=$W/big n1 n2 l1 l2 want
	mkdir "$big" || fail "mkdir" || return
	# bash builtins only (touch would add a SETATTR per file): 5000 LOOKUP + CREATE
	(
		cd "$big" || exit 1
		for ((i = 0; i < 5000; i++)); do
			printf -v n 'entry-%05d-in-a-directory-of-five-thousand' "$i"
			: >"$n" || exit 1
		done
	) || fail "creating 5000 files failed" || return
	want=$(seq -f 'entry-%05g-in-a-directory-of-five-thousand' 0 4999 | sha256sum)
	l1=$(ls -l "$big") || fail "ls -l failed" || return
	drop_caches
	l2=$(ls -l "$big") || fail "second ls -l failed" || return
	n1=$(grep -vc '^total' <<<"$l1")
	n2=$(grep -vc '^total' <<<"$l2")
	[ "$n1" -eq 5000 ] && [ "$n2" -eq 5000 ] || fail "ls -l listed $n1 then $n2 entries, expected 5000" || return
	[ "$(awk '!/^total/{print $NF}' <<<"$l1" | sha256sum)" = "$want" ] || fail "first listing: wrong names" || return
	[ "$(awk '!/^total/{print $NF}' <<<"$l2" | sha256sum)" = "$want" ] || fail "second listing: wrong names" || return
	rm -rf "$big" || fail "rm -rf of the 5000 entries failed" || return
	NOTE="5000 and 5000 entries, same names"
}

t_rename() {
	local src=$STATE/src/special/s4097 sum
	sum=$(sha256sum <"$src")
	mkdir -p "$W/ren/a" "$W/ren/b" && cp "$src" "$W/ren/a/one" || fail "setup" || return
	mv "$W/ren/a/one" "$W/ren/a/two" && mv "$W/ren/a/two" "$W/ren/b/three" || fail "mv failed" || return
	drop_caches
	[ ! -e "$W/ren/a/one" ] && [ ! -e "$W/ren/a/two" ] || fail "old names still there" || return
	[ "$(sha256sum <"$W/ren/b/three")" = "$sum" ] || fail "content changed by the renames" || return
	# rename over an existing file replaces it
	printf 'victim\n' >"$W/ren/b/victim" && mv "$W/ren/b/three" "$W/ren/b/victim" || fail "rename over a file" || return
	drop_caches
	[ "$(sha256sum <"$W/ren/b/victim")" = "$sum" ] && [ ! -e "$W/ren/b/three" ] || fail "rename over a file: wrong result" || return
}
t_link() {
	local sum n
	printf 'hard link test %s\n' "$RANDOM" >"$W/lnk-a" || fail "write" || return
	sum=$(sha256sum <"$W/lnk-a")
	ln "$W/lnk-a" "$W/lnk-b" || fail "ln failed" || return
	drop_caches
	n=$(stat -c %h "$W/lnk-b")
	[ "$n" -eq 2 ] || fail "nlink $n after ln, expected 2" || return
	[ "$(stat -c %i "$W/lnk-a")" = "$(stat -c %i "$W/lnk-b")" ] || fail "different fileids" || return
	rm "$W/lnk-a" || fail "rm" || return
	drop_caches
	n=$(stat -c %h "$W/lnk-b")
	[ "$n" -eq 1 ] && [ "$(sha256sum <"$W/lnk-b")" = "$sum" ] || fail "after rm of one name: nlink $n or content wrong" || return
}
t_symlink() {
	local t
	printf 'symlink target\n' >"$W/sym-target" || fail "write" || return
	ln -s sym-target "$W/sym-rel" && ln -s "/some/absolute/path/that/does/not/exist" "$W/sym-abs" ||
		fail "ln -s failed" || return
	drop_caches
	t=$(readlink "$W/sym-rel")
	[ "$t" = sym-target ] || fail "readlink gave '$t'" || return
	t=$(readlink "$W/sym-abs")
	[ "$t" = /some/absolute/path/that/does/not/exist ] || fail "readlink (absolute) gave '$t'" || return
	[ "$(cat "$W/sym-rel")" = "symlink target" ] || fail "reading through the symlink" || return
	[ -L "$W/sym-rel" ] || fail "not a symlink" || return
}
t_chmod() {
	local m
	printf 'mode\n' >"$W/mode" && chmod 0640 "$W/mode" || fail "chmod failed" || return
	drop_caches
	m=$(stat -c %a "$W/mode")
	[ "$m" = 640 ] || fail "mode $m after chmod 0640" || return
	chmod 4755 "$W/mode" && mkdir "$W/mode-dir" && chmod 1777 "$W/mode-dir" || fail "chmod 4755 / 1777 failed" || return
	drop_caches
	m=$(stat -c %a "$W/mode")
	[ "$m" = 4755 ] || fail "mode $m after chmod 4755" || return
	m=$(stat -c %a "$W/mode-dir")
	[ "$m" = 1777 ] || fail "directory mode $m after chmod 1777" || return
}
t_truncate() {
	local exp=$STATE/trunc.exp s
	head -c 10000 "$STATE/src/special/s1048576" >"$W/trunc" || fail "write" || return
	truncate -s 4000 "$W/trunc" || fail "truncate -s 4000" || return
	drop_caches
	s=$(stat -c %s "$W/trunc")
	[ "$s" -eq 4000 ] || fail "size $s after truncate -s 4000" || return
	head -c 4000 "$STATE/src/special/s1048576" >"$exp"
	cmp -s "$exp" "$W/trunc" || fail "content wrong after shrinking" || return
	truncate -s 6000 "$W/trunc" && truncate -s 6000 "$exp" || fail "truncate -s 6000" || return
	drop_caches
	s=$(stat -c %s "$W/trunc")
	[ "$s" -eq 6000 ] && cmp -s "$exp" "$W/trunc" || fail "after growing to 6000: size $s or content (zeros) wrong" || return
	: >"$W/trunc" || fail "truncate to 0 by O_TRUNC" || return
	drop_caches
	s=$(stat -c %s "$W/trunc")
	[ "$s" -eq 0 ] || fail "size $s after O_TRUNC" || return
}
t_fsync() {
	local src=$STATE/src/special/s1048576
	dd if="$src" of="$W/fsync.dat" bs=64k conv=fsync status=none || fail "dd conv=fsync failed" || return
	printf 'appended\n' >>"$W/fsync.dat" && sync "$W/fsync.dat" || fail "append + sync FILE (fsync) failed" || return
	drop_caches
	cmp -s -n 1048576 "$src" "$W/fsync.dat" && [ "$(tail -c 9 "$W/fsync.dat")" = appended ] ||
		fail "content wrong after fsync" || return
	dd if="$src" of="$W/fdsync.dat" bs=1M oflag=dsync status=none || fail "dd oflag=dsync failed" || return
	drop_caches
	cmp -s "$src" "$W/fdsync.dat" || fail "content wrong after O_DSYNC writes" || return
}

# writer DIR W: 100 files through bash builtins only (printf), sizes up to 8000 octets
writer() {
	local d=$1 w=$2 i p
	p=$(<"$STATE/payload")
	for ((i = 0; i < 100; i++)); do
		printf '%s %d %d\n' "${p:0:$(((i * 397 + w * 131) % ${#p}))}" "$w" "$i" >"$d/w$w-$i" || return 1
	done
}
t_parallel() {
	local ref=$STATE/par-ref pids=() w rc=0 a b
	rm -rf "$ref"
	mkdir -p "$ref" "$W/par" || fail "mkdir" || return
	for w in 0 1 2 3; do
		writer "$W/par" "$w" &
		pids+=($!)
	done
	for w in "${pids[@]}"; do wait "$w" || rc=1; done
	[ "$rc" -eq 0 ] || fail "a writer failed" || return
	for w in 0 1 2 3; do writer "$ref" "$w"; done
	drop_caches
	a=$(cd "$ref" && find . -type f | sort | xargs sha256sum)
	b=$(cd "$W/par" && find . -type f | sort | xargs sha256sum)
	[ "$(wc -l <<<"$b")" -eq 400 ] || fail "$(wc -l <<<"$b") files, expected 400" || return
	[ "$a" = "$b" ] || fail "checksums differ from the reference" || return
	NOTE="400 files, 4 writers"
}
t_fio_verify() {
	local out rc
	command -v fio >/dev/null || fail "fio not installed in the guest" || return
	out=$(fio --name=rand-verify --directory="$W" --filename=fio-rand.dat --size=4m --bs=4k --rw=randwrite \
		--ioengine=libaio --iodepth=4 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
		--name=seq-verify --directory="$W" --filename=fio-seq.dat --size=16m --bs=1m --rw=write \
		--ioengine=libaio --iodepth=2 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
		--output-format=terse --terse-version=3 2>&1)
	rc=$?
	[ "$rc" -eq 0 ] || fail "fio exit $rc: $(tail -n 3 <<<"$out" | tr '\n' ' ')" || return
	! grep -qi 'verify.*\(bad\|fail\)\|crc32c.*wanted' <<<"$out" || fail "verify errors: $(grep -i verify <<<"$out" | head -n 2)" || return
	[ "$(awk -F';' '$1==3 && $5!=0' <<<"$out" | wc -l)" -eq 0 ] || fail "a job reported an error" || return
	[ "$(awk -F';' '$1==3' <<<"$out" | wc -l)" -eq 2 ] || fail "fio printed no results: $(head -c 300 <<<"$out")" || return
	NOTE="4 MiB random 4 KiB + 16 MiB sequential 1 MiB, crc32c verified"
}
t_rm_rf() {
	local left
	rm -rf "$W" || fail "rm -rf failed" || return
	drop_caches
	left=$(ls -A "$DIR")
	[ -z "$left" ] || fail "left behind: $(head -c 200 <<<"$left" | tr '\n' ' ')" || return
}

full() {
	local fio=1 ls=1
	REMOUNT=
	while [ $# -gt 0 ]; do
		case $1 in
		--remount)
			REMOUNT=$2
			shift
			;;
		--no-fio) fio=0 ;;
		--no-ls) ls=0 ;;
		*)
			echo "nfs-workload: unknown option $1" >&2
			exit 2
			;;
		esac
		shift
	done
	W=$DIR/wl
	[ -z "$(ls -A "$DIR")" ] || echo "note: $DIR is not empty: $(find "$DIR" -mindepth 1 -maxdepth 1 | head -n 5 | tr "\n" " ")"
	check sources gen_sources
	check tree-write t_tree_write
	if [ -n "$REMOUNT" ]; then
		check remount t_remount
		check tree-verify t_tree_verify
	fi
	[ "$ls" = 0 ] || check ls-5000 t_ls_5000
	check rename t_rename
	check link t_link
	check symlink t_symlink
	check chmod t_chmod
	check truncate t_truncate
	check fsync t_fsync
	check parallel-writers t_parallel
	[ "$fio" = 0 ] || check fio-verify t_fio_verify
	check rm-rf t_rm_rf
	finish
}

# ---- churn (fault run) -------------------------------------------------------------------------
# churn_ops ROOT: a deterministic create/write/append/rename/remove/link/symlink/chmod/mkdir/rmdir
# sequence; prints "churn-error ..." for (the first 10) operations that fail, counts them in ERRS.
churn_err() {
	ERRS=$((ERRS + 1))
	[ "$ERRS" -gt 10 ] || echo "churn-error: $*"
}
churn_ops() {
	local r=$1 n=${RPCRDMA_NFS_CHURN_N:-200} i f g p
	ERRS=0
	p=$(<"$STATE/payload")
	mkdir -p "$r"/c/d{0..9} || churn_err "mkdir $r/c/d*"
	for ((i = 0; i < n; i++)); do
		f=$r/c/d$((i % 10))/f$i
		printf '%s %d\n' "${p:0:$(((i * 211) % ${#p}))}" "$i" >"$f" || churn_err "create+write $f"
		if ((i % 7 == 0)); then printf 'appended %d\n' "$i" >>"$f" || churn_err "append $f"; fi
		if ((i % 3 == 0)); then
			g=$r/c/d$(((i + 1) % 10))/r$i
			mv "$f" "$g" || churn_err "rename $f"
			f=$g
		fi
		if ((i % 5 == 0 && i >= 5)); then
			if (((i - 5) % 3 == 0)); then g=$r/c/d$(((i - 4) % 10))/r$((i - 5)); else g=$r/c/d$(((i - 5) % 10))/f$((i - 5)); fi
			rm "$g" || churn_err "remove $g"
		fi
		if ((i % 11 == 0)); then mkdir "$r/c/x$i" || churn_err "mkdir x$i"; fi
		if ((i % 22 == 0 && i >= 22)); then rmdir "$r/c/x$((i - 11))" || churn_err "rmdir x$((i - 11))"; fi
		if ((i % 13 == 1)); then ln "$f" "$r/c/h$i" || churn_err "link $f"; fi
		if ((i % 17 == 2)); then ln -s "d$((i % 10))/f$i" "$r/c/s$i" || churn_err "symlink s$i"; fi
		if ((i % 19 == 4)); then chmod 0604 "$f" || churn_err "chmod $f"; fi
	done
}
tree_manifest() { # ROOT: names, types, sizes (files), modes, link targets, checksums
	(cd "$1" && find . -mindepth 1 \( -type f -printf '%y %p %s %m\n' -o -type l -printf '%y %p %l\n' -o \
		-type d -printf '%y %p %m\n' \) | sort &&
		find . -type f -print0 | sort -z | xargs -0 -r sha256sum)
}
t_churn() {
	local ref=$STATE/churn-ref e a b
	rm -rf "$ref"
	churn_ops "$DIR/churn"
	e=$ERRS
	[ "$e" -eq 0 ] || fail "$e operations failed on NFS (churn-error lines above)" || return
	churn_ops "$ref" >/dev/null
	[ "$ERRS" -eq 0 ] || fail "the local reference run had $ERRS errors" || return
	drop_caches
	a=$(tree_manifest "$ref")
	b=$(tree_manifest "$DIR/churn")
	[ "$a" = "$b" ] || fail "final tree differs from the reference: $(diff <(echo "$a") <(echo "$b") | head -n 6 | tr '\n' ' ')" || return
	NOTE="${RPCRDMA_NFS_CHURN_N:-200} iterations, $(grep -c '^[fdl] ' <<<"$b") entries match the reference"
}
churn() {
	W=$DIR/churn # fio-verify's files: removed with the churn tree
	check sources gen_sources
	check churn t_churn
	[ "${1:-}" != --fio ] || check fio-verify t_fio_verify
	check churn-cleanup t_churn_cleanup
	finish
}
t_churn_cleanup() {
	rm -rf "$DIR/churn" || fail "rm -rf failed" || return
	drop_caches
	[ -z "$(ls -A "$DIR")" ] || fail "directory not empty afterwards" || return
}

if [ $# -lt 2 ] || [ ! -d "$2" ]; then
	echo "usage: nfs-workload.sh full DIR [--remount 'CMD'] [--no-fio] [--no-ls] | churn DIR [--fio]   (DIR: a mounted directory)" >&2
	exit 2
fi
MODE=$1 DIR=$(readlink -f "$2")
shift 2
mkdir -p "$STATE"
cd "$STATE" || exit 2 # stray files (fio's) land on the tmpfs, not in the caller's directory
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd # process substitution (the guest has no udev)
case $MODE in
full) full "$@" ;;
churn) churn "$@" ;;
*)
	echo "nfs-workload: unknown mode $MODE (full, churn)" >&2
	exit 2
	;;
esac
