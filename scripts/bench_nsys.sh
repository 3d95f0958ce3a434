#!/usr/bin/env bash
# Benchmark of `runner triage` on nsys SQLite exports against the sqlite3 shell (issue 4's
# README figure).
#
#   scripts/bench_nsys.sh [KERNELS]        # default 1000000 kernels (and 3x runtime calls)
#   BIG=10000000 scripts/bench_nsys.sh     # and a 10M-kernel export of four processes
#
# Generates (once, cached in ${TMPDIR:-/tmp}/runner-nsys-bench-KERNELS.sqlite, and the same for
# KERNELS/10) an export with nsys/nsysgen, then prints, best of RUNS runs each (wall time; peak
# RSS of that run):
#   - sqlite3 shell: SELECT shortName, COUNT(*), SUM(end-start) ... GROUP BY shortName (the reference)
#   - `runner triage report.sqlite`: the default, full triage (kernel, overlap, fusion, NVTX,
#     memory and API tables), at KERNELS and at KERNELS/10 kernels, and at KERNELS on the same
#     export with NVTX ranges (a denoising_step_N range per 1000 kernels, a layers.N range per
#     20 inside it: NVTX scopes, stages and the NVTX table to compute), and at KERNELS on the
#     same export with a 1 MiB host-to-device copy every 50 kernels (-nsys.memops)
#   - `runner triage --kernels-only report.sqlite`: kernel and fusion tables from SQL sums
#   - the same GROUP BY and full triage on an export of KERNELS kernels from four processes
#     (-nsys.procs 4: a server's TP ranks, one GPU each, each numbering its correlation ids
#     from 1), without and with NVTX ranges, and a check that the streamed report of each is
#     the held (in-memory) path's (TestStreamedMatchesHeldExport); the one with NVTX ranges is
#     the first KERNELS kernels of BIG's
#   - with BIG set: the GROUP BY and the full triage on a BIG-kernel four-process export with
#     NVTX ranges, BIG_RUNS (default 2) runs each, interleaved; the export (about 190 MB per
#     million kernels) is removed afterwards unless KEEP=1
# and the ratios to the sqlite3 figure (issue 4's target: at most 1.5x). The runs alternate
# (sqlite3, full, kernels-only, ...) so that a busy neighbour slows all of them alike. The
# sqlite3 figure is skipped when sqlite3 is missing (apt-get install -y sqlite3).
set -euo pipefail
cd "$(dirname "$0")/.."

N=${1:-1000000}
RUNS=${RUNS:-5}
SMALL=$((N / 10))
DB="${TMPDIR:-/tmp}/runner-nsys-bench-$N.sqlite"
DBS="${TMPDIR:-/tmp}/runner-nsys-bench-$SMALL.sqlite"
DBN="${TMPDIR:-/tmp}/runner-nsys-bench-$N-nvtx.sqlite"
DBM="${TMPDIR:-/tmp}/runner-nsys-bench-$N-memops.sqlite"
DBP="${TMPDIR:-/tmp}/runner-nsys-bench-$N-procs4.sqlite"
DBNP="${TMPDIR:-/tmp}/runner-nsys-bench-$N-nvtx-procs4.sqlite"
BIG=${BIG:-0}
DBB="${TMPDIR:-/tmp}/runner-nsys-bench-$BIG-nvtx-procs4.sqlite"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

go build -o "$dir/runner" ./cmd/runner
go test -c -o "$dir/nsys.test" ./nsys/nsysdb
for n in "$N" "$SMALL"; do
	# The benchmark export generator lives in nsys/nsysdb's benchmarks; one quick run creates the file.
	"$dir/nsys.test" -test.run '^$' -test.bench '^BenchmarkKernelSummary$' -test.benchtime 1x \
		-nsys.kernels "$n" >/dev/null || { echo "generating the $n-kernel export failed" >&2; exit 1; }
done
"$dir/nsys.test" -test.run '^$' -test.bench '^BenchmarkKernelSummary$' -test.benchtime 1x \
	-nsys.kernels "$N" -nsys.nvtx >/dev/null || { echo "generating the $N-kernel NVTX export failed" >&2; exit 1; }
"$dir/nsys.test" -test.run '^$' -test.bench '^BenchmarkKernelSummary$' -test.benchtime 1x \
	-nsys.kernels "$N" -nsys.memops >/dev/null || { echo "generating the $N-kernel export with copies failed" >&2; exit 1; }
"$dir/nsys.test" -test.run '^$' -test.bench '^BenchmarkKernelSummary$' -test.benchtime 1x \
	-nsys.kernels "$N" -nsys.procs 4 >/dev/null || { echo "generating the $N-kernel export of four processes failed" >&2; exit 1; }
