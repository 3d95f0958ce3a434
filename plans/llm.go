package plans

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sglprof/runner/plans/infile"
)

// The LLM serving benchmark's keys: the arrival process, the dataset and the SLOs of [load],
// the server_args, concurrency and request_rate axes of [matrix]. Decoding and checks live here,
// called once from decode, applyDefaults and validate.

// Values of load.dataset.
const (
	DatasetRandom   = "random"   // random token ids with lengths from input_len/output_len
	DatasetShareGPT = "sharegpt" // the first turns of a local ShareGPT-layout JSON file
	DatasetPrefix   = "prefix"   // generated groups of prompts sharing a system prefix
	// DatasetMultiTurn continues the conversations of a local ShareGPT-layout file turn by turn
	// (each request carries the conversation so far), so the prefix cache is exercised.
	DatasetMultiTurn = "multiturn"
)

// APIChat is OpenAI POST /v1/chat/completions (text prompts only).
const APIChat = "chat"

// Datasets lists the values of load.dataset.
var Datasets = []string{DatasetRandom, DatasetShareGPT, DatasetPrefix, DatasetMooncake, DatasetMultiTurn}

// Defaults of the LLM benchmark keys.
const (
	DefaultBurstiness       = 1.0 // Poisson arrivals, bench_serving's default
	DefaultDataset          = DatasetRandom
	DefaultRandomRangeRatio = 1.0 // exactly the matrix's input_len/output_len
)

// ServerArg is one [matrix.server_args] axis: a server flag without its dashes and the values
// it takes, as they go on the command line. Bool is set when the values are TOML booleans:
// "true" puts the bare flag on the command line and "false" leaves it out.
type ServerArg struct {
	Flag   string   `json:"flag"`
	Values []string `json:"values"`
	Bool   bool     `json:"bool,omitempty"`
}

// Argv is the command-line form of one value of the axis: ["--flag", "value"], ["--flag"]
// for true and nothing for false.
func (a ServerArg) Argv(v string) []string {
	if a.Bool {
		if v == "true" {
			return []string{"--" + a.Flag}
		}
		return nil
	}
	return []string{"--" + a.Flag, v}
}

// idPart is the cell-id form of one value: "-tp-size-2", "-enable-x" or "-no-enable-x".
func (a ServerArg) idPart(v string) string {
	if a.Bool {
		if v == "true" {
			return "-" + a.Flag
		}
		return "-no-" + a.Flag
	}
	return "-" + a.Flag + "-" + slug(v)
}

// slug keeps [a-z0-9.] of s (lower-cased) and turns other runs into '-', for ids and directory
// names.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	if b.Len() == 0 {
		return "x"
	}
	return b.String()
}

