#!/usr/bin/env bash
# Builds the runner/proc benchmark as a standalone binary, for measuring the log-path overhead
# on a machine without Go (a multi-core GPU host): the binary re-executes itself as the child
# that writes 200 MB of log lines, so nothing else is needed there.
#
#   scripts/build_proc_bench.sh            # writes bench-out/proc.test (git-ignored)
#   bench-out/proc.test -test.run '^$' -test.bench 'Log200MB/path=file' -test.benchtime 3x -test.count 3
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench-out
CGO_ENABLED=0 go test -c -o bench-out/proc.test ./runner/proc
echo "built bench-out/proc.test; run:"
echo "  bench-out/proc.test -test.run '^\$' -test.bench 'Log200MB/path=file' -test.benchtime 3x -test.count 3"
