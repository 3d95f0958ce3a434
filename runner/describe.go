package runner

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/nsys"
	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
	"github.com/sglprof/runner/runner/load"
	"github.com/sglprof/runner/runner/secrets"
	"github.com/sglprof/runner/runner/slurm"
)

// CellLaunch is what `runner plan` shows for one cell: the cell and the exact process it would
// run. Paths point into a placeholder run directory, because the real one is named when the
// run starts.
type CellLaunch struct {
	Cell plans.Cell        `json:"cell"`
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env"`
	Dir  string            `json:"dir"`
	// StartProfile is the body of the POST /start_profile a profiled serve cell sends (nil when
	// it opens no such window); Request is what its client phase sends (serve cells only).
	StartProfile map[string]any `json:"start_profile,omitempty"`
	Request      *RequestPlan   `json:"request,omitempty"`
}

// RequestPlan is a serve cell's client phase as runner plan shows it: where the requests go,
// how many and how fast, and the body of one (an LLM cell's prompt stands for what its dataset
// makes).
type RequestPlan struct {
	Method      string          `json:"method"`
	Path        string          `json:"path"`
	Warmup      int             `json:"warmup"`
	Requests    int             `json:"requests,omitempty"`
	Duration    string          `json:"duration,omitempty"`
	Concurrency int             `json:"concurrency,omitempty"`
	RequestRate string          `json:"request_rate,omitempty"`
	Dataset     string          `json:"dataset,omitempty"`
	Body        json.RawMessage `json:"body"`
}

// PlaceholderRunID stands for the run directory's "<UTC time>-<id>" in `runner plan` output.
const PlaceholderRunID = "RUN"

// Describe computes every cell's launch without creating or starting anything.
func Describe(p *plans.Plan, opts Options) ([]CellLaunch, error) {
	output := p.OutputDir
	if opts.OutputDir != "" {
		output = opts.OutputDir
	}
	abs, err := filepath.Abs(filepath.Join(output, p.Name, PlaceholderRunID))
	if err != nil {
		return nil, err
	}
	if p.Executor.Kind == plans.ExecutorSlurm {
		if err := checkSlurmRunDir(filepath.Join(output, p.Name)); err != nil {
			return nil, err
		}
	}
	var out []CellLaunch
	for _, c := range p.Expand() {
		be, err := backendFor(c)
		if err != nil {
			return nil, err
		}
		cellDir := filepath.Join(abs, rundir.CellsDir, c.ID)
		lc := c
		lc.Backend.Command = opts.sglangCommand(c)
		// A backend that can compute its launch without touching the disk says so; Launch
		// itself may create the cell's directories, which a dry listing must not.
		launch := be.Launch
		if pl, ok := be.(interface {
			Command(plans.Cell, string) (rundir.Launch, error)
		}); ok {
			launch = pl.Command
		}
		l, err := launch(lc, cellDir)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.ID, err)
		}
		argv := l.Argv
		if c.Profiler == plans.ProfilerNsys {
			report := filepath.Join(cellDir, "nsys", "report")
			if srv, ok := be.(backends.Server); ok && c.Backend.Mode == backends.ModeServe {
				argv, _ = wrapServerNSys(&opts, srv, c, "<session>", report, argv)
			} else {
				argv = nsys.Wrap(opts.nsysCommand(), c.NSys, report, argv)
			}
		}
		c.Backend.Env = redactEnvMap(c.Backend.Env)
		cl := CellLaunch{Cell: c, Argv: redactArgs(argv), Env: redactEnvMap(l.Env), Dir: l.Dir}
		if srv, ok := be.(backends.Server); ok && c.Backend.Mode == backends.ModeServe {
			if w := srv.Window(lc, filepath.Join(cellDir, "traces")); w.Kind == backends.WindowStartStop {
				cl.StartProfile = w.Start
			}
			cl.Request = describeRequest(lc, srv.Protocol(lc).API)
		}
		out = append(out, cl)
	}
	return out, nil
}

// describeRequest is the client phase of serve cell c whose server's default API is api, built
// by the functions the run uses (loadSpec and load.Build, load.Body); nil when no request can
// be built (the run then fails the cell with the reason).
func describeRequest(c plans.Cell, api string) *RequestPlan {
	spec := loadSpec(c, api)
	l := c.Load
	rp := &RequestPlan{Method: "POST", Warmup: l.Warmup, Requests: l.Requests, Concurrency: l.Concurrency}
	if l.Duration.Duration > 0 {
		rp.Duration = l.Duration.Duration.String()
	}
	if isLLMAPI(spec.API) {
		in, out := c.InputLen, c.OutputLen
		if in <= 0 {
			in = llmDefaultInputLen
		}
		if out <= 0 {
			out = llmDefaultOutputLen
		}
		rp.Path = load.LLMPath(spec.API)
		rp.Dataset = c.Load.Dataset
		rp.RequestRate = "inf"
		if l.RequestRate > 0 {
			rp.RequestRate = fmt.Sprint(l.RequestRate)
		}
		if l.MaxConcurrency > 0 {
			rp.Concurrency = l.MaxConcurrency
		}
		body, err := load.Body(spec.API, c.Model, load.Prompt{Text: fmt.Sprintf("[%d-token prompt from the %s dataset]", in, rp.Dataset), OutputLen: out})
		if err != nil {
			return nil
		}
		rp.Body = body
		return rp
	}
	req, err := load.Build(spec, true)
	if err != nil {
		return nil
	}
	rp.Method, rp.Path, rp.Body = req.Method, req.Path, req.Body
	return rp
}

// DescribeSlurm is the batch script a run of a Slurm plan would submit first
// (slurm/job-1.sbatch: every cell of the plan, in order), with PlaceholderRunID for the run's
// directory and a placeholder job name, so `runner plan` shows the #SBATCH lines and the
// node's setup before anything is queued. It is "" for a plan of another executor.
func DescribeSlurm(p *plans.Plan, opts Options) (string, error) {
	if p.Executor.Kind != plans.ExecutorSlurm {
		return "", nil
	}
	output := p.OutputDir
	if opts.OutputDir != "" {
		output = opts.OutputDir
	}
	abs, err := filepath.Abs(filepath.Join(output, p.Name, PlaceholderRunID))
	if err != nil {
		return "", err
	}
	var ids []string
	for _, c := range p.Expand() {
		ids = append(ids, c.ID)
	}
	script, err := slurmScript(p, ids, abs, slurm.JobName(PlaceholderRunID, 1), &opts)
	if err != nil {
		return "", &exitcode.UsageError{Err: fmt.Errorf("executor slurm: %w", err)}
	}
	// Setup lines are the user's own, but what runner plan prints may be pasted into an issue.
	return secrets.Default().String(script), nil
}
