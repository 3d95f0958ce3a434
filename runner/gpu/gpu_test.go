package gpu

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
)

const idleGPUs = `0, GPU-aaaa, 0 %, 1 MiB, 1980 MHz, 1980 MHz, 0x0000000000000001, Enabled, 70.12 W, 33
1, GPU-bbbb, 3 %, 2048 MiB, 1755 MHz, 1980 MHz, 0x0000000000000004, Enabled, 690.50 W, 81
`

// fakeSMI writes a stand-in nvidia-smi into a fresh directory and returns an environment whose
// PATH finds it. body is a shell case on the first argument's prefix.
func fakeSMI(t *testing.T, gpus, apps, clock string, extra string) []string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"gpus.csv": gpus, "apps.csv": apps, "clock.txt": clock} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\n" + extra + `
case "$1" in
--query-gpu=*) cat "` + dir + `/gpus.csv" ;;
--query-compute-apps=*) cat "` + dir + `/apps.csv" ;;
-q) cat "` + dir + `/clock.txt" ;;
topo) echo "GPU0 X" ;;
*) echo "unknown option $1" >&2; exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + dir + ":/usr/bin:/bin"}
}

func TestSnapshotIdleAndThrottled(t *testing.T) {
	env := fakeSMI(t, idleGPUs, "", "", "")
	s := Prober{Env: env}.Snapshot(context.Background(), nil)
	if !s.Available() {
		t.Fatalf("snapshot unavailable: %s", s.Error)
	}
	if len(s.GPUs) != 2 || len(s.Apps) != 0 {
		t.Fatalf("got %d GPUs %d apps, want 2 and 0", len(s.GPUs), len(s.Apps))
	}
	g := s.GPUs[1]
	want := rundir.GPUState{Index: 1, UUID: "GPU-bbbb", UtilPct: 3, MemUsedMiB: 2048, SMClockMHz: 1755, MaxSMMHz: 1980,
		Throttle: ReasonSWPowerCap, Reasons: []string{"sw_power_cap"}, Persistence: "Enabled", PowerW: 690.5, TempC: 81}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("GPU 1 = %+v\nwant %+v", g, want)
	}
	msg := Throttled(s.GPUs)
	if !strings.Contains(msg, "GPU 1 sw_power_cap") || strings.Contains(msg, "GPU 0") {
		t.Errorf("Throttled = %q: want GPU 1's power cap only (GPU 0 is merely idle)", msg)
	}
	// Restricting to GPU 0 drops GPU 1 and its throttling.
	s0 := Prober{Env: env}.Snapshot(context.Background(), []int{0})
	if len(s0.GPUs) != 1 || s0.GPUs[0].Index != 0 || Throttled(s0.GPUs) != "" {
		t.Errorf("Snapshot([0]) = %+v", s0.GPUs)
	}
}

func TestSnapshotForeignProcess(t *testing.T) {
	apps := "4242, python3 -m other, job, 30000 MiB, GPU-aaaa\n777, sglang::scheduler, 5000 MiB, GPU-bbbb\n"
	env := fakeSMI(t, idleGPUs, apps, "", "")
	s := Prober{Env: env}.Snapshot(context.Background(), []int{0})
	if !s.Available() {
		t.Fatal(s.Error)
	}
	if len(s.Apps) != 1 {
		t.Fatalf("apps on GPU 0 = %+v, want only pid 4242", s.Apps)
	}
	a := s.Apps[0]
	if a.PID != 4242 || a.Name != "python3 -m other, job" || a.UsedMiB != 30000 || a.GPU != 0 {
		t.Errorf("app = %+v", a)
	}
	own := func(pid int) bool { return pid == 777 }
	all := Prober{Env: env}.Snapshot(context.Background(), nil)
	f := Foreign(all.Apps, own)
	if len(f) != 1 || f[0].PID != 4242 {
		t.Fatalf("Foreign = %+v, want pid 4242 only (777 is the cell's)", f)
	}
	msg := BusyMessage(f)
	for _, w := range []string{"pid 4242", "python3 -m other, job", "30000 MiB", "GPU 0"} {
		if !strings.Contains(msg, w) {
			t.Errorf("BusyMessage = %q, missing %q", msg, w)
		}
	}
}

