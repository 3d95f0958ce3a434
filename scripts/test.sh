#!/usr/bin/env bash
# The suite as `go test ./...` runs it, followed by the list of tests that skipped and why:
# `go test ./...` prints one line per package and hides a passing package's skip messages, so
# a machine without the fixtures, Chromium or Slurm passes without saying what it left out.
#
#   scripts/test.sh                 # go test ./..., then the skipped tests with their reasons
#   scripts/test.sh -run TestX      # extra arguments go to go test
#
# The exit status is go test's.
set -uo pipefail
cd "$(dirname "$0")/.."
go test -json "$@" ./... | go run ./cmd/skipped
exit "${PIPESTATUS[0]}"
