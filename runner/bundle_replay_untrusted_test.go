package runner

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
	"github.com/sglprof/runner/runner/exitcode"
)

// Everything in a bundle is untrusted, its manifest's "simulated": true included. These tests
// tamper with a simulated run's bundle the three ways that once ran code or reached the
// network on replay: a Slurm setup line, an LD_PRELOAD in [backend.env] pointing at a shared
// object inside the bundle, and a backend.url.

// tamper is one tampered simulated bundle and what would show that it did harm.
type tamper struct {
	name   string
	bundle string
	opts   ReplayOptions
	out    *bytes.Buffer
	// harm reports what the bundle made happen (a file written, a library loaded, a
	// connection received), "" when nothing.
	harm func(t *testing.T) string
	// listed are what the confirmation must show.
	listed []string
}

// sharedObject builds a shared library whose constructor appends to marker: a process that
// loads it says so. Without a C compiler it is a file with the same name that no loader
// accepts, and the tests rely on the replay's other traces.
func sharedObject(t *testing.T, marker string) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "evil.c")
	code := "#include <fcntl.h>\n#include <unistd.h>\n" +
		"__attribute__((constructor)) static void evil(void) {\n" +
		"  int fd = open(" + strconv.Quote(marker) + ", O_WRONLY | O_CREAT | O_APPEND, 0644);\n" +
		"  if (fd >= 0) { write(fd, \"loaded\\n\", 7); close(fd); }\n}\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Logf("no C compiler (%v): evil.so is not a real library", err)
		return []byte("not a library")
	}
	so := filepath.Join(dir, "evil.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	data, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// fileHarm reports the marker file's content when something wrote it.
func fileHarm(marker, what string) func(*testing.T) string {
	return func(*testing.T) string {
		if b, err := os.ReadFile(marker); err == nil {
			return what + ": " + strings.TrimSpace(string(b))
		}
		return ""
	}
}

// listener is a loopback server standing in for an arbitrary host; it counts the
// connections it receives.
type listener struct {
	ln    net.Listener
	addrs chan string // the remote address of each accepted connection, in order
}

func listen(t *testing.T) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{ln: ln, addrs: make(chan string, 1024)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(l.addrs)
				return
			}
			l.addrs <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// received counts the connections anyone but the test made so far: the test connects once
// itself, and connections are accepted in the order they arrived, so every one before its
// own came from the replay. No sleep and no timing: its own connection is the marker.
func (l *listener) received(t *testing.T) int {
	t.Helper()
	c, err := net.Dial("tcp", l.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mine := c.LocalAddr().String()
	n := 0
	for a := range l.addrs {
		if a == mine {
			return n
		}
		n++
	}
	t.Fatal("the listener stopped")
	return n
}

// fakeSlurm puts an sbatch and an scontrol first on PATH that do what a cluster does with the
// batch script's setup lines (run them), then fail the submission, so that a replay that gets
// as far as submitting shows it by the setup line's marker.
func fakeSlurm(t *testing.T, env []string) []string {
	t.Helper()
	bin := t.TempDir()
	scripts := map[string]string{
		"sbatch":   "#!/bin/sh\ncase \"$1\" in --version) echo 'slurm 23.11.4' ;; --parsable) sed '/^exec /,$d' \"$2\" | SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=1 bash >/dev/null 2>&1; echo 'no job' ;; esac\n",
		"scontrol": "#!/bin/sh\necho 'Slurmctld(primary) at localhost is UP'\n",
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The Slurm client looks its programs up on the test's own PATH; the cells get env's.
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	out := append([]string(nil), env...)
	for i, kv := range out {
		if strings.HasPrefix(kv, "PATH=") {
			out[i] = "PATH=" + bin + ":" + kv[len("PATH="):]
		}
	}
	return out
}

const servePlan = `name = "served"
[backend]
mode = "serve"
[matrix]
model = ["Qwen/Qwen-Image"]
prompt = ["a cat"]
num_inference_steps = [2]
[load]
warmup = 0
requests = 1
`

// tampered builds the three tampered simulated bundles.
func tampered(t *testing.T) []*tamper {
	t.Helper()
	var out []*tamper
	newCase := func(name string) *tamper {
		tc := &tamper{name: name, out: &bytes.Buffer{}}
		tc.opts = replayOpts(t, tc.out)
		tc.opts.Simulate = false // the bundle says simulated; the user said nothing
		return tc
	}

	// A Slurm setup line that writes a file as the replaying user.
	setup := newCase("setup")
	marker := filepath.Join(t.TempDir(), "setup-ran")
	line := "touch " + marker
	setup.bundle = rebundle(t, bundleOf(t, fallbackPlan, nil), func(name string, data []byte) []byte {
		if name == rundir.PlanFile {
			return append(data, []byte("\n[executor]\nkind = \"slurm\"\n[executor.slurm]\nextra_sbatch = [\"--exclusive\"]\nsetup = ["+strconv.Quote(line)+"]\n")...)
		}
		return data
	})
	setup.opts.Env = fakeSlurm(t, setup.opts.Env)
	setup.harm = fileHarm(marker, "the setup line ran")
	setup.listed = []string{"  " + line + "\n", "  --exclusive\n"}
	out = append(out, setup)

	// LD_PRELOAD of a shared object the bundle carries, at the path it is extracted to.
	preload := newCase("ld-preload")
	loaded := filepath.Join(t.TempDir(), "so-loaded")
	so := filepath.Join(preload.opts.Output, "bundle", "evil.so")
	preload.bundle = rebundleAdd(t, bundleOf(t, fallbackPlan, nil), func(name string, data []byte) []byte {
		if name == rundir.PlanFile {
			return append(data, []byte("\n[backend]\nenv = { LD_PRELOAD = "+strconv.Quote(so)+" }\n")...)
		}
		return data
	}, map[string][]byte{"evil.so": sharedObject(t, loaded)})
	preload.harm = fileHarm(loaded, "evil.so was loaded")
	preload.listed = []string{"  LD_PRELOAD=" + so + "   DANGEROUS: ", "  " + so + ": "}
	out = append(out, preload)

	// backend.url: the runner's requests go to an arbitrary host.
	attach := newCase("url")
	l := listen(t)
	u := "http://" + l.ln.Addr().String()
	attach.bundle = rebundle(t, bundleOf(t, servePlan, nil), func(name string, data []byte) []byte {
		if name == rundir.PlanFile {
			return bytes.Replace(data, []byte("[backend]\n"), []byte("[backend]\nurl = "+strconv.Quote(u)+"\nready_timeout = \"1s\"\n"), 1)
		}
		return data
	})
	attach.harm = func(t *testing.T) string {
		if n := l.received(t); n > 0 {
			return strconv.Itoa(n) + " connection(s) to " + u
		}
		return ""
	}
	attach.listed = []string{"  backend.url " + u + ": "}
	out = append(out, attach)
	return out
}

// Without a terminal and without --yes, a tampered simulated bundle runs nothing, contacts
// nothing, leaves nothing and is refused as a usage error (exit 2) that says how to proceed.
func TestReplayTamperedSimulatedNeedsYes(t *testing.T) {
	for _, tc := range tampered(t) {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Replay(context.Background(), tc.bundle, tc.opts)
			var ue *exitcode.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "pass --yes") || !strings.Contains(err.Error(), "in a terminal") {
				t.Errorf("err = %v, want a usage error saying to pass --yes or run in a terminal\n%s", err, tc.out)
			}
			if h := tc.harm(t); h != "" {
				t.Errorf("the bundle did harm: %s\n%s", h, tc.out)
			}
			if _, err := os.Stat(tc.opts.Output); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused replay left %s: %v", tc.opts.Output, err)
			}
		})
	}
}

