package kineto

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/kineto/kinetogen"
)

// splitDocs are traces whose bytes near any split point are hostile to a guess: strings
// holding braces, brackets, commas and escaped quotes; args holding arrays of objects; string
// pids, bad durations, shapes and collectives only in the second half; a second traceEvents
// key; stray and missing commas; a cut-off end.
var splitDocs = map[string]string{
	"hostile strings": `{"traceEvents":[
{"ph":"X","cat":"kernel","name":"a},{\"b","pid":0,"tid":7,"ts":1,"dur":2,"args":{"device":0,"stream":7,"correlation":1}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":5,"tid":5,"ts":0.5,"dur":0.2,"args":{"correlation":1,"External id":3}},
{"ph":"X","cat":"cpu_op","name":"aten::mm }, {","pid":5,"tid":5,"ts":0.1,"dur":1,"args":{"External id":3,"Input Dims":[[2,3],[3,4]],"Input type":["float","float"]}},
{"ph":"s","cat":"ac2g","id":1,"pid":5,"tid":5,"ts":0.5},{"ph":"f","cat":"ac2g","id":1,"pid":0,"tid":7,"ts":1,"bp":"e"},
{"ph":"X","cat":"user_annotation","name":"]},{[\\","pid":5,"tid":5,"ts":0,"dur":3,"args":{"x":[{"a":"},{"},{"b":[{},{}]}]}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":9,"ts":3,"dur":2,"args":{"device":0,"stream":9,"Collective name":"allreduce","dtype":"BFloat16","In msg nelems":8,"Out msg nelems":8,"Group size":2,"In split size":"[]","Out split size":"[]"}},
{"ph":"X","cat":"python_function","name":"f },{ g","pid":5,"tid":5,"ts":0,"dur":4,"args":{"Python id":1,"Python parent id":0}},
{"ph":"X","cat":"cpu_op","name":"aten::add","pid":5,"tid":5,"ts":4,"dur":1,"args":{"External id":4,"Input Dims":[[2]],"Concrete Inputs":["", "1"]}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","pid":0,"tid":7,"ts":5,"dur":1,"args":{"device":0,"stream":7,"bytes":64}},
{"ph":"X","cat":"kernel","name":"a},{\"b","pid":0,"tid":7,"ts":6,"dur":2,"args":{"device":0,"stream":7,"correlation":2}}
],"deviceProperties":[{"id":0,"name":"H100"}],"baseTimeNanoseconds":1000}`,
	"second half unusual": `{"traceEvents":[
{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":1,"dur":2},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":3,"dur":2},
{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":5,"dur":2},
{"ph":"X","cat":"kernel","name":"k3","pid":"[TP01] 7","tid":"s","ts":7,"dur":2},
{"ph":"X","cat":"kernel","name":"k4","pid":0,"tid":7,"ts":"x","dur":2},
{"ph":"X","cat":"kernel","name":"k5","pid":0,"tid":7,"ts":9,"dur":-2},
{"ph":"M","name":"process_name","pid":0,"args":{"name":"gpu"}},,
{"ph":"X","cat":"kernel","name":"k6","pid":0,"tid":7,"ts":11,"dur":2}
{"ph":"X","cat":"kernel","name":"k7","pid":0,"tid":7,"ts":13,"dur":2},
],"traceEvents":[{"ph":"X","cat":"kernel","name":"k8","pid":0,"tid":7,"ts":15,"dur":2},{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":17,"dur":2}],
"distributedInfo":{"rank":1}}`,
	"bare array": `[{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":1,"dur":2},{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":3,"dur":2},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":5,"dur":2},{"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":7,"ts":7,"dur":2}]`,
	"string pids": `{"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"a","pid":"A","tid":"t","ts":1,"dur":2},
{"ph":"X","cat":"cpu_op","name":"b","pid":"A","tid":"t","ts":3,"dur":2},
{"ph":"X","cat":"cpu_op","name":"c","pid":"B","tid":"t","ts":5,"dur":2},
{"ph":"X","cat":"kernel","name":"k","pid":"[TP00] 3","tid":"s","ts":7,"dur":2},
{"ph":"M","name":"process_labels","pid":"[TP00] 3","args":{"labels":"x"}},
{"ph":"M","name":"process_name","pid":0,"args":{"name":"n0"}},
{"ph":"X","cat":"cpu_op","name":"d","pid":"B","tid":"u","ts":7,"dur":2},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":"C","tid":"u","ts":8,"dur":1},
{"ph":"X","cat":"kernel","name":"k","pid":"[TP01] 9","tid":"s","ts":9,"dur":2},
{"ph":"M","name":"process_labels","pid":"[TP00] 3","args":{"labels":"y"}},
{"ph":"M","name":"process_name","pid":0,"args":{"name":"n1"}},
{"ph":"X","cat":"gpu_user_annotation","name":"g","pid":"[TP01] 9","tid":"s","ts":9,"dur":2},
{"ph":"s","cat":"ac2g","id":5,"pid":"C","tid":"u","ts":8}]}`,
	"high ids": `{"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"a","pid":"A","tid":1,"ts":1,"dur":2},
{"ph":"X","cat":"cpu_op","name":"b","pid":2,"tid":1,"ts":3,"dur":2},
{"ph":"X","cat":"cpu_op","name":"c","pid":1073741824,"tid":1,"ts":5,"dur":2},
{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":1,"ts":5,"dur":2,"args":{"stream":1073741825}},
{"ph":"X","cat":"cpu_op","name":"d","pid":"B","tid":1,"ts":7,"dur":2}]}`,
	"tiny": `{"traceEvents":[{},{}]}`,
}

