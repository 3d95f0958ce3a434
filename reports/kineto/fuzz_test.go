package kineto

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzRead feeds arbitrary bytes to the reader: it must never panic or fail on a document it
// can partly read, and on valid JSON it must find exactly the kernels encoding/json finds.
func FuzzRead(f *testing.F) {
	f.Add([]byte(smallTrace))
	f.Add([]byte(`[{"ph":"X","cat":"kernel","name":"k","pid":"[TP00] 1","tid":-2,"ts":1e3,"dur":0.5}]`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","ts":1,"dur":2}],"baseTimeNanoseconds":5}`))
	f.Add([]byte(`{"a":{"b":[1,2,{"c":"]"}]},"traceEvents":[{"ph":"X","cat":"kernel","ts":"1","dur":2,"args":{"stream":"x"}}]}`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","ts":1,"dur":2},`))
	f.Add([]byte("{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"a\"b\",\"ts\":1,\"dur\":2}]}"))
	f.Add([]byte("{\n\"traceEvents\": [\n  {\"name\": \"x\ny\"},\n  {\"ph\":\"X\",\"cat\":\"kernel\",\"ts\":1,\"dur\":1}\n]}"))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","ts":1,"dur":2,"args":{"Collective name":"allreduce","In msg nelems":4,"Out msg nelems":"4","Group size":2,"dtype":"Float","In split size":"[1, 3]","Out split size":"[]"}}]}`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","ts":1,"dur":2,"args":{"Collective name":"a\u006c","dtype":7,"Group size":"x"}}]}`))
	for _, d := range fastEventDocs {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Read(context.Background(), bytes.NewReader(data), "fuzz.json", Options{})
		if err == nil && tr == nil {
			t.Fatal("nil trace without error")
		}
		// The fast event scanner must build exactly what the fastjson path builds, on any input.
		slow, err2 := Read(context.Background(), bytes.NewReader(data), "fuzz.json", Options{noFast: true})
		if (err == nil) != (err2 == nil) || !reflect.DeepEqual(tr, slow) {
			t.Fatalf("fast and fastjson paths differ: %v / %v\n%+v\n%+v", err, err2, tr, slow)
		}
		// So must the pipeline when its splitting goroutine runs the scanner.
		pre, err3 := Read(context.Background(), bytes.NewReader(data), "fuzz.json", Options{Pipeline: true, preparseAll: true})
		if (err == nil) != (err3 == nil) || !reflect.DeepEqual(tr, pre) {
			t.Fatalf("pre-parsing pipeline differs: %v / %v\n%+v\n%+v", err, err3, tr, pre)
		}
		// So must the read in two halves, whatever offset it guesses as the split point.
		if len(data) > 1 {
			sp, err4 := Read(context.Background(), bytes.NewReader(data), "fuzz.json", Options{splitOff: int64(len(data) / 2)})
			if (err == nil) != (err4 == nil) || !reflect.DeepEqual(tr, sp) {
				t.Fatalf("split read differs: %v / %v\n%+v\n%+v", err, err4, tr, sp)
			}
		}
		if len(data) > 1<<16 || !json.Valid(data) || !utf8.Valid(data) || bytes.Count(data, []byte("traceEvents")) > 1 || nestingDepth(data) > 100 {
			return
		}
		want, ok := oracle(data)
		if !ok {
			return
		}
		if err != nil {
			// Valid JSON that is an object or array is always readable.
			if data2 := bytes.TrimSpace(data); len(data2) > 0 && (data2[0] == '{' || data2[0] == '[') {
				t.Fatalf("valid JSON rejected: %v", err)
			}
			return
		}
		if n, _ := tr.KernelTime(-1); n != want.Kernels {
			t.Fatalf("reader found %d kernels, encoding/json %d; warnings %v", n, want.Kernels, tr.Warnings)
		}
		if _, ns := tr.KernelTime(-1); ns != want.KernelNS {
			t.Fatalf("kernel ns %d, oracle %d", ns, want.KernelNS)
		}
	})
}

// nestingDepth is the deepest bracket nesting outside strings.
func nestingDepth(b []byte) int {
	d, m, in, esc := 0, 0, false, false
	for _, c := range b {
		switch {
		case in && esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == '{' || c == '['):
			d++
			m = max(m, d)
		case !in && (c == '}' || c == ']'):
			d--
		}
	}
	return m
}

// FuzzFix checks that Fix never panics, and that on a valid trace its output is valid JSON with
// the same number of events plus one thread_name event per lane it added.
func FuzzFix(f *testing.F) {
	f.Add([]byte(smallTrace))
	f.Add([]byte(`[{"ph":"X","cat":"kernel","pid":0,"tid":7,"ts":1,"dur":5},{"ph":"X","cat":"gpu_memset","pid":0,"tid":7,"ts":2,"dur":1}]`))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","cat":"kernel","pid":"a","tid":"b","ts":1,"dur":5},{"ph":"X","cat":"kernel","pid":"a","tid":"b","ts":1,"dur":5}],"x":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		st, err := Fix(context.Background(), bytes.NewReader(data), &out)
		if len(data) > 1<<16 || !json.Valid(data) || !utf8.Valid(data) || nestingDepth(data) > 100 || bytes.Count(data, []byte("traceEvents")) > 1 {
			return
		}
		want, ok := oracle(data)
		if !ok || err != nil {
			return
		}
		if !json.Valid(out.Bytes()) {
			t.Fatalf("Fix output is not valid JSON:\n%s", out.Bytes())
		}
		got, ok := oracle(out.Bytes())
		if !ok || got.Events != want.Events+st.Lanes {
			t.Fatalf("events: in %d, out %d, lanes %d", want.Events, got.Events, st.Lanes)
		}
	})
}
