package sglang

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sglprof/runner/plans"
)

// Flags of the ports a diffusion server binds besides its HTTP --port. With --strict-ports,
// ServerArgs._adjust_network_ports (python/sglang/multimodal_gen/runtime/server_args.py)
// fails at start, before the model loads, when --port, --scheduler-port (default 5555, the
// scheduler's ZMQ socket) or --master-port (torch.distributed, checked when set) cannot be
// bound; without it, it moves each to a free port instead.
const (
	FlagSchedulerPort = "--scheduler-port"
	FlagMasterPort    = "--master-port"
)

// StrictPorts returns the port flags, beyond --port, that the runner must choose and pass for
// cell c's server so that --strict-ports never meets a port some other process holds (a
// second server's scheduler on 5555, say): FlagSchedulerPort and FlagMasterPort for a
// diffusion server, minus any that backend.extra_args sets itself; none for an LLM server,
// which has no --strict-ports.
func StrictPorts(c plans.Cell) []string {
	if ModelType(c) != ModelTypeDiffusion || isLaunchServer(c.Backend.Command) {
		return nil
	}
	var out []string
	for _, f := range []string{FlagSchedulerPort, FlagMasterPort} {
		if !hasArg(c.Backend.ExtraArgs, f) {
			out = append(out, f)
		}
	}
	return out
}

// PortArgs renders flags with the ports chosen for them, in order, as argv elements
// ("--scheduler-port", "41234", ...). A negative or zero port, or a count mismatch, is an
// error: the runner would otherwise start a server that picks its own.
func PortArgs(flags []string, ports []int) ([]string, error) {
	if len(flags) != len(ports) {
		return nil, fmt.Errorf("sglang serve: %d port flags but %d ports", len(flags), len(ports))
	}
	out := make([]string, 0, 2*len(flags))
	for i, f := range flags {
		if ports[i] <= 0 || ports[i] > 65535 {
			return nil, fmt.Errorf("sglang serve: %s %d out of range", f, ports[i])
		}
		out = append(out, f, strconv.Itoa(ports[i]))
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
