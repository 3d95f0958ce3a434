package kineto

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"
)

// TestAheadMapsTheFront checks with mincore that ahead maps the pages of a published array
// from its front up to its last sixteenth, and nothing once stop is set, on fresh anonymous
// memory that nothing else has touched.
func TestAheadMapsTheFront(t *testing.T) {
	ps := os.Getpagesize()
	const pages = 64
	for _, stopped := range []bool{false, true} {
		mem, err := syscall.Mmap(-1, 0, pages*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Skip("mmap:", err)
		}
		if err := syscall.Madvise(mem[(pages-1)*ps:], 23); err != nil { // MADV_POPULATE_WRITE
			syscall.Munmap(mem)
			t.Skip("the kernel has no MADV_POPULATE_WRITE (Linux 5.14):", err)
		}
		var res [resKinds]reservation
		res[resCPUOps].shown.Store(&arrayView{p: unsafe.Pointer(&mem[0]), size: uintptr(len(mem)), front: uintptr(8 * ps)})
		var stop atomic.Bool
		stop.Store(stopped)
		ahead(&res, stop.Load)
		vec := make([]byte, pages)
		if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			syscall.Munmap(mem)
			t.Skip("mincore:", e)
		}
		for i, v := range vec {
			want := !stopped && i >= 8 && i < pages-pages/16 || i == pages-1
			if got := v&1 == 1; got != want {
				t.Errorf("stop %v: page %d resident = %v, want %v (pages %v)", stopped, i, got, want, vec)
			}
		}
		syscall.Munmap(mem)
	}
}