// At a terminal, the confirmation lists the setup line, the LD_PRELOAD (dangerous, and the
// bundle's shared object it loads) and the URL before it asks; declined, nothing runs.
func TestReplayTamperedSimulatedConfirmationListsAll(t *testing.T) {
	for _, tc := range tampered(t) {
		t.Run(tc.name, func(t *testing.T) {
			var shown string
			asked := 0
			tc.opts.Confirm = func(string) (bool, error) {
				asked++
				shown = tc.out.String()
				return false, nil
			}
			_, err := Replay(context.Background(), tc.bundle, tc.opts)
			if err == nil || !strings.Contains(err.Error(), "not confirmed") || asked != 1 {
				t.Fatalf("asked %d times, err = %v\n%s", asked, err, tc.out)
			}
			for _, want := range tc.listed {
				if !strings.Contains(shown, want) {
					t.Errorf("the confirmation does not list %q:\n%s", want, shown)
				}
			}
			if h := tc.harm(t); h != "" {
				t.Errorf("declined, the bundle still did harm: %s", h)
			}
		})
	}
}

// --simulate runs the built-in simulators only: the setup line, the variables and the URL are
// dropped (and it says so), nothing is asked, nothing of the bundle's runs or is contacted.
func TestReplaySimulateDropsWhatTheBundleNames(t *testing.T) {
	drops := map[string]string{
		"setup":      `dropped: [executor] kind = "slurm"`,
		"ld-preload": "dropped: [backend.env]: 1 variable(s): LD_PRELOAD",
		"url":        "dropped: backend.url http://127.0.0.1:",
	}
	for _, tc := range tampered(t) {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Simulate = true
			res, err := Replay(context.Background(), tc.bundle, tc.opts)
			if err != nil {
				t.Fatalf("%v\n%s", err, tc.out)
			}
			if !strings.Contains(tc.out.String(), drops[tc.name]) {
				t.Errorf("output lacks %q:\n%s", drops[tc.name], tc.out)
			}
			if h := tc.harm(t); h != "" {
				t.Errorf("--simulate ran what the bundle names: %s\n%s", h, tc.out)
			}
			if len(res.Cells) == 0 || res.Cells[0].ReplayVerdict == "" {
				t.Errorf("no cell was replayed: %+v", res)
			}
		})
	}
}

