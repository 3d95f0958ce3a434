// Package sim holds faithful stand-ins for the external programs the runner drives: `sglang`
// (generate and version) and `nsys` (--version, profile, export). They exist so the whole
// product can be exercised — by tests, by testscript scripts and by `runner run --simulate` —
// on a machine with nothing but Go: no GPU, no sglang, no Nsight Systems.
//
// The runner reaches them by re-executing its own binary (`runner sim sglang ...`,
// `runner sim nsys ...`); cmd/runner calls SGLang and NSys with the process's arguments,
// environment and stdio. Being program simulators, they — unlike the core packages — resolve
// relative paths against the real working directory (os.Getwd), start child processes and
// handle signals (os/signal), always inside the entry point and restored on return.
//
// What the simulators reproduce, and where the facts come from, is the interface reference
// (shared/docs/ref-sglang-interfaces.md §A.2–A.7, D; ref-trace-formats-and-analyzers.md §1, §3):
// argparse behaviour, the log lines with their timestamp format and ANSI colours, the perf-dump
// schema, the trace directory and file naming, the diffusers fallback, and nsys's command
// line, output and report/export files. Timings are plausible H100 figures, scaled by
// RUNNER_SIM_TIME_SCALE so a simulated 30-second run takes milliseconds.
//
// Environment knobs (all optional):
//
//	RUNNER_SIM_TIME_SCALE     real seconds slept per simulated second (default 0.002; 0 = no sleeping)
//	RUNNER_SIM_FAIL           comma list of failure modes: oom, crash, hang, hang-hard, slow,
//	                          trace-fail, trace-truncated, no-perf-dump, escape
//	RUNNER_SIM_ESCAPE_PORT    with the escape mode: the port its setsid grandchild listens on
//	RUNNER_SIM_SLOWDOWN       comma list of name=factor; names are stages (DenoisingStage,
//	                          TextEncodingStage, DecodingStage, ...) or kernel groups
//	                          (attention, gemm, norm, modulation, activation, elementwise,
//	                          conv, memcpy, comm); they lengthen logs, dumps and traces alike
//	RUNNER_SIM_SLOW_RANK      R or R=factor (default factor 1.3): with --tp-size > 1, rank R's
//	                          compute kernels run factor times longer and the other ranks'
//	                          all-reduces last as long as its extra compute (a straggler for
//	                          `runner triage`, named by compute time as in a real TP run)
//	RUNNER_SIM_LATE_RANK      R or R=ms (default 2 ms): with --tp-size > 1, rank R starts every
//	                          all-reduce that many ms late in /start_profile traces and the other
//	                          ranks wait for it inside the collective (skew for `runner triage`)
//	RUNNER_SIM_JITTER_SEED    integer mixed into the step-time jitter and the run-level noise
//	                          (default 0), so repeats of one cell can differ while staying
//	                          reproducible
//	RUNNER_SIM_RUN_CV         run-to-run coefficient of variation (default 0.01; 0 = none): every
//	                          time of one simulated process is scaled by one log-normal factor
//	                          drawn from the jitter seed, on top of the per-step jitter
//	RUNNER_SIM_KNOBS_FILE     a file of these knobs, one NAME=VALUE a line, read at start; a knob
//	                          set in the environment wins over the file's
//	RUNNER_SIM_NSYS_ACTIVITY  set by the nsys simulator for its child: file to append GPU activity to
package sim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sglprof/runner/backends/simclock"
)

// Version strings the simulated programs report.
const (
	SGLangVersion  = "0.5.9-sim"
	SGLangRevision = "5c3a8f1"
	sglangCommit   = "5c3a8f1d2e4b6a79880c1d2e3f4a5b6c7d8e9f01"
)

// Environment knobs read by the simulators (the time scale, which the runner's load client
// reads too, is simclock.EnvTimeScale).
const (
	EnvFail         = "RUNNER_SIM_FAIL"
	EnvSlowdown     = "RUNNER_SIM_SLOWDOWN"
	EnvNSysActivity = "RUNNER_SIM_NSYS_ACTIVITY"
	EnvJitterSeed   = "RUNNER_SIM_JITTER_SEED"
	EnvSlowRank     = "RUNNER_SIM_SLOW_RANK"
	EnvLateRank     = "RUNNER_SIM_LATE_RANK"
	EnvRunCV        = "RUNNER_SIM_RUN_CV"
)

// DefaultRunCV is the run-to-run coefficient of variation of a simulated process when
// RUNNER_SIM_RUN_CV is unset: about what repeats of an unprofiled diffusion run on one GPU
// show. Without it repeats differed only by per-step jitter, which averages out over 50 steps,
// so every comparison saw ±0% and no false-alarm test meant anything.
const DefaultRunCV = 0.01

// DefaultLateRankMS is how late (ms) the late rank starts its collectives when
// RUNNER_SIM_LATE_RANK names no delay.
const DefaultLateRankMS = 2.0

// parseLateRank reads RUNNER_SIM_LATE_RANK: "R" or "R=ms".
func parseLateRank(v string) (rank int, ns int64, err error) {
	rs, ms, hasMS := strings.Cut(v, "=")
	rank, err = strconv.Atoi(strings.TrimSpace(rs))
	f := DefaultLateRankMS
	if err == nil && hasMS {
		f, err = strconv.ParseFloat(strings.TrimSpace(ms), 64)
		if err == nil && !(f > 0 && f <= 60_000) {
			err = errors.New("delay out of range")
		}
	}
	if err != nil || rank < 0 {
		return -1, 0, errors.New("want a rank, optionally =milliseconds between 0 and 60000 (e.g. 3 or 3=2.5)")
	}
	return rank, int64(math.Round(f * 1e6)), nil
}

// lateComm is rank's CommLateNS and CommWaitNS (kinetogen.Config) under RUNNER_SIM_LATE_RANK:
// the late rank starts its collectives late, the others wait for it inside them.
func (k knobs) lateComm(rank, ranks int) (late, wait int64) {
	if k.lateRank < 0 || k.lateRank >= ranks || ranks < 2 {
		return 0, 0
	}
	if rank == k.lateRank {
		return k.lateNS, 0
	}
	return 0, k.lateNS
}

