#!/usr/bin/env bash
# The statistical check of `runner bisect` that is too slow for `go test`: ten bisections of a
# generated 64-commit repository (scripts/bisect_repo.sh) whose simulated DenoisingStage is 10%
# slower from commit 37 on, each under another RUNNER_SIM_JITTER_SEED (every repeat of every
# commit then draws its own step jitter and run-level noise), and one bisection of a range
# without a step. It prints, per seed, the commit named and the steps measured, then the tally
# quoted in docs/bisect.md. About 5 minutes of wall time on 2 cores.
#
#   scripts/bisect_seeds.sh                 # seeds 1..10, the simulator's default noise
#   RUNNER_SIM_RUN_CV=0.02 scripts/bisect_seeds.sh   # twice the run-to-run noise
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KEEP:-$(mktemp -d)}
mkdir -p "$dir"
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$dir"' EXIT
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8 9 10"}
export RUNNER_SIM_TIME_SCALE=0
go build -o "$dir/runner" ./cmd/runner
scripts/bisect_repo.sh "$dir/repo" 64 37
cat >"$dir/plan.toml" <<'PLAN'
name = "seeds"
[backend]
extra_args = ["--backend", "sglang"]
env = { RUNNER_SIM_KNOBS_FILE = "{worktree}/knobs" }
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
resolution = ["512x512"]
num_inference_steps = [2]
repeats = 2
[profile]
profilers = ["none"]
[compare.tolerances]
stage = "5%"
PLAN
want=$(git -C "$dir/repo" rev-parse main~27) # commit 37 of 64
found=0 total=0 steps=""
for seed in $SEEDS; do
	RUNNER_SIM_JITTER_SEED=$seed "$dir/runner" bisect --simulate --no-progress --repo "$dir/repo" --good main~63 \
		--output "$dir/out-$seed" --format json "$dir/plan.toml" 2>/dev/null >"$dir/seed-$seed.json"
	read -r hash subject n < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); fb=d["first_bad"] or {}; print(fb.get("commit","none"), fb.get("subject","none").replace(" ","_"), d["measured_steps"])' "$dir/seed-$seed.json")
	echo "seed $seed: first bad ${subject//_/ } ($hash), $n measured steps"
	total=$((total + 1))
	if [[ $hash == "$want" ]]; then found=$((found + 1)); fi
	steps="$steps $n"
done
echo "commit 37 found for $found of $total seeds; measured steps:$steps"
# No step at all: commits 40..64 all carry the slowdown.
RUNNER_SIM_JITTER_SEED=1 "$dir/runner" bisect --simulate --no-progress --repo "$dir/repo" --good main~24 \
	--output "$dir/out-flat" "$dir/plan.toml" 2>/dev/null | head -2
