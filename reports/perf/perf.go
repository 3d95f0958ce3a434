// Package perf reads the JSON file that `sglang generate --perf-dump-path` writes: end-to-end
// time, per-stage times, per-denoising-step times and memory checkpoints. The schema drifted
// across sglang versions (see the Schema* constants); ReadDump accepts every known version and
// normalises it into one Dump so that callers never branch on the version.
//
// Durations are parsed from the JSON number text as fixed-point decimals (never through
// float64), so a millisecond value such as 1234.567891 becomes exactly 1234567891ns and two
// dumps that print the same text always compare equal.
//
// metrics.go turns run directories, cell directories and perf dumps into per-configuration
// samples (Set, Config) for runner compare, the history and runner report: repeats of one
// configuration pool their samples, and only ok cells of the unprofiled pass enter by default.
package perf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sglprof/runner/plans/infile"
)

// Schema versions recognised by ReadDump, from newest to oldest. The value is recorded in
// Dump.Schema so that reports can say which fields were really measured.
const (
	// SchemaCurrent has denoise_steps_ms and memory_checkpoints (newest builds).
	SchemaCurrent = "current"
	// SchemaDenoiseSteps has denoise_steps_ms but no memory_checkpoints (after sglang PR #15537).
	SchemaDenoiseSteps = "denoise-steps"
	// SchemaStepsInStages has no denoise_steps_ms; per-step times are `denoising_step_N`
	// entries inside "steps" (sglang PR #15397). ReadDump moves them into DenoiseSteps.
	SchemaStepsInStages = "steps-in-stages"
	// SchemaStagesOnly is the oldest dump (sglang PR #13630): stage times only, no per-step
	// times.
	SchemaStagesOnly = "stages-only"
)

// maxEntries bounds the number of stages, steps and checkpoints accepted from one dump, so a
// hostile or corrupted file cannot make the reader allocate without limit.
const maxEntries = 1 << 20

// Stage is one pipeline stage in execution order (e.g. "TextEncodingStage", "DenoisingStage").
type Stage struct {
	Name string        `json:"name"`
	Dur  time.Duration `json:"dur_ns"`
}

// MemCheckpoint is the CUDA caching-allocator state sglang recorded after one stage, in MB as
// sglang printed them (rounded to 2 decimals by sglang; MB are not times, so float64 is fine).
type MemCheckpoint struct {
	AllocatedMB     float64 `json:"allocated_mb"`
	ReservedMB      float64 `json:"reserved_mb"`
	PeakAllocatedMB float64 `json:"peak_allocated_mb"`
	PeakReservedMB  float64 `json:"peak_reserved_mb"`
}

// Dump is one perf dump, normalised across schema versions.
type Dump struct {
	Timestamp  string        `json:"timestamp"`
	RequestID  string        `json:"request_id"`
	CommitHash string        `json:"commit_hash"`
	Tag        string        `json:"tag"`
	Total      time.Duration `json:"total_ns"`
	// Stages in execution order, without the `denoising_step_N` entries of older dumps.
	Stages []Stage `json:"stages"`
	// DenoiseSteps holds one duration per denoising step, ordered by step index. Empty for
	// SchemaStagesOnly dumps, which did not record steps.
	DenoiseSteps []time.Duration `json:"denoise_steps_ns,omitempty"`
	// Memory is keyed by sglang's checkpoint name ("after_DenoisingStage"); nil when the dump
	// has no memory_checkpoints, empty when sglang wrote an empty object.
	Memory map[string]MemCheckpoint `json:"memory,omitempty"`
	Model  string                   `json:"model,omitempty"`
	Prompt string                   `json:"prompt,omitempty"`
	// Schema is the version ReadDump recognised (one of the Schema* constants).
	Schema string `json:"schema"`
}

