#!/usr/bin/env bash
# Whole-program figures quoted in the README's performance table. It builds runner and
# tracegen, generates SGLang-like traces, and times the real binary under /usr/bin/time -v
# (wall, CPU, peak RSS), then runs the Go benchmarks that have no whole-program form.
#
#   scripts/bench.sh              # everything (about 5 minutes on 2 cores)
#   PARTS="triage" scripts/bench.sh
#   SIZES="100MB" scripts/bench.sh
#
# Parts: triage (single trace .json and .json.gz, two-trace mode), ranks (8 per-rank traces of
# RANK_SIZE, default 100MB, in one directory: the Ranks section of issue 17), proc (the 200 MB log
# benchmark of runner/proc), nsys (scripts/bench_nsys.sh: 1M kernels against the sqlite3 CLI).
# Figures depend on the machine: the script prints its CPU count and load first.
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${PARTS:-"triage ranks proc nsys"}
SIZES=${SIZES:-"100MB 500MB"}
dir=${KEEP:-$(mktemp -d)}
mkdir -p "$dir"
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$dir"' EXIT

echo "machine: $(nproc) CPUs, $(go version | awk '{print $3}'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$dir/runner" ./cmd/runner
go build -o "$dir/tracegen" ./cmd/tracegen

# timed LABEL BYTES CMD...: runs CMD under GNU time, prints wall, CPU, MB/s and peak RSS.
timed() {
	local label=$1 bytes=$2
	shift 2
	/usr/bin/time -v -o "$dir/time.txt" "$@" >/dev/null
	local wall cpu rss
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$dir/time.txt")
	cpu=$(awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {print u+s}' "$dir/time.txt")
	rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2/1024}' "$dir/time.txt")
	awk -v l="$label" -v b="$bytes" -v w="$wall" -v c="$cpu" -v r="$rss" \
		'BEGIN {printf "%-44s %8.0f MB %7.2f s %7.2f s %8.0f MB/s %7d MB\n", l, b/1e6, w, c, b/1e6/w, r}'
}

if [[ " $PARTS " == *" triage "* ]]; then
	echo
	echo "== runner triage (uncompressed JSON size; wall; CPU; MB/s of JSON by wall; peak RSS)"
	for size in $SIZES; do
		formal="$dir/formal-$size.json"
		mapping="$dir/mapping-$size.json"
		[[ -f $formal ]] || "$dir/tracegen" -flavor llm -comm -stack -graph -size "$size" -o "$formal" >/dev/null
		[[ -f $mapping ]] || "$dir/tracegen" -flavor llm -comm -stack -size "$size" -seed 2 -o "$mapping" >/dev/null
		[[ -f $formal.gz ]] || "$dir/tracegen" -flavor llm -comm -stack -graph -size "$size" -o "$formal.gz" >/dev/null
		fb=$(stat -c %s "$formal")
		mb=$(stat -c %s "$mapping")
		timed "triage $size .json (graph-on, formal)" "$fb" "$dir/runner" triage --format json "$formal"
		timed "triage $size .json (graph-off + stacks, mapping)" "$mb" "$dir/runner" triage --format json "$mapping"
		timed "triage $size .json.gz" "$fb" "$dir/runner" triage --format json "$formal.gz"
		timed "gzip -dc $size (decompression floor)" "$fb" gzip -dc "$formal.gz"
		mkdir -p "$dir/m-$size" "$dir/f-$size"
		ln -sf "$mapping" "$dir/m-$size/mapping-TP-0.trace.json"
		ln -sf "$formal" "$dir/f-$size/formal-TP-0.trace.json"
		timed "triage two-trace $size + $size" "$((fb + mb))" "$dir/runner" triage --format json --mapping "$dir/m-$size" --formal "$dir/f-$size"
	done
fi

if [[ " $PARTS " == *" ranks "* ]]; then
	echo
	echo "== runner triage over 8 ranks (summed uncompressed JSON; wall; CPU; MB/s; peak RSS)"
	rsize=${RANK_SIZE:-100MB}
	mkdir -p "$dir/ranks-$rsize"
	total=0
	for r in 0 1 2 3 4 5 6 7; do
		f="$dir/ranks-$rsize/bench-TP-$r.trace.json"
		[[ -f $f ]] || "$dir/tracegen" -flavor llm -comm -stack -graph -size "$rsize" -rank "$r" -world 8 -seed $((r + 1)) -o "$f" >/dev/null
		total=$((total + $(stat -c %s "$f")))
	done
	timed "triage 8 ranks x $rsize" "$total" "$dir/runner" triage --format json "$dir/ranks-$rsize"
fi

if [[ " $PARTS " == *" proc "* ]]; then
	echo
	echo "== runner/proc: a child writing 200 MB of log lines, direct to a file vs through the process layer"
	# file+select is what the runner does; the others are the alternatives it was chosen over.
	# PROC_PIN=1: the child on CPU 0, the runner on CPU 1 (a spare core, as on a GPU host).
	if [ "${PROC_PIN:-0}" = 1 ]; then
		go test -c -o "$dir/proc.test" ./runner/proc
		proc_bench() { PROC_BENCH_CHILD_CPU=0 taskset -c 1 "$dir/proc.test" -test.run '^$' -test.bench "Log200MB/path=${PROC_PATHS:-file}" -test.benchtime ${PROC_N:-5}x -test.count 3; }
	else
		proc_bench() { go test -run '^$' -bench "Log200MB/path=${PROC_PATHS:-file}" -benchtime ${PROC_N:-5}x -count 3 ./runner/proc; }
	fi
	proc_bench | grep -E '^Benchmark' |
		awk '{for (i=1;i<=NF;i++) {if ($(i+1)=="ratio") r=$i; if ($(i+1)=="child-ratio") c=$i; if ($(i+1)=="median-pair-ratio") m=$i; if ($(i+1)=="pair-ratio-ci95-lo") lo=$i; if ($(i+1)=="pair-ratio-ci95-hi") hi=$i; if ($(i+1)=="direct-ms") d=$i; if ($(i+1)=="proc-ms") p=$i; if ($(i+1)=="proc-cpu-ms") u=$i; if ($(i+1)=="peak-heap-MB") h=$i}
			printf "%-52s direct %5.0f ms  through Run %5.0f ms  ratio %.3f (median pair %.3f, 95%% CI %.3f-%.3f)  child alone %.3f  runner CPU %4.0f ms  peak heap %.0f MB\n", $1, d, p, r, m, lo, hi, c, u, h}'
	echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [[ " $PARTS " == *" nsys "* ]]; then
	echo
	echo "== nsys export triage (scripts/bench_nsys.sh)"
	scripts/bench_nsys.sh
fi