// RateText is a request rate as plans and ids write it: "inf" for 0 (all at once).
func RateText(r float64) string {
	if r <= 0 {
		return "inf"
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}

// decodeLLMLoad decodes the benchmark keys of [load].
func (d *decoder) decodeLLMLoad(rl *rawLoad, l *LoadSpec) {
	if k := path("load", "request_rate"); d.present(k) {
		if r, ok := d.rate(k, rl.RequestRate, -1); ok {
			l.RequestRate = r
		}
	}
	d.decodeFloat(path("load", "burstiness"), rl.Burstiness, &l.Burstiness, `a number > 0 such as 1 (Poisson)`)
	decodeField(d, path("load", "max_concurrency"), rl.MaxConcurrency, &l.MaxConcurrency, `an integer such as 64`)
	decodeField(d, path("load", "duration"), rl.Duration, &l.Duration, `a duration string such as "60s"`)
	decodeField(d, path("load", "dataset"), rl.Dataset, &l.Dataset, `a string: "random", "sharegpt", "prefix", "multiturn" or "mooncake"`)
	d.decodeFloat(path("load", "random_range_ratio"), rl.RandomRangeRatio, &l.RandomRangeRatio, `a number in (0, 1] such as 0.5`)
	decodeField(d, path("load", "dataset_path"), rl.DatasetPath, &l.DatasetPath, `a string: the path of a ShareGPT JSON file`)
	decodeField(d, path("load", "slo_ttft"), rl.SLOTTFT, &l.SLOTTFT, `a duration string such as "200ms"`)
	decodeField(d, path("load", "slo_tpot"), rl.SLOTPOT, &l.SLOTPOT, `a duration string such as "50ms"`)
	decodeField(d, path("load", "clients"), rl.Clients, &l.Clients, `an integer such as 2`)
	d.decodeFloat(path("load", "trace_slowdown"), rl.TraceSlowdown, &l.TraceSlowdown, `a number > 0 such as 2 (half the trace's rate)`)
	decodeField(d, path("load", "flush_cache"), rl.FlushCache, &l.FlushCache, `true or false`)
}

// rate decodes one request rate: a number > 0 or "inf" (stored as 0). elem >= 0 names an
// element of an array for the message.
func (d *decoder) rate(k []string, prim toml.Primitive, elem int) (float64, bool) {
	var v any
	if err := d.md.PrimitiveDecode(prim, &v); err != nil {
		d.typeError(k, prim, err, `a number of requests/s or "inf"`)
		return 0, false
	}
	return d.rateValue(k, v, elem)
}

func (d *decoder) rateValue(k []string, v any, elem int) (float64, bool) {
	bad := func(lit, msg string) (float64, bool) {
		d.bad[toml.Key(k).String()] = true
		if elem >= 0 {
			d.addElem(k, elem, lit, msg)
		} else {
			d.addKey(k, msg)
		}
		return 0, false
	}
	var r float64
	switch x := v.(type) {
	case int64:
		r = float64(x)
	case float64:
		r = x
	case string:
		if strings.EqualFold(x, "inf") {
			return 0, true
		}
		return bad(x, fmt.Sprintf(`%q is not a request rate; write a number of requests/s such as 4, or "inf" to send every request at once`, x))
	default:
		return bad("", fmt.Sprintf(`expected a number of requests/s or "inf", got %s`, describe(v)))
	}
	if math.IsInf(r, 1) {
		return 0, true
	}
	if !(r > 0) {
		return bad("", fmt.Sprintf(`request rate %v: it must be > 0 requests/s, or "inf" to send every request at once`, r))
	}
	return r, true
}

// decodeLLMMatrix decodes [matrix.server_args] and the concurrency and request_rate axes.
func (d *decoder) decodeLLMMatrix(rm *rawMatrix, m *Matrix) {
	decodeField(d, path("matrix", "concurrency"), rm.Concurrency, &m.Concurrency, `an array of integers such as [1, 8, 64]`)
	if k := path("matrix", "request_rate"); d.present(k) {
		var vs []any
		if !decodeField(d, k, rm.RequestRate, &vs, `an array of numbers (requests/s) or "inf", such as [1, 4, "inf"]`) {
			return
		}
		m.RequestRate = make([]float64, 0, len(vs))
		seen := map[float64]int{}
		for i, v := range vs {
			r, ok := d.rateValue(k, v, i)
			if !ok {
				continue
			}
			if j, dup := seen[r]; dup {
				d.addElem(k, i, "", fmt.Sprintf("%s is listed twice (elements %d and %d); list each value once", RateText(r), j, i))
			}
			seen[r] = i
			m.RequestRate = append(m.RequestRate, r)
		}
	}
	m.ServerArgs = d.decodeFlags("server_args", rm.ServerArgs, `{ tp-size = ["1", "2"] }`)
	m.Args = d.decodeFlags("args", rm.Args, `{ attention-backend = ["fa", "torch_sdpa"] }`)
}

// decodeFlags decodes a table of flag axes ([matrix.server_args], [matrix.args]) in the order
// the file lists its flags (the order of the id parts and of the command line); nil when the
// table is absent.
func (d *decoder) decodeFlags(table string, prim toml.Primitive, example string) []ServerArg {
	k := path("matrix", table)
	if !d.present(k) {
		return nil
	}
	raw, ok := d.decodeMap(k, prim, "a table of arrays such as "+example)
	if !ok {
		return nil
	}
	out := []ServerArg{}
	for _, key := range d.md.Keys() {
		if len(key) != 3 || key[0] != "matrix" || key[1] != table {
			continue
		}
		if a, ok := d.serverArg(key, raw[key[2]]); ok {
			out = append(out, a)
		}
	}
	return out
}

func (d *decoder) serverArg(k []string, prim toml.Primitive) (ServerArg, bool) {
	flag := k[2]
	a := ServerArg{Flag: flag}
	fail := func(msg string) (ServerArg, bool) {
		d.bad[toml.Key(k).String()] = true
		d.addKey(k, msg)
		return a, false
	}
	switch {
	case strings.HasPrefix(flag, "-"):
		return fail(fmt.Sprintf("write the flag without its dashes: %q", strings.TrimLeft(flag, "-")))
	case flag == "" || strings.ContainsAny(flag, " \t=\x00"):
		return fail(fmt.Sprintf("%q is not a flag name; write the server flag without dashes, e.g. tp-size", flag))
	}
	var vs []any
	if !decodeField(d, k, prim, &vs, `an array of values such as ["1", "2"] or [true, false]`) {
		return a, false
	}
	if len(vs) == 0 {
		return fail(fmt.Sprintf("empty axis; list at least one value such as [\"1\"], or drop --%s", flag))
	}
	_, a.Bool = vs[0].(bool)
	seen := map[string]int{}
	for i, v := range vs {
		var s string
		switch x := v.(type) {
		case bool:
			if !a.Bool {
				return fail("mixes booleans with other values; use true/false for a flag without a value, strings otherwise")
			}
			s = strconv.FormatBool(x)
		case string:
			s = x
		case int64:
			s = strconv.FormatInt(x, 10)
		case float64:
			s = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			return fail(fmt.Sprintf("element %d is %s; use strings, numbers or booleans", i, describe(v)))
		}
		if _, isBool := v.(bool); a.Bool != isBool {
			return fail("mixes booleans with other values; use true/false for a flag without a value, strings otherwise")
		}
		if strings.TrimSpace(s) == "" || strings.ContainsRune(s, 0) {
			d.addElem(k, i, s, "empty value (or a NUL byte); give the flag's value, e.g. \"2\"")
			d.bad[toml.Key(k).String()] = true
			continue
		}
		if j, dup := seen[s]; dup {
			lit := s
			if _, isStr := v.(string); !isStr {
				lit = ""
			}
			d.addElemN(k, i, lit, 1, fmt.Sprintf("%s is listed twice (elements %d and %d); list each value once", s, j, i))
			d.bad[toml.Key(k).String()] = true
			continue
		}
		seen[s] = i
		a.Values = append(a.Values, s)
	}
	return a, !d.bad[toml.Key(k).String()]
}

// applyLLMDefaults fills the benchmark keys the file left out, for LLM plans only (the cells of
// diffusion plans keep the load they always had in cells.json).
func applyLLMDefaults(p *Plan, set func(k ...string) bool) {
	if p.Backend.ModelType != ModelTypeLLM {
		return
	}
	l := &p.Load
	if !set("load", "burstiness") {
		l.Burstiness = DefaultBurstiness
	}
	if !set("load", "dataset") {
		l.Dataset = DefaultDataset
	}
	if !set("load", "random_range_ratio") {
		l.RandomRangeRatio = DefaultRandomRangeRatio
	}
	if !set("load", "flush_cache") {
		// A server the runner starts is its own to flush; an attached one is not.
		l.FlushCache = p.Backend.URL == ""
	}
	applySearchDefaults(p, set)
}

// MaxClients bounds [load] clients: client processes run on the runner's machine.
const MaxClients = 64

// llmLoadKeys are the [load] keys only an LLM cell uses.
var llmLoadKeys = []string{"request_rate", "burstiness", "max_concurrency", "duration", "dataset",
	"random_range_ratio", "dataset_path", "slo_ttft", "slo_tpot", "clients", "trace_slowdown",
	"search", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "flush_cache"}

// validateLLM checks the benchmark keys. planFile resolves a relative dataset_path.
func (d *decoder) validateLLM(p *Plan, planFile string) {
	l, m := &p.Load, p.Matrix
	serve := !d.check("backend", "mode") || p.Backend.Mode == "serve"
	llm := d.check("backend", "model_type") && p.Backend.ModelType == ModelTypeLLM
	for _, ax := range []string{"server_args", "concurrency", "request_rate"} {
		if k := path("matrix", ax); !serve && d.check(k...) && d.md.IsDefined(k...) {
			d.addKey(k, serveOnlyMsg)
			d.bad[toml.Key(k).String()] = true
		}
	}
	if k := path("matrix", "args"); serve && d.check(k...) && d.md.IsDefined(k...) {
		d.addKey(k, `[matrix.args] holds flags of sglang generate; a serve plan's flags go to the server: write [matrix.server_args]`)
		d.bad[toml.Key(k).String()] = true
	}
	if serve && d.check("backend", "model_type") && !llm {
		for _, key := range llmLoadKeys {
			if k := path("load", key); d.check(k...) && d.md.IsDefined(k...) {
				d.addKey(k, fmt.Sprintf(`only used by LLM cells (backend.model_type = "llm"), but it is %q; drop it`, p.Backend.ModelType))
				d.bad[toml.Key(k).String()] = true
			}
		}
	}
	if k := path("matrix", "concurrency"); d.check(k...) && m.Concurrency != nil {
		if len(m.Concurrency) == 0 {
			d.addKey(k, "empty axis; list at least one concurrency such as [1, 8], or drop the key")
		}
		seen := map[int]int{}
		for i, c := range m.Concurrency {
			if c < 1 {
				d.addElem(k, i, "", fmt.Sprintf("%d: a concurrency must be >= 1", c))
			} else if j, dup := seen[c]; dup {
				d.addElem(k, i, "", fmt.Sprintf("%d is listed twice (elements %d and %d); list each value once", c, j, i))
			}
			seen[c] = i
		}
	}
	if k := path("matrix", "request_rate"); d.check(k...) && m.RequestRate != nil && len(m.RequestRate) == 0 {
		d.addKey(k, `empty axis; list at least one rate such as [1, 4, "inf"], or drop the key`)
	}
	d.validateSearch(p, serve && llm)
	if llm {
		d.validateRampUp(p)
	}
	if !llm {
		return // reported above, or a generate plan whose [load] validateServe rejects
	}
	if k := path("load", "burstiness"); d.check(k...) && !(l.Burstiness > 0) {
		d.addKey(k, fmt.Sprintf("%v: the gamma shape must be > 0 (1 = Poisson, < 1 burstier, > 1 steadier)", l.Burstiness))
	}
	if k := path("load", "max_concurrency"); d.check(k...) && l.MaxConcurrency < 0 {
		d.addKey(k, fmt.Sprintf("%d: it must be >= 1, or 0 (the default) for no cap", l.MaxConcurrency))
	}
	if k := path("load", "clients"); d.check(k...) && (l.Clients < 0 || l.Clients > MaxClients) {
		d.addKey(k, fmt.Sprintf("%d: it must be between 1 and %d (client processes on this machine)", l.Clients, MaxClients))
	}
	if k := path("load", "clients"); d.check(k...) && l.Clients > 1 && l.MaxConcurrency > 0 && l.MaxConcurrency < l.Clients {
		d.addKey(k, fmt.Sprintf("%d clients cannot share max_concurrency = %d (each keeps at least one request in flight); use at most %d clients", l.Clients, l.MaxConcurrency, l.MaxConcurrency))
	}
	if k := path("load", "random_range_ratio"); d.check(k...) && !(l.RandomRangeRatio > 0 && l.RandomRangeRatio <= 1) {
		d.addKey(k, fmt.Sprintf("%v is outside (0, 1]; lengths are drawn from [len·ratio, len], 1 means exactly len", l.RandomRangeRatio))
	}
	for _, key := range []string{"duration", "slo_ttft", "slo_tpot"} {
		if k := path("load", key); d.md.IsDefined(k...) {
			v := map[string]Duration{"duration": l.Duration, "slo_ttft": l.SLOTTFT, "slo_tpot": l.SLOTPOT}[key]
			d.positiveDuration(k, v, `"200ms"`)
		}
	}
	d.validateDataset(l, planFile)
}

// validateDataset checks load.dataset and, for sharegpt, that dataset_path is a ShareGPT file;
// a relative path is made absolute from the plan file's directory, unless the plan is a copy
// whose dataset was resolved already (ParseOptions.DatasetPath).
func (d *decoder) validateDataset(l *LoadSpec, planFile string) {
	k := path("load", "dataset")
	if !d.check(k...) {
		return
	}
	if !oneOf(l.Dataset, Datasets) {
		d.addKey(k, fmt.Sprintf("unknown dataset %q; use %s", l.Dataset, quoteList(Datasets)))
		return
	}
	kp := path("load", "dataset_path")
	if !d.check(kp...) {
		return
	}
	if ks := path("load", "trace_slowdown"); d.check(ks...) && d.md.IsDefined(ks...) {
		if l.Dataset != DatasetMooncake {
			d.addKey(ks, fmt.Sprintf(`only used with dataset = "mooncake" (it is %q); drop it`, l.Dataset))
		} else if !(l.TraceSlowdown > 0) || math.IsInf(l.TraceSlowdown, 0) {
			d.addKey(ks, fmt.Sprintf("%v: the factor the trace's arrival times are multiplied by must be > 0 (2 = half the rate)", l.TraceSlowdown))
		}
	}
	if l.Dataset != DatasetShareGPT && l.Dataset != DatasetMooncake && l.Dataset != DatasetMultiTurn {
		if d.md.IsDefined(kp...) {
			d.addKey(kp, fmt.Sprintf(`only used with dataset = "sharegpt", "multiturn" or "mooncake" (it is %q); drop it or set the dataset`, l.Dataset))
		}
		return
	}
	what := "ShareGPT JSON file"
	if l.Dataset == DatasetMooncake {
		what = "Mooncake trace (JSON Lines)"
	}
	if l.DatasetPath == "" {
		d.missing(kp, fmt.Sprintf(`dataset = %q needs dataset_path: a local %s (it is never downloaded)`, l.Dataset, what))
		return
	}
	hint := "give the path of a local " + what + " (relative paths start at the plan's directory)"
	switch {
	case d.opts.DatasetPath != "":
		l.DatasetPath = d.opts.DatasetPath
		hint = "this is the file the run read its dataset from (cells.json \"dataset\"); put it back there"
	case !filepath.IsAbs(l.DatasetPath) && planFile != "":
		// Absolute, so that the path means the same file from any directory: a Slurm task's,
		// a later --resume's. The run directory records it (cells.json) because its copy of
		// the plan sits elsewhere.
		dir, err := filepath.Abs(filepath.Dir(planFile))
		if err != nil {
			d.addKey(kp, fmt.Sprintf("%v; give an absolute dataset_path", err))
			return
		}
		l.DatasetPath = filepath.Join(dir, l.DatasetPath)
	}
	// Through the one reader: a FIFO or a device named as the dataset is refused, never opened
	// for a read that would block `runner plan` and `runner run` past Ctrl-C.
	f, err := infile.Open(l.DatasetPath)
	if err != nil {
		d.addKey(kp, fmt.Sprintf("%v; %s", err, hint))
		return
	}
	defer f.Close()
	n := 0
	if l.Dataset == DatasetMooncake {
		err = MooncakeRecords(f, l.DatasetPath, func(int, MooncakeRecord) error { n++; return nil })
		if err == nil && n == 0 {
			err = fmt.Errorf("%s: no requests", l.DatasetPath)
		}
		if err != nil {
			d.addKey(kp, err.Error()+`; a Mooncake trace has a JSON object a line: {"timestamp": <ms>, "input_length": <tokens>, "output_length": <tokens>, "hash_ids": [<block ids>]}`)
		}
		return
	}
	err = ShareGPTRecords(f, l.DatasetPath, func(int, ShareGPTRecord) error { n++; return nil })
	if err == nil && n == 0 {
		err = fmt.Errorf("%s: no conversations", l.DatasetPath)
	}
	if err != nil {
		d.addKey(kp, err.Error()+`; the ShareGPT layout is [{"id": ..., "conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}, ...]`)
	}
}

// jsonProblem says what is wrong with a JSON value in the file's terms (a field, what it is,
// what it should be), not in the Go types encoding/json names ("cannot unmarshal number into
// Go struct field ShareGPTRecord.id of type string").
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "another kind of value"
		switch te.Type.Kind() {
		case reflect.String:
			want = "a string"
		case reflect.Slice:
			want = "a list"
		case reflect.Struct:
			want = "an object"
		}
		field := te.Field
		if field == "" {
			return fmt.Sprintf("a %s where %s belongs (at byte %d)", te.Value, want, te.Offset)
		}
		return fmt.Sprintf("field %q is a %s; want %s (at byte %d)", field, te.Value, want, te.Offset)
	}
	return err.Error()
}