// MeanDenoiseStep is the mean of DenoiseSteps, or 0 when the dump has none. The division is
// done on integer nanoseconds, so the result is truncated to the nanosecond.
func (d *Dump) MeanDenoiseStep() time.Duration {
	if d == nil || len(d.DenoiseSteps) == 0 {
		return 0
	}
	var sum time.Duration
	for _, s := range d.DenoiseSteps {
		sum += s
	}
	return sum / time.Duration(len(d.DenoiseSteps))
}

// Stage returns the duration of the first stage called name. A stage that sglang ran twice is
// unusual enough that the caller should look at Stages directly.
func (d *Dump) Stage(name string) (time.Duration, bool) {
	if d == nil {
		return 0, false
	}
	for _, s := range d.Stages {
		if s.Name == name {
			return s.Dur, true
		}
	}
	return 0, false
}

// PeakMemoryMB is the largest peak_reserved_mb over all checkpoints (falling back to
// peak_allocated_mb where reserved is absent). Reserved memory is what the caching allocator
// took from the device, so it is the figure that decides whether a configuration fits on a
// GPU. It is 0 when the dump has no memory checkpoints.
func (d *Dump) PeakMemoryMB() float64 {
	if d == nil {
		return 0
	}
	peak := 0.0
	for _, m := range d.Memory {
		v := m.PeakReservedMB
		if v == 0 {
			v = m.PeakAllocatedMB
		}
		if v > peak {
			peak = v
		}
	}
	return peak
}

// ReadDumpFile reads the perf dump at path.
func ReadDumpFile(path string) (*Dump, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("perf dump: %w", err)
	}
	defer f.Close()
	d, err := ReadDump(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// ReadDump reads one perf dump (any schema version) from r. Unknown keys are ignored so that
// newer sglang builds that add fields still read; missing required keys, wrong types and
// negative durations are errors that name the key.
func ReadDump(r io.Reader) (*Dump, error) {
	top, err := decodeDumpObject(r)
	if err != nil {
		return nil, err
	}
	d := &Dump{}
	for key, dst := range map[string]*string{
		"timestamp":   &d.Timestamp,
		"request_id":  &d.RequestID,
		"commit_hash": &d.CommitHash,
		"tag":         &d.Tag,
	} {
		if err := optString(top, key, dst); err != nil {
			return nil, err
		}
	}
	inline, err := d.readTotalAndStages(top)
	if err != nil {
		return nil, err
	}
	hasDenoise, err := d.readDenoise(top, inline)
	if err != nil {
		return nil, err
	}
	if raw, ok := top["memory_checkpoints"]; ok && !isNull(raw) {
		mem, err := readMemory(raw)
		if err != nil {
			return nil, err
		}
		d.Memory = mem
	}
	if raw, ok := top["meta"]; ok && !isNull(raw) {
		if err := d.readMeta(raw); err != nil {
			return nil, err
		}
	}

	switch {
	case hasDenoise && d.Memory != nil:
		d.Schema = SchemaCurrent
	case hasDenoise:
		d.Schema = SchemaDenoiseSteps
	case len(inline) > 0:
		d.Schema = SchemaStepsInStages
	default:
		d.Schema = SchemaStagesOnly
	}
	return d, nil
}

// decodeDumpObject decodes the one JSON object of a perf dump into its raw fields, with an
// error that says what the file is instead (empty, NaN from Python, not an object, trailing
// data).
func decodeDumpObject(r io.Reader) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return nil, fmt.Errorf("perf dump: expected a JSON object (the file written by sglang generate --perf-dump-path), found a JSON %s", ute.Value)
		}
		if errors.Is(err, io.EOF) {
			return nil, errors.New("perf dump: file is empty; sglang writes it at the end of a successful run, so the run probably did not finish")
		}
		var se *json.SyntaxError
		if errors.As(err, &se) && (strings.Contains(se.Error(), "'N'") || strings.Contains(se.Error(), "'I'")) {
			return nil, fmt.Errorf("perf dump: not valid JSON (Python writes NaN or Infinity for a non-finite float, which JSON does not allow; the run measured nothing usable): %w", err)
		}
		return nil, fmt.Errorf("perf dump: not valid JSON: %w", err)
	}
	if top == nil {
		return nil, errors.New("perf dump: expected a JSON object, found null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("perf dump: unexpected data after the JSON object; expected exactly one object per file")
	}
	return top, nil
}