// DefaultSlowRankFactor is how much longer the straggler's compute kernels run when
// RUNNER_SIM_SLOW_RANK names no factor.
const DefaultSlowRankFactor = 1.3

// Failure modes accepted in RUNNER_SIM_FAIL.
var failModes = []string{"oom", "crash", "hang", "hang-hard", "slow", "trace-fail", "trace-truncated", "no-perf-dump", "escape",
	// server modes (serve.go)
	"never-ready", "crash-load", "slow-flush", "http-500", "bad-counts", "video-cancelled"}

// ANSI colours sglang puts into its log text (logging_utils.py).
const (
	ansiCyan  = "\033[1;36m"
	ansiGreen = "\033[92m"
	ansiReset = "\033[0;0m"
)

// knobs are the parsed environment knobs.
type knobs struct {
	scale  float64
	jitter uint64
	// runCV is the run-level coefficient of variation (RUNNER_SIM_RUN_CV).
	runCV float64
	fail  map[string]bool
	slow  map[string]float64
	// slowRank is the straggler rank (-1: none) and slowRankF its compute slowdown.
	slowRank  int
	slowRankF float64
	// lateRank is the rank that arrives late at every collective (-1: none), by lateNS.
	lateRank int
	lateNS   int64
}

func readKnobs(env map[string]string) (knobs, error) {
	k := knobs{scale: simclock.DefaultTimeScale, runCV: DefaultRunCV, fail: map[string]bool{}, slow: map[string]float64{}, slowRank: -1, slowRankF: DefaultSlowRankFactor, lateRank: -1}
	if v := strings.TrimSpace(env[EnvRunCV]); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 0.5) {
			return k, fmt.Errorf("%s=%q: want a coefficient of variation between 0 and 0.5, such as 0.01 (0 disables the run-level noise)", EnvRunCV, v)
		}
		k.runCV = f
	}
	if v := strings.TrimSpace(env[EnvSlowRank]); v != "" {
		rs, fs, hasF := strings.Cut(v, "=")
		r, err := strconv.Atoi(strings.TrimSpace(rs))
		f := DefaultSlowRankFactor
		if hasF {
			f, err = strconv.ParseFloat(strings.TrimSpace(fs), 64)
			if err == nil && !(f >= 1 && !math.IsInf(f, 0)) {
				err = errors.New("factor below 1")
			}
		}
		if err != nil || r < 0 {
			return k, fmt.Errorf("%s=%q: want a rank, optionally =factor >= 1 (e.g. 3 or 3=1.5)", EnvSlowRank, v)
		}
		k.slowRank, k.slowRankF = r, f
	}
	if v := strings.TrimSpace(env[EnvLateRank]); v != "" {
		r, ns, err := parseLateRank(v)
		if err != nil {
			return k, fmt.Errorf("%s=%q: %w", EnvLateRank, v, err)
		}
		k.lateRank, k.lateNS = r, ns
	}
	scale, err := simclock.ParseTimeScale(env[simclock.EnvTimeScale])
	if err != nil {
		return k, err
	}
	k.scale = scale
	if v := strings.TrimSpace(env[EnvJitterSeed]); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return k, fmt.Errorf("%s=%q: want an integer", EnvJitterSeed, v)
		}
		k.jitter = uint64(n)
	}
	for _, m := range strings.Split(env[EnvFail], ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		ok := false
		for _, f := range failModes {
			ok = ok || f == m
		}
		if !ok {
			return k, fmt.Errorf("%s: unknown failure mode %q (known: %s)", EnvFail, m, strings.Join(failModes, ", "))
		}
		k.fail[m] = true
	}
	for _, kv := range strings.Split(env[EnvSlowdown], ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if !ok || strings.TrimSpace(name) == "" || err != nil || !(f > 0) || math.IsInf(f, 0) {
			return k, fmt.Errorf("%s: %q is not name=factor with a positive factor (e.g. DenoisingStage=1.15)", EnvSlowdown, kv)
		}
		k.slow[strings.TrimSpace(name)] = f
	}
	return k, nil
}

// runFactor is a simulated process's run-level factor: exp(cv·z), z a standard normal (cut at
// ±4) drawn from the jitter seed and mix (what the process simulates, so configurations of one
// night differ), the same for every time the process reports: one process of a real run is
// uniformly a little faster or slower than another (clocks, placement, the machine's load).
func (k knobs) runFactor(mix uint64) float64 {
	if k.runCV == 0 {
		return 1
	}
	r := mrand.New(mrand.NewPCG(k.jitter*0x9e3779b97f4a7c15+0x5851f42d4c957f2d, mix))
	z := min(max(r.NormFloat64(), -4), 4)
	return math.Exp(k.runCV * z)
}

// errInterrupted is returned by clock.sleep when a signal or the context ends the run.
type errInterrupted struct{ sig os.Signal }

func (e *errInterrupted) Error() string {
	if e.sig == nil {
		return "context canceled"
	}
	return "interrupted by " + e.sig.String()
}

// clock is the simulated time line. virt advances by the full simulated durations; the real
// process sleeps only scale times as long. Absolute simulated times (now) are what the perf
// dump, the trace and the nsys activity use, so they all describe the same unscaled run.
type clock struct {
	ctx   context.Context
	scale float64
	start time.Time
	virt  atomic.Int64 // atomic: concurrent LLM requests advance it
	sig   <-chan os.Signal
}

func (c *clock) now() int64 { return c.start.UnixNano() + c.virt.Load() }

func (c *clock) interrupted() error {
	select {
	case s := <-c.sig:
		return &errInterrupted{sig: s}
	default:
	}
	select {
	case <-c.ctx.Done():
		return &errInterrupted{}
	default:
	}
	return nil
}

func (c *clock) sleep(ns int64) error {
	return c.sleepTo(ns, time.Now().Add(time.Duration(float64(ns)*c.scale)))
}

// sleepTo advances the simulated clock by ns and sleeps until due. A caller that takes many
// short steps keeps one deadline and adds each step's scaled time to it, so the steps' total
// is right even though each real sleep overshoots (a 23 µs token step would otherwise take the
// timer's granularity, often a millisecond).
func (c *clock) sleepTo(ns int64, due time.Time) error {
	c.virt.Add(ns)
	d := time.Until(due)
	if ns <= 0 || c.scale <= 0 || d <= 0 {
		return c.interrupted()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return c.interrupted()
	case s := <-c.sig:
		return &errInterrupted{sig: s}
	case <-c.ctx.Done():
		if err := c.interrupted(); err != nil {
			return err
		}
		return &errInterrupted{}
	}
}

