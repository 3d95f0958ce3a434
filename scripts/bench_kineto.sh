#!/usr/bin/env bash
# End-to-end figures for the streaming Kineto reader (reports/kineto): generates SGLang-like
# traces with cmd/tracegen, then times reading them with a built binary under /usr/bin/time -v
# and prints MB/s of uncompressed JSON (by wall time, and by CPU time, which is what matters on a
# machine shared with other work), CPU seconds and peak RSS.
#
#   scripts/bench_kineto.sh                 # 100MB and 500MB, llm flavor with comm + Python stacks
#   SIZES="1GB" FLAVOR=diffusion scripts/bench_kineto.sh
#   KEEP=/tmp/traces scripts/bench_kineto.sh   # keep the generated traces there
#   MEMLIMIT=200MiB scripts/bench_kineto.sh     # reads run with GOMEMLIMIT (the GC then holds
#                                               # peak RSS near it while the live data fits)
#
# Modes (MODES="..." to choose): full = keep every record and Link (defaults: gzip inflated and
# split on a second goroutine, plain JSON on one); full-seq = everything on one goroutine;
# full-pipe = the two-goroutine pipeline for plain JSON too; lean = Options{SkipFrames,
# SkipCPUOps, SkipFlows}; gunzip = klauspost decompression alone (the floor for .json.gz input).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"100MB 500MB"}
FLAVOR=${FLAVOR:-llm}
GEN_FLAGS=${GEN_FLAGS:-"-comm -stack"}
if [[ -n "${KEEP:-}" ]]; then
	dir=$KEEP
	mkdir -p "$dir"
else
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
fi
bin="$dir/tracegen"
go build -o "$bin" ./cmd/tracegen
if [[ ! -x /usr/bin/time ]]; then
	echo "bench_kineto: /usr/bin/time (GNU time) is required for peak RSS" >&2
	exit 1
fi
echo "machine: $(nproc) CPUs, $(go version | awk '{print $3}'), load: $(cut -d' ' -f1-3 /proc/loadavg), GOMEMLIMIT=${MEMLIMIT:-unset}"
printf '%-8s %-8s %-7s %10s %9s %9s %9s %10s %9s\n' size input mode json_MB wall_s cpu_s MB/s MB/s_cpu maxRSS_MB
for size in $SIZES; do
	json="$dir/trace-$FLAVOR-$size.json"
	gz="$json.gz"
	# shellcheck disable=SC2086
	[[ -s "$json" ]] || "$bin" -flavor "$FLAVOR" -size "$size" $GEN_FLAGS -o "$json"
	# shellcheck disable=SC2086
	[[ -s "$gz" ]] || "$bin" -flavor "$FLAVOR" -size "$size" $GEN_FLAGS -o "$gz"
	jbytes=$(stat -c %s "$json")
	for input in json json.gz; do
		f=$json
		[[ $input == json.gz ]] && f=$gz
		modes=${MODES:-"full full-pipe lean"}
		[[ $input == json.gz ]] && modes=${MODES:-"full full-seq lean"}" gunzip"
		for mode in $modes; do
			cat "$f" >/dev/null # page cache
			if [[ -n "${MEMLIMIT:-}" ]]; then
				out=$({ GOMEMLIMIT=$MEMLIMIT /usr/bin/time -v "$bin" -read "$f" -read-mode "$mode" >/dev/null; } 2>&1)
			else
				out=$({ /usr/bin/time -v "$bin" -read "$f" -read-mode "$mode" >/dev/null; } 2>&1)
			fi
			wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' <<<"$out")
			usr=$(awk -F': ' '/User time/{print $2}' <<<"$out")
			sys=$(awk -F': ' '/System time/{print $2}' <<<"$out")
			rss=$(awk -F': ' '/Maximum resident/{print $2}' <<<"$out")
			awk -v s="$size" -v i="$input" -v m="$mode" -v b="$jbytes" -v w="$wall" -v u="$usr" -v y="$sys" -v r="$rss" \
				'BEGIN{c=u+y; if(c<0.01)c=0.01; printf "%-8s %-8s %-7s %10.1f %9.2f %9.2f %9.1f %10.1f %9.1f\n", s, i, m, b/1e6, w, c, b/1e6/w, b/1e6/c, r/1024}'
		done
	done
done