func TestSnapshotFailures(t *testing.T) {
	cases := []struct {
		name, gpus, extra, want string
		timeout                 time.Duration
	}{
		{"garbage", "this is not csv at all\n", "", "fields, want 10", 0},
		{"letters for a clock", "0, GPU-a, 0 %, 1 MiB, fast, 1980 MHz, 0x0, Enabled, 70 W, 33\n", "", `"fast" is not a number of MHz`, 0},
		{"empty", "", "", "no GPU listed", 0},
		{"fails", idleGPUs, "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver' >&2; exit 9\n", "could not communicate", 0},
		{"hangs", idleGPUs, "exec sleep 30\n", "timed out", 300 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := fakeSMI(t, c.gpus, "", "", c.extra)
			t0 := time.Now()
			s := Prober{Env: env, Timeout: c.timeout}.Snapshot(context.Background(), nil)
			if s.Available() || !strings.Contains(s.Error, c.want) {
				t.Fatalf("Error = %q, want it to contain %q", s.Error, c.want)
			}
			if c.timeout > 0 && time.Since(t0) > 10*time.Second {
				t.Errorf("a hanging nvidia-smi held the probe for %s", time.Since(t0))
			}
		})
	}
	s := Prober{Env: []string{"PATH=" + t.TempDir()}}.Snapshot(context.Background(), nil)
	if !strings.Contains(s.Error, "unavailable: nvidia-smi not found on PATH") {
		t.Errorf("missing nvidia-smi: Error = %q", s.Error)
	}
}

const clockHeader = `==============NVSMI LOG==============

Timestamp                                 : Tue Nov 24 10:00:00 2026
Driver Version                            : 560.35.03
CUDA Version                              : 12.6

Attached GPUs                             : 1
`

func clockSection(app, def, boost, appSetting string) string {
	return `GPU 00000000:18:00.0
    Performance State                     : P0
    Clocks Event Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : ` + appSetting + `
        SW Power Cap                      : Not Active
    Clocks
        Graphics                          : 1980 MHz
        SM                                : 1980 MHz
    Applications Clocks
        Graphics                          : ` + app + `
        Memory                            : 2619 MHz
    Default Applications Clocks
        Graphics                          : ` + def + `
        Memory                            : 2619 MHz
    Clock Policy
        Auto Boost                        : ` + boost + `
        Auto Boost Default                : N/A
`
}

func TestParseClockLock(t *testing.T) {
	cases := []struct {
		name   string
		out    string
		locked bool
		err    string
	}{
		{"floating", clockHeader + clockSection("1980 MHz", "1980 MHz", "N/A", "Not Active"), false, ""},
		{"application clocks set (-ac)", clockHeader + clockSection("1410 MHz", "1980 MHz", "N/A", "Not Active"), true, ""},
		{"locked gpu clocks (-lgc)", clockHeader + clockSection("1980 MHz", "1980 MHz", "N/A", "Active"), true, ""},
		{"auto boost off", clockHeader + clockSection("1980 MHz", "1980 MHz", "Off", "Not Active"), true, ""},
		{"one of two floating", clockHeader + clockSection("1410 MHz", "1980 MHz", "N/A", "Not Active") +
			clockSection("1980 MHz", "1980 MHz", "N/A", "Not Active"), false, ""},
		{"no GPU", clockHeader, false, "no GPU section"},
		{"no application clocks", clockHeader + "GPU 00000000:18:00.0\n    Clocks\n        SM : 1 MHz\n", false, "no Applications Clocks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			locked, err := ParseClockLock([]byte(c.out))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || locked != c.locked {
				t.Fatalf("locked = %v, %v; want %v", locked, err, c.locked)
			}
		})
	}
	env := fakeSMI(t, idleGPUs, "", clockHeader+clockSection("1410 MHz", "1980 MHz", "N/A", "Not Active"), "")
	if locked, err := (Prober{Env: env}).ClocksLocked(context.Background()); err != nil || !locked {
		t.Errorf("ClocksLocked through the stand-in = %v, %v; want true", locked, err)
	}
}

