#!/bin/sh
# bisect_repo.sh DIR N STEP [BROKEN]: a git repository of N commits ("commit 1" … "commit N"),
# made by one git fast-import, for testing `runner bisect` with the simulator: its file knobs
# (a RUNNER_SIM_KNOBS_FILE) adds RUNNER_SIM_SLOWDOWN=DenoisingStage=1.10 from commit STEP on,
# and commit BROKEN alone holds a file BROKEN that an install command `test ! -e BROKEN`
# refuses (0 or absent: none). Used by cmd/runner/testdata/script/bisect.txtar and
# scripts/bisect_seeds.sh.
set -e
dir=$1 n=$2 step=$3 broken=${4:-0}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
k=1
while [ "$k" -le "$n" ]; do
	knobs="# simulator knobs"
	if [ "$k" -ge "$step" ]; then
		knobs="$knobs
RUNNER_SIM_SLOWDOWN=DenoisingStage=1.10"
	fi
	msg="commit $k"
	t=$((1700000000 + k * 60))
	printf 'commit refs/heads/main\nmark :%d\nauthor T <t@example.com> %d +0000\ncommitter T <t@example.com> %d +0000\ndata %d\n%s\n' "$k" "$t" "$t" ${#msg} "$msg"
	if [ "$k" -gt 1 ]; then printf 'from :%d\n' $((k - 1)); fi
	printf 'M 644 inline knobs\ndata %d\n%s\n' "$(printf '%s\n' "$knobs" | wc -c)" "$knobs"
	if [ "$k" -eq "$broken" ]; then printf 'M 644 inline BROKEN\ndata 0\n'; fi
	if [ "$broken" -gt 0 ] && [ "$k" -eq $((broken + 1)) ]; then printf 'D BROKEN\n'; fi
	k=$((k + 1))
done >"$dir.stream"
cd "$dir"
git init -q -b main .
git fast-import --quiet <"$dir.stream"
git checkout -q main
rm -f "$dir.stream"
