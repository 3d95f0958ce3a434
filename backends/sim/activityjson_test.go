package sim

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/valyala/fastjson"
)

// appendActRec writes what json.Marshal writes, for every field set or not and strings that
// need escaping, and parseActLine reads it back.
func TestAppendActRecIsMarshal(t *testing.T) {
	recs := []actRec{
		{},
		{K: "kernel", S: 1_700_000_000_000_000_000, E: -1, Dev: 7, Str: -2147483648, Corr: 1<<63 - 1, N: 3, G: [3]int32{132, 1, 1}, B: [3]int32{128, 0, 0}},
		{K: "name", ID: 4, V: `void f<float>(a & b) "q" \\ é` + "\x00\xff\u2028"},
		{K: "nvtx", S: 5, E: 6, PID: 9, TID: 10, Text: "denoising_step_0"},
		{K: "mem", Bytes: -1 << 63, CK: 2, G: [3]int32{0, 0, 1}},
		{K: "proc", PID: 1, Name: "python3"},
	}
	for _, r := range recs {
		want, _ := json.Marshal(&r)
		got := appendActRec(nil, &r)
		if string(got) != string(want)+"\n" {
			t.Errorf("appendActRec = %s\njson.Marshal = %s", got, want)
		}
		var back actRec
		if parseActLine(got[:len(got)-1], &back) {
			if back != r {
				t.Errorf("parseActLine read %+v back as %+v", r, back)
			}
		} else if r.V == "" {
			t.Errorf("parseActLine refused %s", got)
		}
	}
}

// FuzzActLine: what parseActLine accepts, json.Unmarshal reads the same; what appendActRec
// writes of a fuzzed record is what json.Marshal writes.
func FuzzActLine(f *testing.F) {
	f.Add([]byte(`{"k":"kernel","s":1,"e":2,"dev":0,"n":1,"g":[1,1,1]}`), int64(5), int32(-3), "x<y")
	f.Add([]byte(`{"k":"name","id":1,"v":"k"}`), int64(0), int32(0), "")
	f.Add([]byte(`{"K":"rt","s":-0,"e":1e3,"n":2147483648,"g":[1,2]}`), int64(-1<<63), int32(1<<31-1), "\u00e9")
	f.Fuzz(func(t *testing.T, line []byte, n int64, m int32, s string) {
		var fast, slow actRec
		if parseActLine(line, &fast) {
			if err := json.Unmarshal(line, &slow); err != nil || fast != slow {
				t.Fatalf("parseActLine read %q as %+v; json.Unmarshal: %+v, %v", line, fast, slow, err)
			}
		}
		r := actRec{K: s, S: n, E: -n, PID: m, Corr: n, N: m, V: s, Text: s, G: [3]int32{m, 0, m}, Bytes: n, CK: m}
		want, _ := json.Marshal(&r)
		if got := appendActRec(nil, &r); string(got) != string(want)+"\n" {
			t.Fatalf("appendActRec = %s\njson.Marshal = %s", got, want)
		}
	})
}

// BenchmarkActivityLines writes and reads the activity lines of a 20,000-kernel capture (a
// kernel, its runtime call and every twentieth an NVTX range) through the fast paths and through
// encoding/json.
func BenchmarkActivityLines(b *testing.B) {
	var recs []actRec
	for i := int64(0); i < 20000; i++ {
		t := 1_700_000_000_000_000_000 + i*40_000
		recs = append(recs, actRec{K: "kernel", S: t, E: t + 30_000, Dev: 0, Str: 7, Corr: i, N: 3, G: [3]int32{132, 1, 1}, B: [3]int32{128, 1, 1}},
			actRec{K: "rt", S: t - 5000, E: t - 1000, PID: 4242, TID: 4242, Corr: i, N: 4})
		if i%20 == 0 {
			recs = append(recs, actRec{K: "nvtx", S: t, E: t + 800_000, PID: 4242, TID: 4242, Text: "denoising_step_0"})
		}
	}
	var lines [][]byte
	for i := range recs {
		lines = append(lines, appendActRec(nil, &recs[i]))
	}
	b.Run("write/fast", func(b *testing.B) {
		var buf []byte
		for i := 0; i < b.N; i++ {
			for j := range recs {
				buf = appendActRec(buf[:0], &recs[j])
			}
		}
	})
	b.Run("write/json", func(b *testing.B) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for i := 0; i < b.N; i++ {
			for j := range recs {
				buf.Reset()
				enc.Encode(&recs[j])
			}
		}
	})
	b.Run("read/fast", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, l := range lines {
				var r actRec
				if !parseActLine(l[:len(l)-1], &r) {
					b.Fatal("refused")
				}
			}
		}
	})
	b.Run("read/fastjson", func(b *testing.B) { // the library the Kineto reader uses
		var p fastjson.Parser
		for i := 0; i < b.N; i++ {
			for _, l := range lines {
				v, err := p.ParseBytes(l)
				if err != nil {
					b.Fatal(err)
				}
				o, _ := v.Object()
				var r actRec
				o.Visit(func(k []byte, v *fastjson.Value) {
					switch string(k) {
					case "k":
						r.K = string(v.GetStringBytes())
					case "text":
						r.Text = string(v.GetStringBytes())
					case "s":
						r.S = v.GetInt64()
					case "e":
						r.E = v.GetInt64()
					case "corr":
						r.Corr = v.GetInt64()
					case "pid":
						r.PID = int32(v.GetInt())
					case "tid":
						r.TID = int32(v.GetInt())
					case "str":
						r.Str = int32(v.GetInt())
					case "n":
						r.N = int32(v.GetInt())
					case "g", "b":
						dst := &r.G
						if k[0] == 'b' {
							dst = &r.B
						}
						for j, x := range v.GetArray() {
							if j < 3 {
								dst[j] = int32(x.GetInt())
							}
						}
					}
				})
			}
		}
	})
	b.Run("read/json", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, l := range lines {
				var r actRec
				if err := json.Unmarshal(l, &r); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
