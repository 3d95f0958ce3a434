package kineto

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

// fastEventDocs are events the fast scanner must either decode exactly as fastjson does or
// decline: escapes in keys and in used values, duplicates, args that are not objects, string
// and escaped pids, exponents, nesting, non-ASCII and invalid UTF-8, JSON that is not strict.
var fastEventDocs = []string{
	`[{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":1,"dur":2,"args":{"Input Dims": [[4096, 4096], [ 4096,4096 ]],` + "\n" + `"Input type": ["c10::BFloat16", "a b"], "Concrete Inputs": ["", "[1, 1]"]}},{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":1,"dur":2,"args":{"Input Dims":[[4096,4096],[4096,4096]],"Input type":["c10::BFloat16","a b"],"Concrete Inputs":["","[1, 1]"]}}]`,
	`[{"ph":"X","cat":"cpu_op","name":"aten::add","ts":1,"dur":2,"args":{"Input Dims":[[2]],"Input type":["q\"x", "\u00e9"],"Concrete Inputs":{"a": [1, "b"]}}},{"ph":"X","cat":"cpu_op","name":"x","ts":1,"dur":2,"args":{"Input type":[]}}]`,
	`[{"ph":"X","cat":"kernel","name":"k\"q","pid":0,"tid":7,"ts":1,"dur":2,"args":{"stream":7,"correlation":5}}]`,
	`[{"ph":"X","cat":"kernel","n\u0061me":"k","pid":0,"tid":7,"ts":1,"dur":2,"args":{"str\u0065am":9}}]`,
	`[{"ph":"X","cat":"kernel","name":"k","pid":"\u005bTP01] 3","tid":"7","ts":1,"dur":2,"args":{"device":"2"}}]`,
	`[{"ph":"X","cat":"kernel","name":"k","pid":"[TP01] 3","tid":7,"ts":1.5e3,"dur":2E-1,"args":{"stream":"x","device":1.0}}]`,
	`[{"ph":"X","ph":"Y","cat":"kernel","name":"k","ts":1,"dur":2},{"ph":"X","cat":"kernel","cat":5,"ts":1,"dur":2}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"stream":3},"args":5},{"ph":"X","cat":"kernel","ts":1,"dur":2,"args":[1,2]}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"stream":3,"stream":null,"External id":4,"External id":"x"}}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"grid":[1,[2,{"a":[]}],3],"x":{"y":{"z":"\n"}},"b":true,"c":false}}]`,
	`[{"ph":"X","cat":"kernel","name":"kérnel ✓","ts":1,"dur":2},{"ph":"X","cat":"kernel","name":"k` + "\xff" + `","ts":1,"dur":2}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":01,"dur":2},{"ph":"X","cat":"kernel","name":"k","ts":1.,"dur":2},{"ph":"X","cat":"kernel","ts":+1,"dur":2}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,},{"ph":"X","cat":"kernel","name":"k" "ts":1,"dur":2},{"ph":"X","cat":"kernel","ts":1,"dur":2 "x":1}]`,
	`[{"ph":"X","cat":"kernel","name":"a` + "\t" + `b","ts":1,"dur":2},{"ph":"X","cat":"kernel","name":"\x","ts":1,"dur":2},{"ph":"X","cat":"kernel","name":"\u12","ts":1,"dur":2}]`,
	`[{"ph":"X","cat":"kernel","ts":1,"dur":99999999999999999999},{"ph":"X","cat":"kernel","ts":1,"dur":-5},{"ph":"X","cat":"kernel","ts":"1","dur":2}]`,
	`[{"ph":"s","id":"12","pid":1,"tid":1,"ts":1,"cat":"ac2g"},{"ph":"f","id":12,"pid":0,"tid":7,"ts":2,"cat":"ac2g","bp":"e"},{"ph":"f","id":1.5,"ts":2,"cat":"ac2g"}]`,
	`[{"ph":"M","name":"process_name","pid":"[TP00] 1","args":{"name":"x"}},{"ph":"M","name":"process_labels","pid":0,"args":{"labels":"GPU 0"}}]`,
	`[{"ph":"X","cat":"python_function","name":"f","pid":1,"tid":1,"ts":1,"dur":3,"args":{"Python id":4,"Python parent id":2}},{},[],5,"x",null,true,{"ph":"X"}]`,
	`[{"ph":"X","cat":"gpu_user_annotation","name":"a","pid":0,"tid":7,"ts":1,"dur":3,"args":{"device":3}},{"ph":"X","cat":"gpu_memcpy","name":"m","pid":0,"tid":7,"ts":1,"dur":3,"args":{"bytes":1024}}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}]`,
	"[ {\n \"ph\" : \"X\" ,\r\n\t\"cat\":\"kernel\", \"ts\" : 1 , \"dur\" : 2 , \"args\" : { } } ]",
	// The separators the pipeline's bulk decoding leaves to the ordinary path: a missing comma,
	// doubled and trailing commas, a raw newline in a string (resynchronisation), text after an
	// element, the last element, metadata keys after the array.
	`{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2} {"ph":"X","cat":"kernel","name":"k","ts":3,"dur":2},,{"ph":"X","cat":"kernel","name":"k","ts":5,"dur":2} , ],"deviceProperties":[]}`,
	"[{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":1,\"dur\":2},\n{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"a\nb\",\"ts\":1,\"dur\":2},\n{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":3,\"dur\":2},\n{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":4,\"dur\":2}]",
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2} x, {"ph":"X","cat":"kernel","name":"k","ts":3,"dur":2}]`,
	`[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2},{"ph":"X","cat":"kernel","name":"k","ts":3,"dur":2}`,
}

// TestFastEventMatchesFastjson reads documents with the fast event scanner and with fastjson
// alone; the traces, warnings included, must be identical.
func TestFastEventMatchesFastjson(t *testing.T) {
	inputs := map[string][]byte{"small": []byte(smallTrace)}
	for i, d := range fastEventDocs {
		inputs["doc"+string(rune('A'+i))] = []byte(d)
	}
	var gen bytes.Buffer
	if _, err := kinetogen.Write(&gen, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 2, Layers: 3, WithStack: true, CommStream: true}); err != nil {
		t.Fatal(err)
	}
	inputs["generated"] = gen.Bytes()
	for _, fx := range []string{fxDDP, "hta-a100-cudagraph-multistream-rank0.json.gz", "tracelens-mi300x-sglang-qwen3-8b-decode-hipgraph.json.gz"} {
		if p := filepath.Join(fixtureDir(), fx); fileExists(p) {
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			inputs[fx] = raw
		}
	}
	for name, data := range inputs {
		slow, err2 := Read(context.Background(), bytes.NewReader(data), name, Options{noFast: true})
		for _, o := range []Options{{Sequential: true}, {Pipeline: true}, {Pipeline: true, preparseAll: true}} {
			fast, err1 := Read(context.Background(), bytes.NewReader(data), name, o)
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("%s %+v: fast path error %v, fastjson path error %v", name, o, err1, err2)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Errorf("%s %+v: fast and fastjson paths differ: events %d/%d, kernels %d/%d, launches %d/%d, frames %d/%d, warnings %q / %q",
					name, o, fast.Events, slow.Events, len(fast.GPUOps), len(slow.GPUOps), len(fast.Launches), len(slow.Launches),
					len(fast.Frames), len(slow.Frames), fast.Warnings, slow.Warnings)
			}
		}
	}
}

// TestFastEventDeclines checks that the fast scanner hands the cases it cannot decode exactly
// to fastjson rather than guessing.
func TestFastEventDeclines(t *testing.T) {
	d := newDecoder(context.Background(), "x", Options{})
	for _, c := range []struct {
		ev   string
		fast bool
	}{
		{`{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"x":"a\"b","grid":[1,2]}}`, true},
		{`{"ph":"X","cat":"kernel","name":"k\"","ts":1,"dur":2}`, false},
		{`{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"device":"\u0031"}}`, false},
		{`{"p\u0068":"X"}`, false},
		{`{"ph":"M","name":"process_name","args":{"name":"x"}}`, false},
		{`{"ph":"X","ts":01}`, false},
		{`{"ph":"X"} `, true},
		{`{"ph":"X"}x`, false},
		{`{"ph":"X","name":"` + "\xc3\x28" + `"}`, false},
		{`{"ph":"X","name":"é"}`, true},
	} {
		if got := fastEvent([]byte(c.ev), &d.ev); got != c.fast {
			t.Errorf("fastEvent(%s) = %v, want %v", c.ev, got, c.fast)
		}
	}
}

// Recorded shapes reach CPUOp.Shape as compact JSON, the same text whatever white space the
// trace had, so that ops of one shape share one id.
func TestReadShapes(t *testing.T) {
	tr, err := Read(context.Background(), strings.NewReader(fastEventDocs[0]), "x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// An op without shapes before the first one with them still has its (empty) entry.
	mixed := `[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":2},{"ph":"X","cat":"cpu_op","name":"b","ts":1,"dur":2,"args":{"Input Dims":[[1]]}},{"ph":"X","cat":"cpu_op","name":"c","ts":1,"dur":2}]`
	tm, err := Read(context.Background(), strings.NewReader(mixed), "m", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, id := tm.Shape(1); len(tm.CPUOpShapes) != 3 || tm.CPUOpShapes[0] != 0 || id == 0 || tm.CPUOpShapes[2] != 0 {
		t.Fatalf("shapes %v, want [0 id 0]", tm.CPUOpShapes)
	}
	got, id0 := tr.Shape(0)
	_, id1 := tr.Shape(1)
	if len(tr.CPUOps) != 2 || id0 == 0 || id0 != id1 {
		t.Fatalf("cpu ops %+v, shapes %v: want two ops sharing one shape id", tr.CPUOps, tr.CPUOpShapes)
	}
	want := `[[4096,4096],[4096,4096]]` + "\x1f" + `["c10::BFloat16","a b"]` + "\x1f" + `["","[1, 1]"]`
	if got != want {
		t.Errorf("shape text %q, want %q", got, want)
	}
}

// BenchmarkFastEventAt measures the fast scanner alone (no storing) over the traceEvents of a
// generated 32 MB trace, in MB/s of the events' JSON; elements it declines (metadata) are
// skipped to the next line that opens an element.
func BenchmarkFastEventAt(b *testing.B) {
	data := benchTrace(b, 32<<20, false)
	at := bytes.Index(data, []byte(`"traceEvents"`))
	if at < 0 {
		b.Fatal("no traceEvents")
	}
	data = data[at+bytes.IndexByte(data[at:], '[')+1:]
	b.SetBytes(int64(len(data)))
	var ev rawEvent
	for b.Loop() {
		events := 0
		for i := 0; i < len(data); {
			for i < len(data) && (wsByte[data[i]] || data[i] == ',') {
				i++
			}
			if i >= len(data) || data[i] != '{' {
				break
			}
			n, ok := fastEventAt(data[i:], &ev)
			if !ok {
				k := bytes.Index(data[i+1:], []byte("\n  {"))
				if k < 0 {
					break
				}
				i += 1 + k
				continue
			}
			i += n
			events++
		}
		if events == 0 {
			b.Fatal("no event decoded")
		}
	}
}
