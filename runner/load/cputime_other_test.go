//go:build !unix

package load

import "time"

// processCPU is unknown here; the benchmarks then leave the CPU metric out.
func processCPU() time.Duration { return -1 }
