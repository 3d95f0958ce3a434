package kineto

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// fixtureDir is ../../../shared/fixtures seen from this package: the repository root's parent
// holds shared/.
func fixtureDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "fixtures")
}

// fixture returns the path of a real trace fixture, skipping the test when it is absent.
func fixture(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(fixtureDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("fixture %s not available (%v): the real traces live in ../shared/fixtures beside the checkout", name, err)
	}
	return p
}

// decompressed returns the JSON bytes of a fixture (gunzipped with the standard library, so the
// oracle shares no code with the reader).
func decompressed(t testing.TB, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		raw, err = io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
	}
	return raw
}

// oracleCounts are the per-category counts and kernel totals computed with encoding/json and
// math/big: slow, but independent of the streaming reader.
type oracleCounts struct {
	Kernels, Memcpy, Memset, Runtime, CPUOps, Frames, Annotations int
	KernelNS                                                      int64
	KernelNSByDevice                                              map[int64]int64
	KernelsByDevice                                               map[int64]int
	Events                                                        int
}

const oracleMaxDurNS = 7 * 24 * 3600 * 1_000_000_000

// oracleNS converts a JSON number of microseconds to nanoseconds with big.Rat, rounding half away
// from zero; ok is false when it does not fit int64.
func oracleNS(n json.Number) (int64, bool) {
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, false
	}
	r.Mul(r, big.NewRat(1000, 1))
	num, den := r.Num(), r.Denom()
	q, m := new(big.Int).QuoRem(num, den, new(big.Int))
	// Round half away from zero.
	twice := new(big.Int).Mul(new(big.Int).Abs(m), big.NewInt(2))
	if twice.Cmp(den) >= 0 {
		if num.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

// oracle decodes a whole trace document with encoding/json. ok is false when data is not a
// trace the oracle understands (then the caller does not compare).
func oracle(data []byte) (c oracleCounts, ok bool) {
	c.KernelNSByDevice = map[int64]int64{}
	c.KernelsByDevice = map[int64]int{}
	var events []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top any
	if err := dec.Decode(&top); err != nil {
		return c, false
	}
	switch v := top.(type) {
	case []any:
		for _, e := range v {
			b, _ := json.Marshal(e)
			events = append(events, b)
		}
	case map[string]any:
		te, ok := v["traceEvents"].([]any)
		if !ok {
			return c, true
		}
		for _, e := range te {
			b, _ := json.Marshal(e)
			events = append(events, b)
		}
	default:
		return c, false
	}
	for _, raw := range events {
		c.Events++
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var e map[string]any
		if d.Decode(&e) != nil {
			continue
		}
		ph, _ := e["ph"].(string)
		if ph != "X" {
			continue
		}
		cat, _ := e["cat"].(string)
		tsN, ok1 := e["ts"].(json.Number)
		durN, ok2 := e["dur"].(json.Number)
		if !ok1 || !ok2 {
			continue
		}
		ts, ok1 := oracleNS(tsN)
		dur, ok2 := oracleNS(durN)
		if !ok1 || !ok2 || dur < 0 || dur > oracleMaxDurNS {
			continue
		}
		_ = ts
		args, _ := e["args"].(map[string]any)
		switch cat {
		case "kernel":
			c.Kernels++
			c.KernelNS += dur
			dev := int64(-1)
			if dn, ok := args["device"].(json.Number); ok {
				dev, _ = dn.Int64()
			} else if pn, ok := e["pid"].(json.Number); ok {
				dev, _ = pn.Int64()
			}
			c.KernelNSByDevice[dev] += dur
			c.KernelsByDevice[dev]++
		case "gpu_memcpy":
			c.Memcpy++
		case "gpu_memset":
			c.Memset++
		case "cuda_runtime", "cuda_driver":
			c.Runtime++
		case "cpu_op":
			c.CPUOps++
		case "python_function":
			c.Frames++
		case "user_annotation", "gpu_user_annotation":
			c.Annotations++
		}
	}
	return c, true
}
