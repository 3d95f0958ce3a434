#!/usr/bin/env bash
# Benchmark of the nsys SQLite reader against the sqlite3 shell (issue 4's README figure).
#
#   scripts/bench_nsys.sh [KERNELS]        # default 1000000 kernels (and 3x runtime calls)
#
# Generates (once, cached in ${TMPDIR:-/tmp}/runner-nsys-bench-KERNELS.sqlite) an export with
# nsys/nsysgen, then prints, best of RUNS runs each:
#   - sqlite3 shell: SELECT shortName, COUNT(*), SUM(end-start) ... GROUP BY shortName
#   - nsys.KernelSummary (streaming: the same GROUP BY inside SQLite, names joined afterwards)
#   - nsys.ReadCapture + KernSum (full trace model: every kernel and runtime call in memory)
# with peak RSS, and the streaming path's RSS at KERNELS/10 to show it does not grow with the
# kernel count. The sqlite3 figure is skipped when sqlite3 is missing (apt-get install -y sqlite3).
set -euo pipefail
cd "$(dirname "$0")/.."

N=${1:-1000000}
RUNS=${RUNS:-5}
DB="${TMPDIR:-/tmp}/runner-nsys-bench-$N.sqlite"
SMALL=$((N / 10))
BIN=$(mktemp -d)/nsys.test
trap 'rm -rf "$(dirname "$BIN")"' EXIT

go test -c -o "$BIN" ./nsys
run_bench() { # name kernels benchtime -> prints "ns/op maxrss_kb"
	local out
	out=$( { /usr/bin/time -f 'RSS %M' "$BIN" -test.run '^$' -test.bench "^$1\$" -test.benchtime "$3" \
		-test.count 1 -nsys.kernels "$2" ; } 2>&1 )
	local ns rss
	ns=$(awk '/^Benchmark/ {print $3}' <<<"$out")
	rss=$(awk '/^RSS/ {print $2}' <<<"$out")
	[ -n "$ns" ] || { echo "$out" >&2; exit 1; }
	echo "$ns $rss"
}

echo "generating/reusing $DB (first run takes a while)..." >&2
run_bench BenchmarkKernelSummary "$N" 1x >/dev/null
run_bench BenchmarkKernelSummary "$SMALL" 1x >/dev/null

best() { sort -n | head -1; }
secs() { awk '{printf "%.3f", $1/1e9}'; }

if command -v sqlite3 >/dev/null; then
	cli=$(for _ in $(seq "$RUNS"); do
		/usr/bin/time -f '%e %M' sqlite3 -readonly "$DB" \
			'SELECT shortName, COUNT(*), SUM(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName' 2>&1 >/dev/null | tail -1
	done | sort -n | head -1)
	cli_s=$(awk '{print $1}' <<<"$cli")
	cli_rss=$(awk '{print $2}' <<<"$cli")
else
	echo "sqlite3 not found: install it with 'apt-get update && apt-get install -y sqlite3' for the reference figure" >&2
	cli_s=""
fi

stream=$(for _ in $(seq "$RUNS"); do run_bench BenchmarkKernelSummary "$N" 1x; done | sort -n | head -1)
stream_small=$(run_bench BenchmarkKernelSummary "$SMALL" 1x)
full=$(for _ in $(seq 2); do run_bench BenchmarkReadAggregate "$N" 1x; done | sort -n | head -1)

stream_s=$(awk '{print $1}' <<<"$stream" | secs)
full_s=$(awk '{print $1}' <<<"$full" | secs)
echo "nsys export: $N kernels, $((3 * N)) runtime calls, $(du -m "$DB" | cut -f1) MB ($DB)"
if [ -n "$cli_s" ]; then
	printf '%-44s %8s s  peak RSS %6d MB\n' "sqlite3 shell GROUP BY shortName" "$cli_s" $((cli_rss / 1024))
fi
printf '%-44s %8s s  peak RSS %6d MB (%d MB at %d kernels)\n' "nsys.KernelSummary (streaming)" "$stream_s" \
	$(($(awk '{print $2}' <<<"$stream") / 1024)) $(($(awk '{print $2}' <<<"$stream_small") / 1024)) "$SMALL"
printf '%-44s %8s s  peak RSS %6d MB\n' "nsys.ReadCapture + KernSum (full model)" "$full_s" $(($(awk '{print $2}' <<<"$full") / 1024))
if [ -n "$cli_s" ]; then
	awk -v a="$stream_s" -v b="$full_s" -v c="$cli_s" 'BEGIN {
		printf "ratio to sqlite3: streaming %.2fx (target <= 1.5x), full model %.2fx\n", a / c, b / c }'
fi