"$dir/nsys.test" -test.run '^$' -test.bench '^BenchmarkKernelSummary$' -test.benchtime 1x \
	-nsys.kernels "$N" -nsys.procs 4 -nsys.nvtx >/dev/null || { echo "generating the $N-kernel export of four processes with NVTX ranges failed" >&2; exit 1; }
if [ "$BIG" -gt 0 ]; then
	[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$dir"; rm -f "$DBB"' EXIT
	echo "generating the $BIG-kernel export of four processes (minutes; $(df -h "$(dirname "$DBB")" | awk 'NR==2 {print $4}') free)" >&2
	"$dir/nsys.test" -test.run '^$' -test.bench '^BenchmarkKernelSummary$' -test.benchtime 1x -test.timeout 0 \
		-nsys.kernels "$BIG" -nsys.procs 4 -nsys.nvtx >/dev/null || { echo "generating the $BIG-kernel export failed" >&2; exit 1; }
fi
# The streamed reports of the four-process exports (the one with NVTX ranges is the first N
# kernels of BIG's) and of the one-process NVTX export are the held path's.
for x in "$DBP" "$DBNP" "$DBN"; do
	RUNNER_NSYS_DIFF_EXPORT="$x" go test ./runner/analysis -run '^TestStreamedMatchesHeldExport$' -count=1 >"$dir/diff" 2>&1 ||
		{ grep -v '^time=' "$dir/diff" | head -40 >&2; echo "the streamed report of $x differs from the held one" >&2; exit 1; }
done

# timed CMD...: prints "seconds peak_rss_kb user_s system_s" of one run (output discarded).
timed() {
	/usr/bin/time -f '%e %M %U %S' -o "$dir/t" "$@" >/dev/null 2>"$dir/err" || { cat "$dir/err" >&2; exit 1; }
	cat "$dir/t"
}
have_cli=false
if command -v sqlite3 >/dev/null; then
	have_cli=true
else
	echo "sqlite3 not found: install it with 'apt-get update && apt-get install -y sqlite3' for the reference figure" >&2
fi
: >"$dir/cli"
: >"$dir/full"
: >"$dir/konly"
: >"$dir/small"
: >"$dir/nvtx"
: >"$dir/memops"
: >"$dir/clip"
: >"$dir/procs"
: >"$dir/nvtxp"
for _ in $(seq "$RUNS"); do
	if $have_cli; then
		timed sqlite3 -readonly "$DB" \
			'SELECT shortName, COUNT(*), SUM(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName' >>"$dir/cli"
	fi
	timed "$dir/runner" triage "$DB" >>"$dir/full"
	timed "$dir/runner" triage --kernels-only "$DB" >>"$dir/konly"
	timed "$dir/runner" triage "$DBS" >>"$dir/small"
	timed "$dir/runner" triage "$DBN" >>"$dir/nvtx"
	timed "$dir/runner" triage "$DBM" >>"$dir/memops"
	if $have_cli; then
		timed sqlite3 -readonly "$DBP" \
			'SELECT shortName, COUNT(*), SUM(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName' >>"$dir/clip"
	fi
	timed "$dir/runner" triage "$DBP" >>"$dir/procs"
	timed "$dir/runner" triage "$DBNP" >>"$dir/nvtxp"
done
: >"$dir/clib"
: >"$dir/big"
if [ "$BIG" -gt 0 ]; then
	for _ in $(seq "${BIG_RUNS:-2}"); do
		if $have_cli; then
			timed sqlite3 -readonly "$DBB" \
				'SELECT shortName, COUNT(*), SUM(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName' >>"$dir/clib"
		fi
		timed "$dir/runner" triage "$DBB" >>"$dir/big"
	done
fi
best() { sort -n "$1" | head -1; }
sec() { awk '{print $1}' <<<"$1"; }
mb() { awk '{printf "%d", $2 / 1024}' <<<"$1"; }
full=$(best "$dir/full")
konly=$(best "$dir/konly")
small=$(best "$dir/small")
nvtx=$(best "$dir/nvtx")
memops=$(best "$dir/memops")
procs=$(best "$dir/procs")
nvtxp=$(best "$dir/nvtxp")
maxrss() { sort -n -k2 "$1" | tail -1 | awk '{printf "%d", $2 / 1024}'; }

echo "nsys export: $N kernels, $((3 * N)) runtime calls, $(du -m "$DB" | cut -f1) MB ($DB); best of $RUNS"
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
if $have_cli; then
	cli=$(best "$dir/cli")
	printf '%-52s %6s s  peak RSS %5d MB\n' "sqlite3 shell GROUP BY shortName" "$(sec "$cli")" "$(mb "$cli")"
fi
printf '%-52s %6s s  peak RSS %5d MB (%d MB at most over the runs)\n' "runner triage report.sqlite (full)" "$(sec "$full")" "$(mb "$full")" "$(maxrss "$dir/full")"
printf '%-52s %6s s  peak RSS %5d MB\n' "runner triage report.sqlite (full), $SMALL kernels" "$(sec "$small")" "$(mb "$small")"
printf '%-52s %6s s  peak RSS %5d MB (%d MB at most over the runs)\n' "runner triage report.sqlite (full), with NVTX ranges" "$(sec "$nvtx")" "$(mb "$nvtx")" "$(maxrss "$dir/nvtx")"
printf '%-52s %6s s  peak RSS %5d MB\n' "runner triage report.sqlite (full), with copies" "$(sec "$memops")" "$(mb "$memops")"
printf '%-52s %6s s  peak RSS %5d MB\n' "runner triage --kernels-only report.sqlite" "$(sec "$konly")" "$(mb "$konly")"
echo "four processes: $N kernels ($(du -m "$DBP" | cut -f1) MB; $(du -m "$DBNP" | cut -f1) MB with NVTX ranges); streamed report = held report, for both and for the one-process NVTX export: yes"
if $have_cli; then
	clip=$(best "$dir/clip")
	printf '%-52s %6s s  peak RSS %5d MB\n' "sqlite3 shell GROUP BY shortName, four processes" "$(sec "$clip")" "$(mb "$clip")"
fi
printf '%-52s %6s s  peak RSS %5d MB (%d MB at most over the runs)\n' "runner triage report.sqlite (full), four processes" "$(sec "$procs")" "$(mb "$procs")" "$(maxrss "$dir/procs")"
printf '%-52s %6s s  peak RSS %5d MB (%d MB at most over the runs)\n' "the same with NVTX ranges" "$(sec "$nvtxp")" "$(mb "$nvtxp")" "$(maxrss "$dir/nvtxp")"
if [ "$BIG" -gt 0 ]; then
	big=$(best "$dir/big")
	echo "four processes with NVTX ranges: $BIG kernels ($(du -m "$DBB" | cut -f1) MB), best of ${BIG_RUNS:-2}"
	if $have_cli; then
		clib=$(best "$dir/clib")
		printf '%-52s %6s s  peak RSS %5d MB\n' "sqlite3 shell GROUP BY shortName, $BIG kernels" "$(sec "$clib")" "$(mb "$clib")"
	fi
	printf '%-52s %6s s  peak RSS %5d MB (%d MB at most over the runs)\n' "runner triage report.sqlite (full), $BIG kernels" "$(sec "$big")" "$(mb "$big")" "$(maxrss "$dir/big")"
fi
if $have_cli; then
	awk -v f="$(sec "$full")" -v n="$(sec "$nvtx")" -v m="$(sec "$memops")" -v k="$(sec "$konly")" -v c="$(sec "$cli")" 'BEGIN {
		printf "ratio to sqlite3: full triage %.2fx (with NVTX ranges %.2fx, with copies %.2fx), --kernels-only %.2fx (target <= 1.5x)\n", f / c, n / c, m / c, k / c }'
	awk -v p="$(sec "$procs")" -v q="$(sec "$nvtxp")" -v c="$(sec "$clip")" 'BEGIN {
		printf "ratio to sqlite3, four processes: full triage %.2fx, with NVTX ranges %.2fx (target <= 1.0x, <= 64 MB)\n", p / c, q / c }'
	if [ "$BIG" -gt 0 ]; then
		awk -v p="$(sec "$big")" -v c="$(sec "$clib")" -v n="$BIG" 'BEGIN {
			printf "ratio to sqlite3, four processes with NVTX ranges, %d kernels: full triage %.2fx (target <= 1.0x, <= 3 s, <= 64 MB)\n", n, p / c }'
	fi
fi
awk -v a="$(mb "$full")" -v b="$(mb "$small")" -v n="$N" -v s="$SMALL" 'BEGIN {
	printf "full triage memory: %d MB at %d kernels, %d MB at %d kernels (%.0f bytes per extra kernel)\n", a, n, b, s, (a - b) * 1048576 / (n - s) }'
# CPU time (user + system) is steadier than wall time on a shared machine: the least of the runs.
cpu() { [ -s "$1" ] && awk '{printf "%.2f\n", $3 + $4}' "$1" | sort -n | head -1; }
echo "CPU time (user + system), least over the runs:"
for f in cli:"sqlite3 GROUP BY" full:"full triage" nvtx:"full triage, NVTX ranges" clip:"sqlite3 GROUP BY, four processes" \
	procs:"full triage, four processes" nvtxp:"full triage, four processes, NVTX ranges" clib:"sqlite3 GROUP BY, $BIG kernels" big:"full triage, $BIG kernels"; do
	if c=$(cpu "$dir/${f%%:*}"); then printf '  %-52s %6s s\n' "${f#*:}" "$c"; fi
done
