#!/usr/bin/env bash
# End-to-end figures for Kineto (torch profiler) traces: generates SGLang-like LLM decode traces
# with cmd/tracegen (-comm -stack: a communication stream and Python frames) and times
#
#   part "triage" (the default): `runner triage --format json` on each size, .json and
#   .json.gz, under /usr/bin/time -v, REPEAT times interleaved; prints the median wall, CPU and
#   peak RSS, the targets and the ratios (.json.gz / .json; the Python triage / runner at the
#   reference size; runner / `wc -l` of the file, the scan floor). With BASE_BIN=path/to/runner
#   (an older build) the same runs are interleaved with it and its ratio is printed too. With
#   PYREF=dir (the directory holding analyze_llm_torch_profile.py of the Python triage skill this
#   tool replaced) the Python triage runs once on the REF_SIZE trace in the same session;
#   without it the ratio is to its recorded figure (PY_CPU, PY_RSS), by CPU.
#   part "read": the reader alone (tracegen -read) in each read mode, as before.
#
#   scripts/bench_kineto.sh                        # triage at 100MB and 500MB
#   PYREF=/path/to/scripts BASE_BIN=/tmp/runner.main scripts/bench_kineto.sh
#   PARTS="triage read" SIZES="1GB" FLAVOR=diffusion scripts/bench_kineto.sh
#   KEEP=/tmp/traces scripts/bench_kineto.sh         # keep the generated traces there
#   MEMLIMIT=200MiB scripts/bench_kineto.sh          # reads run with GOMEMLIMIT
#
# Read modes (MODES="..." to choose): full = keep every record and Link (defaults: gzip inflated
# and split on a second goroutine, plain JSON on one); full-seq = everything on one goroutine;
# full-pipe = the two-goroutine pipeline for plain JSON too; lean = Options{SkipFrames,
# SkipCPUOps, SkipFlows}; gunzip = klauspost decompression alone (the floor for .json.gz input).
# The machine's load is printed before and after: on a shared machine wall times measure the
# neighbours too, so compare CPU seconds there.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"100MB 500MB"}
FLAVOR=${FLAVOR:-llm}
GEN_FLAGS=${GEN_FLAGS:-"-comm -stack"}
PARTS=${PARTS:-triage}
REPEAT=${REPEAT:-3}
REF_SIZE=${REF_SIZE:-100MB}
if [[ -n "${KEEP:-}" ]]; then
	dir=$KEEP
	mkdir -p "$dir"
else
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
fi
bin="$dir/tracegen"
go build -o "$bin" ./cmd/tracegen
go build -o "$dir/runner" ./cmd/runner
if [[ ! -x /usr/bin/time ]]; then
	echo "bench_kineto: /usr/bin/time (GNU time) is required for peak RSS" >&2
	exit 1
fi
echo "machine: $(nproc) CPUs ($(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)), $(go version | awk '{print $3}'), load: $(cut -d' ' -f1-3 /proc/loadavg), GOMEMLIMIT=${MEMLIMIT:-unset}"

# measure CMD...: runs CMD under GNU time; sets wall, cpu (user+sys) and rss (MB).
measure() {
	if [[ -n "${MEMLIMIT:-}" ]]; then
		GOMEMLIMIT=$MEMLIMIT /usr/bin/time -v -o "$dir/time.txt" "$@" >/dev/null
	else
		/usr/bin/time -v -o "$dir/time.txt" "$@" >/dev/null
	fi
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$dir/time.txt")
	cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{print u+s}' "$dir/time.txt")
	rss=$(awk -F': ' '/Maximum resident/{printf "%.0f", $2/1024}' "$dir/time.txt")
}

# median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END{if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

gen() { # gen SIZE: makes the .json and .json.gz of that size in $dir
	local json="$dir/trace-$FLAVOR-$1.json"
	# shellcheck disable=SC2086
	[[ -s "$json" ]] || "$bin" -flavor "$FLAVOR" -size "$1" $GEN_FLAGS -o "$json" >/dev/null
	# shellcheck disable=SC2086
	[[ -s "$json.gz" ]] || "$bin" -flavor "$FLAVOR" -size "$1" $GEN_FLAGS -o "$json.gz" >/dev/null
}

