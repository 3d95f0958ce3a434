package nsysgen

import (
	"path/filepath"
	"testing"
)

// BenchmarkGen measures the streaming writer: 20,000 kernels and 60,000 runtime calls per op.
func BenchmarkGen(b *testing.B) {
	for b.Loop() {
		w, _ := Create(filepath.Join(b.TempDir(), "x.sqlite"), "")
		for i := 0; i < 20000; i++ {
			w.AddRuntime(Runtime{Start: int64(i), End: int64(i) + 1, PID: 1, TID: 1, Correlation: int64(i), Name: "cudaLaunchKernel_v7000"})
			w.AddRuntime(Runtime{Start: int64(i), End: int64(i) + 1, PID: 1, TID: 1, Correlation: int64(i), Name: "cudaLaunchKernel_v7000"})
			w.AddRuntime(Runtime{Start: int64(i), End: int64(i) + 1, PID: 1, TID: 1, Correlation: int64(i), Name: "cudaLaunchKernel_v7000"})
			w.AddKernel(Kernel{Start: int64(i), End: int64(i) + 2, Correlation: int64(i), Name: "k", PID: 1})
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
