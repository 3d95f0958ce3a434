package perf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReadDumpSchemas(t *testing.T) {
	tests := []struct {
		file string
		want *Dump
	}{
		{
			file: "current.json",
			want: &Dump{
				Timestamp:  "2025-12-20T16:45:15.602292+00:00",
				RequestID:  "3f1c2a4e-9b7d-4c1e-8a55-0d6f2b9e7c11",
				CommitHash: "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
				Tag:        "cli_generate",
				Total:      23456789012,
				Stages: []Stage{
					{"InputValidationStage", 41200},
					{"TextEncodingStage", 512500000},
					{"ConditioningStage", 10700},
					{"TimestepPreparationStage", 1250000},
					{"LatentPreparationStage", 3500000},
					{"DenoisingStage", 22100123456},
					{"DecodingStage", 830000000},
				},
				DenoiseSteps: []time.Duration{450100000, 441200000, 441300000, 440900000},
				Memory: map[string]MemCheckpoint{
					"after_TextEncodingStage": {16234.5, 16800, 16500.25, 16800},
					"after_DenoisingStage":    {40960.12, 52000, 51234.56, 53248},
					"after_DecodingStage":     {41000, 52000, 51234.56, 53000},
				},
				Model:  "Qwen/Qwen-Image",
				Prompt: "A Logo With Bold Large Text: SGL Diffusion",
				Schema: SchemaCurrent,
			},
		},
		{
			file: "denoise-steps.json",
			want: &Dump{
				Timestamp:    "2025-11-30T09:12:01.000001+00:00",
				RequestID:    "mocked_fake_id_for_offline_generate",
				CommitHash:   "N/A",
				Tag:          "cli_generate",
				Total:        9 * time.Second,
				Stages:       []Stage{{"TextEncodingStage", 300 * time.Millisecond}, {"DenoisingStage", 8000500000}, {"DecodingStage", 699500000}},
				DenoiseSteps: []time.Duration{4000250000, 4000250000},
				Model:        "black-forest-labs/FLUX.1-dev",
				Prompt:       "a cat",
				Schema:       SchemaDenoiseSteps,
			},
		},
		{
			file: "steps-in-stages.json",
			want: &Dump{
				Timestamp:    "2025-11-10T20:00:00.5+00:00",
				RequestID:    "mocked_fake_id_for_offline_generate",
				CommitHash:   "0123456789abcdef0123456789abcdef01234567",
				Tag:          "cli_generate",
				Total:        3100750000,
				Stages:       []Stage{{"TextEncodingStage", 100250000}, {"DenoisingStage", 3 * time.Second}, {"DecodingStage", 500000}},
				DenoiseSteps: []time.Duration{1000500000, 999500000, 1000000000},
				Model:        "Qwen/Qwen-Image",
				Prompt:       "a dog",
				Schema:       SchemaStepsInStages,
			},
		},
		{
			file: "stages-only.json",
			want: &Dump{
				Timestamp:  "2025-10-01T08:00:00+00:00",
				RequestID:  "mocked_fake_id_for_offline_generate",
				CommitHash: "N/A",
				Tag:        "cli_generate",
				Total:      1500 * time.Millisecond,
				Stages:     []Stage{{"TextEncodingStage", 250 * time.Millisecond}, {"DenoisingStage", 1200 * time.Millisecond}, {"DecodingStage", 50 * time.Millisecond}},
				Schema:     SchemaStagesOnly,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ReadDumpFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadDumpFile(%s) mismatch (-want +got):\n%s", tt.file, diff)
			}
		})
	}
}

func TestHelpers(t *testing.T) {
	d, err := ReadDumpFile(filepath.Join("testdata", "current.json"))
	if err != nil {
		t.Fatal(err)
	}
	// (450.1 + 441.2 + 441.3 + 440.9) / 4 ms = 443.375 ms exactly.
	if got, want := d.MeanDenoiseStep(), 443375*time.Microsecond; got != want {
		t.Errorf("MeanDenoiseStep = %v, want %v", got, want)
	}
	if got, ok := d.Stage("DenoisingStage"); !ok || got != 22100123456 {
		t.Errorf("Stage(DenoisingStage) = %v, %v", got, ok)
	}
	if _, ok := d.Stage("NoSuchStage"); ok {
		t.Error("Stage(NoSuchStage) reported found")
	}
	if got := d.PeakMemoryMB(); got != 53248 {
		t.Errorf("PeakMemoryMB = %v, want 53248", got)
	}

	old, err := ReadDumpFile(filepath.Join("testdata", "stages-only.json"))
	if err != nil {
		t.Fatal(err)
	}
	if old.MeanDenoiseStep() != 0 || old.PeakMemoryMB() != 0 {
		t.Errorf("stages-only dump: mean %v peak %v, want zeros", old.MeanDenoiseStep(), old.PeakMemoryMB())
	}
	var nilDump *Dump
	if nilDump.MeanDenoiseStep() != 0 || nilDump.PeakMemoryMB() != 0 {
		t.Error("nil dump helpers returned non-zero")
	}
	if _, ok := nilDump.Stage("x"); ok {
		t.Error("nil dump Stage found something")
	}
}