func TestLeaked(t *testing.T) {
	before := rundir.GPUSnapshot{GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 100}, {Index: 1, MemUsedMiB: 100}}}
	after := rundir.GPUSnapshot{
		GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 9100}, {Index: 1, MemUsedMiB: 6100}},
		Apps: []rundir.GPUApp{{PID: 50, Name: "other", UsedMiB: 6000, GPU: 1}, {PID: 60, Name: "cell-child", UsedMiB: 0, GPU: 1}},
	}
	got := Leaked(before, after, func(pid int) bool { return pid == 60 })
	if len(got) != 2 || !strings.Contains(got[0], "pid 60") || !strings.Contains(got[1], "GPU 0 holds 9000 MiB more") {
		t.Fatalf("Leaked = %q: want the cell's leftover pid 60 and GPU 0's unowned 9000 MiB (GPU 1's growth is held by pid 50)", got)
	}

	// A neighbour holds 30000 MiB before and after the cell: a 5000 MiB leak beside it is
	// still one (subtracting all that is held after hid it), and the neighbour is none.
	foreign := rundir.GPUApp{PID: 70, Name: "python3 other_job.py", UsedMiB: 30000, GPU: 0}
	before = rundir.GPUSnapshot{GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 30100}}, Apps: []rundir.GPUApp{foreign}}
	leak := rundir.GPUSnapshot{GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 35100}}, Apps: []rundir.GPUApp{foreign}}
	if got := Leaked(before, leak, nil); len(got) != 1 || !strings.Contains(got[0], "GPU 0 holds 5000 MiB more") {
		t.Errorf("a leak beside a neighbour present throughout: Leaked = %q, want GPU 0's 5000 MiB", got)
	}
	if got := Leaked(before, before, nil); got != nil {
		t.Errorf("a neighbour present throughout, nothing leaked: Leaked = %q, want nothing", got)
	}
	// The neighbour leaves during the cell: its memory freed is no leak, and does not hide one.
	gone := rundir.GPUSnapshot{GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 5100}}}
	if got := Leaked(before, gone, nil); len(got) != 1 || !strings.Contains(got[0], "5000 MiB more") {
		t.Errorf("a leak as the neighbour leaves: Leaked = %q, want GPU 0's 5000 MiB", got)
	}

	// Serve mode: the cell's server holds its memory before and after the client phase, and
	// grows its cache during it; that is held, not leaked (own answers no for the server,
	// which outlives the cell by design). Memory beyond it that nobody holds is a leak.
	server := rundir.GPUApp{PID: 80, Name: "python3 -m sglang.launch_server", UsedMiB: 40000, GPU: 0}
	grown := server
	grown.UsedMiB = 45000
	before = rundir.GPUSnapshot{GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 40200}}, Apps: []rundir.GPUApp{server}}
	after = rundir.GPUSnapshot{GPUs: []rundir.GPUState{{Index: 0, MemUsedMiB: 45300}}, Apps: []rundir.GPUApp{grown}}
	if got := Leaked(before, after, func(int) bool { return false }); got != nil {
		t.Errorf("serve: the server's own growth: Leaked = %q, want nothing", got)
	}
	after.GPUs[0].MemUsedMiB = 47200
	if got := Leaked(before, after, func(int) bool { return false }); len(got) != 1 || !strings.Contains(got[0], "2000 MiB more") {
		t.Errorf("serve: 2000 MiB beyond the server's: Leaked = %q, want GPU 0's 2000 MiB", got)
	}
	if got := Leaked(rundir.GPUSnapshot{Error: "x"}, after, nil); got != nil {
		t.Errorf("Leaked with an unreadable snapshot = %q, want nothing", got)
	}
}

