package triage

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"testing"
)

// decodeGzipJSON decodes the gzipped JSON file at path into v with encoding/json: the tests that
// check the triage against an independent count read real traces this way, with none of the
// reader's code.
func decodeGzipJSON(t testing.TB, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
