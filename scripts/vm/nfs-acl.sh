# shellcheck shell=bash
# scripts/vm/nfs-acl.sh — sourced by nfs-server.sh (inside the VM): POSIX ACLs through NFSACL
# (program 100227 version 3: GETACL, SETACL) as the kernel client uses them (part `acl`).
#
#   run_acl
#
# Over rxe, vers=3,proto=rdma, mounted without `noacl` (mountstats must not list it), as root on
# the mount: one sequence against the kernel nfsd (tmpfs export /srv/kexport: the reference),
# then against ours with the memory backend and with the dir:/srv/nfsd-dir backend (in `kernel`
# mode: the kernel nfsd again, on /srv/nfsd-dir, compared with itself). In a fresh directory
# `acl` (0755):
#   a. base       f (0640, "secret") and d (0755): getfacl -n f is user::rw- group::r-- other::---
#   b. setfacl    setfacl -m u:1000:rw f: user:1000:rw- and mask::rw-, `ls -l` shows a `+`,
#                 stat %a is 660
#   c. access     uid 1000 (setpriv --reuid --regid --clear-groups) reads "secret" and appends;
#                 uid 1001 is refused (Permission denied)
#   d. chmod      chmod 600 f: mask::---, user:1000:rw- #effective:---, uid 1000 refused
#   e. not-owner  uid 1001's setfacl -m u:1001:rwx f: Operation not permitted (the client's own
#                 owner check refuses it before any SETACL), the ACL unchanged
#   f. default    setfacl -d -m u:1000:rwx d; root's d/new gets user:1000:rwx #effective:rw-
#                 (mask::rw-), d/sub the default entries (default:user:1000:rwx); uid 1000 cannot
#                 create in d until setfacl -m u:1000:rwx d, then d/by1000 is created (1000:1000)
#   g. remove     setfacl -b f: only the three base entries, no `+` in `ls -l`
#   Where the tree is visible on the server's side (the kernel nfsd's tmpfs, the dir backend's
#   /srv/nfsd-dir), getfacl -n there shows the same after b (user:1000:rw-), f (d's default
#   entries, d/new's user:1000:rwx) and g (no named entry): the ACL lives in that file system.
#   Ours: the server's counters nfsacl.GETACL and nfsacl.SETACL > 0.
# The client's caches (attributes, ACCESS results per user, ACLs) are dropped
# (/proc/sys/vm/drop_caches) before every getfacl, ls and stat and every change of identity, so
# that each answer comes from the server. Every step's outputs (getfacl -n without the `# file:`
# lines, ls -ln modes, stat, the commands' messages) are recorded in /run/nfs-server/acl/LABEL/ and
# compared step by step with the kernel nfsd's (diff; the differing lines printed on FAIL); the
# kernel nfsd's records are printed.
# Switch: RPCRDMA_NFSD_ACL (1, default; 0: "## nfs-server acl: SKIP").

ACL_U1=1000 ACL_U2=1001
acl_as() { # UID CMD...: CMD as that user and group, no supplementary groups
	local u=$1
	shift
	setpriv --reuid="$u" --regid="$u" --clear-groups "$@"
}
# acl_drop: the client's caches dropped (the next getfacl, ls, stat or open asks the server)
acl_drop() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}
acl_get() { # PATH...: getfacl -n of the mount without the `# file:` lines, caches dropped first
	acl_drop
	getfacl -n "$@" 2>&1 | grep -v '^# file:'
}
acl_entries() { sed -e 's/[[:space:]]*#.*//' -e '/^$/d' <<<"$1"; } # TEXT: the entries only
acl_mode() { # PATH...: "MODE OCTAL UID:GID NAME" per path (ls -ln's mode column with its `+`)
	local p
	acl_drop
	# shellcheck disable=SC2012 # ls -l's mode column: the only tool that shows the ACL's `+`
	for p in "$@"; do echo "$(ls -ldn "$p" 2>&1 | awk '{print $1}') $(stat -c '%a %u:%g %n' "$p" 2>&1)"; done
}
acl_rec() { printf '%s\n' "$2" >>"$ACL_OUT/$1"; } # STEP TEXT: appended to the record of STEP
acl_srv() { getfacl -n -p "$ACL_SDIR/acl/$1" 2>&1 | grep -v '^# file:'; } # PATH: on the server's side
# acl_ok STATUS NAME DETAIL: pass (STATUS 0) or failc "LABEL-NAME" (STATUS: `$?` of the test
# just run, first among the arguments: expanded before any command substitution of DETAIL)
acl_ok() {
	if [ "$1" -eq 0 ]; then pass "$ACL_LAB-$2" "$3"; else failc "$ACL_LAB-$2" "$3"; fi
}
acl_has() { grep -Eq "$2" <<<"$1"; } # TEXT REGEX: a line of TEXT matches