if [[ " $PARTS " == *" triage "* ]]; then
	echo
	echo "== runner triage --format json: median of $REPEAT interleaved runs (wall s / CPU s / peak RSS MB)"
	printf '%-7s %-8s %-10s %8s %8s %8s %8s   %s\n' size input program json_MB wall_s cpu_s rss_MB "ratio / target"
	for size in $SIZES; do
		gen "$size"
		json="$dir/trace-$FLAVOR-$size.json"
		jmb=$(awk -v b="$(stat -L -c %s "$json")" 'BEGIN{printf "%.0f", b/1e6}')
		progs="runner"
		[[ -n "${BASE_BIN:-}" ]] && progs="runner base"
		declare -A W=() C=() R=() M=()
		for ((i = 0; i < REPEAT; i++)); do
			cat "$json" "$json.gz" >/dev/null # page cache
			measure wc -l "$json"
			W[floor]+="$wall "
			for p in $progs; do
				b="$dir/runner"
				[[ $p == base ]] && b=$BASE_BIN
				for input in json json.gz; do
					f=$json
					[[ $input == json.gz ]] && f=$json.gz
					measure "$b" triage --format json "$f"
					W[$p.$input]+="$wall "
					C[$p.$input]+="$cpu "
					R[$p.$input]+="$rss "
				done
			done
		done
		med() { tr ' ' '\n' <<<"${1% }" | median; }
		floor=$(med "${W[floor]}")
		for p in $progs; do
			for input in json json.gz; do
				w=$(med "${W[$p.$input]}")
				c=$(med "${C[$p.$input]}")
				r=$(med "${R[$p.$input]}")
				note=""
				[[ $p == runner ]] && M[$input]=$w
				if [[ $p == runner && $input == json ]]; then
					rw=$w
					note=$(awk -v w="$w" -v f="$floor" -v s="$size" -v r="$r" 'BEGIN{
						t = (s == "500MB") ? "target <= 1.0 s, <= 200 MB" : (s == "100MB") ? "target <= 0.2 s" : "";
						printf "%.1fx wc -l (%.2f s)  %s", w/f, f, t}')
				elif [[ $p == runner ]]; then
					note=$(awk -v w="$w" -v j="$rw" 'BEGIN{printf ".json.gz / .json %.2f (target <= 1.2)", w/j}')
				else
					note=$(awk -v w="$w" -v t="${M[$input]}" 'BEGIN{printf "the base build; this build / base %.2f", t/w}')
				fi
				printf '%-7s %-8s %-10s %8s %8.2f %8.2f %8s   %s\n' "$size" "$input" "$p" "$jmb" "$w" "$c" "$r" "$note"
			done
		done
		unset W C R M
	done
	if [[ -n "${PYREF:-}" ]]; then
		py="$PYREF/analyze_llm_torch_profile.py"
		json="$dir/trace-$FLAVOR-$REF_SIZE.json"
		gen "$REF_SIZE"
		if ! command -v python3 >/dev/null || [[ ! -f $py ]]; then
			echo "reference: python3 or $py missing; the Python triage was not run"
		else
			measure "$dir/runner" triage --format json "$json"
			rw=$wall rc=$cpu rr=$rss
			measure python3 "$py" triage --input "$json"
			printf '%-7s %-8s %-10s %8s %8.2f %8.2f %8s   %s\n' "$REF_SIZE" json python "" "$wall" "$cpu" "$rss" \
				"$(awk -v w="$wall" -v r="$rw" -v c="$cpu" -v rc="$rc" -v m="$rss" -v rm="$rr" 'BEGIN{printf "Python / runner: %.0fx wall, %.0fx CPU, %.1fx RSS (runner %.2f s, %s MB in the same session)", w/r, c/rc, m/rm, r, rm}')"
		fi
	else
		# The Python triage is not shipped with this repository; without it the ratio is to
		# its recorded figure (PY_CPU seconds of CPU, PY_RSS MB at 100 MB: docs/performance.md),
		# by CPU, since that figure's wall time was taken on a loaded machine.
		py_cpu=${PY_CPU:-43.0} py_rss=${PY_RSS:-489}
		json="$dir/trace-$FLAVOR-$REF_SIZE.json"
		gen "$REF_SIZE"
		measure "$dir/runner" triage --format json "$json"
		printf '%-7s %-8s %-10s %8s %8s %8.2f %8s   %s\n' "$REF_SIZE" json python "" "-" "$py_cpu" "$py_rss" \
			"$(awk -v c="$py_cpu" -v rc="$cpu" -v m="$py_rss" -v rm="$rss" -v w="$wall" 'BEGIN{printf "recorded, not run (PYREF unset): Python / runner %.0fx CPU, %.1fx RSS (runner %.2f s wall, %.2f s CPU, %s MB now)", c/rc, m/rm, w, rc, rm}')"
	fi
fi
if [[ " $PARTS " == *" read "* ]]; then
echo
echo "== the reader alone (tracegen -read)"
printf '%-8s %-8s %-7s %10s %9s %9s %9s %10s %9s\n' size input mode json_MB wall_s cpu_s MB/s MB/s_cpu maxRSS_MB
for size in $SIZES; do
	gen "$size"
	json="$dir/trace-$FLAVOR-$size.json"
	gz="$json.gz"
	jbytes=$(stat -L -c %s "$json")
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
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
