package gpu

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/sglprof/runner/reports/rundir"
)

// DeviceQuery is the --query-gpu field list of Devices: what stays the same for the whole run
// and a maintainer asks for (the model, the driver, MIG and ECC modes, the power limit and the
// highest SM clock).
const DeviceQuery = "index,name,driver_version,mig.mode.current,ecc.mode.current,power.limit,clocks.max.sm"

// Devices queries DeviceQuery for every GPU.
func (p Prober) Devices(ctx context.Context) ([]rundir.GPUDevice, error) {
	out, err := p.run(ctx, "--query-gpu="+DeviceQuery, "--format=csv,noheader")
	if err != nil {
		return nil, err
	}
	d, err := ParseDevices(out)
	if err != nil {
		return d, fmt.Errorf("nvidia-smi --query-gpu: %w", err)
	}
	return d, nil
}

// ParseDevices reads `nvidia-smi --query-gpu=DeviceQuery --format=csv,noheader`. GPU names
// hold no comma, so a line with another field count is an error quoting the line.
func ParseDevices(out []byte) ([]rundir.GPUDevice, error) {
	var ds []rundir.GPUDevice
	err := eachRecord(out, 7, func(n int, f []string) error {
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 {
			return fmt.Errorf("line %d: GPU index %q is not a number", n, clip(f[0]))
		}
		ds = append(ds, rundir.GPUDevice{Index: i, Name: f[1], Driver: f[2], MIG: f[3], ECC: f[4], PowerLimit: f[5], MaxSMClock: f[6]})
		return nil
	})
	if err != nil {
		return ds, err
	}
	if len(ds) == 0 {
		return nil, errors.New("no GPU listed")
	}
	return ds, nil
}