// block waits until a signal arrives or the context ends (the "hang" failure mode).
func (c *clock) block() error {
	select {
	case s := <-c.sig:
		return &errInterrupted{sig: s}
	case <-c.ctx.Done():
		if err := c.interrupted(); err != nil {
			return err
		}
		return &errInterrupted{}
	}
}

// logger writes sglang's log format: "[MM-DD HH:MM:SS] message", one Write per line.
type logger struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logger) log(format string, a ...any) {
	msg := format
	if len(a) > 0 {
		msg = fmt.Sprintf(format, a...)
	}
	line := "[" + time.Now().Format("01-02 15:04:05") + "] " + msg + "\n"
	l.mu.Lock()
	io.WriteString(l.w, line)
	l.mu.Unlock()
}

func (l *logger) raw(s string) {
	l.mu.Lock()
	io.WriteString(l.w, s)
	l.mu.Unlock()
}

// SGLang runs the simulated `sglang` console script; args are the arguments after "sglang".
// It returns the process exit status. Logs go to stderr (Python logging's default stream),
// `version` output to stdout.
func SGLang(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "usage: sglang [-h] {generate,serve,version} ...\nsglang: error: the following arguments are required: command\n")
		return 2
	}
	if port := env[envEscapeListen]; port != "" {
		return listenForever(port)
	}
	switch args[0] {
	case "version":
		fmt.Fprintf(stdout, "sglang version: %s\ngit revision: %s\n", SGLangVersion, SGLangRevision)
		return 0
	case "generate":
		return generate(ctx, args[1:], env, stdout, stderr)
	case "-h", "--help":
		fmt.Fprint(stdout, "usage: sglang [-h] {generate,serve,version} ...\n\npositional arguments:\n  {generate,serve,version}\n    generate            Run offline generation (diffusion)\n    serve               Launch a server (diffusion or LLM)\n    version             Show the version\n")
		return 0
	case "serve":
		// The server simulator lives in serve.go.
		return serveMain(ctx, args[1:], env, stdout, stderr, false)
	case "-m":
		// `python -m sglang.launch_server ...` (the LLM-only entry), reached as
		// `sim sglang -m sglang.launch_server ...`.
		if len(args) > 1 && args[1] == "sglang.launch_server" {
			return serveMain(ctx, args[2:], env, stdout, stderr, true)
		}
	}
	fmt.Fprintf(stderr, "usage: sglang [-h] {generate,serve,version} ...\nsglang: error: argument command: invalid choice: '%s' (choose from 'generate', 'serve', 'version')\n", args[0])
	return 2
}

// request is one prompt's work.
type request struct {
	id       string
	prompt   string
	seed     int
	stages   []stageRun
	stepsMS  []float64
	totalMS  float64
	mem      []memCheckpoint
	outputs  []string
	trace    string
	startAbs int64
}

type stageRun struct {
	name string
	ms   float64
}

type memCheckpoint struct {
	stage                          string
	alloc, reserved, peakA, peakRe float64
}

// gen is one `sglang generate` invocation.
type gen struct {
	p         parsedArgs
	k         knobs
	env       map[string]string
	log       *logger
	stderr    io.Writer
	clk       *clock
	model     string
	prof      modelProfile
	diffusers bool
	w, h      int
	frames    int
	steps     int
	seed      int
	tp        int
	act       *activityWriter
	corr      int64
	rng       *mrand.Rand
	runF      float64 // the run-level factor (knobs.runFactor); 0 in emitter shims, meaning 1
	cwd       string
	hard      *exec.Cmd
}

func generate(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	const prog = "sglang generate"
	for _, a := range args {
		if a == "-h" || a == "--help" {
			fmt.Fprint(stdout, help(prog, generateSpecs))
			return 0
		}
	}
	p, err := parseArgs(generateSpecs, args)
	if err != nil {
		fmt.Fprint(stderr, usage(prog, generateSpecs))
		fmt.Fprintf(stderr, "%s: error: %s\n", prog, err)
		return 2
	}
	k, err := readKnobs(env)
	if err != nil {
		fmt.Fprintf(stderr, "runner sim: %v\n", err)
		return 2
	}
	g := &gen{p: p, k: k, env: env, log: &logger{w: stderr}, stderr: stderr}
	if cfg := p.str("config"); cfg != "" {
		if err := g.loadConfig(cfg); err != nil {
			g.log.log("Failed to load config %s: %v", cfg, err)
			return 1
		}
	}
	g.cwd, _ = os.Getwd()

	sig := make(chan os.Signal, 2)
	if k.fail["hang-hard"] {
		// Like a process stuck in native code with SIGINT/SIGTERM ignored: only SIGKILL works.
		// Each ignored signal is logged, so a test can tell that the stop ladder reached it.
		ign := make(chan os.Signal, 4)
		signal.Notify(ign, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(ign)
		go func() {
			for s := range ign {
				g.log.log("ignoring signal %s", s)
			}
		}()
	} else {
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sig)
	}
	g.clk = &clock{ctx: ctx, scale: k.scale, start: time.Now(), sig: sig}
	defer func() {
		if g.hard != nil && g.hard.Process != nil {
			g.hard.Process.Kill()
			g.hard.Wait()
		}
	}()

	code, err := g.run()
	var intr *errInterrupted
	if errors.As(err, &intr) {
		return g.interrupted(intr)
	}
	return code
}

