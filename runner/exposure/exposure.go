// Package exposure says what in a plan runs code or reaches the network on this machine.
//
// A plan names more than the argv of its cells (runner.Describe): variables set in every
// process, Slurm directives and setup lines that a shell runs on the node, and servers the
// runner contacts. A plan from someone else (a bug bundle) is untrusted, so `runner replay`
// lists all of it before it asks (Of), and a simulated replay drops all of it
// (SimulatorOnly). Both walk the same fields, here, so a new key that can run code or reach
// the network is added to both at once. The package knows plans and secret names only, so the
// orchestrator and the bundle library both use it without either importing the other.
package exposure

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/runner/secrets"
)

// EnvSetting is one variable a plan (or a bundle's manifest) sets in the processes it starts.
type EnvSetting struct {
	Name string
	// Value is shown as is, except a secret-named variable's, which is secrets.Redacted.
	Value string
	// Danger says how the variable can load or run code, or redirect traffic, in a process
	// that inherits it; "" for an ordinary one.
	Danger string
}

// String is the variable as the confirmation lists it.
func (e EnvSetting) String() string {
	s := e.Name + "=" + e.Value
	if e.Danger != "" {
		s += "   DANGEROUS: " + e.Danger
	}
	return s
}

// NewEnvSetting describes NAME=value for a listing: the value redacted when the name looks
// secret, the danger when it has one.
func NewEnvSetting(name, value string) EnvSetting {
	if secrets.IsSecretName(name) {
		value = secrets.Redacted
	}
	return EnvSetting{Name: name, Value: value, Danger: EnvDanger(name)}
}

// dangerousEnv are variables that make a program load or run code it would not otherwise, or
// send its traffic elsewhere, by exact name.
var dangerousEnv = map[string]string{
	"LD_PRELOAD":            "the dynamic loader loads these libraries into every process",
	"LD_LIBRARY_PATH":       "the dynamic loader looks for libraries here first",
	"LD_AUDIT":              "the dynamic loader loads these auditing libraries into every process",
	"PYTHONPATH":            "Python imports modules from here first",
	"PYTHONSTARTUP":         "Python runs this file at start",
	"PYTHONHOME":            "Python takes its standard library from here",
	"PYTHONUSERBASE":        "Python imports site packages from here",
	"PYTHONPLATLIBDIR":      "Python takes its standard library from here",
	"PYTHONBREAKPOINT":      "Python imports and calls this at breakpoint()",
	"PYTHONWARNINGS":        "Python imports the modules its categories name",
	"PYTHONEXECUTABLE":      "Python's idea of its own program",
	"BASH_ENV":              "bash runs this file before every script",
	"ENV":                   "sh runs this file at start",
	"SHELLOPTS":             "bash starts with these options",
	"PS4":                   "bash expands it (command substitution included) for every traced line",
	"PROMPT_COMMAND":        "bash runs it before every prompt",
	"IFS":                   "changes how shells split words",
	"PATH":                  "programs are looked up here",
	"NODE_OPTIONS":          "Node.js takes options (--require) from it",
	"NODE_PATH":             "Node.js loads modules from here",
	"PERL5LIB":              "Perl loads modules from here",
	"PERL5OPT":              "Perl takes options (-M) from it",
	"PERLLIB":               "Perl loads modules from here",
	"RUBYLIB":               "Ruby loads libraries from here",
	"RUBYOPT":               "Ruby takes options (-r) from it",
	"JAVA_TOOL_OPTIONS":     "the JVM takes options (-javaagent) from it",
	"_JAVA_OPTIONS":         "the JVM takes options (-javaagent) from it",
	"GCONV_PATH":            "glibc loads character-set modules from here",
	"CUDA_INJECTION64_PATH": "the CUDA driver loads this library into every CUDA process",
	"NCCL_NET_PLUGIN":       "NCCL loads this network plugin library",
	"NCCL_TUNER_PLUGIN":     "NCCL loads this tuner plugin library",
	"NCCL_PROFILER_PLUGIN":  "NCCL loads this profiler plugin library",
	"NCCL_ENV_PLUGIN":       "NCCL loads this environment plugin library",
	"TORCH_EXTENSIONS_DIR":  "PyTorch loads compiled extensions from here",
	"HF_ENDPOINT":           "model downloads go to this host",
	"HTTP_PROXY":            "HTTP traffic goes through this host",
	"HTTPS_PROXY":           "HTTPS traffic goes through this host",
	"ALL_PROXY":             "network traffic goes through this host",
	"NO_PROXY":              "changes which traffic bypasses the proxy",
}

