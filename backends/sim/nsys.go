package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sglprof/runner/backends/simclock"
	"github.com/sglprof/runner/nsys/nsysgen"
)

// NSysVersion is what the simulated `nsys --version` reports.
const NSysVersion = "2025.5.1.121-255136380782v0"

// reportMagic marks the simulator's .nsys-rep files. The real format is proprietary; the
// simulator's (nsysreport.go) holds the captured activity with absolute simulated times, the
// collection window and how the application ended. Only the simulated `nsys export` reads it.
const reportMagic = "sglprof-sim-nsys-report"

// nsysReport is the content of a simulated .nsys-rep.
type nsysReport struct {
	Magic          string            `json:"magic"`
	Format         int               `json:"format"`
	NSysVersion    string            `json:"nsys_version"`
	Command        []string          `json:"command"`
	Options        map[string]string `json:"options"`
	SessionStartNS int64             `json:"session_start_unix_ns"`
	WindowStartNS  int64             `json:"window_start_unix_ns"`
	WindowEndNS    int64             `json:"window_end_unix_ns"` // 0: until the application ended
	// CaptureEnd is --capture-range-end under --capture-range=cudaProfilerApi ("" without):
	// only activity inside the application's cudaProfilerStart/Stop ranges was kept.
	CaptureEnd  string            `json:"capture_range_end,omitempty"`
	AppExitCode int               `json:"app_exit_code"`
	AppSignal   string            `json:"app_signal,omitempty"`
	Interrupted bool              `json:"interrupted,omitempty"`
	GPUs        []nsysgen.GPU     `json:"gpus"`
	Processes   []nsysgen.Process `json:"processes"`
	Kernels     []nsysgen.Kernel  `json:"kernels"`
	Runtime     []nsysgen.Runtime `json:"runtime"`
	Memops      []nsysgen.Memop   `json:"memops"`
	NVTX        []nsysgen.NVTX    `json:"nvtx"`
}

// nsysOpt is one option of `nsys profile`.
type nsysOpt struct {
	long, short string
	boolean     bool
	check       func(string) error
}

func oneOf(vals ...string) func(string) error {
	return func(v string) error {
		for _, x := range vals {
			if v == x {
				return nil
			}
		}
		return fmt.Errorf("must be one of: %s", strings.Join(vals, ", "))
	}
}

func seconds(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return errors.New("must be a non-negative number of seconds")
	}
	return nil
}

var traceAPIs = []string{"cuda", "nvtx", "osrt", "cublas", "cublas-verbose", "cudnn", "cusolver", "cusparse", "nccl", "mpi", "ucx", "openmp", "opengl", "opengl-annotations", "vulkan", "python-gil", "gds", "cuda-sw", "nvvideo", "none"}

func traceList(v string) error {
	for _, t := range strings.Split(v, ",") {
		if oneOf(traceAPIs...)(strings.TrimSpace(t)) != nil {
			return fmt.Errorf("unknown API '%s' (known: %s)", t, strings.Join(traceAPIs, ", "))
		}
	}
	return nil
}

func graphTrace(v string) error {
	head, _, _ := strings.Cut(v, ":")
	return oneOf("graph", "node")(head)
}

