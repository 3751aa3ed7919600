#!/bin/bash
# scripts/vm/pjdfstest-table.sh — the pjdfstest results of the kernel nfsd and of rpcrdma-nfsd
# (memory and dir backends) side by side, and the check that ours fails no case the kernel nfsd
# passes unless the case is listed in scripts/vm/pjdfstest-known.txt.
#
#   scripts/vm/pjdfstest-table.sh [--all] [--md] [--known FILE] [--tag TAG] RESULTS...
#
# RESULTS: files holding the lines the guest prints (scripts/vm/nfs-pjdfstest.sh), e.g. the
# console log of scripts/nfs-server-stage.sh or its saved results file:
#   pjd LABEL ok|FAILED|skipped CASE         pjd-why LABEL CASE REASON
# with LABEL kernel (the reference), memory, dir; the NFSv4.2 runs print `pjd41` and `pjd41-why`
# instead (--tag pjd41, with --known scripts/vm/pjdfstest41-known.txt). Prints one row per case that is not `ok` on all
# three, leaving out the cases every server skipped (every case with --all; a Markdown table
# with --md), then per server the cases passed of those run, then the verdict:
#   NEW        ours fails (or never reported) a case the kernel nfsd passes, not in the list
#   known      the same, tolerated by a line of the list (the row shows why)
#   stale      a listed case that ours now passes on a listed backend: delete the line
# Exit status: 0 no NEW failure and no stale line; 1 otherwise, or a server reported no case; 2
# usage. The list (one line per case: `CASE [BACKENDS]  # why`, BACKENDS `memory`, `dir` or
# `memory,dir`, the default) only ever shrinks: a fix that makes a listed case pass must delete
# its line, or this check fails.
set -uo pipefail
ALL=0 MD=0 TAG=pjd KNOWN=$(dirname "$(readlink -f "$0")")/pjdfstest-known.txt
while [ $# -gt 0 ]; do
	case $1 in
	--all) ALL=1 ;;
	--md) MD=1 ;;
	--known)
		KNOWN=${2:?--known needs a file}
		shift
		;;
	--tag)
		TAG=${2:?--tag needs a word}
		shift
		;;
	-h | --help)
		sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "pjdfstest-table: unknown option $1" >&2
		exit 2
		;;
	*) break ;;
	esac
	shift
done
if [ $# -eq 0 ]; then
	echo "usage: pjdfstest-table.sh [--all] [--md] [--known FILE] [--tag TAG] RESULTS..." >&2
	exit 2
fi
[ -r "$KNOWN" ] || {
	echo "pjdfstest-table: cannot read the list $KNOWN" >&2
	exit 2
}

# The known list first (file 1), then the results.
awk -v all="$ALL" -v md="$MD" -v kf="$KNOWN" -v tag="$TAG" '
function cell(l, c,   r) { r = res[l, c]; return r == "" ? "-" : r }
function row(c, k, m, d, note) {
	if (md) printf "| `%s` | %s | %s | %s | %s |\n", c, k, m, d, note
	else printf "  %-58s %-8s %-11s %-9s %s\n", c, k, m, d, note
}
FILENAME == kf {
	cause = ""
	if (index($0, "#")) { cause = substr($0, index($0, "#") + 1); sub(/^ +/, "", cause) }
	sub(/#.*/, "")
	if (NF == 0) next
	bk = NF > 1 ? $2 : "memory,dir"
	n = split(bk, b, ",")
	for (i = 1; i <= n; i++) {
		if (b[i] != "memory" && b[i] != "dir") { printf "pjdfstest-table: %s: bad backend %s\n", FILENAME, b[i]; bad = 1; continue }
		known[$1, b[i]] = cause == "" ? "listed" : cause
		knownlist[++nk] = $1 SUBSEP b[i]
	}
	next
}
$1 == tag && NF == 4 {
	res[$2, $4] = $3
	if (!(($4) in seen)) { seen[$4] = 1; cases[++nc] = $4 }
	got[$2] = 1
	next
}
$1 == tag "-why" && NF >= 4 {
	r = $0
	sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", r)
	why[$2, $3] = r
}
END {
	split("kernel memory dir", L, " ")
	for (i = 1; i <= 3; i++) if (!(L[i] in got)) { printf "pjdfstest-table: no results of %s\n", L[i]; bad = 1 }
	# sort the cases by name (insertion sort: a few hundred)
	for (i = 2; i <= nc; i++) { v = cases[i]; for (j = i - 1; j >= 1 && cases[j] > v; j--) cases[j + 1] = cases[j]; cases[j + 1] = v }
	if (md) { print "| case | kernel nfsd | ours, memory | ours, dir | why |"; print "|---|---|---|---|---|" }
	else row("case", "kernel", "ours-memory", "ours-dir", "")
	for (i = 1; i <= nc; i++) {
		c = cases[i]
		k = cell("kernel", c); m = cell("memory", c); d = cell("dir", c)
		note = ""; kc = ""; nk_row = 0; new_row = 0
		for (j = 2; j <= 3; j++) {
			l = L[j]
			if (k == "ok" && cell(l, c) != "ok") {
				if ((c, l) in known) { nknown++; nk_row++; kc = known[c, l] }
				else { nnew++; new_row++; newl[nnew] = c " (" l ")"; note = note (note == "" ? "NEW " : ", ") l }
			}
			if ((c, l) in known && cell(l, c) == "ok") { nstale++; stale[nstale] = c " " l }
		}
		w = why["memory", c]; if (w == "") w = why["dir", c]; if (w == "") w = why["kernel", c]
		if (new_row) note = note ": " w
		else if (nk_row) note = "known: " kc
		else note = w
		if (k == "skipped" && m == k && d == k) { nskip++; if (!all) continue }
		if (all || k != "ok" || m != "ok" || d != "ok") row(c, k, m, d, note)
	}
	for (i = 1; i <= nk; i++) {
		split(knownlist[i], kb, SUBSEP)
		if (!((kb[1]) in seen) && nc > 0) { nstale++; stale[nstale] = kb[1] " " kb[2] " (no such case)" }
	}
	if (nskip && !all) printf "  (%d cases skipped on every server: not shown; --all shows every case)\n", nskip
	print ""
	for (i = 1; i <= 3; i++) {
		p = f = s = 0
		for (j = 1; j <= nc; j++) { r = res[L[i], cases[j]]; if (r == "ok") p++; else if (r == "skipped") s++; else f++ }
		printf "pjdfstest %-7s %d passed of %d run (%d failed or missing, %d skipped)\n", L[i] ":", p, p + f, f, s
	}
	printf "pjdfstest check: %d NEW failure(s), %d known (%s), %d stale line(s)\n", nnew, nknown, kf, nstale
	for (i = 1; i <= nnew; i++) printf "  NEW: ours fails %s, which the kernel nfsd passes\n", newl[i]
	for (i = 1; i <= nstale; i++) printf "  stale: %s now passes: delete its line from %s\n", stale[i], kf
	exit (bad || nnew || nstale) ? 1 : 0
}' "$KNOWN" "$@"