// A manifest is no more trusted than a plan: a variable no run records (LD_PRELOAD) is not set
// from it, and a simulated bundle whose plan names nothing else replays without asking.
func TestReplayIgnoresEditedManifestEnv(t *testing.T) {
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate = false
	loaded := filepath.Join(t.TempDir(), "so-loaded")
	so := filepath.Join(opts.Output, "bundle", "evil.so")
	b := rebundleAdd(t, bundleOf(t, fallbackPlan, nil), func(name string, data []byte) []byte {
		if name == rundir.ManifestFile {
			return bytes.Replace(data, []byte(`"simulated": true`), []byte(`"simulated": true, "env": {"LD_PRELOAD": `+strconv.Quote(so)+`}`), 1)
		}
		return data
	}, map[string][]byte{"evil.so": sharedObject(t, loaded)})
	if _, err := Replay(context.Background(), b, opts); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got, err := os.ReadFile(loaded); err == nil {
		t.Errorf("the manifest's LD_PRELOAD was set: %s\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "the bundle's manifest lists LD_PRELOAD, which no run records") {
		t.Errorf("no warning:\n%s", out.String())
	}
}

// A real replay's confirmation lists more than argv: the plan's variables, the dangerous ones
// marked.
func TestReplayRealConfirmationListsEnv(t *testing.T) {
	b := realBundle(t, func(d []byte) []byte {
		return append(d, []byte("\n[backend]\nenv = { PYTHONPATH = \"/tmp/x\", SGLANG_FLAG = \"1\" }\n")...)
	})
	var out bytes.Buffer
	opts := replayOpts(t, &out)
	opts.Simulate = false
	_, err := Replay(context.Background(), b, opts)
	if err == nil || !strings.Contains(err.Error(), "pass --yes") {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"  PYTHONPATH=/tmp/x   DANGEROUS: Python imports modules from here first\n", "  SGLANG_FLAG=1\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the confirmation does not list %q:\n%s", want, out.String())
		}
	}
}