// interrupted ends the run the way CPython does: SIGINT raises KeyboardInterrupt (exit 130);
// SIGTERM's default action kills the process by the signal.
func (g *gen) interrupted(e *errInterrupted) int {
	g.act.close()
	switch e.sig {
	case syscall.SIGINT:
		g.log.raw("Traceback (most recent call last):\n" +
			"  File \"/usr/local/bin/sglang\", line 8, in <module>\n    sys.exit(main())\n" +
			"  File \"/usr/local/lib/python3.12/dist-packages/sglang/cli/main.py\", line 41, in main\n    args.func(args)\n" +
			"  File \"/usr/local/lib/python3.12/dist-packages/sglang/multimodal_gen/runtime/entrypoints/cli/generate.py\", line 118, in generate_cmd\n    results = generator.generate(sampling_params_kwargs=sampling_kwargs)\n" +
			"  File \"/usr/local/lib/python3.12/dist-packages/sglang/multimodal_gen/runtime/entrypoints/diffusion_generator.py\", line 301, in generate\n    output = self._recv_result()\n" +
			"KeyboardInterrupt\n")
		return 130
	case syscall.SIGTERM:
		signal.Reset(syscall.SIGTERM)
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(100 * time.Millisecond)
		return 143
	}
	return 1
}

func (g *gen) loadConfig(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("only JSON configs are simulated: %w", err)
	}
	for k, v := range m {
		if g.p.has(k) {
			continue // the command line wins
		}
		switch x := v.(type) {
		case float64:
			if x == math.Trunc(x) {
				g.p[k] = int(x)
			} else {
				g.p[k] = x
			}
		case []any:
			var ss []string
			var ns []int
			for _, e := range x {
				switch y := e.(type) {
				case string:
					ss = append(ss, y)
				case float64:
					ns = append(ns, int(y))
				}
			}
			if ns != nil {
				g.p[k] = ns
			} else {
				g.p[k] = ss
			}
		default:
			g.p[k] = v
		}
	}
	if !g.p.has("model_path") {
		return errors.New("model_path is required")
	}
	return nil
}

func (g *gen) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(g.cwd, p)
}

func ms(d float64) int64 { return int64(d * 1e6) }

func (g *gen) sleepMS(d float64) error { return g.clk.sleep(ms(d)) }

// run is the generate lifecycle; it returns the exit status, or an *errInterrupted.
func (g *gen) run() (int, error) {
	p := g.p
	g.model = p.str("model_path")
	if code, ok := g.startWorkers(); !ok {
		return code, nil
	}
	known, ok := g.resolveBackend()
	if !ok {
		return 1, nil
	}
	g.startFailures()
	g.shape()
	prompts, ok := g.prompts()
	if !ok {
		return 1, nil
	}
	if a := g.openActivity(); a != nil {
		defer a.close()
	}
	if err := g.load(known); err != nil {
		return 0, err
	}
	if len(prompts) == 0 {
		g.log.log("Failed to generate output for prompt: ValueError: no prompt given; pass --prompt or --prompt-path")
		return 1, nil
	}
	if g.steps <= 0 {
		g.log.log("Failed to generate output for prompt 1: ValueError: num_inference_steps must be a positive integer, got %d", g.steps)
		return 1, nil
	}
	return g.batch(prompts)
}

// startWorkers logs the server arguments and checks the ranks against CUDA_VISIBLE_DEVICES:
// like torch, the workers see only those devices, and a rank whose device index does not exist
// fails at start. The runner's GPU slots are checked against the logged line.
func (g *gen) startWorkers() (int, bool) {
	p := g.p
	backend := p.str("backend")
	if backend == "" {
		backend = "auto"
	}
	g.tp = max(p.intv("tp_size", 1), p.intv("num_gpus", 1), 1)
	g.log.log("server_args: %s", g.serverArgsJSON(backend))
	if v, ok := g.env["CUDA_VISIBLE_DEVICES"]; ok {
		g.log.log("CUDA_VISIBLE_DEVICES=%s", v)
	}
	if vis := visibleGPUs(g.env); g.tp > vis {
		g.log.log("Launching %d worker processes (%d visible GPUs)", g.tp, vis)
		g.log.raw(fmt.Sprintf("[rank%d] RuntimeError: CUDA error: invalid device ordinal\n", vis))
		g.log.log("Initialization failed. Please see the error messages above.")
		return 1, false
	}
	return 0, true
}

// resolveBackend picks the native engine or the diffusers fallback as upstream does, and the
// model profile; it reports whether the model is known, and false in ok when sglang refuses
// to start (an unknown model with --backend sglang).
func (g *gen) resolveBackend() (known, ok bool) {
	p := g.p
	backend := p.str("backend")
	if backend == "" {
		backend = "auto"
	}
	prof, known := resolveModel(g.model, p.str("model_id"))
	switch {
	case backend == "diffusers":
		g.log.log("Using diffusers backend for model '%s' (explicitly requested)", g.model)
		g.diffusers = true
	case backend == "sglang" && !known:
		known := make([]string, len(KnownModels))
		for i, m := range KnownModels {
			known[i] = "'" + m + "'"
		}
		g.log.log("Could not resolve configuration for model '%s'. It is not a registered model path or detected by any registered model family detectors. Known model paths: [%s]. Consider using --backend diffusers to use vanilla diffusers pipeline.", g.model, strings.Join(known, ", "))
		g.log.raw("Traceback (most recent call last):\n" +
			"  File \"/usr/local/lib/python3.12/dist-packages/sglang/multimodal_gen/runtime/server_args/server_args.py\", line 912, in __post_init__\n    self._resolve_pipeline_config()\n" +
			"ValueError: Could not resolve model info for '" + g.model + "'. Use a registered model path, --model-id, or --backend diffusers.\n")
		g.log.log("Initialization failed. Please see the error messages above.")
		return false, false
	case backend == "auto" && quantized(g.model):
		g.log.log("Detected a quantized model format ('%s'). The native sglang-diffusion engine currently only supports BF16/FP16. Falling back to diffusers backend.", g.model)
		g.diffusers = true
	case backend == "auto" && !known:
		g.log.log("Could not resolve native configuration for model '%s'. Falling back to diffusers backend.", g.model)
		g.diffusers = true
	}
	if known {
		g.prof = prof
	} else {
		g.prof = diffusersProfile
		g.prof.id = g.model
	}
	if g.diffusers && known {
		g.prof.loadS, g.prof.stepMS = g.prof.loadS*1.3, g.prof.stepMS*1.25 // vanilla diffusers is slower
	}

	return known, true
}