func killOpt(v string) error {
	if oneOf("none", "sigkill", "sigterm")(v) == nil {
		return nil
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 65 {
		return nil
	}
	return errors.New("must be none, sigkill, sigterm or a signal number")
}

var profileOpts = []nsysOpt{
	{long: "--trace", short: "-t", check: traceList},
	{long: "--trace-fork-before-exec", boolean: true},
	{long: "--cuda-graph-trace", check: graphTrace},
	{long: "--force-overwrite", short: "-f", boolean: true},
	{long: "--delay", short: "-y", check: seconds},
	{long: "--duration", short: "-d", check: seconds},
	{long: "--output", short: "-o"},
	{long: "--capture-range", short: "-c", check: oneOf("none", "cudaProfilerApi", "hotkey", "nvtx")},
	{long: "--capture-range-end"},
	{long: "--nvtx-capture", short: "-p"},
	{long: "--kill", check: killOpt},
	{long: "--stop-on-exit", short: "-x", boolean: true},
	{long: "--sample", short: "-s", check: oneOf("process-tree", "system-wide", "none")},
	{long: "--cpuctxsw", check: oneOf("process-tree", "system-wide", "none")},
	{long: "--stats", boolean: true},
	{long: "--export"},
	{long: "--wait", short: "-w", check: oneOf("primary", "all")},
	{long: "--session-new"},
	{long: "--cuda-memory-usage", boolean: true},
	{long: "--cuda-event-trace"},
	{long: "--cuda-flush-interval"},
	{long: "--python-backtrace"},
	{long: "--python-sampling", boolean: true},
	{long: "--pytorch"},
	{long: "--env-var", short: "-e"},
	{long: "--show-output", boolean: true},
	{long: "--nccl-trace"},
}

const nsysProfileUsage = "\nusage: nsys profile [<args>] [application] [<application args>]\nTry 'nsys profile --help' for more information.\n"

// NSys runs the simulated `nsys`; args are the arguments after "nsys". It returns the exit
// status: for profile, the application's status (128+signal when it was killed), 1 for
// nsys's own errors.
func NSys(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "usage: nsys [--version] [--help] <command> [<args>] [application] [<application args>]\n")
		return 1
	}
	switch args[0] {
	case "--version", "-v":
		fmt.Fprintf(stdout, "NVIDIA Nsight Systems version %s\n", NSysVersion)
		return 0
	case "--help", "-h":
		fmt.Fprint(stdout, "usage: nsys [--version] [--help] <command> [<args>] [application] [<application args>]\n\n The most commonly used nsys commands are:\n\tprofile       Run an application and capture its profile into a nsys-rep file.\n\texport        Generate an export file from an existing nsys-rep file.\n")
		return 0
	case "profile":
		return nsysProfile(ctx, args[1:], env, stdout, stderr)
	case "export":
		return nsysExport(args[1:], stdout, stderr)
	case "launch":
		return nsysLaunch(ctx, args[1:], env, stdout, stderr)
	case "start":
		return nsysStart(args[1:], env, stdout, stderr)
	case "stop":
		return nsysStop(args[1:], stdout, stderr)
	case "shutdown":
		return nsysShutdown(args[1:], stderr)
	}
	fmt.Fprintf(stderr, "Error: unknown command '%s'.\nusage: nsys [--version] [--help] <command> [<args>] [application] [<application args>]\n", args[0])
	return 1
}

func isBoolWord(s string) bool { return s == "true" || s == "false" }

// parseProfile splits `nsys profile` arguments into options and the application command.
func parseProfile(args []string) (map[string]string, []string, error) {
	opts := map[string]string{}
	for i := 0; i < len(args); i++ {
		tok := args[i]
		if !strings.HasPrefix(tok, "-") || tok == "-" {
			return opts, args[i:], nil
		}
		if tok == "--" {
			return opts, args[i+1:], nil
		}
		name, val, hasVal := tok, "", false
		if eq := strings.IndexByte(tok, '='); eq > 0 {
			name, val, hasVal = tok[:eq], tok[eq+1:], true
		}
		var o *nsysOpt
		for j := range profileOpts {
			if profileOpts[j].long == name || (profileOpts[j].short != "" && profileOpts[j].short == name) {
				o = &profileOpts[j]
			}
		}
		if o == nil {
			return nil, nil, fmt.Errorf("unrecognised option '%s'", name)
		}
		if !hasVal {
			switch {
			case o.boolean && i+1 < len(args) && isBoolWord(args[i+1]):
				i++
				val = args[i]
			case o.boolean:
				val = "true"
			case i+1 < len(args):
				i++
				val = args[i]
			default:
				return nil, nil, fmt.Errorf("the required argument for option '%s' is missing", o.long)
			}
		}
		if o.boolean && !isBoolWord(val) {
			return nil, nil, fmt.Errorf("the argument ('%s') for option '%s' is invalid. Valid choices are 'true' and 'false'", val, o.long)
		}
		if o.check != nil {
			if err := o.check(val); err != nil {
				return nil, nil, fmt.Errorf("the argument ('%s') for option '%s' is invalid: %v", val, o.long, err)
			}
		}
		opts[o.long] = val
	}
	return opts, nil, nil
}