# acl_seq LABEL [SERVER-DIR]: the sequence on $MNT (mounted), recorded in $LOGS/acl/LABEL;
# SERVER-DIR: the exported directory as the server's file system holds it (empty: not visible)
acl_seq() {
	ACL_LAB=$1 ACL_SDIR=${2:-} ACL_OUT=$LOGS/acl/$1
	local w=$MNT/acl o rc e
	rm -rf "$ACL_OUT"
	mkdir -p "$ACL_OUT"
	if ! chmod 0755 "$MNT" || ! mkdir -m 0755 "$w" || ! cd "$w"; then
		failc "$ACL_LAB-setup" "cannot create $w"
		return
	fi
	umask 022
	# a. the base ACL of a fresh file
	echo secret >f && chmod 0640 f && mkdir -m 0755 d
	acl_ok $? create "f 0640 and d 0755 created"
	o=$(acl_get f d)
	acl_rec a-base "$o"
	acl_rec a-base "$(acl_mode f d)"
	e=$(acl_entries "$(acl_get f)")
	[ "$e" = $'user::rw-\ngroup::r--\nother::---' ]
	acl_ok $? base-acl "getfacl -n f: $(tr '\n' ' ' <<<"$e")"
	# b. a named user
	o=$(setfacl -m u:$ACL_U1:rw f 2>&1)
	acl_ok $? setfacl "setfacl -m u:$ACL_U1:rw f${o:+: $o}"
	o=$(acl_get f)
	acl_rec b-setfacl "$o"
	acl_has "$o" "^user:$ACL_U1:rw-\$" && acl_has "$o" '^mask::rw-$'
	acl_ok $? setfacl-getfacl "user:$ACL_U1:rw- and mask::rw- in: $(acl_entries "$o" | tr '\n' ' ')"
	o=$(acl_mode f)
	acl_rec b-setfacl "$o"
	[ "${o%% *}" = -rw-rw----+ ]
	acl_ok $? setfacl-ls "ls -l: ${o%% *} (a + after the mode)"
	[ "$(cut -d' ' -f2 <<<"$o")" = 660 ]
	acl_ok $? setfacl-mode "stat %a: $(cut -d' ' -f2 <<<"$o") (660: the group bits are the mask)"
	if [ -n "$ACL_SDIR" ]; then
		o=$(acl_srv f)
		acl_rec b-server "$o"
		acl_has "$o" "^user:$ACL_U1:rw-\$"
		acl_ok $? server-acl "getfacl -n $ACL_SDIR/acl/f on the server's side: $(acl_entries "$o" | tr '\n' ' ')"
	fi
	# c. the ACL grants uid 1000 and nobody else
	acl_drop
	o=$(acl_as $ACL_U1 cat f 2>&1)
	acl_rec c-access "uid $ACL_U1 cat f: $o"
	[ "$o" = secret ]
	acl_ok $? user-read "uid $ACL_U1 cat f: $o"
	o=$(acl_as $ACL_U1 sh -c 'echo x >>f' 2>&1)
	rc=$?
	acl_rec c-access "uid $ACL_U1 echo x >>f: $rc $o"
	acl_ok $rc user-append "uid $ACL_U1 echo x >>f: exit $rc${o:+ $o}"
	acl_drop
	o=$(acl_as $ACL_U2 cat f 2>&1)
	rc=$?
	acl_rec c-access "uid $ACL_U2 cat f: $rc $o"
	[ "$rc" -ne 0 ] && acl_has "$o" 'Permission denied'
	acl_ok $? other-user-refused "uid $ACL_U2 cat f: exit $rc: $o"
	o=$(cat f 2>&1)
	acl_rec c-access "root cat f: $(tr '\n' ' ' <<<"$o")"
	[ "$o" = $'secret\nx' ]
	acl_ok $? content "f holds: $(tr '\n' ' ' <<<"$o")"
	# d. chmod changes the mask, the named user loses its rights
	o=$(chmod 600 f 2>&1)
	acl_ok $? chmod "chmod 600 f${o:+: $o}"
	o=$(acl_get f)
	acl_rec d-chmod "$o"
	acl_rec d-chmod "$(acl_mode f)"
	acl_has "$o" '^mask::---$' && acl_has "$o" "^user:$ACL_U1:rw-[[:space:]]+#effective:---\$"
	acl_ok $? chmod-mask "mask::--- and user:$ACL_U1:rw- #effective:--- in: $(tr '\n\t' '  ' <<<"$o" | tr -s ' ')"
	acl_drop
	o=$(acl_as $ACL_U1 cat f 2>&1)
	rc=$?
	acl_rec d-chmod "uid $ACL_U1 cat f: $rc $o"
	[ "$rc" -ne 0 ] && acl_has "$o" 'Permission denied'
	acl_ok $? chmod-user-refused "uid $ACL_U1 cat f: exit $rc: $o"
	# e. only the owner (or root) sets an ACL
	acl_drop
	o=$(acl_as $ACL_U2 setfacl -m u:$ACL_U2:rwx f 2>&1)
	rc=$?
	acl_rec e-not-owner "uid $ACL_U2 setfacl -m u:$ACL_U2:rwx f: $rc $o"
	[ "$rc" -ne 0 ] && acl_has "$o" 'Operation not permitted'
	acl_ok $? not-owner-refused "uid $ACL_U2 setfacl -m u:$ACL_U2:rwx f: exit $rc: $o"
	o=$(acl_get f)
	acl_rec e-not-owner "$o"
	! acl_has "$o" "^user:$ACL_U2:"
	acl_ok $? not-owner-unchanged "no user:$ACL_U2 entry after the refusal"
	# f. a default ACL, inherited by what is created in d
	o=$(setfacl -d -m u:$ACL_U1:rwx d 2>&1)
	acl_ok $? default-set "setfacl -d -m u:$ACL_U1:rwx d${o:+: $o}"
	o=$(acl_get d)
	acl_rec f-default "$o"
	acl_has "$o" "^default:user:$ACL_U1:rwx\$" && acl_has "$o" '^default:mask::rwx$'
	acl_ok $? default-getfacl "default:user:$ACL_U1:rwx and default:mask::rwx on d"
	touch d/new && mkdir d/sub
	acl_ok $? default-create "touch d/new, mkdir d/sub"
	o=$(acl_get d/new)
	acl_rec f-default "$o"
	acl_has "$o" "^user:$ACL_U1:rwx[[:space:]]+#effective:rw-\$" && acl_has "$o" '^mask::rw-$'
	acl_ok $? default-file "d/new: user:$ACL_U1:rwx #effective:rw-, mask::rw- in: $(tr '\n\t' '  ' <<<"$o" | tr -s ' ')"
	o=$(acl_get d/sub)
	acl_rec f-default "$o"
	acl_has "$o" "^user:$ACL_U1:rwx\$" && acl_has "$o" "^default:user:$ACL_U1:rwx\$" && acl_has "$o" '^default:mask::rwx$'
	acl_ok $? default-dir "d/sub: user:$ACL_U1:rwx and the default entries in: $(acl_entries "$o" | tr '\n' ' ')"
	acl_rec f-default "$(acl_mode d d/new d/sub)"
	acl_drop
	o=$(acl_as $ACL_U1 touch d/early 2>&1)
	rc=$?
	acl_rec f-default "uid $ACL_U1 touch d/early: $rc $o"
	[ "$rc" -ne 0 ] && acl_has "$o" 'Permission denied'
	acl_ok $? default-user-refused "uid $ACL_U1 touch d/early before u:$ACL_U1:rwx on d: exit $rc: $o"
	o=$(setfacl -m u:$ACL_U1:rwx d 2>&1)
	acl_ok $? dir-setfacl "setfacl -m u:$ACL_U1:rwx d${o:+: $o}"
	acl_drop
	o=$(acl_as $ACL_U1 touch d/by$ACL_U1 2>&1)
	rc=$?
	acl_rec f-default "uid $ACL_U1 touch d/by$ACL_U1: $rc $o"
	acl_ok $rc user-create "uid $ACL_U1 touch d/by$ACL_U1 (granted by user:$ACL_U1:rwx on d): exit $rc${o:+ $o}"
	o=$(acl_get d d/by$ACL_U1)
	acl_rec f-default "$o"
	acl_rec f-default "$(acl_mode d d/by$ACL_U1)"
	[ "$(stat -c %u:%g d/by$ACL_U1 2>&1)" = $ACL_U1:$ACL_U1 ] && acl_has "$o" "^user:$ACL_U1:rwx[[:space:]]+#effective:rw-\$"
	acl_ok $? user-create-acl "d/by$ACL_U1 $(stat -c %u:%g d/by$ACL_U1 2>&1), inherits user:$ACL_U1:rwx #effective:rw-"
	if [ -n "$ACL_SDIR" ]; then
		o=$(acl_srv d)
		acl_rec f-server "$o"
		acl_has "$o" "^default:user:$ACL_U1:rwx\$"
		acl_ok $? server-default "getfacl -n $ACL_SDIR/acl/d on the server's side: default:user:$ACL_U1:rwx"
		o=$(acl_srv d/new)
		acl_rec f-server "$o"
		acl_has "$o" "^user:$ACL_U1:rwx"
		acl_ok $? server-inherited "getfacl -n $ACL_SDIR/acl/d/new on the server's side: $(acl_entries "$o" | tr '\n' ' ')"
	fi
	# g. the ACL removed
	o=$(setfacl -b f 2>&1)
	acl_ok $? remove "setfacl -b f${o:+: $o}"
	o=$(acl_get f)
	acl_rec g-remove "$o"
	e=$(acl_entries "$o")
	[ "$(grep -c . <<<"$e")" = 3 ] && acl_has "$e" '^user::' && acl_has "$e" '^group::' && acl_has "$e" '^other::'
	acl_ok $? remove-getfacl "only the base entries: $(tr '\n' ' ' <<<"$e")"
	o=$(acl_mode f)
	acl_rec g-remove "$o"
	e=${o%% *}
	[ "${e%+}" = "$e" ]
	acl_ok $? remove-ls "ls -l: $e (no +)"
	if [ -n "$ACL_SDIR" ]; then
		o=$(acl_srv f)
		acl_rec g-server "$o"
		acl_has "$o" '^user::' && ! acl_has "$o" '^(user:[0-9]|mask::)'
		acl_ok $? server-removed "getfacl -n $ACL_SDIR/acl/f on the server's side: $(acl_entries "$o" | tr '\n' ' ')"
	fi
	cd / || true
	rm -rf "$w"
}