// dangerousPrefixes are families of such variables.
var dangerousPrefixes = []struct{ prefix, why string }{
	{"LD_", "the dynamic loader reads it"},
	{"DYLD_", "the dynamic loader reads it"},
	{"BASH_FUNC_", "bash defines this function in every script"},
	{"GIT_", "git runs programs (ssh, credential helpers) it names"},
}

// EnvDanger says how a variable can load or run code, or redirect traffic, in a process that
// inherits it ("" for an ordinary variable). Names are compared as written and upper-cased
// (http_proxy is honoured too).
func EnvDanger(name string) string {
	up := strings.ToUpper(name)
	if why, ok := dangerousEnv[up]; ok {
		return why
	}
	for _, p := range dangerousPrefixes {
		if strings.HasPrefix(up, p.prefix) {
			return p.why
		}
	}
	return ""
}

// Exposure is what a plan makes this machine set, run or contact beyond the argv of its
// cells and of the environment probes (runner.Describe, runner.ProbeCommands).
type Exposure struct {
	// Env are the variables of [backend.env], by name.
	Env []EnvSetting
	// Slurm are the options of the sbatch script, as written to it (only with the Slurm
	// executor); Setup are the shell lines each task runs before its cell.
	Slurm []string
	Setup []string
	// Network are the hosts the runner contacts besides the servers it starts on loopback
	// at a free port: an attached server (backend.url), a server host or port the plan fixes.
	Network []string
	// Files are the paths the plan names that are read, loaded or run: backend.command's
	// program, the load's dataset_path.
	Files []string
	// Values are every string of the plan that a process or a shell receives (command, extra
	// arguments, variable values, setup lines, directives, paths), for a caller that looks for
	// files they name.
	Values []string
}

// Empty reports whether the plan sets, runs and contacts nothing beyond the runner's own
// simulators (under simulate) or the listed commands.
func (e Exposure) Empty() bool {
	return len(e.Env) == 0 && len(e.Slurm) == 0 && len(e.Setup) == 0 && len(e.Network) == 0
}

// Of lists what p sets, runs and contacts beyond its cells' argv, as a run of it would:
// executor, when not "", overrides the plan's executor kind (as runner.Options.Executor does
// for a run), and under simulate the simulators replace backend.command, so its program is
// not listed as a file that runs.
func Of(p *plans.Plan, executor string, simulate bool) Exposure {
	var e Exposure
	b := p.Backend
	for _, k := range slices.Sorted(maps.Keys(b.Env)) {
		e.Env = append(e.Env, NewEnvSetting(k, b.Env[k]))
		e.Values = append(e.Values, b.Env[k])
	}
	kind := p.Executor.Kind
	if executor != "" {
		kind = executor
	}
	if kind == plans.ExecutorSlurm {
		s := p.Executor.Slurm
		opt := func(name, v string) {
			if v != "" {
				e.Slurm = append(e.Slurm, "--"+name+"="+v)
			}
		}
		opt("partition", s.Partition)
		opt("account", s.Account)
		opt("qos", s.QOS)
		opt("time", s.Time)
		opt("mem", s.Mem)
		opt("constraint", s.Constraint)
		if s.GPUsPerTask > 0 {
			opt("gpus-per-task", strconv.Itoa(s.GPUsPerTask))
		}
		if s.CPUsPerTask > 0 {
			opt("cpus-per-task", strconv.Itoa(s.CPUsPerTask))
		}
		e.Slurm = append(e.Slurm, s.ExtraSbatch...)
		e.Setup = append(e.Setup, s.Setup...)
		e.Values = append(e.Values, e.Slurm...)
		e.Values = append(e.Values, s.Setup...)
	}
	if b.URL != "" {
		e.Network = append(e.Network, "backend.url "+b.URL+": an attached server, which the runner sends its requests to")
	}
	if b.URL == "" && (!loopback(b.Host) || b.Port != 0) {
		host, port := b.Host, "(a free port)"
		if b.Port != 0 {
			port = strconv.Itoa(b.Port)
		}
		e.Network = append(e.Network, "server "+net.JoinHostPort(host, port)+" (backend.host/port): the server listens there and the runner connects to it")
	}
	if !simulate && len(b.Command) > 0 {
		e.Files = append(e.Files, b.Command[0])
	}
	e.Values = append(e.Values, b.Command...)
	e.Values = append(e.Values, b.ExtraArgs...)
	for _, axis := range [][]plans.ServerArg{p.Matrix.ServerArgs, p.Matrix.Args} {
		for _, sa := range axis {
			e.Values = append(e.Values, sa.Values...)
		}
	}
	if p.Load.DatasetPath != "" {
		e.Files = append(e.Files, p.Load.DatasetPath)
		e.Values = append(e.Values, p.Load.DatasetPath)
	}
	return e
}