// readTotalAndStages reads the two required keys, total_duration_ms and the stage list
// "steps", into d and returns the denoising steps found inline in that list.
func (d *Dump) readTotalAndStages(top map[string]json.RawMessage) ([]indexedStep, error) {
	if _, server := top["stages"]; server {
		// The server's JSONL performance.log has "stages" and a list of bare step numbers;
		// saying so is more useful than a type error deep inside "steps".
		return nil, errors.New("perf dump: found a \"stages\" key: this looks like a line of sglang's server performance.log, not a file written by --perf-dump-path")
	}
	rawTotal, ok := top["total_duration_ms"]
	if !ok {
		return nil, errors.New("perf dump: missing total_duration_ms; is this the file written by sglang generate --perf-dump-path?")
	}
	total, err := msField("total_duration_ms", rawTotal)
	if err != nil {
		return nil, err
	}
	d.Total = total

	rawSteps, ok := top["steps"]
	if !ok {
		return nil, errors.New("perf dump: missing \"steps\" (the stage list); is this the file written by sglang generate --perf-dump-path?")
	}
	stages, inline, err := readStages(rawSteps)
	if err != nil {
		return nil, err
	}
	d.Stages = stages
	return inline, nil
}

// readDenoise fills d.DenoiseSteps from the dedicated denoise_steps_ms list or, without one,
// from the steps found inline in the stage list; it reports whether the dedicated list was
// there (a null one counts as absent).
func (d *Dump) readDenoise(top map[string]json.RawMessage, inline []indexedStep) (bool, error) {
	rawDenoise, hasDenoise := top["denoise_steps_ms"]
	if hasDenoise && isNull(rawDenoise) {
		hasDenoise = false
	}
	if hasDenoise {
		steps, err := readDenoiseSteps(rawDenoise)
		if err != nil {
			return hasDenoise, err
		}
		d.DenoiseSteps = steps
		// A dump that has both keeps the dedicated list; the inline entries were duplicates
		// (the state fixed by sglang PR #15537) and are dropped from the stage list anyway.
	} else if len(inline) > 0 {
		steps, err := orderSteps("steps", inline)
		if err != nil {
			return hasDenoise, err
		}
		d.DenoiseSteps = steps
	}
	return hasDenoise, nil
}

// readMeta reads the optional model and prompt of the "meta" object.
func (d *Dump) readMeta(raw json.RawMessage) error {
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(raw, &meta); err != nil {
		return fmt.Errorf("perf dump: \"meta\" must be an object: %w", err)
	}
	if err := optString(meta, "model", &d.Model); err != nil {
		return fmt.Errorf("meta.%w", err)
	}
	if err := optString(meta, "prompt", &d.Prompt); err != nil {
		return fmt.Errorf("meta.%w", err)
	}
	return nil
}

// indexedStep is one per-step time before ordering.
type indexedStep struct {
	step int
	dur  time.Duration
}

const stepPrefix = "denoising_step_"