// TestSplitEqualsSequential: reading in two halves builds exactly the trace the sequential
// read builds, whichever offset is guessed as the split point (every byte of the hostile
// documents, and of their cut-off prefixes, is tried), and the guess is taken at some.
func TestSplitEqualsSequential(t *testing.T) {
	var gen bytes.Buffer
	if _, err := kinetogen.Write(&gen, kinetogen.Config{Flavor: kinetogen.FlavorLLM, Steps: 2, Layers: 2, WithStack: true, CommStream: true}); err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{"generated": gen.String()}
	for name, doc := range splitDocs {
		docs[name] = doc
		docs[name+" cut"] = doc[:len(doc)*3/4]
	}
	merged, declined := 0, 0
	splitTaken = func(ok bool) {
		if ok {
			merged++
		} else {
			declined++
		}
	}
	defer func() { splitTaken = nil }()
	for name, doc := range docs {
		data := []byte(doc)
		want, werr := Read(context.Background(), bytes.NewReader(data), name, Options{Sequential: true})
		step := 1
		if len(data) > 4000 {
			step = len(data) / 40 // the generated trace: a sample of the offsets
		} else if strings.HasSuffix(name, " cut") {
			step = 11 // cut-off ends: a sample (the whole documents try every offset)
		}
		for at := 1; at < len(data); at += step {
			got, err := Read(context.Background(), bytes.NewReader(data), name, Options{splitOff: int64(at)})
			if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s split at %d (%q): differs from the sequential read: %v / %v\n%+v\n%+v",
					name, at, data[at:min(at+20, len(data))], err, werr, got, want)
			}
		}
	}
	if merged == 0 || declined == 0 {
		t.Errorf("split points merged %d times and were declined %d times: both must happen", merged, declined)
	}
}

// TestSplitAt: the guess is a '{' after "}," near the middle, past strings that look alike
// only when they do; none without such a sequence.
func TestSplitAt(t *testing.T) {
	doc := `{"traceEvents":[{"a":1},` + strings.Repeat(" ", 40) + `{"b":"x"}, {"c":2}]}`
	at := splitAt(strings.NewReader(doc), int64(len(doc)))
	if at < int64(len(doc)/2) || doc[at] != '{' || !strings.HasPrefix(doc[at:], `{"c"`) {
		t.Errorf("splitAt = %d (%q)", at, doc[max(at, 0):])
	}
	if at := splitAt(strings.NewReader(`{"traceEvents":[1,2,3]}`), 23); at != -1 {
		t.Errorf("splitAt found %d in a document without objects", at)
	}
	// The first boundary lies past the first window (a long string straddles the middle):
	// the whole window finds it; and one whose white space runs across the first window's
	// end is found where the whole window finds it.
	long := `{"traceEvents":[{"a":"` + strings.Repeat("x", 4*splitWindowFirst) + `"},{"b":1},{"c":2}]}`
	if at := splitAt(strings.NewReader(long), int64(len(long))); at < 0 || !strings.HasPrefix(long[at:], `{"b"`) {
		t.Errorf("splitAt past the first window = %d", at)
	}
	const ws, head, tail = 100, `{"traceEvents":[{"a":"`, `{"b":1},{"c":2}]}`
	comma := len(tail) + 1 + ws + 2*splitWindowFirst - 20 // 10 bytes before the first window's end
	edge := head + strings.Repeat("x", comma-2-len(head)) + `"},` + strings.Repeat(" ", ws) + tail
	size := int64(len(edge))
	if c := strings.Index(edge, `},`) + 1; c != comma || int64(c)-size/2 != splitWindowFirst-10 {
		t.Fatalf("test document: comma at %d, %d past the middle", c, int64(c)-size/2)
	}
	if at := splitAtWithin(strings.NewReader(edge), size, splitWindowFirst); at != -1 {
		t.Errorf("the first window alone found %d", at)
	}
	if at := splitAt(strings.NewReader(edge), size); at < 0 || !strings.HasPrefix(edge[at:], `{"b"`) {
		t.Errorf("splitAt across the first window's end = %d", at)
	}
}

// TestSplitRealTraces: the real fixtures, inflated, read in two halves from the guessed
// middle, build what the sequential read builds.
func TestSplitRealTraces(t *testing.T) {
	merged := 0
	splitTaken = func(ok bool) {
		if ok {
			merged++
		}
	}
	defer func() { splitTaken = nil }()
	for _, fx := range []string{fxDDP, "hta-a100-cudagraph-multistream-rank0.json.gz", fxMI300X} {
		p := filepath.Join(fixtureDir(), fx)
		if !fileExists(p) {
			t.Logf("skipping %s: fixture absent (%s)", fx, p)
			continue
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		want, werr := Read(context.Background(), bytes.NewReader(data), fx, Options{Sequential: true})
		n := int64(len(data))
		offs := []int64{splitAt(bytes.NewReader(data), n)}
		for _, at := range offs {
			if at <= 0 {
				t.Errorf("%s: no split point guessed", fx)
				continue
			}
			got, err := Read(context.Background(), bytes.NewReader(data), fx, Options{splitOff: at})
			if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("%s split at %d: differs from the sequential read: %v / %v", fx, at, err, werr)
			}
		}
	}
	t.Logf("%d second halves merged", merged)
}