// SimulatorOnly removes from p everything Of lists, so that only the runner's
// built-in simulators run (they replace backend.command, which is never run under them): no
// [backend.env], no attached server (the simulated server stands in for it), no host other
// than loopback and no fixed port, no Slurm (the cells run on this machine). It returns one line per thing it removed, for the
// user. What stays is data the simulators and the load generator read: the matrix, the
// backend's arguments, the load, the dataset.
func SimulatorOnly(p *plans.Plan) []string {
	var dropped []string
	b := &p.Backend
	if len(b.Env) > 0 {
		names := slices.Sorted(maps.Keys(b.Env))
		dropped = append(dropped, fmt.Sprintf("[backend.env]: %d variable(s): %s", len(names), strings.Join(names, ", ")))
		b.Env = nil
	}
	if b.URL != "" {
		dropped = append(dropped, "backend.url "+b.URL+": a simulated server stands in for the attached one")
		b.URL = ""
	}
	if !loopback(b.Host) || b.Port != 0 {
		dropped = append(dropped, fmt.Sprintf("backend.host %q, backend.port %d: the simulated server listens on %s at a free port", b.Host, b.Port, plans.DefaultHost))
		b.Host, b.Port = plans.DefaultHost, 0
	}
	if p.Executor.Kind == plans.ExecutorSlurm {
		n := len(p.Executor.Slurm.Setup)
		dropped = append(dropped, fmt.Sprintf("[executor] kind = \"slurm\" with its sbatch options and %d setup line(s): the cells run here", n))
		p.Executor.Kind = plans.ExecutorLocal
		p.Executor.Slurm = plans.SlurmSpec{}
	}
	return dropped
}

// loopback reports whether a server host is this machine's loopback (the plan's default host):
// a server there is reached by nothing but this machine.
func loopback(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Redactor is the redactor of the files of a run of p (secrets.ForRun), the one the
// runner writes the run directory with and a bundle of the run packs it with: it knows the
// values of p's [backend.env] and of env's secret-named variables, p's [bundle] redact
// patterns, and the secrets the rules find in p's command lines (planCommands). p may be nil
// (a run directory whose plan does not load): then only env and the rules.
func Redactor(p *plans.Plan, env []string) (*secrets.Redactor, error) {
	if p == nil {
		return secrets.ForRun(nil, env, nil)
	}
	return secrets.ForRun(p.Backend.Env, env, p.Bundle.Redact, Commands(p)...)
}

// Commands are the command lines of p, each an argv: backend.command and extra_args as one,
// each Slurm setup line and sbatch directive, the attached server's URL, and each
// [backend.env] entry as NAME=value (a value may itself be a command line).
func Commands(p *plans.Plan) [][]string {
	out := [][]string{append(slices.Clone(p.Backend.Command), p.Backend.ExtraArgs...)}
	for _, l := range p.Executor.Slurm.Setup {
		out = append(out, []string{l})
	}
	for _, l := range p.Executor.Slurm.ExtraSbatch {
		out = append(out, []string{l})
	}
	if p.Backend.URL != "" {
		out = append(out, []string{p.Backend.URL})
	}
	for k, v := range p.Backend.Env {
		out = append(out, []string{k + "=" + v})
	}
	return out
}