// expandOutput applies nsys's output-name substitutions and the .nsys-rep suffix.
func expandOutput(name string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' || i+1 >= len(name) {
			b.WriteByte(name[i])
			continue
		}
		switch name[i+1] {
		case 'p':
			b.WriteString(strconv.Itoa(os.Getpid()))
			i++
		case 'h':
			h, _ := os.Hostname()
			b.WriteString(h)
			i++
		case '%':
			b.WriteByte('%')
			i++
		case 'q':
			if j := strings.IndexByte(name[i:], '}'); i+2 < len(name) && name[i+2] == '{' && j > 0 {
				b.WriteString(env[name[i+3:i+j]])
				i += j
			} else {
				b.WriteByte('%')
			}
		default:
			b.WriteByte('%')
		}
	}
	out := b.String()
	if !strings.HasSuffix(out, ".nsys-rep") {
		out += ".nsys-rep"
	}
	return out
}

// timeScale is the simulators' real seconds per simulated second under env (the default when
// unset or bad).
func timeScale(env map[string]string) float64 {
	f, err := simclock.ParseTimeScale(env[simclock.EnvTimeScale])
	if err != nil {
		return simclock.DefaultTimeScale
	}
	return f
}

func nsysProfile(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	opts, app, err := parseProfile(args)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n%s", err, nsysProfileUsage)
		return 1
	}
	if len(app) == 0 {
		fmt.Fprintf(stderr, "Error: no application was specified.%s", nsysProfileUsage)
		return 1
	}
	if _, err := readKnobs(env); err != nil {
		fmt.Fprintf(stderr, "runner sim: %v\n", err)
		return 1
	}
	out, ok := nsysOutputPath(opts, env, stderr)
	if !ok {
		return 1
	}
	actFile, err := os.CreateTemp("", "nsys-sim-activity-*.jsonl")
	if err != nil {
		fmt.Fprintf(stderr, "Error: cannot create the collection buffer: %v\n", err)
		return 1
	}
	actPath := actFile.Name()
	actFile.Close()
	defer os.Remove(actPath)

	scale := timeScale(env)
	delay, _ := strconv.ParseFloat(opts["--delay"], 64)
	duration, _ := strconv.ParseFloat(opts["--duration"], 64)

	stdout, stderr = lockWriters(stdout, stderr)
	a, t0, stopSignals, ok := startNSysApp(app, opts, env, actPath, stdout, stderr)
	if !ok {
		return 1
	}
	defer stopSignals()
	win := newCaptureWindow(opts, t0, delay, duration)
	if delay == 0 {
		fmt.Fprintln(stdout, "Collecting data...")
	}
	waitErr, interrupted := a.supervise(ctx, &win, delay, duration, scale)

	rep := newNSysReport(opts, app, t0, win, waitErr, interrupted)
	if err := fillReport(rep, actPath, opts["--trace"]); err != nil {
		fmt.Fprintf(stderr, "Error: reading collected data: %v\n", err)
	}
	if err := writeReport(out, rep); err != nil {
		fmt.Fprintf(stderr, "Failed to create '%s': %v\n", out, err)
		return 1
	}
	fmt.Fprintf(stdout, "Generating '%s'\n", filepath.Join(os.TempDir(), fmt.Sprintf("nsys-report-%04x.qdstrm", t0.UnixNano()%0x10000)))
	fmt.Fprintf(stdout, "[1/1] [========================100%%] %s\n", filepath.Base(out))
	if len(rep.Kernels) == 0 && strings.Contains(tracedAPIs(opts["--trace"]), "cuda") {
		fmt.Fprintln(stdout, "WARNING: No CUDA kernel data was collected. The application may have ended before the collection window (--delay/--duration) or launched no kernels.")
	}
	fmt.Fprintf(stdout, "Generated:\n    %s\n", out)
	return rep.AppExitCode
}

