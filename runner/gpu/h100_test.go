package gpu

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/rundir"
)

// realDir holds what a real nvidia-smi printed for every query this package makes: one
// NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, while a python3 process held 4.5 GiB of
// it (testdata/h100-driver580/PROVENANCE.md). The stand-ins the other tests use are held to
// these.
const realDir = "testdata/h100-driver580"

func readReal(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(realDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRealNvidiaSMIOutputs(t *testing.T) {
	uuid := "GPU-27ec734f-c7cb-e90f-1b21-e57fc49674c5"
	gpus, err := ParseGPUs(readReal(t, "gpus.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := []rundir.GPUState{{Index: 0, UUID: uuid, MemUsedMiB: 4623, SMClockMHz: 1980, MaxSMMHz: 1980,
		Persistence: "Enabled", PowerW: 117.99, TempC: 32}}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("GPUs:\n got %+v\nwant %+v", gpus, want)
	}
	apps, err := ParseApps(readReal(t, "apps.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 1 || apps[0].PID != 456 || apps[0].Name != "python3" || apps[0].UsedMiB != 4614 || apps[0].GPUUUID != uuid {
		t.Errorf("apps: %+v", apps)
	}
	devs, err := ParseDevices(readReal(t, "devices.csv"))
	if err != nil {
		t.Fatal(err)
	}
	wantDev := []rundir.GPUDevice{{Index: 0, Name: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", MIG: "Disabled",
		ECC: "Enabled", PowerLimit: "700.00 W", MaxSMClock: "1980 MHz"}}
	if !reflect.DeepEqual(devs, wantDev) {
		t.Errorf("devices:\n got %+v\nwant %+v", devs, wantDev)
	}
	// Driver 580 prints "Clocks Event Reasons" where older drivers printed "Clocks Throttle
	// Reasons"; the application clocks are the defaults and no lock reason is active.
	locked, err := ParseClockLock(readReal(t, "clocks.txt"))
	if err != nil || locked {
		t.Errorf("clock lock: %v, %v; want floating", locked, err)
	}
	topo := StripEscapes(string(readReal(t, "topo.txt")))
	if strings.Contains(topo, "\x1b") || !strings.HasPrefix(strings.TrimSpace(topo), "GPU0\tCPU Affinity") {
		t.Errorf("topology keeps escape codes: %q", topo[:40])
	}
}