// readStages decodes "steps": the stage list, from which `denoising_step_N` entries are split
// off because older sglang builds recorded per-step times there.
func readStages(raw json.RawMessage) ([]Stage, []indexedStep, error) {
	var items []json.RawMessage
	if err := decodeNumbers(raw, &items); err != nil {
		return nil, nil, fmt.Errorf("perf dump: \"steps\" must be a list of {name, duration_ms}: %w", err)
	}
	if len(items) > maxEntries {
		return nil, nil, fmt.Errorf("perf dump: \"steps\" has %d entries, more than the %d this reader accepts", len(items), maxEntries)
	}
	stages := make([]Stage, 0, len(items))
	var inline []indexedStep
	for i, it := range items {
		var e struct {
			Name     *string      `json:"name"`
			Duration *json.Number `json:"duration_ms"`
		}
		if err := decodeNumbers(it, &e); err != nil {
			return nil, nil, fmt.Errorf("perf dump: steps[%d] must be {\"name\": string, \"duration_ms\": number}: %w", i, err)
		}
		if e.Name == nil {
			return nil, nil, fmt.Errorf("perf dump: steps[%d] has no \"name\"", i)
		}
		if e.Duration == nil {
			return nil, nil, fmt.Errorf("perf dump: steps[%d] (%q) has no \"duration_ms\"", i, *e.Name)
		}
		dur, err := parseMS(e.Duration.String())
		if err != nil {
			return nil, nil, fmt.Errorf("perf dump: steps[%d] (%q) duration_ms: %w", i, *e.Name, err)
		}
		if n, ok := denoiseStepIndex(*e.Name); ok {
			inline = append(inline, indexedStep{n, dur})
			continue
		}
		stages = append(stages, Stage{Name: *e.Name, Dur: dur})
	}
	return stages, inline, nil
}

// denoiseStepIndex recognises sglang's internal per-step stage name `denoising_step_<N>`.
func denoiseStepIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, stepPrefix)
	if !ok || rest == "" || len(rest) > 9 {
		return 0, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0, false
	}
	return n, true
}

// readDenoiseSteps decodes "denoise_steps_ms": [{step, duration_ms}, ...].
func readDenoiseSteps(raw json.RawMessage) ([]time.Duration, error) {
	var items []struct {
		Step     *json.Number `json:"step"`
		Duration *json.Number `json:"duration_ms"`
	}
	if err := decodeNumbers(raw, &items); err != nil {
		return nil, fmt.Errorf("perf dump: \"denoise_steps_ms\" must be a list of {step, duration_ms}: %w", err)
	}
	if len(items) > maxEntries {
		return nil, fmt.Errorf("perf dump: \"denoise_steps_ms\" has %d entries, more than the %d this reader accepts", len(items), maxEntries)
	}
	steps := make([]indexedStep, 0, len(items))
	for i, it := range items {
		if it.Step == nil || it.Duration == nil {
			return nil, fmt.Errorf("perf dump: denoise_steps_ms[%d] needs both \"step\" and \"duration_ms\"", i)
		}
		n, err := strconv.Atoi(it.Step.String())
		if err != nil || n < 0 {
			return nil, fmt.Errorf("perf dump: denoise_steps_ms[%d].step = %s; expected a non-negative integer", i, it.Step.String())
		}
		dur, err := parseMS(it.Duration.String())
		if err != nil {
			return nil, fmt.Errorf("perf dump: denoise_steps_ms[%d] duration_ms: %w", i, err)
		}
		steps = append(steps, indexedStep{n, dur})
	}
	return orderSteps("denoise_steps_ms", steps)
}

// orderSteps sorts per-step times by step index. A repeated index means two different
// measurements claim the same step, which no sglang version writes, so it is an error rather
// than a silent pick.
func orderSteps(field string, steps []indexedStep) ([]time.Duration, error) {
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].step < steps[j].step })
	out := make([]time.Duration, len(steps))
	for i, s := range steps {
		if i > 0 && steps[i-1].step == s.step {
			return nil, fmt.Errorf("perf dump: %s lists denoising step %d twice", field, s.step)
		}
		out[i] = s.dur
	}
	return out, nil
}

