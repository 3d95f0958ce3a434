package sglang

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sglprof/runner/backends"
	"github.com/sglprof/runner/plans"
)

// Flags of the ports a diffusion server binds besides its HTTP --port. With --strict-ports,
// ServerArgs._adjust_network_ports (python/sglang/multimodal_gen/runtime/server_args.py)
// fails at start, before the model loads, when --port, --scheduler-port + r for every
// data-parallel replica r < --dp-size (default 5555, the schedulers' ZMQ sockets) or
// --master-port (torch.distributed, checked when set) cannot be bound, or when two of them are
// the same port; without it, it moves each to a free port instead.
const (
	FlagSchedulerPort = "--scheduler-port"
	FlagMasterPort    = "--master-port"
)

// StrictPorts returns the port flags, beyond --port, that the runner must choose and pass for
// cell c's server so that --strict-ports never meets a port some other process holds (a
// second server's scheduler on 5555, say): FlagSchedulerPort, spanning one port per
// data-parallel replica (DPSize), and FlagMasterPort for a diffusion server, minus any that
// backend.extra_args sets itself; none for an LLM server, which has no --strict-ports.
func StrictPorts(c plans.Cell) []backends.PortFlag {
	if ModelType(c) != ModelTypeDiffusion || isLaunchServer(c.Backend.Command) {
		return nil
	}
	var out []backends.PortFlag
	for _, f := range []backends.PortFlag{{Flag: FlagSchedulerPort, Span: DPSize(c.Backend.ExtraArgs)}, {Flag: FlagMasterPort, Span: 1}} {
		if !hasArg(c.Backend.ExtraArgs, f.Flag) {
			out = append(out, f)
		}
	}
	return out
}

// DPSize is the data-parallel size args give the diffusion server (--data-parallel-size N,
// --dp-size N, --dp N or the = forms; the last one wins, as in argparse), 1 when unset. A value that is not a
// positive integer counts as 1: the server's argparse rejects it before any port matters.
func DPSize(args []string) int {
	n := 1
	for i, a := range args {
		for _, f := range []string{"--data-parallel-size", "--dp-size", "--dp"} {
			v, ok := "", false
			if a == f && i+1 < len(args) {
				v, ok = args[i+1], true
			} else if rest, cut := strings.CutPrefix(a, f+"="); cut {
				v, ok = rest, true
			}
			if ok {
				if k, err := strconv.Atoi(v); err == nil && k > 0 {
					n = k
				} else {
					n = 1
				}
			}
		}
	}
	return n
}

// PortArgs renders flags with the ports chosen for them, in order, as argv elements
// ("--scheduler-port", "41234", ...). A port out of range (for any port of the flag's span),
// or a count mismatch, is an error: the runner would otherwise start a server that picks its
// own.
func PortArgs(flags []backends.PortFlag, ports []int) ([]string, error) {
	if len(flags) != len(ports) {
		return nil, fmt.Errorf("sglang serve: %d port flags but %d ports", len(flags), len(ports))
	}
	out := make([]string, 0, 2*len(flags))
	for i, f := range flags {
		if ports[i] <= 0 || ports[i]+max(f.Span, 1)-1 > 65535 {
			return nil, fmt.Errorf("sglang serve: %s %d out of range", f.Flag, ports[i])
		}
		out = append(out, f.Flag, strconv.Itoa(ports[i]))
	}
	return out, nil
}

// hasArg reports whether args set flag ("--f V" or "--f=V").
func hasArg(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}