func TestInterpreterAndCheckEnv(t *testing.T) {
	dir := t.TempDir()
	py := filepath.Join(dir, "python")
	script := `#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "sglang.check_env" ]; then echo "Python: 3.12.3"; echo "sglang: 0.5.6"; exit 0; fi
if [ "$1" = "-c" ]; then echo '{"python":"3.12.3","torch":"2.9.1","cuda_runtime":"12.8","nccl":"2.27.3"}'; exit 0; fi
exit 1
`
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sglang"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + dir + ":/usr/bin:/bin"}
	for _, cmd := range [][]string{{"sglang"}, {filepath.Join(dir, "sglang")}, {"python", "-m", "sglang.launch_server"}} {
		if got := Interpreter(cmd, env); got != py {
			t.Errorf("Interpreter(%q) = %q, want %q", cmd, got, py)
		}
	}
	if got := Interpreter([]string{"/usr/bin/env"}, env); got != "" && !strings.HasPrefix(filepath.Base(got), "python") {
		t.Errorf("Interpreter(/usr/bin/env) = %q", got)
	}
	out, err := CheckEnv(context.Background(), py, env, 5*time.Second)
	if err != nil || !strings.Contains(out, "sglang: 0.5.6") {
		t.Fatalf("CheckEnv = %q, %v", out, err)
	}
	v, err := LibraryVersions(context.Background(), py, env, 5*time.Second)
	if err != nil || v.Torch != "2.9.1" || v.NCCL != "2.27.3" || v.CUDA != "12.8" {
		t.Fatalf("LibraryVersions = %+v, %v", v, err)
	}
	slow := filepath.Join(dir, "slowpython")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckEnv(context.Background(), slow, env, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("a hanging check_env: err = %v, want a timeout", err)
	}
	if _, err := CheckEnv(context.Background(), "", env, time.Second); err == nil {
		t.Error("CheckEnv with no interpreter succeeded")
	}
}

func FuzzParseGPUs(f *testing.F) {
	f.Add([]byte(idleGPUs))
	f.Add([]byte("0, a, [N/A], [Not Supported], 1 MHz, 2 MHz, 0x1, Disabled, [N/A], 30\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := ParseGPUs(b)
		if err == nil && len(gpus) == 0 {
			t.Fatal("no error and no GPU")
		}
		for _, g := range gpus {
			if g.Index < 0 {
				t.Fatalf("negative index %d", g.Index)
			}
			if !reflect.DeepEqual(g.Reasons, ReasonNames(g.Throttle)) {
				t.Fatalf("reasons %v do not spell mask %#x", g.Reasons, g.Throttle)
			}
		}
	})
}

func FuzzParseApps(f *testing.F) {
	f.Add([]byte("4242, python3, 30000 MiB, GPU-aaaa\n"))
	f.Add([]byte("1, a, b, c, 1 MiB, GPU-x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		apps, _ := ParseApps(b)
		for _, a := range apps {
			if a.PID <= 0 {
				t.Fatalf("pid %d accepted", a.PID)
			}
		}
	})
}

func FuzzParseClockLock(f *testing.F) {
	f.Add([]byte(clockHeader + clockSection("1980 MHz", "1980 MHz", "N/A", "Not Active")))
	f.Add([]byte("GPU 0\n  Applications Clocks\n Graphics: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		locked, err := ParseClockLock(b)
		if err != nil && locked {
			t.Fatal("locked with an error")
		}
	})
}

func TestDevices(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 550.54.15, Disabled, Enabled, 700.00 W, 1980 MHz'\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ds, err := Prober{Env: []string{"PATH=" + dir}}.Devices(context.Background())
	want := []rundir.GPUDevice{{Index: 0, Name: "NVIDIA H100 80GB HBM3", Driver: "550.54.15", MIG: "Disabled", ECC: "Enabled", PowerLimit: "700.00 W", MaxSMClock: "1980 MHz"}}
	if err != nil || !reflect.DeepEqual(ds, want) {
		t.Errorf("Devices = %+v, %v", ds, err)
	}
	if _, err := ParseDevices([]byte("0, H100, 550\n")); err == nil || !strings.Contains(err.Error(), "3 fields, want 7") {
		t.Errorf("short line: err = %v", err)
	}
	if _, err := ParseDevices(nil); err == nil {
		t.Error("no output: want an error")
	}
}

func FuzzParseDevices(f *testing.F) {
	f.Add([]byte("0, NVIDIA H100 80GB HBM3, 550.54.15, Disabled, Enabled, 700.00 W, 1980 MHz\n"))
	f.Add([]byte("x, a, b, c, d, e, f\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := ParseDevices(b)
		if err == nil && len(ds) == 0 {
			t.Fatal("no error and no device")
		}
		for _, d := range ds {
			if d.Index < 0 {
				t.Fatalf("negative index %d", d.Index)
			}
		}
	})
}
