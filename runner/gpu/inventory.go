package gpu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DeviceQuery is the --query-gpu field list of Devices: what stays the same for the whole run
// and a maintainer asks for (the model, the driver, MIG and ECC modes, the power limit and the
// highest SM clock).
const DeviceQuery = "index,name,driver_version,mig.mode.current,ecc.mode.current,power.limit,clocks.max.sm"

// Devices queries DeviceQuery for every GPU.
func (p Prober) Devices(ctx context.Context) ([]Device, error) {
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
func ParseDevices(out []byte) ([]Device, error) {
	var ds []Device
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := splitCSV(line)
		if len(f) != 7 {
			return ds, fmt.Errorf("line %d: %d fields, want 7: %q", n, len(f), clip(line))
		}
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 {
			return ds, fmt.Errorf("line %d: GPU index %q is not a number", n, clip(f[0]))
		}
		ds = append(ds, Device{Index: i, Name: f[1], Driver: f[2], MIG: f[3], ECC: f[4], PowerLimit: f[5], MaxSMClock: f[6]})
	}
	if err := sc.Err(); err != nil {
		return ds, err
	}
	if len(ds) == 0 {
		return nil, errors.New("no GPU listed")
	}
	return ds, nil
}