func TestPeakMemoryFallsBackToAllocated(t *testing.T) {
	d, err := ReadDump(strings.NewReader(`{"total_duration_ms":1,"steps":[],"denoise_steps_ms":[],
		"memory_checkpoints":{"after_X":{"peak_allocated_mb":12.5}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.PeakMemoryMB() != 12.5 {
		t.Errorf("PeakMemoryMB = %v, want 12.5", d.PeakMemoryMB())
	}
	if d.Schema != SchemaCurrent {
		t.Errorf("Schema = %q, want %q", d.Schema, SchemaCurrent)
	}
}

func TestEmptyMemoryObjectIsCurrent(t *testing.T) {
	// sglang writes {} when no checkpoint was taken; the key is present, so the schema is
	// current and Memory is empty but non-nil.
	d, err := ReadDump(strings.NewReader(`{"total_duration_ms":1,"steps":[],"denoise_steps_ms":[],"memory_checkpoints":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Schema != SchemaCurrent || d.Memory == nil || len(d.Memory) != 0 {
		t.Errorf("Schema %q Memory %#v", d.Schema, d.Memory)
	}
}

func TestDenoiseListWinsOverInlineSteps(t *testing.T) {
	// A transitional dump with both forms: the dedicated list is used and the inline entries
	// are still removed from the stages.
	d, err := ReadDump(strings.NewReader(`{"total_duration_ms":3,"steps":[
		{"name":"denoising_step_0","duration_ms":9},{"name":"DenoisingStage","duration_ms":2}],
		"denoise_steps_ms":[{"step":0,"duration_ms":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]time.Duration{time.Millisecond}, d.DenoiseSteps); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]Stage{{"DenoisingStage", 2 * time.Millisecond}}, d.Stages); diff != "" {
		t.Error(diff)
	}
}

func TestStageNamesThatOnlyLookLikeSteps(t *testing.T) {
	d, err := ReadDump(strings.NewReader(`{"total_duration_ms":3,"steps":[
		{"name":"denoising_step_","duration_ms":1},{"name":"denoising_step_x1","duration_ms":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Stages) != 2 || len(d.DenoiseSteps) != 0 || d.Schema != SchemaStagesOnly {
		t.Errorf("stages %v steps %v schema %q", d.Stages, d.DenoiseSteps, d.Schema)
	}
}

func TestParseMS(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"-0", 0},
		{"-0.0", 0},
		{"1", time.Millisecond},
		{"1.5", 1500 * time.Microsecond},
		{"0.000001", 1},
		{"0.0000005", 1},  // half a nanosecond rounds away from zero
		{"0.0000004", 0},  // below half rounds down
		{"0.00000049", 0}, // the first dropped digit decides
		{"1234.5678915", 1234567892},
		{"1e3", time.Second},
		{"1E+3", time.Second},
		{"2.5e-3", 2500},
		{"12e-7", 1},
		{"0.1", 100 * time.Microsecond}, // 0.1 has no exact float64; fixed point gets it exactly
		{"9223372036854.775807", 1<<63 - 1},
		{"000123.000", 123 * time.Millisecond},
	}
	for _, tt := range tests {
		got, err := parseMS(tt.in)
		if err != nil {
			t.Errorf("parseMS(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parseMS(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "-1", "-0.5", "1e999999", "9223372036854.775808", "9223372036855", "1e20", "abc", "1.2.3", "."} {
		if got, err := parseMS(bad); err == nil {
			t.Errorf("parseMS(%q) = %d, want an error", bad, got)
		}
	}
}

func TestReadDumpErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "file is empty"},
		{"not json", "Metrics dumped to: /x", "not valid JSON"},
		{"python NaN", `{"total_duration_ms": NaN, "steps": []}`, "NaN or Infinity"},
		{"python Infinity", `{"total_duration_ms": 1, "steps": [{"name": "A", "duration_ms": Infinity}]}`, "NaN or Infinity"},
		{"array", `[1,2]`, "expected a JSON object"},
		{"number", `42`, "expected a JSON object"},
		{"null", `null`, "found null"},
		{"truncated", `{"total_duration_ms": 1, "steps": [`, "not valid JSON"},
		{"trailing", `{"total_duration_ms":1,"steps":[]} {}`, "unexpected data after"},
		{"no total", `{"steps":[]}`, "missing total_duration_ms"},
		{"server log", `{"request_id":"r","tag":"pipeline_stage_metrics","stages":[{"name":"a","execution_time_ms":1}],"steps":[1],"total_duration_ms":3}`, "performance.log"},
		{"total string", `{"total_duration_ms":"abc","steps":[]}`, "total_duration_ms must be a number"},
		{"total negative", `{"total_duration_ms":-5,"steps":[]}`, "negative duration"},
		{"no steps", `{"total_duration_ms":1}`, `missing "steps"`},
		{"steps object", `{"total_duration_ms":1,"steps":{}}`, `"steps" must be a list`},
		{"stage no name", `{"total_duration_ms":1,"steps":[{"duration_ms":1}]}`, `has no "name"`},
		{"stage no dur", `{"total_duration_ms":1,"steps":[{"name":"A"}]}`, `has no "duration_ms"`},
		{"stage negative", `{"total_duration_ms":1,"steps":[{"name":"A","duration_ms":-1}]}`, "negative duration"},
		{"stage name number", `{"total_duration_ms":1,"steps":[{"name":3,"duration_ms":1}]}`, "steps[0] must be"},
		{"denoise shape", `{"total_duration_ms":1,"steps":[],"denoise_steps_ms":{}}`, `"denoise_steps_ms" must be a list`},
		{"denoise no step", `{"total_duration_ms":1,"steps":[],"denoise_steps_ms":[{"duration_ms":1}]}`, `needs both`},
		{"denoise bad step", `{"total_duration_ms":1,"steps":[],"denoise_steps_ms":[{"step":1.5,"duration_ms":1}]}`, `non-negative integer`},
		{"denoise negative", `{"total_duration_ms":1,"steps":[],"denoise_steps_ms":[{"step":0,"duration_ms":-2}]}`, "negative duration"},
		{"denoise dup", `{"total_duration_ms":1,"steps":[],"denoise_steps_ms":[{"step":0,"duration_ms":1},{"step":0,"duration_ms":2}]}`, "step 0 twice"},
		{"inline dup", `{"total_duration_ms":1,"steps":[{"name":"denoising_step_3","duration_ms":1},{"name":"denoising_step_3","duration_ms":1}]}`, "step 3 twice"},
		{"memory shape", `{"total_duration_ms":1,"steps":[],"memory_checkpoints":[]}`, `"memory_checkpoints" must be an object`},
		{"memory negative", `{"total_duration_ms":1,"steps":[],"memory_checkpoints":{"a":{"allocated_mb":-1}}}`, "non-negative number of MB"},
		{"tag number", `{"total_duration_ms":1,"steps":[],"tag":5}`, "tag must be a string"},
		{"meta shape", `{"total_duration_ms":1,"steps":[],"meta":"x"}`, `"meta" must be an object`},
		{"meta model", `{"total_duration_ms":1,"steps":[],"meta":{"model":1}}`, "model must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ReadDump(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("ReadDump(%q) = %+v, want an error containing %q", tt.in, d, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadDump(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestReadDumpFileMissing(t *testing.T) {
	_, err := ReadDumpFile(filepath.Join(t.TempDir(), "perf.json"))
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadDumpFile(missing) error = %v, want a not-exist error", err)
	}
}

func TestReadDumpFileNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "perf.json")
	if err := os.WriteFile(p, []byte(`{`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadDumpFile(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v does not name %s", err, p)
	}
}

func FuzzReadDump(f *testing.F) {
	for _, name := range []string{"current.json", "denoise-steps.json", "steps-in-stages.json", "stages-only.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"total_duration_ms":1e-7,"steps":[{"name":"denoising_step_0","duration_ms":0.0000005}]}`))
	f.Add([]byte(`{"total_duration_ms":9223372036854.775807,"steps":[]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ReadDump(strings.NewReader(string(b)))
		if err != nil {
			if d != nil {
				t.Fatal("non-nil dump with an error")
			}
			return
		}
		switch d.Schema {
		case SchemaCurrent, SchemaDenoiseSteps, SchemaStepsInStages, SchemaStagesOnly:
		default:
			t.Fatalf("unknown schema %q", d.Schema)
		}
		if d.Total < 0 {
			t.Fatalf("negative total %v", d.Total)
		}
		for _, s := range d.Stages {
			if s.Dur < 0 {
				t.Fatalf("negative stage %v", s)
			}
			if _, ok := denoiseStepIndex(s.Name); ok {
				t.Fatalf("step entry %q left in stages", s.Name)
			}
		}
		for _, s := range d.DenoiseSteps {
			if s < 0 {
				t.Fatalf("negative step %v", s)
			}
		}
		if d.MeanDenoiseStep() < 0 || d.PeakMemoryMB() < 0 {
			t.Fatal("negative helper result")
		}
	})
}
