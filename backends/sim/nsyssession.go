package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Interactive nsys sessions, as the Nsight Systems CLI has them: `nsys launch
// --session-new=NAME app...` starts the application with collection off and stays in the
// foreground until it exits; `nsys start --session=NAME -o FILE` opens a collection and
// `nsys stop --session=NAME` closes it and writes the report while the application keeps
// running; `nsys shutdown --session=NAME` ends the session (its application gets SIGTERM,
// nsys's default --kill). A session exists only while its launch runs; starting a collection
// twice, or stopping one that was never started, is an error, as in nsys.
//
// The simulator keeps a session as a directory under the temporary directory: session.json
// (the launch's pid, the application's activity file, --trace) and, while a collection is
// open, collection.json (the report path and the window's start on the application's
// simulated clock). The window is read on the application's clock (the end of the newest
// activity it reported), so it holds exactly the work done between start and stop.

type nsysSession struct {
	PID     int      `json:"pid"`
	Act     string   `json:"activity"`
	Trace   string   `json:"trace"`
	StartNS int64    `json:"start_ns"`
	Command []string `json:"command"`
}

type nsysCollection struct {
	Output  string `json:"output"`
	StartNS int64  `json:"start_ns"`
}

func sessionDir(name string) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("nsys-sim-sessions-%d", os.Getuid()), name)
}

func validSessionName(name string) bool {
	if name == "" || !(name[0] >= 'a' && name[0] <= 'z' || name[0] >= 'A' && name[0] <= 'Z') {
		return false
	}
	for _, r := range name {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func readSession(name string) (*nsysSession, error) {
	b, err := os.ReadFile(filepath.Join(sessionDir(name), "session.json"))
	if err != nil {
		return nil, fmt.Errorf("session '%s' does not exist", name)
	}
	var s nsysSession
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("session '%s' is damaged: %v", name, err)
	}
	if syscall.Kill(s.PID, 0) != nil {
		os.RemoveAll(sessionDir(name))
		return nil, fmt.Errorf("session '%s' does not exist", name)
	}
	return &s, nil
}

// activityEnd is how far the application's simulated clock has got: the latest end (or
// start) of any record in its activity file.
func activityEnd(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	var end int64
	for {
		var r actRec
		if dec.Decode(&r) != nil {
			return end
		}
		end = max(end, r.E, r.S)
	}
}

// sessionOpts parses the options of start, stop and shutdown: --session=NAME (or --session
// NAME) and the few each takes.
func sessionOpts(cmd string, args []string, allowed ...string) (map[string]string, error) {
	opts := map[string]string{}
	short := map[string]string{"-o": "--output", "-f": "--force-overwrite"}
	for i := 0; i < len(args); i++ {
		name, val, has := strings.Cut(args[i], "=")
		if l, ok := short[name]; ok {
			name = l
		}
		ok := name == "--session"
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return nil, fmt.Errorf("unrecognised option '%s' for 'nsys %s'", args[i], cmd)
		}
		if !has {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("the required argument for option '%s' is missing", name)
			}
			i++
			val = args[i]
		}
		opts[name] = val
	}
	if opts["--session"] == "" {
		// nsys falls back to the current session; the runner always names one, and the
		// simulator has no notion of a current session.
		return nil, fmt.Errorf("no session was given; use --session=NAME")
	}
	return opts, nil
}

func nsysLaunch(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	const usage = "\nusage: nsys launch [<args>] <application> [<application args>]\n"
	opts, app, err := parseProfile(args)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v%s", err, usage)
		return 1
	}
	if len(app) == 0 {
		fmt.Fprintf(stderr, "Error: no application was specified.%s", usage)
		return 1
	}
	for _, o := range []string{"--output", "--delay", "--duration", "--capture-range", "--stats", "--export"} {
		if _, ok := opts[o]; ok {
			fmt.Fprintf(stderr, "Error: unrecognised option '%s' for 'nsys launch'%s", o, usage)
			return 1
		}
	}
	name := opts["--session-new"]
	if name == "" {
		// nsys would create a default session; the runner always names one.
		fmt.Fprintf(stderr, "Error: the runner's nsys simulator needs --session-new=NAME with launch%s", usage)
		return 1
	}
	if !validSessionName(name) {
		fmt.Fprintf(stderr, "Error: invalid session name '%s': it must start with a letter and hold letters, digits, '_' and '-' only\n", name)
		return 1
	}
	if _, err := readSession(name); err == nil {
		fmt.Fprintf(stderr, "Error: session '%s' already exists\n", name)
		return 1
	}
	dir := sessionDir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "Error: cannot create session '%s': %v\n", name, err)
		return 1
	}
	defer os.RemoveAll(dir)
	actPath := filepath.Join(dir, "activity.jsonl")
	stdout, stderr = lockWriters(stdout, stderr)
	a, t0, stopSignals, ok := startNSysApp(app, opts, env, actPath, stdout, stderr)
	if !ok {
		return 1
	}
	defer stopSignals()
	s := nsysSession{PID: os.Getpid(), Act: actPath, Trace: opts["--trace"], StartNS: t0.UnixNano(), Command: app}
	b, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, "session.json"), b, 0o644); err != nil {
		fmt.Fprintf(stderr, "Error: cannot record session '%s': %v\n", name, err)
		a.cmd.Process.Kill()
		<-a.done
		return 1
	}
	// Collection is off until `nsys start`: the window never stops the application.
	win := captureWindow{collecting: true}
	waitErr, _ := a.supervise(ctx, &win, 0, 0, 0)
	rep := newNSysReport(opts, app, t0, win, waitErr, false)
	return rep.AppExitCode
}