# acl_server LABEL BACKEND KIND: one server (started as KIND: kernel or ours), mounted on $MNT,
# the sequence, the server's counters (ours), stopped
acl_server() {
	local lab=$1 be=$2 kind=$3 kind_save=$KIND sdir='' opts
	KIND=$kind
	if ! srv_start rxe "$be"; then
		KIND=$kind_save
		failc "$lab-server-start" "the server did not start"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		return
	fi
	KIND=$kind_save
	# the exported tree as the server's file system holds it: the kernel nfsd's tmpfs, ours' dir:
	if [ "$kind" = kernel ]; then sdir=$SRV_PATH; elif [ "$be" = dir ]; then sdir=$NFSD_DIR; fi
	ACL_LAB=$lab
	if do_mount "$MNT"; then
		opts=$(mstats "$MNT" | awk '$1 == "opts:" {print $2; exit}')
		! tr ',' '\n' <<<"$opts" | grep -qx noacl
		acl_ok $? mounted-acl "no noacl in the mount options ($opts)"
		echo "acl $lab: sequence on $MNT (${kind} server, ${be}${sdir:+, server side $sdir})"
		acl_seq "$lab" "$sdir"
		if [ "$kind" = ours ]; then
			if counters; then
				[ "${CNT[nfsacl.GETACL]:-0}" -gt 0 ] && [ "${CNT[nfsacl.SETACL]:-0}" -gt 0 ]
				acl_ok $? counters "the server answered nfsacl.GETACL=${CNT[nfsacl.GETACL]:-missing} nfsacl.SETACL=${CNT[nfsacl.SETACL]:-missing} (both > 0)"
			else
				failc "$lab-counters" "no nfsd-stat lines after SIGUSR1"
			fi
		fi
		do_umount "$MNT"
	fi
	[ "$kind" = kernel ] || srv_stop
	if [ "$PFAIL" -ne 0 ] && [ "$kind" = ours ] && [ -s "$SRV_LOG" ]; then
		echo "---- server log (tail):"
		grep -v '^nfsd-stat ' "$SRV_LOG" | tail -n 20 | sed 's/^/  | /'
	fi
}

