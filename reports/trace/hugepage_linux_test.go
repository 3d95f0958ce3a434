package trace

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestAdviseHugeMarksTheArray checks that AdviseHuge leaves the kernel's huge-page flag ("hg"
// in /proc/self/smaps' VmFlags) on the 2 MiB-aligned interior of a large array, and none on a
// small one. The flag is set by the madvise call whatever the machine's THP mode and free
// memory, so the check does not depend on whether huge pages were actually handed out.
func TestAdviseHugeMarksTheArray(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	big := make([]Launch, 0, (16<<20)/unsafe.Sizeof(Launch{}))
	AdviseHuge(big)
	mid := uintptr(unsafe.Pointer(unsafe.SliceData(big[:cap(big)]))) + 8<<20
	if !vmFlag(t, mid, "hg") {
		t.Errorf("the middle of a 16 MiB array (%#x) is not advised for huge pages", mid)
	}
	small := make([]byte, 1<<20)
	AdviseHuge(small)
	small[0] = 1
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
