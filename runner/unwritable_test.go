package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// blockWrite makes the atomic write of path fail, as a full disk would, for root too: the
// final rename cannot replace a non-empty directory.
func blockWrite(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(path, "blocked"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// blockOnStart blocks the write of path when the cell id starts.
type blockOnStart struct {
	nopProgress
	t    *testing.T
	id   string
	path string
}

func (b blockOnStart) CellStart(_, _ int, c plans.Cell) {
	if c.ID == b.id {
		blockWrite(b.t, b.path)
	}
}

// When result.json, manifest.json and summary.md cannot be written (a full disk ended
// the run with only "write manifest.json: no space left"), the run writes what it can, the cell
// whose record is lost is failed, the summary table is printed, and the error says how to
// recover.
func TestUnwritableFilesStillSummarize(t *testing.T) {
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	var out bytes.Buffer
	opts.Out = &out
	opts.defaults()
	dir, err := rundir.Create(opts.OutputDir, p.Name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := prepareCells(dir, p.Expand(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	// The cell's result is blocked once it has started (a blocked result.json before the run
	// would count as a result already there).
	opts.Progress = blockOnStart{t: t, id: recs[0].Cell.ID, path: filepath.Join(recs[0].abs, rundir.ResultFile)}
	blockWrite(t, filepath.Join(dir, rundir.ManifestFile))
	blockWrite(t, filepath.Join(dir, rundir.SummaryMD))
	sum, err := execute(context.Background(), p, dir, recs, &rundir.Manifest{}, &opts)
	if err == nil || !strings.Contains(err.Error(), rundir.ManifestFile) || !strings.Contains(err.Error(), rundir.SummaryMD) || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("err = %v, want the manifest and summary.md failures and a --resume hint", err)
	}
	if sum == nil {
		t.Fatal("no summary")
	}
	if got := []string{sum.Cells[0].Verdict, sum.Cells[1].Verdict}; got[0] != plans.VerdictFailed || got[1] != plans.VerdictOK {
		t.Fatalf("verdicts %v, want [failed ok]", got)
	}
	if !strings.Contains(strings.Join(sum.Cells[0].Reasons, " "), "result-write") {
		t.Errorf("reasons %q lack result-write", sum.Cells[0].Reasons)
	}
	if sum.ExitCode != exitcode.CellsFailed {
		t.Errorf("exit code %d, want %d", sum.ExitCode, exitcode.CellsFailed)
	}
	for _, id := range []string{recs[0].Cell.ID, recs[1].Cell.ID} {
		if !strings.Contains(out.String(), id) {
			t.Errorf("summary table lacks %s:\n%s", id, out.String())
		}
	}
	// What could be written was: the other cell's result and summary.json.
	for _, f := range []string{filepath.Join(recs[1].abs, rundir.ResultFile), filepath.Join(dir, rundir.SummaryJSON)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// A result.json that is empty, not JSON, or holds an unknown verdict is not a measurement
// (--resume showed such a cell as not-run and never re-ran it, and copied an unknown
// verdict into the summary): the summary says so, and --resume moves the cell aside, warns and
// runs it again.
func TestResumeRerunsUnreadableResults(t *testing.T) {
	p := testPlan(t, strings.Replace(twoCells, "repeats = 2", "repeats = 3", 1))
	opts := simOptions(t)
	sum, err := Run(context.Background(), p, opts)
	if err != nil || sum.ExitCode != exitcode.OK {
		t.Fatalf("run: %v %+v", err, sum)
	}
	bad := map[string]string{sum.Cells[0].ID: "", sum.Cells[1].ID: "{\"verdict\": ", sum.Cells[2].ID: `{"verdict": "great"}`}
	for id, content := range bad {
		if err := os.WriteFile(filepath.Join(sum.RunDir, rundir.CellsDir, id, rundir.ResultFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recs := make([]cellRecord, len(sum.Cells))
	for i, c := range p.Expand() {
		recs[i] = cellRecord{CellRecord: rundir.CellRecord{Cell: c}, abs: filepath.Join(sum.RunDir, rundir.CellsDir, c.ID)}
	}
	before := buildSummary(p, sum.RunDir, recs, nil, false)
	for i, row := range before.Cells {
		if row.Verdict != rundir.VerdictNotRun || !strings.Contains(strings.Join(row.Reasons, " "), "result-unreadable") {
			t.Errorf("cell %d before resume: verdict %q reasons %q, want not-run and result-unreadable", i, row.Verdict, row.Reasons)
		}
	}
	if before.Counts["great"] != 0 {
		t.Error("an unknown verdict reached the summary")
	}

	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	sum2, err := Resume(context.Background(), sum.RunDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Counts[plans.VerdictOK] != 3 {
		t.Fatalf("after resume: %v, want 3 ok", sum2.Counts)
	}
	for id, content := range bad {
		old, err := os.ReadFile(filepath.Join(sum.RunDir, "unreadable", id+"-1", rundir.ResultFile))
		if err != nil || string(old) != content {
			t.Errorf("%s: old result not kept under unreadable/: %v %q", id, err, old)
		}
		if !strings.Contains(logs.String(), "cell="+id) {
			t.Errorf("no warning names %s:\n%s", id, logs.String())
		}
	}
}

// When the records written before the first cell cannot be (a full disk at the start
// ended the run with only "write cells.json: no space left", exit 1, no verdicts, no table), no
// cell runs, each is failed with run-write, the table is printed, and the error lists the files
// not written and says what to do; nothing claims a result on disk.
func TestUnwritableStartStillSummarizes(t *testing.T) {
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	var out bytes.Buffer
	opts.Out = &out
	opts.defaults()
	start := time.Now()
	dir, err := rundir.Create(opts.OutputDir, p.Name, start)
	if err != nil {
		t.Fatal(err)
	}
	blockWrite(t, filepath.Join(dir, rundir.CellsFile))
	blockWrite(t, filepath.Join(dir, rundir.ManifestFile))
	sum, err := startRun(context.Background(), p, dir, p.Expand(), start, &opts)
	if err == nil || !strings.Contains(err.Error(), rundir.CellsFile) || !strings.Contains(err.Error(), rundir.ManifestFile) || !strings.Contains(err.Error(), "free disk space") {
		t.Fatalf("err = %v, want the cells.json and manifest.json failures and what to do", err)
	}
	if sum == nil {
		t.Fatal("no summary")
	}
	if sum.ExitCode != exitcode.CellsFailed {
		t.Errorf("exit code %d, want %d", sum.ExitCode, exitcode.CellsFailed)
	}
	for _, row := range sum.Cells {
		if row.Verdict != plans.VerdictFailed || !strings.Contains(strings.Join(row.Reasons, " "), "run-write") {
			t.Errorf("cell %s: verdict %q reasons %q, want failed with run-write", row.ID, row.Verdict, row.Reasons)
		}
		if !strings.Contains(out.String(), row.ID) {
			t.Errorf("summary table lacks %s:\n%s", row.ID, out.String())
		}
		if _, err := os.Stat(filepath.Join(dir, rundir.CellsDir, row.ID, rundir.ResultFile)); err == nil {
			t.Errorf("cell %s has a result.json although it did not run", row.ID)
		}
	}
	// What could be written was: plan.toml and the summary.
	for _, f := range []string{rundir.PlanFile, rundir.SummaryJSON} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// A disk full before the run starts (root only: a tmpfs filled beforehand): the run ends with
// failed cells, the table and an error naming what was not written.
func TestFullDiskAtStartTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skip("cannot mount a tmpfs:", err)
	}
	defer func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }()
	fh, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := fh.Write(buf); err != nil {
			break
		}
	}
	fh.Close()
	p := testPlan(t, twoCells)
	opts := simOptions(t)
	opts.OutputDir = dir
	var out bytes.Buffer
	opts.Out = &out
	sum, err := Run(context.Background(), p, opts)
	if err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), rundir.CellsFile) {
		t.Fatalf("err = %v, want no space left naming cells.json", err)
	}
	t.Log(err)
	if sum == nil || sum.Counts[plans.VerdictFailed] != len(sum.Cells) || len(sum.Cells) == 0 {
		t.Fatalf("summary %+v, want every cell failed", sum)
	}
	for _, row := range sum.Cells {
		if !strings.Contains(out.String(), row.ID) {
			t.Errorf("summary table lacks %s:\n%s", row.ID, out.String())
		}
	}
}
