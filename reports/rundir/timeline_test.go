package rundir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadLLMSpans keeps the first MaxLLMSpans requests and counts the rest; a line that is not a
// record is an error naming the file and line; a missing file is fs.ErrNotExist.
func TestReadLLMSpans(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for range MaxLLMSpans + 3 {
		b.WriteString(`{"index":0,"start_ns":5,"ttft_ns":7,"latency_ns":9,"itl_ns":[1,1]}` + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, LLMRecordsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	spans, more, err := ReadLLMSpans(dir)
	if err != nil || len(spans) != MaxLLMSpans || more != 3 || spans[0] != (LLMSpan{StartNS: 5, TTFTNS: 7, LatencyNS: 9}) {
		t.Errorf("%d spans (%+v), %d more, %v", len(spans), spans[0], more, err)
	}
	if err := os.WriteFile(filepath.Join(dir, LLMRecordsFile), []byte("{\"start_ns\":1}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadLLMSpans(dir); err == nil || !strings.Contains(err.Error(), LLMRecordsFile+":2: not a request record") {
		t.Errorf("bad line: %v", err)
	}
	if _, _, err := ReadLLMSpans(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzReadLLMSpans(f *testing.F) {
	f.Add([]byte(`{"start_ns":1,"ttft_ns":2,"latency_ns":3}` + "\n" + `{"error":"x"}`))
	f.Add([]byte("[]\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, LLMRecordsFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		spans, _, _ := ReadLLMSpans(dir)
		if len(spans) > MaxLLMSpans {
			t.Errorf("%d spans", len(spans))
		}
	})
}
