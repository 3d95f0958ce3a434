package trace

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// TestAdviseHugeMarksTheArray checks that AdviseHuge leaves the kernel's huge-page flag ("hg"
// in /proc/self/smaps' VmFlags) on the 2 MiB-aligned interior of a large array, and none on a
// small one. The flag is set by the madvise call whatever the machine's THP mode and free
// memory, so the check does not depend on whether huge pages were actually handed out. The
// arrays are fresh anonymous mappings: on the Go heap a small array may share a mapping with
// an advised large one, and the flag is per mapping.
func TestAdviseHugeMarksTheArray(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	mapped := func(n int) []byte {
		b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Skip("mmap:", err)
		}
		t.Cleanup(func() { syscall.Munmap(b) })
		return b
	}
	if err := syscall.Madvise(mapped(4<<20), syscall.MADV_HUGEPAGE); err != nil {
		t.Skip("this kernel takes no huge-page advice (no transparent huge pages):", err)
	}
	raw := mapped(16 << 20)
	big := unsafe.Slice((*Launch)(unsafe.Pointer(&raw[0])), len(raw)/int(unsafe.Sizeof(Launch{})))
	AdviseHuge(big)
	mid := uintptr(unsafe.Pointer(&raw[0])) + 8<<20
	if !vmFlag(t, mid, "hg") {
		t.Errorf("the middle of a 16 MiB array (%#x) is not advised for huge pages", mid)
	}
	small := mapped(1 << 20)
	AdviseHuge(small)
	if p := uintptr(unsafe.Pointer(&small[0])); vmFlag(t, p, "hg") {
		t.Errorf("a 1 MiB array (%#x) was advised; AdviseHuge should leave arrays below %d bytes alone", p, hugeMin)
	}
}

// vmFlag reports whether the mapping holding address p has flag among its VmFlags.
func vmFlag(t *testing.T, p uintptr, flag string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := addrRange(line); ok {
			in = lo <= p && p < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(line+" ", " "+flag+" ")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", p)
	return false
}

// addrRange parses the "lo-hi perms ..." header line of an smaps entry.
func addrRange(line string) (lo, hi uintptr, ok bool) {
	r, _, found := strings.Cut(line, " ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(r, "-")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(x), uintptr(y), true
}

// TestPrefaultMapsTheRange checks with mincore that Prefault maps in exactly the pages from the
// one holding the first element asked for (the appends are writing into it) to the last one
// that the range covers whole, on fresh anonymous memory that nothing else has touched.
func TestPrefaultMapsTheRange(t *testing.T) {
	ps := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 16*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Madvise(mem[15*ps:], madvPopulateWrite); err != nil {
		t.Skip("the kernel has no MADV_POPULATE_WRITE (Linux 5.14):", err)
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	per := ps / 8
	// Elements from the middle of page 2 to the middle of page 6: pages 2 to 5.
	Prefault(words, 2*per+per/2, 6*per+per/2)
	vec := make([]byte, 16)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Skip("mincore:", e)
	}
	for i, v := range vec {
		want := i >= 2 && i <= 5 || i == 15
		if got := v&1 == 1; got != want {
			t.Errorf("page %d resident = %v, want %v (pages %v)", i, got, want, vec)
		}
	}
}

// TestMakeHugeAligned: MakeHuge's arrays of 2 MiB or more start on a 2 MiB boundary (within
// one element of it when the element size does not divide 2 MiB), have the length and
// capacity asked for, are zero and are advised for huge pages; a smaller one is a plain slice.
func TestMakeHugeAligned(t *testing.T) {
	type slot struct{ a, b, c, d int64 } // 32 bytes: divides 2 MiB
	type odd struct{ a, b, c int64 }     // 24 bytes: does not
	check := func(name string, p uintptr, n, cp, want, size int, zero bool) {
		t.Helper()
		if n != want || cp != want {
			t.Errorf("%s: len %d cap %d, want %d", name, n, cp, want)
		}
		if off := p & (hugeSize - 1); off >= uintptr(size) {
			t.Errorf("%s: array at %#x, %d bytes past a 2 MiB boundary", name, p, off)
		}
		if !zero {
			t.Errorf("%s: not zero", name)
		}
	}
	s := MakeHuge[slot](1 << 16)
	s[len(s)-1].d = 1 // the whole length is usable
	check("32-byte slots", uintptr(unsafe.Pointer(&s[0])), len(s), cap(s), 1<<16, 32, s[0] == slot{} && s[len(s)/2] == slot{})
	o := MakeHuge[odd](100_000)
	check("24-byte slots", uintptr(unsafe.Pointer(&o[0])), len(o), cap(o), 100_000, 24, o[0] == odd{} && o[len(o)-1] == odd{})
	if small := MakeHuge[slot](100); len(small) != 100 || cap(small) != 100 {
		t.Errorf("small: len %d cap %d", len(small), cap(small))
	}
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		return
	}
	probe, err := syscall.Mmap(-1, 0, 4<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return
	}
	defer syscall.Munmap(probe)
	if syscall.Madvise(probe, syscall.MADV_HUGEPAGE) != nil {
		return // this kernel takes no huge-page advice
	}
	if mid := uintptr(unsafe.Pointer(&s[len(s)/2])); !vmFlag(t, mid, "hg") {
		t.Errorf("the middle of the array (%#x) is not advised for huge pages", mid)
	}
}