// openSession parses a session command's options (--session and extra) and reads the session
// it names; on failure it prints nsys's error and reports false.
func openSession(verb string, args []string, stderr io.Writer, extra ...string) (map[string]string, string, *nsysSession, bool) {
	opts, err := sessionOpts(verb, args, extra...)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return nil, "", nil, false
	}
	name := opts["--session"]
	s, err := readSession(name)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return nil, "", nil, false
	}
	return opts, name, s, true
}

func nsysStart(args []string, env map[string]string, stdout, stderr io.Writer) int {
	opts, name, s, ok := openSession("start", args, stderr, "--output", "--force-overwrite")
	if !ok {
		return 1
	}
	cpath := filepath.Join(sessionDir(name), "collection.json")
	if _, err := os.Stat(cpath); err == nil {
		fmt.Fprintf(stderr, "Error: a collection is already started in session '%s'; use 'nsys stop' first\n", name)
		return 1
	}
	out, ok := nsysOutputPath(opts, env, stderr)
	if !ok {
		return 1
	}
	c := nsysCollection{Output: out, StartNS: activityEnd(s.Act)}
	b, _ := json.Marshal(c)
	if err := os.WriteFile(cpath, b, 0o644); err != nil {
		fmt.Fprintf(stderr, "Error: cannot start the collection: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "Collecting data...")
	return 0
}

func nsysStop(args []string, stdout, stderr io.Writer) int {
	_, name, s, ok := openSession("stop", args, stderr)
	if !ok {
		return 1
	}
	cpath := filepath.Join(sessionDir(name), "collection.json")
	b, err := os.ReadFile(cpath)
	if err != nil {
		fmt.Fprintf(stderr, "Error: no collection is started in session '%s'; use 'nsys start' first\n", name)
		return 1
	}
	var c nsysCollection
	if err := json.Unmarshal(b, &c); err != nil {
		fmt.Fprintf(stderr, "Error: session '%s' is damaged: %v\n", name, err)
		return 1
	}
	defer os.Remove(cpath)
	end := activityEnd(s.Act)
	rep := &nsysReport{Magic: reportMagic, NSysVersion: NSysVersion, Command: s.Command,
		Options:        map[string]string{"--session": name, "--trace": s.Trace},
		SessionStartNS: s.StartNS, WindowStartNS: c.StartNS, WindowEndNS: max(end, c.StartNS+1)}
	if err := fillReport(rep, s.Act, s.Trace); err != nil {
		fmt.Fprintf(stderr, "Error: reading collected data: %v\n", err)
	}
	if err := writeReport(c.Output, rep); err != nil {
		fmt.Fprintf(stderr, "Failed to create '%s': %v\n", c.Output, err)
		return 1
	}
	fmt.Fprintf(stdout, "Generated:\n    %s\n", c.Output)
	return 0
}

func nsysShutdown(args []string, stderr io.Writer) int {
	opts, name, s, ok := openSession("shutdown", args, stderr, "--kill")
	if !ok {
		return 1
	}
	// An open collection is cancelled: no report.
	os.Remove(filepath.Join(sessionDir(name), "collection.json"))
	var err error
	switch k := opts["--kill"]; k {
	case "none":
		// nsys detaches its launch and leaves the application running; the simulator's launch
		// keeps waiting for it (the runner never asks for this).
	case "", "sigterm":
		err = syscall.Kill(s.PID, syscall.SIGTERM)
	case "sigkill":
		err = syscall.Kill(s.PID, syscall.SIGKILL)
	default:
		err = errors.New("--kill must be none, sigterm or sigkill in the runner's nsys simulator")
	}
	if err != nil {
		fmt.Fprintf(stderr, "Error: shutdown of session '%s': %v\n", name, err)
		return 1
	}
	return 0
}