# acl_compare LABEL: every step recorded for the kernel nfsd against LABEL's (the server-side
# records only where both have them)
acl_compare() {
	local lab=$1 k=$LOGS/acl/kernel o=$LOGS/acl/$1 f s d
	if [ ! -d "$k" ] || [ ! -d "$o" ]; then
		failc "$lab-vs-kernel" "no records to compare (a server did not run)"
		return
	fi
	for f in "$k"/*; do
		s=${f##*/}
		case $s in *-server) [ -e "$o/$s" ] || continue ;; esac
		if d=$(diff -u -L "kernel/$s" -L "$lab/$s" "$f" "$o/$s" 2>&1); then
			pass "$lab-vs-kernel-$s" "the same as the kernel nfsd's ($(wc -l <"$f") lines)"
		else
			failc "$lab-vs-kernel-$s" "differs from the kernel nfsd's:"
			printf '%s\n' "$d" | sed 's/^/  | /'
		fi
	done
}

run_acl() {
	local l
	if [ "${RPCRDMA_NFSD_ACL:-1}" != 1 ]; then
		echo "## nfs-server acl: SKIP (RPCRDMA_NFSD_ACL=${RPCRDMA_NFSD_ACL})"
		return
	fi
	part_begin acl "POSIX ACLs (NFSACL) through the kernel client: the kernel nfsd and $KIND (memory, dir backends), rxe"
	rm -rf "$LOGS/acl"
	acl_server kernel memory kernel
	echo "acl kernel: the records (the reference):"
	for l in "$LOGS"/acl/kernel/*; do
		[ -e "$l" ] || continue
		echo "  == ${l##*/}"
		sed 's/^/  | /' "$l"
	done
	if [ "$KIND" = ours ]; then
		acl_server memory memory ours
		acl_server dir dir ours
		acl_compare memory
		acl_compare dir
	else
		# the kernel nfsd again, on its other tmpfs export: compared with itself
		acl_server kernel-dir dir kernel
		acl_compare kernel-dir
	fi
	part_end
}
