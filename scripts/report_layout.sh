#!/usr/bin/env bash
# Checks report.html of real simulated runs in headless Chromium at 390, 800 and 1400 px, as
# TestReportLayoutWidths checks its fixtures: an LLM sweep (two tp-sizes over three
# concurrencies), a regression run against a baseline (a 30 % slower DenoisingStage), and the
# baseline's report against the history. The default test run has only the fixtures (each
# simulated run costs seconds); run this after changing report.html.tmpl or the charts.
#
#   scripts/report_layout.sh
#   KEEP=/tmp/layout scripts/report_layout.sh   # keep the runs (and REPORT_SCREENSHOTS there)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KEEP:-$(mktemp -d)}
mkdir -p "$dir"
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$dir"' EXIT
go build -o "$dir/runner" ./cmd/runner
cat >"$dir/llm.toml" <<'PLAN'
name = "llmsweep"
[backend]
mode = "serve"
model_type = "llm"
[matrix]
model = ["meta-llama/Llama-3.1-8B-Instruct"]
prompt = ["hi"]
input_len = [64]
output_len = [16]
concurrency = [1, 4, 16]
[matrix.server_args]
tp-size = ["1", "2"]
[load]
requests = 8
PLAN
cat >"$dir/cmp.toml" <<'PLAN'
name = "cmp"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["A cat"]
resolution = ["512x512", "1024x1024"]
num_inference_steps = [4]
repeats = 3
[profile]
profilers = ["none", "torch"]
PLAN
export RUNNER_SIM_TIME_SCALE=0
r() { "$dir/runner" "$@" >/dev/null; }
r run --simulate --no-progress --output "$dir/out" "$dir/llm.toml"
r run --simulate --no-progress --output "$dir/out" "$dir/cmp.toml"
RUNNER_SIM_SLOWDOWN=DenoisingStage=1.3 r run --simulate --no-progress --output "$dir/slow" "$dir/cmp.toml"
llm=$(ls -d "$dir"/out/llmsweep/*/) base=$(ls -d "$dir"/out/cmp/*/) slow=$(ls -d "$dir"/slow/cmp/*/)
r report "$llm"
r report "$base"
r report --baseline "$base" "$slow" || [[ $? == 4 ]] # 4: the regression it was made to have
export REPORT_LAYOUT_PAGES="${llm}report.html:${slow}report.html:${base}report.html"
[[ -z "${KEEP:-}" ]] || export REPORT_SCREENSHOTS="$dir"
go test ./reports/render -count=1 -run 'TestReportLayoutWidths$' -v | grep -E '^(=== RUN|--- FAIL|\s+report_layout|ok|FAIL|PASS)' | grep -v '=== RUN'