// readMemory decodes "memory_checkpoints": {name: {allocated_mb, ...}}.
func readMemory(raw json.RawMessage) (map[string]MemCheckpoint, error) {
	var items map[string]map[string]json.Number
	if err := decodeNumbers(raw, &items); err != nil {
		return nil, fmt.Errorf("perf dump: \"memory_checkpoints\" must be an object of {allocated_mb, reserved_mb, peak_allocated_mb, peak_reserved_mb} objects: %w", err)
	}
	if len(items) > maxEntries {
		return nil, fmt.Errorf("perf dump: \"memory_checkpoints\" has %d entries, more than the %d this reader accepts", len(items), maxEntries)
	}
	mem := make(map[string]MemCheckpoint, len(items))
	for name, fields := range items {
		var m MemCheckpoint
		for key, dst := range map[string]*float64{
			"allocated_mb":      &m.AllocatedMB,
			"reserved_mb":       &m.ReservedMB,
			"peak_allocated_mb": &m.PeakAllocatedMB,
			"peak_reserved_mb":  &m.PeakReservedMB,
		} {
			n, ok := fields[key]
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(n.String(), 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("perf dump: memory_checkpoints[%q].%s = %s; expected a non-negative number of MB", name, key, n.String())
			}
			*dst = v
		}
		mem[name] = m
	}
	return mem, nil
}

// msField parses one required millisecond field.
func msField(key string, raw json.RawMessage) (time.Duration, error) {
	var n json.Number
	if err := decodeNumbers(raw, &n); err != nil || n == "" {
		return 0, fmt.Errorf("perf dump: %s must be a number of milliseconds, found %s", key, abbrev(raw))
	}
	d, err := parseMS(n.String())
	if err != nil {
		return 0, fmt.Errorf("perf dump: %s: %w", key, err)
	}
	return d, nil
}

// optString decodes an optional string field; null and absence both leave dst empty.
func optString(m map[string]json.RawMessage, key string, dst *string) error {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("perf dump: %s must be a string, found %s", key, abbrev(raw))
	}
	return nil
}

// decodeNumbers unmarshals with UseNumber so that numbers keep their exact text.
func decodeNumbers(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// abbrev shortens a raw JSON value for an error message.
func abbrev(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// parseMS converts the text of a JSON number of milliseconds into nanoseconds using decimal
// fixed-point arithmetic: the decimal point is moved six places (ms to ns) by string
// manipulation, digits beyond the nanosecond are rounded half away from zero, and overflow of
// time.Duration is an error. Negative values are errors because sglang never writes a negative
// duration; one means the file is corrupt.
func parseMS(s string) (time.Duration, error) {
	orig := s
	if s == "" {
		return 0, errors.New("empty number")
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1000 || e < -1000 {
			return 0, fmt.Errorf("%q is not a usable number of milliseconds", orig)
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if digits == "" {
		return 0, fmt.Errorf("%q is not a number", orig)
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", orig)
		}
	}
	// value = digits * 10^(exp - len(frac)) ms = digits * 10^(exp - len(frac) + 6) ns.
	shift := exp - len(frac) + 6
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, nil // any spelling of zero, including -0
	}
	if neg {
		return 0, fmt.Errorf("negative duration %s ms; sglang never writes one, so the dump is corrupt", orig)
	}
	var keep string
	roundUp := false
	switch {
	case shift >= 0:
		if len(digits)+shift > 19 {
			return 0, fmt.Errorf("%s ms overflows a time.Duration (about 292 years)", orig)
		}
		keep = digits + strings.Repeat("0", shift)
	case -shift >= len(digits):
		keep = "0"
		roundUp = -shift == len(digits) && digits[0] >= '5'
	default:
		cut := len(digits) + shift
		keep = digits[:cut]
		roundUp = digits[cut] >= '5'
	}
	v, err := strconv.ParseInt(keep, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s ms overflows a time.Duration (about 292 years)", orig)
	}
	if roundUp {
		if v == 1<<63-1 {
			return 0, fmt.Errorf("%s ms overflows a time.Duration (about 292 years)", orig)
		}
		v++
	}
	return time.Duration(v), nil
}
