package kineto

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
	"github.com/sglprof/runner/reports/trace"
)

// recordBytes is the memory the trace's record slices need at their lengths.
func recordBytes(t *trace.Trace) int64 {
	size := func(n int, one uintptr) int64 { return int64(n) * int64(one) }
	return size(len(t.GPUOps), unsafe.Sizeof(trace.GPUOp{})) + size(len(t.Launches), unsafe.Sizeof(trace.Launch{})) +
		size(len(t.CPUOps), unsafe.Sizeof(trace.CPUOp{})) + size(len(t.Frames), unsafe.Sizeof(trace.Frame{})) +
		size(len(t.Flows), unsafe.Sizeof(trace.Flow{})) + size(len(t.Comms), unsafe.Sizeof(trace.Comm{})) +
		size(len(t.Annotations), unsafe.Sizeof(trace.Annotation{}))
}

// TestReadReservesRecords checks that a read whose input size is known allocates little more
// than the records it keeps: grown one append at a time, the slices were copied at every 1.25×
// step, about five times the records' final size in all (a third of triage's CPU time on a
// 500 MB trace).
func TestReadReservesRecords(t *testing.T) {
	var buf bytes.Buffer
	if _, err := kinetogen.Write(&buf, kinetogen.Config{Flavor: kinetogen.FlavorLLM, CommStream: true, WithStack: true, TargetBytes: 24 << 20, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []bool{true, false} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr, err := Read(context.Background(), bytes.NewReader(buf.Bytes()), "t.json", Options{Sequential: seq})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		rec := recordBytes(tr)
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("sequential=%v: %d MB allocated, %d MB of records", seq, alloc>>20, rec>>20)
		// The records, the two reservations' margins and copies (under 15%), and a few MB of
		// buffers and names; the pipeline recycles up to a dozen batches of about 1 MB.
		slack := int64(4 << 20)
		if !seq {
			slack = 16 << 20
		}
		if limit := rec*3/2 + slack; alloc > limit {
			t.Errorf("sequential=%v: the read allocated %d MB for %d MB of records (at most %d MB expected)", seq, alloc>>20, rec>>20, limit>>20)
		}
	}
}

// TestSizeHint checks the sizes the reservation believes: a plain file's and a bytes.Reader's
// size, a gzip member's ISIZE, and nothing for a claim deflate cannot make or a stream.
func TestSizeHint(t *testing.T) {
	plain := []byte(`{"traceEvents":[]}`)
	if got := sizeHint(bytes.NewReader(plain)); got != int64(len(plain)) {
		t.Errorf("bytes.Reader: %d, want %d", got, len(plain))
	}
	path := filepath.Join(t.TempDir(), "t.json")
	if err := os.WriteFile(path, plain, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := sizeHint(f); got != int64(len(plain)) {
		t.Errorf("file: %d, want %d", got, len(plain))
	}
	if got := sizeHint(bytes.NewBuffer(plain)); got != 0 {
		t.Errorf("a stream: %d, want 0", got)
	}
	big := bytes.Repeat([]byte(" "), 100000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(big)
	zw.Close()
	if got := sizeHint(bytes.NewReader(gz.Bytes())); got != int64(len(big)) {
		t.Errorf("gzip: %d, want %d", got, len(big))
	}
	bad := bytes.Clone(gz.Bytes())
	binary.LittleEndian.PutUint32(bad[len(bad)-4:], 0xffffffff)
	if got := sizeHint(bytes.NewReader(bad)); got != 0 {
		t.Errorf("gzip claiming 4 GiB from %d bytes: %d, want 0", len(bad), got)
	}
}

// TestReserve checks that a reservation keeps the records and is bounded by what was read.
func TestReserve(t *testing.T) {
	var r reservation
	var s []int
	for i := range 1000 {
		s = reserve(s, &r, int64(i)*(4<<10), 1<<40)
		s = append(s, i)
	}
	for i, v := range s {
		if v != i {
			t.Fatalf("s[%d] = %d after reservations", i, v)
		}
	}
	if cap(s) > maxStep*len(s) {
		t.Errorf("cap %d for %d records: a reservation exceeded %d× what was read", cap(s), len(s), maxStep)
	}
}