// startFailures starts the failure modes that need a process of their own.
func (g *gen) startFailures() {
	if g.k.fail["escape"] {
		g.escape()
	}
	if g.k.fail["hang-hard"] {
		// a grandchild that also ignores SIGINT/SIGTERM, in our process group
		c := exec.Command("sh", "-c", "trap '' INT TERM; exec sleep 3600")
		if err := c.Start(); err == nil {
			g.hard = c
		}
	}

}

// shape reads resolution, frames, steps and seed.
func (g *gen) shape() {
	p := g.p
	g.w, g.h, g.frames = g.prof.w, g.prof.h, g.prof.frames
	switch {
	case p.boolv("4k"):
		g.w, g.h = 3840, 2160
	case p.boolv("2k"):
		g.w, g.h = 2560, 1440
	case p.boolv("1080p"):
		g.w, g.h = 1920, 1080
	case p.boolv("720p"):
		g.w, g.h = 1280, 720
	}
	g.w, g.h = p.intv("width", g.w), p.intv("height", g.h)
	if g.prof.video {
		g.frames = p.intv("num_frames", g.frames)
	} else {
		g.frames = 1
	}
	g.steps = p.intv("num_inference_steps", g.prof.steps)
	seeds, _ := p["seed"].([]int)
	g.seed = 1024
	if len(seeds) > 0 {
		g.seed = seeds[0]
	} else if n, ok := p["seed"].(int); ok {
		g.seed = n
	}
	g.rng = mrand.New(mrand.NewPCG(uint64(g.seed), uint64(len(g.model))*0x9e3779b97f4a7c15+uint64(g.w*g.h)+g.k.jitter*0xbf58476d1ce4e5b9))
	g.runF = g.k.runFactor(uint64(g.seed)<<32 ^ uint64(len(g.model))*0xbf58476d1ce4e5b9 ^ uint64(g.w*g.h*max(g.frames, 1)))
}

// rf is the run-level factor, 1 where none was drawn.
func (g *gen) rf() float64 {
	if g.runF == 0 {
		return 1
	}
	return g.runF
}

// prompts reads --prompt and --prompt-path; false when the prompt file cannot be read.
func (g *gen) prompts() ([]string, bool) {
	p := g.p
	prompts := p.strs("prompt")
	if s := p.str("prompt"); s != "" {
		prompts = []string{s}
	}
	if pp := p.str("prompt_path"); pp != "" {
		b, err := os.ReadFile(g.abs(pp))
		if err != nil {
			g.log.log("Failed to read prompt file %s: %v", pp, err)
			return nil, false
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				prompts = append(prompts, l)
			}
		}
	}

	return prompts, true
}

// openActivity opens the GPU activity file the nsys simulator reads (when the generate runs
// under it) and records the process and its GPUs; nil without one.
func (g *gen) openActivity() *activityWriter {
	path := g.env[EnvNSysActivity]
	if path == "" {
		return nil
	}
	a, err := openActivity(path)
	if err != nil {
		g.log.log("WARNING: %v", err) // the app keeps running, the report will be empty
		return nil
	}
	g.act = a
	a.put(&actRec{K: "proc", PID: int32(os.Getpid()), Name: "python3"})
	for d := 0; d < g.tp; d++ {
		a.put(&actRec{K: "gpu", Dev: int32(d), Name: "NVIDIA H100 80GB HBM3"})
	}
	a.flush()
	return a
}

// load logs the attention backend and the pipeline loading, and takes the load time.
func (g *gen) load(known bool) error {
	p := g.p
	if !g.diffusers {
		switch ab := p.str("attention_backend"); ab {
		case "", "fa", "fa3", "fa4":
			g.log.log("Using FlashAttention (FA3 for hopper, FA4 for blackwell) backend")
		case "torch_sdpa":
			g.log.log("Using Torch SDPA backend")
		case "sage_attn", "sage_attn_3":
			g.log.log("Using SageAttention backend")
		default:
			g.log.log("Using %s backend", ab)
		}
	}
	g.log.log("Starting server...")
	if g.diffusers {
		g.log.log("Loading diffusers pipeline from %s", g.model)
		g.log.log("Loading diffusers pipeline with dtype=torch.bfloat16, device_map=cuda")
	}
	if err := g.clk.sleep(int64(g.prof.loadS * 1e9)); err != nil {
		return err
	}
	if g.diffusers {
		cls := "DiffusionPipeline"
		if known {
			cls = g.prof.pipeline
		}
		g.log.log("Loaded diffusers pipeline: %s", cls)
		kind := "image"
		if g.prof.video {
			kind = "video"
		}
		g.log.log("Detected pipeline type: %s", kind)
	}
	g.log.log("Pipeline instantiated")
	g.log.log("Worker 0: Initialized device, model, and distributed environment.")
	g.log.log("Worker 0: Scheduler loop started.")

	return nil
}

// batch processes the prompts one after another, then logs the batch and writes the perf dump.
func (g *gen) batch(prompts []string) (int, error) {
	batchStart := g.clk.virt.Load()
	var done []*request
	outputs := 0
	var peaks []float64
	for i, pr := range prompts {
		g.log.log("Processing prompt %d/%d: %s", i+1, len(prompts), truncate(pr, 100))
		r := &request{id: uuid4(), prompt: pr, seed: g.seed}
		code, err := g.request(r, i+1)
		if err != nil || code != 0 {
			return code, err
		}
		done = append(done, r)
		outputs += max(len(r.outputs), 1)
		peaks = append(peaks, g.prof.peakGB*1024*g.memFactor())
	}
	total := float64(g.clk.virt.Load()-batchStart) / 1e6
	g.log.log("Completed batch processing. Generated %d outputs in %s%.2f%s seconds", outputs, ansiGreen, total/1000, ansiReset)
	var sum, mx float64
	for _, v := range peaks {
		sum += v
		mx = math.Max(mx, v)
	}
	g.log.log("Memory usage - Max peak: %.2f MB, Avg peak: %.2f MB", mx, sum/float64(len(peaks)))

	if dump := g.p.str("perf_dump_path"); dump != "" && !g.k.fail["no-perf-dump"] {
		abs := g.abs(dump)
		if err := writePerfDump(abs, done[0], g); err != nil {
			g.log.log("Failed to dump metrics to %s: %v", abs, err)
			return 1, nil
		}
		g.log.log("Metrics dumped to: %s%s%s", ansiCyan, abs, ansiReset)
	}
	return 0, nil
}

