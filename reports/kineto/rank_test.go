package kineto

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

func TestReadRank(t *testing.T) {
	var gen bytes.Buffer
	if _, err := kinetogen.Write(&gen, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 1, Layers: 1, Rank: 3}); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(gen.Bytes())
	zw.Close()
	cases := []struct {
		name string
		in   []byte
		rank int
		ok   bool
	}{
		{"generated", gen.Bytes(), 3, true},
		{"generated gzip", gz.Bytes(), 3, true},
		{"rank 0", []byte(`{"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": []}`), 0, true},
		{"no distributedInfo", []byte(`{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "k"}]}`), -1, false},
		{"no rank", []byte(`{"distributedInfo": {"backend": "nccl"}, "traceEvents": []}`), -1, false},
		{"string rank", []byte(`{"distributedInfo": {"rank": "1"}, "traceEvents": []}`), -1, false},
		// After the events: not read (the header is over), so no rank rather than a full scan.
		{"after events", []byte(`{"traceEvents": [{"ph": "X"}], "distributedInfo": {"rank": 2}}`), -1, false},
		{"bare array", []byte(`[{"ph": "X"}]`), -1, false},
		{"not JSON", []byte("hello"), -1, false},
		{"truncated header", []byte(`{"distributedInfo": {"rank": 5}, "traceEv`), 5, true},
	}
	for _, c := range cases {
		rank, ok, err := ReadRank(context.Background(), bytes.NewReader(c.in))
		if err != nil || rank != c.rank || ok != c.ok {
			t.Errorf("%s: ReadRank = %d, %v, %v; want %d, %v, nil", c.name, rank, ok, err, c.rank, c.ok)
		}
	}
	worlds := map[string]Header{
		`{"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 128}, "traceEvents": []}`: {1, 128},
		`{"distributedInfo": {"world_size": 2}, "traceEvents": []}`:                                 {-1, 2},
		`{"distributedInfo": {"rank": 0, "world_size": 0}, "traceEvents": []}`:                      {0, -1},
		`{"traceEvents": [{"ph": "X"}], "distributedInfo": {"rank": 0, "world_size": 2}}`:           {-1, -1},
	}
	for in, want := range worlds {
		if h, err := ReadHeader(context.Background(), strings.NewReader(in)); err != nil || h != want {
			t.Errorf("ReadHeader(%s) = %+v, %v; want %+v", in, h, err, want)
		}
	}
	// A cancelled context is an error, not "no rank".
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ReadRank(ctx, strings.NewReader(`{"traceEvents": [{"ph": "X"}]}`)); err == nil {
		t.Error("cancelled: no error")
	}
}

// FuzzReadRank: on any input ReadRank neither panics nor fails (an in-memory input can always
// be read), and a header that states a rank before anything else yields exactly that rank,
// whatever follows it.
func FuzzReadRank(f *testing.F) {
	f.Add([]byte(`{"distributedInfo": {"rank": 0}, "traceEvents": []}`), 3, []byte(`"traceEvents": [{"ph": "X"}]}`))
	f.Add([]byte(`[{"ph": "X"}]`), 0, []byte(`}`))
	f.Add([]byte("\x1f\x8b"), 7, []byte(`"traceEv`))
	f.Fuzz(func(t *testing.T, data []byte, rank int, tail []byte) {
		if _, _, err := ReadRank(context.Background(), bytes.NewReader(data)); err != nil && !(len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
			t.Fatalf("ReadRank failed on a readable, non-gzip input: %v", err)
		}
		if rank < 0 {
			rank = -rank
		}
		if rank < 0 { // the most negative int
			rank = 0
		}
		doc := append([]byte(fmt.Sprintf(`{"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}, `, rank, rank+1)), tail...)
		got, ok, err := ReadRank(context.Background(), bytes.NewReader(doc))
		if err != nil || !ok || got != rank {
			t.Fatalf("ReadRank(%q) = %d, %v, %v; want %d", doc, got, ok, err, rank)
		}
		if h, err := ReadHeader(context.Background(), bytes.NewReader(doc)); err != nil || h.Rank != rank || (rank+1 > 0 && h.WorldSize != rank+1) {
			t.Fatalf("ReadHeader(%q) = %+v, %v; want rank %d, world size %d", doc, h, err, rank, rank+1)
		}
	})
}