// nsysOutputPath resolves the report path as nsys does (-o with its %-expansions, or the
// first free reportN.nsys-rep in the working directory) and creates its directory; it
// prints nsys's error and reports false when the path exists without --force-overwrite or
// cannot be created.
func nsysOutputPath(opts, env map[string]string, stderr io.Writer) (string, bool) {
	cwd, _ := os.Getwd()
	out := opts["--output"]
	if out == "" {
		for n := 1; ; n++ {
			out = filepath.Join(cwd, "report"+strconv.Itoa(n)+".nsys-rep")
			if _, err := os.Stat(out); err != nil {
				break
			}
		}
	}
	out = expandOutput(out, env)
	if !filepath.IsAbs(out) {
		out = filepath.Join(cwd, out)
	}
	if _, err := os.Stat(out); err == nil && opts["--force-overwrite"] != "true" {
		fmt.Fprintf(stderr, "Failed to create '%s': File exists.\nUse `--force-overwrite true` to overwrite existing files.\n", out)
		return "", false
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		fmt.Fprintf(stderr, "Failed to create '%s': %v\n", out, err)
		return "", false
	}
	return out, true
}

// nsysAppCommand builds the profiled application's command: the caller's environment in a
// stable order, with the activity file it reports to appended last (replacing any inherited
// one).
func nsysAppCommand(app []string, env map[string]string, actPath string, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.Command(app[0], app[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = make([]string, 0, len(env)+1)
	for k, v := range env {
		if k != EnvNSysActivity {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	sort.Strings(cmd.Env)
	cmd.Env = append(cmd.Env, EnvNSysActivity+"="+actPath)
	return cmd
}

// captureWindow is the collection window on the application's simulated clock (ns), and
// whether the window's end stops the application and collection has begun.
type captureWindow struct {
	start, end           int64
	stopping, collecting bool
}

// newCaptureWindow derives the window from --delay, --duration and --capture-range.
//
// The window is followed on the application's simulated clock (the newest activity it
// reported), so it lands on the same part of the run whatever the time scale and however
// slow this machine is; a real-time deadline (twice the scaled window, plus a second)
// still ends an application that stopped progressing, as nsys's own timer would.
func newCaptureWindow(opts map[string]string, t0 time.Time, delay, duration float64) captureWindow {
	w := captureWindow{collecting: delay == 0}
	w.start = t0.UnixNano() + int64(delay*1e9)
	w.end = w.start + int64(duration*1e9)
	w.stopping = opts["--duration"] != ""
	if cr := opts["--capture-range"]; cr == "cudaProfilerApi" {
		// Collected between the application's cudaProfilerStart and cudaProfilerStop calls
		// (its activity file's cap records; fillReport keeps only what lies in a range).
		w.start, w.stopping = t0.UnixNano(), false
		w.collecting = true // "Collecting data..." is printed when a range opens, as below
	} else if cr != "" && cr != "none" {
		// sglang diffusion never calls cudaProfilerStart, pushes no capture range and sees no
		// hotkey: a capture range never opens (interface reference §D), so nothing is
		// collected and nothing stops the application.
		w.start, w.end, w.stopping = math.MaxInt64, math.MaxInt64, false
	}
	return w
}

// nsysApp is a running profiled application and what nsys watches it through.
// startNSysApp starts the application nsys profiles (nsys profile, nsys launch), its
// activity going to actPath, with SIGINT and SIGTERM caught for supervise to forward; the
// caller calls stopSignals when done. On a start failure it prints nsys's error and reports
// false.
func startNSysApp(app []string, opts, env map[string]string, actPath string, stdout, stderr io.Writer) (a *nsysApp, t0 time.Time, stopSignals func(), ok bool) {
	cmd := nsysAppCommand(app, env, actPath, stdout, stderr)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	t0 = time.Now()
	if err := cmd.Start(); err != nil {
		signal.Stop(sig)
		fmt.Fprintf(stderr, "Error: failed to launch the application '%s': %v\n", app[0], err)
		return nil, t0, nil, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	a = &nsysApp{cmd: cmd, opts: opts, done: done, sig: sig, prog: &progress{path: actPath}, stdout: stdout}
	return a, t0, func() { signal.Stop(sig) }, true
}

type nsysApp struct {
	cmd    *exec.Cmd
	opts   map[string]string
	done   <-chan error
	sig    <-chan os.Signal
	prog   *progress
	stdout io.Writer
}

// stop ends the application as --kill asks once the window closes.
func (a *nsysApp) stop() {
	switch k := a.opts["--kill"]; k {
	case "none":
	case "sigkill":
		a.cmd.Process.Kill()
	case "", "sigterm":
		a.cmd.Process.Signal(syscall.SIGTERM)
	default:
		n, _ := strconv.Atoi(k)
		a.cmd.Process.Signal(syscall.Signal(n))
	}
}

// supervise follows the application until it exits: it announces collection when the
// window opens, stops the application when the window (or the real-time deadline) ends,
// forwards signals, and on ctx's end terminates it (killing it after 5 s). It returns the
// application's wait error and whether it was interrupted.
func (a *nsysApp) supervise(ctx context.Context, w *captureWindow, delay, duration, scale float64) (waitErr error, interrupted bool) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var deadline <-chan time.Time
	if w.stopping && scale > 0 {
		st := time.NewTimer(time.Duration((delay+duration)*scale*2*float64(time.Second)) + time.Second)
		defer st.Stop()
		deadline = st.C
	}
	stop := func() {
		w.stopping = false
		deadline = nil
		a.stop()
	}
loop:
	for {
		select {
		case <-tick.C:
			now := a.prog.poll()
			if !w.collecting && (now >= w.start || delay == 0) {
				w.collecting = true
				fmt.Fprintln(a.stdout, "Collecting data...")
			}
			if w.stopping && now >= w.end {
				stop()
			}
		case <-deadline:
			stop()
		case waitErr = <-a.done:
			break loop
		case s := <-a.sig:
			interrupted = true
			a.cmd.Process.Signal(s)
		case <-ctx.Done():
			interrupted = true
			a.cmd.Process.Signal(syscall.SIGTERM)
			ctxDone := time.NewTimer(5 * time.Second)
			select {
			case waitErr = <-a.done:
			case <-ctxDone.C:
				a.cmd.Process.Kill()
				waitErr = <-a.done
			}
			break loop
		}
	}
	if !w.collecting && a.prog.poll() >= w.start {
		fmt.Fprintln(a.stdout, "Collecting data...")
	}
	return waitErr, interrupted
}

// newNSysReport starts the report of a finished session: its window, the application's exit
// (128+signal when it was killed by one) and the capture range's end mode.
func newNSysReport(opts map[string]string, app []string, t0 time.Time, w captureWindow, waitErr error, interrupted bool) *nsysReport {
	rep := &nsysReport{
		Magic: reportMagic, NSysVersion: NSysVersion, Command: app, Options: opts,
		SessionStartNS: t0.UnixNano(), WindowStartNS: w.start, Interrupted: interrupted,
	}
	if opts["--duration"] != "" && w.end != math.MaxInt64 {
		rep.WindowEndNS = w.end
	}
	rep.AppExitCode = 0
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		rep.AppExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			rep.AppSignal = ws.Signal().String()
			rep.AppExitCode = 128 + int(ws.Signal())
		}
	}
	if opts["--capture-range"] == "cudaProfilerApi" {
		rep.CaptureEnd = opts["--capture-range-end"]
		if rep.CaptureEnd == "" {
			rep.CaptureEnd = "stop-shutdown"
		}
	}
	return rep
}

// lockedWriter serialises writes: the application's output is copied by os/exec goroutines
// while nsys prints its own lines, and a caller's io.Writer need not be safe for that.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func lockWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	_, f1 := stdout.(*os.File)
	_, f2 := stderr.(*os.File)
	if f1 && f2 {
		return stdout, stderr // files: the child writes to them directly
	}
	mu := &sync.Mutex{}
	return lockedWriter{mu, stdout}, lockedWriter{mu, stderr}
}

// progress follows the end of the activity file: the end time in its last complete record
// is how far the application's simulated clock has got (records are appended as the run
// advances, each step closing with its NVTX range). Only the file's tail is read, so polling
// stays cheap however much activity the application writes.
type progress struct {
	path string
	size int64
	max  int64
}

func (p *progress) poll() int64 {
	f, err := os.Open(p.path)
	if err != nil {
		return p.max
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == p.size {
		return p.max
	}
	p.size = st.Size()
	off := max(p.size-8192, 0)
	buf := make([]byte, p.size-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		return p.max
	}
	start := bytes.LastIndexByte(buf[:end], '\n') + 1
	var r struct{ E int64 }
	if json.Unmarshal(buf[start:end], &r) == nil && r.E > p.max {
		p.max = r.E
	}
	return p.max
}

func tracedAPIs(v string) string {
	if v == "" {
		return "cuda,opengl,nvtx,osrt"
	}
	return v
}

// fillReport reads the activity file and keeps what the window and --trace allow.
func fillReport(rep *nsysReport, actPath, trace string) error {
	f, err := os.Open(actPath)
	if err != nil {
		return err
	}
	defer f.Close()
	a, err := readActivity(f)
	if err != nil {
		return err
	}
	apis := map[string]bool{}
	for _, t := range strings.Split(tracedAPIs(trace), ",") {
		apis[strings.TrimSpace(t)] = true
	}
	ranges := captureRanges(a.Caps, strings.HasPrefix(rep.CaptureEnd, "repeat"))
	in := func(s, e int64) bool {
		if rep.CaptureEnd != "" {
			for _, r := range ranges {
				if s >= r[0] && e <= r[1] {
					return true
				}
			}
			return false
		}
		if s < rep.WindowStartNS {
			return false
		}
		return rep.WindowEndNS == 0 || e <= rep.WindowEndNS
	}
	pid := int32(0)
	for _, p := range a.Procs {
		rep.Processes = append(rep.Processes, nsysgen.Process{PID: p.PID, Name: p.Name})
		pid = p.PID
	}
	for _, g := range a.GPUs {
		rep.GPUs = append(rep.GPUs, nsysgen.GPU{ID: g.Dev, Name: g.Name})
	}
	if apis["cuda"] || apis["cuda-sw"] {
		// nsys records the GPU work of the launches it captured, so every kept kernel and memcpy
		// has its launch call. A GPU op that runs inside the window but was launched before it
		// (the CPU runs ahead of a queue of work) is left out with its launch; keeping it would
		// make triage warn about unlinked ops, a problem of the simulator and not of the run.
		// An op whose correlation id no runtime record has is kept: activity written that way
		// asks for unlinked ops.
		launched := map[int64]bool{}
		captured := map[int64]bool{}
		for _, r := range a.RT {
			launched[r.Corr] = true
			if in(r.S, r.E) {
				captured[r.Corr] = true
			}
		}
		gpuIn := func(s, e, corr int64) bool { return in(s, e) && (captured[corr] || !launched[corr]) }
		for _, k := range a.Kernels {
			if gpuIn(k.S, k.E, k.Corr) {
				rep.Kernels = append(rep.Kernels, nsysgen.Kernel{Start: k.S, End: k.E, Device: k.Dev, Stream: k.Str, Correlation: k.Corr, Name: k.Name,
					GridX: k.G[0], GridY: k.G[1], GridZ: k.G[2], BlockX: k.B[0], BlockY: k.B[1], BlockZ: k.B[2], PID: pid})
			}
		}
		for _, r := range a.RT {
			if in(r.S, r.E) {
				rep.Runtime = append(rep.Runtime, nsysgen.Runtime{Start: r.S, End: r.E, PID: r.PID, TID: r.TID, Correlation: r.Corr, Name: versioned(r.Name)})
			}
		}
		for _, m := range a.Mems {
			if gpuIn(m.S, m.E, m.Corr) {
				rep.Memops = append(rep.Memops, nsysgen.Memop{Start: m.S, End: m.E, Device: m.Dev, Stream: m.Str, Correlation: m.Corr, Bytes: m.Bytes, CopyKind: m.CK, PID: pid})
			}
		}
	}
	if apis["nvtx"] {
		for _, n := range a.NVTX {
			if in(n.S, n.E) {
				rep.NVTX = append(rep.NVTX, nsysgen.NVTX{Start: n.S, End: n.E, PID: n.PID, TID: n.TID, Text: n.Text})
			}
		}
	}
	return nil
}

// versioned gives runtime API names the _vNNNN suffix nsys stores.
func versioned(name string) string {
	switch name {
	case "cudaLaunchKernel":
		return "cudaLaunchKernel_v7000"
	case "cudaGraphLaunch":
		return "cudaGraphLaunch_v10000"
	case "cudaMemcpyAsync":
		return "cudaMemcpyAsync_v3020"
	}
	return name
}

func nsysExport(args []string, stdout, stderr io.Writer) int {
	const usageExport = "usage: nsys export [<args>] <nsys-rep-file>\nTry 'nsys export --help' for more information.\n"
	typ, out, force := "", "", false
	var inputs []string
	for i := 0; i < len(args); i++ {
		tok := args[i]
		name, val, hasVal := tok, "", false
		if strings.HasPrefix(tok, "--") {
			if eq := strings.IndexByte(tok, '='); eq > 0 {
				name, val, hasVal = tok[:eq], tok[eq+1:], true
			}
		}
		next := func() (string, bool) {
			if hasVal {
				return val, true
			}
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch name {
		case "--type", "-t":
			v, ok := next()
			if !ok {
				fmt.Fprintf(stderr, "Error: the required argument for option '--type' is missing\n%s", usageExport)
				return 1
			}
			typ = v
		case "--output", "-o":
			v, ok := next()
			if !ok {
				fmt.Fprintf(stderr, "Error: the required argument for option '--output' is missing\n%s", usageExport)
				return 1
			}
			out = v
		case "--force-overwrite", "-f", "--lazy", "-l", "--quiet", "-q":
			v := "true"
			if hasVal {
				v = val
			} else if i+1 < len(args) && isBoolWord(args[i+1]) {
				i++
				v = args[i]
			}
			if !isBoolWord(v) {
				fmt.Fprintf(stderr, "Error: the argument ('%s') for option '%s' is invalid. Valid choices are 'true' and 'false'\n%s", v, name, usageExport)
				return 1
			}
			if name == "--force-overwrite" || name == "-f" {
				force = v == "true"
			}
		default:
			if strings.HasPrefix(tok, "-") {
				fmt.Fprintf(stderr, "Error: unrecognised option '%s'\n%s", name, usageExport)
				return 1
			}
			inputs = append(inputs, tok)
		}
	}
	if typ == "" {
		fmt.Fprintf(stderr, "Error: the option '--type' is required but missing\n%s", usageExport)
		return 1
	}
	if typ != "sqlite" {
		fmt.Fprintf(stderr, "Error: export type '%s' is not supported by the runner's nsys simulator (only sqlite)\n", typ)
		return 1
	}
	if len(inputs) != 1 {
		fmt.Fprintf(stderr, "Error: exactly one report file must be given\n%s", usageExport)
		return 1
	}
	in := inputs[0]
	if out == "" {
		out = strings.TrimSuffix(in, ".nsys-rep") + ".sqlite"
	}
	rep, err := readReport(in)
	if err != nil {
		fmt.Fprintf(stderr, "ERROR: Failed to open report '%s': %v\n", in, err)
		return 1
	}
	if _, err := os.Stat(out); err == nil && !force {
		fmt.Fprintf(stderr, "ERROR: Output file '%s' already exists. Use --force-overwrite true to overwrite it.\n", out)
		return 1
	}
	if err := nsysgen.Write(out, toExport(rep)); err != nil {
		fmt.Fprintf(stderr, "ERROR: Failed to write '%s': %v\n", out, err)
		return 1
	}
	return 0
}

// toExport converts a report to nsysgen's input, times relative to the session start as nsys
// stores them.
func toExport(rep *nsysReport) nsysgen.Export {
	t0 := rep.SessionStartNS
	e := nsysgen.Export{
		Version:            nsysgen.DefaultVersion,
		SessionStartUnixNs: t0,
		GPUs:               rep.GPUs,
		Processes:          rep.Processes,
	}
	for _, k := range rep.Kernels {
		k.Start -= t0
		k.End -= t0
		e.Kernels = append(e.Kernels, k)
	}
	for _, r := range rep.Runtime {
		r.Start -= t0
		r.End -= t0
		e.Runtime = append(e.Runtime, r)
	}
	for _, m := range rep.Memops {
		m.Start -= t0
		m.End -= t0
		e.Memops = append(e.Memops, m)
	}
	for _, n := range rep.NVTX {
		n.Start -= t0
		n.End -= t0
		e.NVTX = append(e.NVTX, n)
	}
	return e
}