// memFactor grows activation memory with the pixel count.
func (g *gen) memFactor() float64 {
	f := g.prof.pixelFactor(g.w, g.h, g.frames)
	return (g.prof.residentG + (g.prof.peakGB-g.prof.residentG)*f) / g.prof.peakGB
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func uuid4() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// stageFactor is the slowdown of a named stage from RUNNER_SIM_SLOWDOWN (kernel-group factors
// included for the GPU-heavy stages).
func (g *gen) stageFactor(stage string) float64 {
	switch stage {
	case "DenoisingStage", "TextEncodingStage", "DecodingStage":
		return kinetogenStageFactor(stage, g.k.slow)
	}
	if f, ok := g.k.slow[stage]; ok {
		return f
	}
	return 1
}

// jit returns a deterministic factor in [1-a, 1+a].
func (g *gen) jit(a float64) float64 { return 1 + a*(2*g.rng.Float64()-1) }

func (g *gen) stepBaseMS(i int) float64 {
	base := g.prof.stepMS * g.prof.pixelFactor(g.w, g.h, g.frames)
	if g.tp > 1 {
		base = base / float64(g.tp) * 1.15
	}
	if i == 0 {
		base *= 1.06 // first step pays for lazy inits
	}
	if g.k.fail["slow"] {
		base *= 10
	}
	return base * g.jit(0.015) * g.rf()
}

// request runs one prompt through the pipeline stages.
func (g *gen) request(r *request, idx int) (int, error) {
	stages := g.pipelineStages()
	r.startAbs = g.clk.now()
	start := g.clk.virt.Load()

	profile, allStages, nProf := g.profileRequest(r)
	alloc := g.prof.residentG * 1024
	for _, st := range stages {
		g.log.log("[%s] started...", st)
		stStart := g.clk.virt.Load()
		stAbs := g.clk.now()
		if code, err := g.runStage(r, idx, st, stAbs, profile && !allStages, nProf); err != nil || code != 0 {
			return code, err
		}
		alloc = g.finishStage(r, st, stStart, stAbs, alloc)
	}
	if allStages {
		g.log.log("Stopping Profiler...")
		if err := g.saveTrace(r, g.steps); err != nil {
			return 0, err
		}
	}
	peak := g.prof.peakGB * g.memFactor()
	g.log.log("Peak GPU memory: %.2f GB, Remaining GPU memory at peak: %.2f GB.", peak, 79.19-peak)
	if err := g.saveOutputs(r); err != nil {
		g.log.log("Failed to save output: %v", err)
		return 1, nil
	}
	r.totalMS = float64(g.clk.virt.Load()-start)/1e6 + 3.2
	g.log.log("Pixel data generated successfully in %s%.2f%s seconds", ansiGreen, r.totalMS/1000, ansiReset)
	return 0, nil
}

// pipelineStages returns the pipeline's stages (one, for the diffusers fallback) and logs
// them as sglang does.
func (g *gen) pipelineStages() []string {
	stages := []string{"InputValidationStage", "TextEncodingStage", "ConditioningStage", "TimestepPreparationStage", "LatentPreparationStage", "DenoisingStage", "DecodingStage"}
	if g.diffusers {
		stages = []string{"DiffusersExecutionStage"}
	}
	snake := make([]string, len(stages))
	for i, s := range stages {
		snake[i] = "'" + toSnake(s) + "'"
	}
	if g.diffusers {
		snake = []string{"'diffusers_execution'"}
	}
	g.log.log("Running pipeline stages: [%s]", strings.Join(snake, ", "))
	return stages
}

// profileRequest reads the profiling flags for one request (--profile, with
// --profile-all-stages or --num-profiled-timesteps, capped at the step count) and logs the
// profiler's start as sglang does.
func (g *gen) profileRequest(r *request) (profile, allStages bool, nProf int) {
	profile = g.p.boolv("profile")
	allStages = profile && g.p.boolv("profile_all_stages")
	nProf = g.p.intv("num_profiled_timesteps", 5)
	if nProf < 0 || nProf > g.steps {
		nProf = g.steps
	}
	if profile {
		mode := strconv.Itoa(nProf) + " steps"
		if allStages {
			mode = "full stages"
		}
		g.log.log("Profiling request: %s for %s...", r.id, mode)
	}
	if allStages {
		g.log.log("Starting Profiler...")
	}
	return profile, allStages, nProf
}

// runStage spends one stage's simulated time and emits its kernels; profileSteps says whether
// the denoising loop profiles its first nProf steps.
func (g *gen) runStage(r *request, idx int, st string, stAbs int64, profileSteps bool, nProf int) (code int, err error) {
	switch st {
	case "DenoisingStage", "DiffusersExecutionStage":
		if g.diffusers {
			if err = g.sleepMS(g.prof.textMS * 1.2); err != nil {
				return 0, err
			}
		}
		code, err = g.denoise(r, idx, profileSteps, nProf)
		if err == nil && code == 0 && g.diffusers {
			err = g.sleepMS(g.prof.vaeMS * g.prof.pixelFactor(g.w, g.h, g.frames) * 1.2)
		}
	case "TextEncodingStage":
		d := g.prof.textMS * g.stageFactor(st) * g.jit(0.03) * g.rf()
		g.emitStage(kinetogenTextEncoding, stAbs, g.prof.textMS*g.rf())
		err = g.sleepMS(d)
	case "DecodingStage":
		base := g.prof.vaeMS * g.prof.pixelFactor(g.w, g.h, g.frames) * g.rf()
		g.emitStage(kinetogenDecoding, stAbs, base)
		err = g.sleepMS(base * g.stageFactor(st) * g.jit(0.03))
	case "InputValidationStage":
		err = g.sleepMS(0.08 * g.stageFactor(st) * g.rf())
	case "ConditioningStage":
		err = g.sleepMS(0.03 * g.stageFactor(st) * g.rf())
	case "TimestepPreparationStage":
		err = g.sleepMS(1.4 * g.stageFactor(st) * g.rf())
	case "LatentPreparationStage":
		err = g.sleepMS(0.7 * g.stageFactor(st) * g.rf())
	}
	return code, err
}

// finishStage logs a finished stage, records its time and memory checkpoint, marks it with an
// NVTX range and returns the allocated MiB after it.
func (g *gen) finishStage(r *request, st string, stStart, stAbs int64, alloc float64) float64 {
	d := float64(g.clk.virt.Load()-stStart) / 1e6
	if st == "DenoisingStage" {
		g.log.log("[DenoisingStage] average time per step: %.4f seconds", avg(r.stepsMS)/1000)
	}
	g.log.log("[%s] finished in %.4f seconds", st, d/1000)
	r.stages = append(r.stages, stageRun{name: st, ms: d})
	switch st {
	case "TextEncodingStage":
		alloc += 1200
	case "LatentPreparationStage":
		alloc += 64 * g.prof.pixelFactor(g.w, g.h, g.frames)
	case "DecodingStage":
		alloc -= 800
	}
	peak := g.prof.peakGB * 1024 * g.memFactor()
	r.mem = append(r.mem, memCheckpoint{stage: st, alloc: alloc, reserved: alloc * 1.04, peakA: math.Max(alloc, peak*0.97), peakRe: peak})
	g.nvtx(st, stAbs, g.clk.now())
	g.act.flush()
	return alloc
}

func avg(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func toSnake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// denoise runs the steps with a tqdm bar on stderr, the failure modes that strike mid-loop,
// and the denoise-only profiler window (warmup step 0, then nProf+1 active steps).
func (g *gen) denoise(r *request, idx int, profile bool, nProf int) (int, error) {
	stage := "DenoisingStage"
	if g.diffusers {
		stage = "DiffusersExecutionStage"
	}
	factor := g.stageFactor("DenoisingStage")
	if profile {
		g.log.log("Starting Profiler...")
	}
	profLast := min(nProf+1, g.steps-1) // last step the profiler records
	profFirst := min(1, g.steps-1)
	var profSteps []int64
	var profStart int64
	t0 := g.clk.virt.Load()
	g.log.raw(tqdm(0, g.steps, 0))
	for i := 0; i < g.steps; i++ {
		if i == 0 && g.k.fail["oom"] {
			return g.oom(stage, idx)
		}
		if i == max(1, g.steps/3) && (g.k.fail["hang"] || g.k.fail["hang-hard"]) {
			if g.k.fail["hang-hard"] {
				<-g.clk.ctx.Done() // signals are ignored: only SIGKILL (or the caller's context) ends this
				return 0, &errInterrupted{}
			}
			return 0, g.clk.block()
		}
		if i == min(3, g.steps-1) && g.k.fail["crash"] {
			g.log.raw("\n")
			g.log.log("Rank 0 scheduler is dead. Please check if there are relevant logs.")
			g.log.log("Exit code: -9")
			g.log.log("Failed to generate output for prompt %d: RuntimeError: Rank 0 scheduler is dead", idx)
			return 1, nil
		}
		base := g.stepBaseMS(i)
		if profile && i <= profLast {
			base *= 1.2 // the profiler's own overhead lands in the step times
		}
		stepAbs := g.clk.now()
		if profile && i == profFirst {
			profStart = stepAbs
		}
		g.emitStep(i, stepAbs, base)
		d := base * factor
		if err := g.sleepMS(d); err != nil {
			return 0, err
		}
		r.stepsMS = append(r.stepsMS, d)
		if profile && i >= profFirst && i <= profLast {
			profSteps = append(profSteps, int64(base*1e6))
		}
		g.nvtx("denoising_step_"+strconv.Itoa(i), stepAbs, g.clk.now())
		g.act.flush()
		g.log.raw(tqdm(i+1, g.steps, float64(g.clk.virt.Load()-t0)/1e9))
		if profile && i == profLast {
			g.log.raw("\n")
			g.log.log("Stopping Profiler...")
			if err := g.saveProfiled(r, profStart, profFirst, profSteps, nProf); err != nil {
				return 0, err
			}
			profile = false
		}
	}
	g.log.raw("\n")
	return 0, nil
}

// oom prints what a CUDA OOM in the first denoising step looks like and fails the request.
func (g *gen) oom(stage string, idx int) (int, error) {
	need := 2.5 * g.prof.pixelFactor(g.w, g.h, g.frames)
	msg := fmt.Sprintf("CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of 79.19 GiB of which %.2f GiB is free. "+
		"Including non-PyTorch memory, this process has %.2f GiB memory in use. Of the allocated memory %.2f GiB is allocated by PyTorch, "+
		"and %.2f MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "+
		"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "+
		"(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)", need, need*0.4, 79.19-need*0.4, 79.19-need*0.4-1.1, 412.25)
	g.log.raw("\n")
	g.log.log("[%s] Error during execution after %.4f ms: %s", stage, 812.3456, msg)
	g.log.log("Failed to generate output for prompt %d: %s", idx, msg)
	g.log.raw("Traceback (most recent call last):\n" +
		"  File \"/usr/local/lib/python3.12/dist-packages/sglang/multimodal_gen/runtime/pipelines_core/composed_pipeline_base.py\", line 398, in forward\n    batch = stage(batch, server_args)\n" +
		"  File \"/usr/local/lib/python3.12/dist-packages/sglang/multimodal_gen/runtime/pipelines_core/stages/denoising.py\", line 1012, in forward\n    noise_pred = self._predict_noise(batch, latent_model_input, t)\n" +
		"  File \"/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py\", line 1775, in _call_impl\n    return forward_call(*args, **kwargs)\n" +
		"torch.OutOfMemoryError: " + msg + "\n")
	return 1, nil
}

// tqdm renders one tqdm frame ("\r  40%|████      | 20/50 [00:02<00:03,  9.87it/s]").
func tqdm(n, total int, elapsed float64) string {
	const width = 10
	frac := float64(n) / float64(total)
	full := int(frac * width)
	bar := strings.Repeat("█", full)
	if full < width {
		parts := []string{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"}
		part := parts[int((frac*width-float64(full))*8)]
		if part == "" {
			part = " "
		}
		bar += part
		bar += strings.Repeat(" ", width-full-1)
	}
	rate, remain := "?it/s", "?"
	if n > 0 && elapsed > 0 {
		r := float64(n) / elapsed
		if r >= 1 {
			rate = fmt.Sprintf("%5.2fit/s", r)
		} else {
			rate = fmt.Sprintf("%5.2fs/it", 1/r)
		}
		remain = clockFmt(float64(total-n) / r)
	}
	return fmt.Sprintf("\r%3.0f%%|%s| %d/%d [%s<%s, %s]", frac*100, bar, n, total, clockFmt(elapsed), remain, rate)
}

func clockFmt(s float64) string {
	t := int(s) // tqdm truncates
	if t >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", t/3600, t/60%60, t%60)
	}
	return fmt.Sprintf("%02d:%02d", t/60, t%60)
}

// serverArgsJSON renders the sanitised ServerArgs dump sglang logs first.
func (g *gen) serverArgsJSON(backend string) string {
	p := g.p
	type kv struct {
		k string
		v any
	}
	str := func(k, def string) any {
		if p.has(k) {
			return p.str(k)
		}
		if def == "" {
			return nil
		}
		return def
	}
	boolOr := func(k string) any {
		if v, ok := p[k].(bool); ok {
			return v
		}
		return nil
	}
	out := p.str("output_path")
	if !p.has("output_path") {
		out = "outputs/"
	}
	fields := []kv{
		{"model_path", p.str("model_path")}, {"model_id", str("model_id", "")}, {"backend", backend},
		{"attention_backend", str("attention_backend", "")}, {"num_gpus", p.intv("num_gpus", 1)},
		{"tp_size", p.intv("tp_size", -1)}, {"sp_degree", p.intv("sp_degree", -1)},
		{"ulysses_degree", p.intv("ulysses_degree", -1)}, {"ring_degree", p.intv("ring_degree", -1)},
		{"dp_size", p.intv("data_parallel_size", 1)}, {"enable_cfg_parallel", boolOr("enable_cfg_parallel")},
		{"performance_mode", str("performance_mode", "auto")}, {"enable_torch_compile", p.boolv("enable_torch_compile")},
		{"warmup_mode", str("warmup_mode", "")}, {"dit_cpu_offload", boolOr("dit_cpu_offload")},
		{"text_encoder_cpu_offload", boolOr("text_encoder_cpu_offload")}, {"vae_cpu_offload", boolOr("vae_cpu_offload")},
		{"pin_cpu_memory", boolOr("pin_cpu_memory")}, {"enable_layerwise_nvtx_marker", p.boolv("enable_layerwise_nvtx_marker")},
		{"host", str("host", "127.0.0.1")}, {"port", p.intv("port", 30000)}, {"scheduler_port", p.intv("scheduler_port", 5555)},
		{"master_port", p.intv("master_port", 30005)}, {"output_path", out}, {"log_level", str("log_level", "info")},
		{"trust_remote_code", p.boolv("trust_remote_code")}, {"revision", str("revision", "")},
		{"lora_path", str("lora_path", "")},
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		kb, _ := json.Marshal(f.k)
		vb, _ := json.Marshal(f.v)
		b.Write(kb)
		b.WriteString(": ")
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.String()
}

// saveOutputs writes the generated image(s) (a small valid PNG) or video placeholder(s),
// named like sglang's default: <prompt[:100]>_<YYYYmmdd-HHMMSS>_<sha8>, sanitised.
func (g *gen) saveOutputs(r *request) error {
	p := g.p
	outDir := "outputs/"
	if p.has("output_path") {
		outDir = p.str("output_path")
	}
	name := p.str("output_file_name")
	if fp := p.str("output_file_path"); fp != "" {
		outDir = filepath.Dir(fp)
		name = filepath.Base(fp)
	}
	if outDir == "" || (p.has("save_output") && !p.boolv("save_output")) {
		return nil
	}
	ext := ".png"
	if g.prof.video {
		ext = ".mp4"
	}
	dir := g.abs(outDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	n := max(p.intv("num_outputs_per_prompt", 1), 1)
	for i := 0; i < n; i++ {
		base := name
		if base == "" {
			sum := sha256.Sum256([]byte(r.prompt + "|" + strconv.Itoa(r.seed) + "|" + r.id))
			base = sanitize(truncate(r.prompt, 100)) + "_" + time.Now().Format("20060102-150405") + "_" + hex.EncodeToString(sum[:4])
			if len(base) > 150 {
				base = base[:150]
			}
		} else if e := strings.ToLower(filepath.Ext(base)); e == ".png" || e == ".jpg" || e == ".jpeg" || e == ".webp" || e == ".mp4" {
			base, ext = strings.TrimSuffix(base, filepath.Ext(base)), e
		}
		if n > 1 {
			base += "_" + strconv.Itoa(i)
		}
		path := filepath.Join(dir, base+ext)
		var data []byte
		switch {
		case g.prof.video || ext == ".mp4":
			data = fakeMP4()
		case ext == ".jpg" || ext == ".jpeg":
			data = jpegImage(g.seed + i)
		default:
			data = pngImage(g.seed + i)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		r.outputs = append(r.outputs, path)
		g.log.log("Output saved to %s", filepath.Join(outDir, base+ext))
	}
	return nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// The escape mode: a grandchild that leaves the process group and the session
// (setsid), as a daemonising worker does, and holds a port, out of reach of any group signal.
const (
	envEscapePort   = "RUNNER_SIM_ESCAPE_PORT"
	envEscapeListen = "RUNNER_SIM_ESCAPE_LISTEN" // set for the grandchild itself
)

// escape starts the grandchild: this very program again (the same binary and arguments, so it
// reaches SGLang under the runner and under the test binaries alike), told to listen.
func (g *gen) escape() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	c := exec.Command(exe, os.Args[1:]...)
	c.Env = append(os.Environ(), envEscapeListen+"="+g.env[envEscapePort])
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err == nil {
		// The line says the worker holds its port, so the worker must hold it by then: a test
		// that acts on the line (kills the runner, checks the port) raced the worker's start on
		// a loaded machine. A daemonising worker is usually up before its parent says so, too.
		addr := net.JoinHostPort("127.0.0.1", g.env[envEscapePort])
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				break
			}
		}
		g.log.log("started a detached worker (pid %d)", c.Process.Pid)
		c.Process.Release()
	}
}

// listenForever is the escaped grandchild: it holds the port until killed.
func listenForever(port string) int {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return 1
	}
	for {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}
}