// ShareGPTRecord is one conversation of the standard ShareGPT layout.
type ShareGPTRecord struct {
	ID            string `json:"id"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// ShareGPTRecords streams the records of a ShareGPT-layout JSON array to fn. A file that is not
// the layout is an error naming the file (name) and the first bad record; the plan check and
// runner/load's dataset both read through it, so they agree on what the layout is.
func ShareGPTRecords(r io.Reader, name string, fn func(i int, rec ShareGPTRecord) error) error {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", name, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("%s: want a JSON array of conversations (the ShareGPT layout), found %v", name, tok)
	}
	for i := 0; dec.More(); i++ {
		var rec ShareGPTRecord
		if err := dec.Decode(&rec); err != nil {
			return fmt.Errorf("%s: record %d: %s", name, i, jsonProblem(err))
		}
		if rec.Conversations == nil {
			return fmt.Errorf("%s: record %d (id %q): no \"conversations\" list: not the ShareGPT layout", name, i, rec.ID)
		}
		if len(rec.Conversations) >= 2 && rec.Conversations[0].Value == "" {
			return fmt.Errorf("%s: record %d (id %q): the first turn has no \"value\"", name, i, rec.ID)
		}
		if err := fn(i, rec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// serverArgCells is how many combinations [matrix.server_args] makes (1 without it), capped
// above MaxCells so cellCount can reject it.
func serverArgCells(args []ServerArg) int {
	n := 1
	for _, a := range args {
		n *= max(1, len(a.Values))
		if n > MaxCells {
			return MaxCells + 1
		}
	}
	return n
}

// llmPoint is one combination of the LLM benchmark axes: server args (argv form), concurrency
// and request rate, with its id and key parts ("" for a plan without these axes, so that the
// ids of such plans never change).
type llmPoint struct {
	engine   string // backend.kind of the engine axis ("": the plan's)
	argv     []string
	id, key  string
	conc     int
	rate     float64
	hasConc  bool
	hasRates bool
}

// llmPoints is the cross product of the axes, outermost first: engine, server args in file order,
// concurrency, request rate.
func llmPoints(m Matrix) []llmPoint {
	pts := enginePoints(m)
	for _, a := range append(slices.Clone(m.ServerArgs), m.Args...) {
		var next []llmPoint
		for _, pt := range pts {
			for _, v := range a.Values {
				q := pt
				q.argv = append(append([]string(nil), pt.argv...), a.Argv(v)...)
				q.id += a.idPart(v)
				q.key += "/" + a.Flag + "=" + v
				next = append(next, q)
			}
		}
		pts = next
	}
	if len(m.Concurrency) > 0 {
		var next []llmPoint
		for _, pt := range pts {
			for _, c := range m.Concurrency {
				q := pt
				q.conc, q.hasConc = c, true
				q.id += fmt.Sprintf("-c%d", c)
				q.key += fmt.Sprintf("/c%d", c)
				next = append(next, q)
			}
		}
		pts = next
	}
	if len(m.RequestRate) > 0 {
		var next []llmPoint
		for _, pt := range pts {
			for _, r := range m.RequestRate {
				q := pt
				q.rate, q.hasRates = r, true
				q.id += "-r" + RateText(r)
				q.key += "/r" + RateText(r)
				next = append(next, q)
			}
		}
		pts = next
	}
	return pts
}

// apply sets the point's values on a cell.
func (pt llmPoint) apply(c *Cell) {
	if pt.engine != "" {
		c.Backend.Kind = pt.engine
	}
	if len(pt.argv) > 0 {
		c.ServerArgs = pt.argv
		c.Backend.ExtraArgs = append(c.Backend.ExtraArgs, pt.argv...)
	}
	if pt.hasConc {
		c.Load.Concurrency = pt.conc
	}
	if pt.hasRates {
		c.Load.RequestRate = pt.rate
	}
}
