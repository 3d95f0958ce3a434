package sim

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// argKind is how argparse consumes an option.
type argKind int

const (
	argStr       argKind = iota // one value
	argInt                      // one int value
	argFloat                    // one float value
	argStrs                     // nargs="+"
	argInts                     // nargs="+" of int
	argTrue                     // store_true
	argFalse                    // store_false
	argStoreBool                // sglang's StoreBoolean: bare flag = true, or an explicit true|false
)

// argSpec is one option of `sglang generate`, as registered with argparse.
type argSpec struct {
	flags   []string // all spellings; the first is used in messages
	dest    string
	kind    argKind
	choices []string
}

// generateSpecs are the options `sglang generate` registers (ServerArgs + SamplingParams +
// the generate extras), per the interface reference §A.2.
var generateSpecs = []argSpec{
	{flags: []string{"--config"}, dest: "config"},
	{flags: []string{"--perf-dump-path"}, dest: "perf_dump_path"},
	{flags: []string{"--output-file-path"}, dest: "output_file_path"},
	{flags: []string{"--diffusers-kwargs"}, dest: "diffusers_kwargs"},
	// SamplingParams
	{flags: []string{"--prompt"}, dest: "prompt", kind: argStrs},
	{flags: []string{"--negative-prompt"}, dest: "negative_prompt"},
	{flags: []string{"--prompt-path"}, dest: "prompt_path"},
	{flags: []string{"--seed"}, dest: "seed", kind: argInts},
	{flags: []string{"--generator-device"}, dest: "generator_device", choices: []string{"cuda", "cpu", "musa"}},
	{flags: []string{"--width"}, dest: "width", kind: argInt},
	{flags: []string{"--height"}, dest: "height", kind: argInt},
	{flags: []string{"--4k"}, dest: "4k", kind: argTrue},
	{flags: []string{"--2k"}, dest: "2k", kind: argTrue},
	{flags: []string{"--1080p"}, dest: "1080p", kind: argTrue},
	{flags: []string{"--720p"}, dest: "720p", kind: argTrue},
	{flags: []string{"--num-frames"}, dest: "num_frames", kind: argInt},
	{flags: []string{"--fps"}, dest: "fps", kind: argInt},
	{flags: []string{"--num-inference-steps"}, dest: "num_inference_steps", kind: argInt},
	{flags: []string{"--guidance-scale"}, dest: "guidance_scale", kind: argFloat},
	{flags: []string{"--guidance-scale-2"}, dest: "guidance_scale_2", kind: argFloat},
	{flags: []string{"--true-cfg-scale"}, dest: "true_cfg_scale", kind: argFloat},
	{flags: []string{"--guidance-rescale"}, dest: "guidance_rescale", kind: argFloat},
	{flags: []string{"--cfg-normalization"}, dest: "cfg_normalization", kind: argFloat},
	{flags: []string{"--boundary-ratio"}, dest: "boundary_ratio", kind: argFloat},
	{flags: []string{"--num-outputs-per-prompt"}, dest: "num_outputs_per_prompt", kind: argInt},
	{flags: []string{"--image-path"}, dest: "image_path", kind: argStrs},
	{flags: []string{"--output-path"}, dest: "output_path"},
	{flags: []string{"--output-file-name"}, dest: "output_file_name"},
	{flags: []string{"--save-output"}, dest: "save_output", kind: argTrue},
	{flags: []string{"--no-save-output"}, dest: "save_output", kind: argFalse},
	{flags: []string{"--return-frames"}, dest: "return_frames", kind: argTrue},
	{flags: []string{"--return-trajectory-latents"}, dest: "return_trajectory_latents", kind: argTrue},
	{flags: []string{"--return-trajectory-decoded"}, dest: "return_trajectory_decoded", kind: argTrue},
	{flags: []string{"--profile"}, dest: "profile", kind: argTrue},
	{flags: []string{"--num-profiled-timesteps"}, dest: "num_profiled_timesteps", kind: argInt},
	{flags: []string{"--profile-all-stages"}, dest: "profile_all_stages", kind: argTrue},
	{flags: []string{"--debug"}, dest: "debug", kind: argTrue},
	{flags: []string{"--enable-teacache"}, dest: "enable_teacache", kind: argTrue},
	{flags: []string{"--adjust-frames"}, dest: "adjust_frames", kind: argStoreBool},
	{flags: []string{"--num-frames-round-down"}, dest: "num_frames_round_down", kind: argTrue},
	// ServerArgs
	{flags: []string{"--model-path"}, dest: "model_path"},
	{flags: []string{"--model-id"}, dest: "model_id"},
	{flags: []string{"--served-model-name"}, dest: "served_model_name"},
	{flags: []string{"--backend"}, dest: "backend", choices: []string{"auto", "sglang", "diffusers"}},
	{flags: []string{"--pipeline-class-name", "--pipeline"}, dest: "pipeline_class_name"},
	{flags: []string{"--attention-backend"}, dest: "attention_backend"},
	{flags: []string{"--attention-backend-config"}, dest: "attention_backend_config"},
	{flags: []string{"--component-attention-backends"}, dest: "component_attention_backends"},
	{flags: []string{"--num-gpus"}, dest: "num_gpus", kind: argInt},
	{flags: []string{"--tp-size"}, dest: "tp_size", kind: argInt},
	{flags: []string{"--sp-degree"}, dest: "sp_degree", kind: argInt},
	{flags: []string{"--ulysses-degree"}, dest: "ulysses_degree", kind: argInt},
	{flags: []string{"--ring-degree"}, dest: "ring_degree", kind: argInt},
	{flags: []string{"--kv-gather-degree"}, dest: "kv_gather_degree", kind: argInt},
	{flags: []string{"--enable-cfg-parallel"}, dest: "enable_cfg_parallel", kind: argStoreBool},
	{flags: []string{"--cfg-parallel-size"}, dest: "cfg_parallel_size", kind: argInt},
	{flags: []string{"--data-parallel-size", "--dp-size", "--dp"}, dest: "data_parallel_size", kind: argInt},
	{flags: []string{"--performance-mode", "--mode"}, dest: "performance_mode", choices: []string{"manual", "auto", "speed", "memory"}},
	{flags: []string{"--enable-torch-compile"}, dest: "enable_torch_compile", kind: argStoreBool},
	{flags: []string{"--enable-breakable-cuda-graph"}, dest: "enable_breakable_cuda_graph", kind: argStoreBool},
	{flags: []string{"--enable-layerwise-nvtx-marker"}, dest: "enable_layerwise_nvtx_marker", kind: argStoreBool},
	{flags: []string{"--warmup-mode"}, dest: "warmup_mode", choices: []string{"off", "request", "server"}},
	{flags: []string{"--warmup-resolutions"}, dest: "warmup_resolutions", kind: argStrs},
	{flags: []string{"--warmup-steps"}, dest: "warmup_steps", kind: argInt},
	{flags: []string{"--warmup-num-frames"}, dest: "warmup_num_frames", kind: argInt},
	{flags: []string{"--warmup-sampling-params"}, dest: "warmup_sampling_params"},
	{flags: []string{"--dit-cpu-offload"}, dest: "dit_cpu_offload", kind: argStoreBool},
	{flags: []string{"--dit-layerwise-offload"}, dest: "dit_layerwise_offload", kind: argStoreBool},
	{flags: []string{"--text-encoder-cpu-offload"}, dest: "text_encoder_cpu_offload", kind: argStoreBool},
	{flags: []string{"--image-encoder-cpu-offload"}, dest: "image_encoder_cpu_offload", kind: argStoreBool},
	{flags: []string{"--vae-cpu-offload"}, dest: "vae_cpu_offload", kind: argStoreBool},
	{flags: []string{"--pin-cpu-memory"}, dest: "pin_cpu_memory", kind: argStoreBool},
	{flags: []string{"--use-fsdp-inference"}, dest: "use_fsdp_inference", kind: argStoreBool},
	{flags: []string{"--host"}, dest: "host"},
	{flags: []string{"--port"}, dest: "port", kind: argInt},
	{flags: []string{"--scheduler-port"}, dest: "scheduler_port", kind: argInt},
	{flags: []string{"--master-port"}, dest: "master_port", kind: argInt},
	{flags: []string{"--strict-ports"}, dest: "strict_ports", kind: argStoreBool},
	{flags: []string{"--input-save-path"}, dest: "input_save_path"},
	{flags: []string{"--prompt-file-path"}, dest: "prompt_file_path"},
	{flags: []string{"--log-level"}, dest: "log_level"},
	{flags: []string{"--log-requests"}, dest: "log_requests", kind: argStoreBool},
	{flags: []string{"--log-requests-level"}, dest: "log_requests_level", kind: argInt, choices: []string{"0", "1", "2", "3"}},
	{flags: []string{"--log-requests-format"}, dest: "log_requests_format", choices: []string{"text", "json"}},
	{flags: []string{"--log-requests-target"}, dest: "log_requests_target", kind: argStrs},
	{flags: []string{"--enable-metrics"}, dest: "enable_metrics", kind: argStoreBool},
	{flags: []string{"--enable-trace"}, dest: "enable_trace", kind: argStoreBool},
	{flags: []string{"--otlp-traces-endpoint"}, dest: "otlp_traces_endpoint"},
	{flags: []string{"--lora-path"}, dest: "lora_path"},
	{flags: []string{"--lora-nickname"}, dest: "lora_nickname"},
	{flags: []string{"--lora-scale"}, dest: "lora_scale", kind: argFloat},
	{flags: []string{"--trust-remote-code"}, dest: "trust_remote_code", kind: argStoreBool},
	{flags: []string{"--revision"}, dest: "revision"},
	{flags: []string{"--quantization"}, dest: "quantization"},
	{flags: []string{"--transformer-weights-path"}, dest: "transformer_weights_path"},
}

// parsedArgs holds the values argparse stored, by dest. Values are string, int, float64,
// bool, []string or []int.
type parsedArgs map[string]any

func (p parsedArgs) str(k string) string {
	s, _ := p[k].(string)
	return s
}

func (p parsedArgs) has(k string) bool { _, ok := p[k]; return ok }

func (p parsedArgs) intv(k string, def int) int {
	if v, ok := p[k].(int); ok {
		return v
	}
	return def
}

func (p parsedArgs) boolv(k string) bool {
	v, _ := p[k].(bool)
	return v
}

func (p parsedArgs) strs(k string) []string {
	v, _ := p[k].([]string)
	return v
}

// argError is an argparse failure: the message after "error: "; the caller prints usage and
// exits 2.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

var negNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

// looksLikeOption is argparse's _parse_optional (CPython 3.10-3.13): whether argparse reads
// tok as an option ('O') or as a value ('A'). Values: "", "-", anything not starting with
// '-'. Options: a registered option string (or -h/--help), "--opt=value" of a registered one,
// a unique or ambiguous prefix of one (allow_abbrev; a single-dash token whose first two
// characters are a registered short option, such as "-hello" for -h). Of the rest, negative
// numbers and anything containing a space are values, everything else an (unknown) option.
// So `--prompt "-x leading dash"` passes the prompt while `--prompt -x` or
// `--prompt "-hello world"` do not; `--prompt=TEXT` always does.
func looksLikeOption(specs []argSpec, s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	if s == "-h" || s == "--help" || hasFlag(specs, s) {
		return true
	}
	if opt, _, ok := strings.Cut(s, "="); ok && hasFlag(specs, opt) {
		return true
	}
	if s[1] == '-' {
		prefix, _, _ := strings.Cut(s, "=")
		if strings.HasPrefix("--help", prefix) {
			return true
		}
		for _, sp := range specs {
			for _, f := range sp.flags {
				if strings.HasPrefix(f, prefix) {
					return true
				}
			}
		}
	} else if s[:2] == "-h" {
		return true
	}
	if negNumber.MatchString(s) || strings.Contains(s, " ") {
		return false
	}
	return true
}

// hasFlag reports whether opt is one of the registered option strings.
func hasFlag(specs []argSpec, opt string) bool {
	for _, sp := range specs {
		for _, f := range sp.flags {
			if f == opt {
				return true
			}
		}
	}
	return false
}

// lookup resolves an option string, allowing unique prefixes as argparse's allow_abbrev does.
func lookup(specs []argSpec, opt string) (*argSpec, string, error) {
	for i := range specs {
		for _, f := range specs[i].flags {
			if f == opt {
				return &specs[i], f, nil
			}
		}
	}
	if !strings.HasPrefix(opt, "--") || len(opt) < 3 {
		return nil, "", nil
	}
	var hits []string
	var hit *argSpec
	for i := range specs {
		for _, f := range specs[i].flags {
			if strings.HasPrefix(f, opt) {
				hits = append(hits, f)
				hit = &specs[i]
			}
		}
	}
	switch len(hits) {
	case 0:
		return nil, "", nil
	case 1:
		return hit, hits[0], nil
	}
	return nil, "", &argError{fmt.Sprintf("ambiguous option: %s could match %s", opt, strings.Join(hits, ", "))}
}

func convert(s *argSpec, name, v string) (any, error) {
	if len(s.choices) > 0 {
		ok := false
		for _, c := range s.choices {
			ok = ok || c == v
		}
		if !ok {
			q := make([]string, len(s.choices))
			for i, c := range s.choices {
				q[i] = "'" + c + "'"
			}
			if s.kind == argInt {
				q = s.choices
			}
			return nil, &argError{fmt.Sprintf("argument %s: invalid choice: '%s' (choose from %s)", name, v, strings.Join(q, ", "))}
		}
	}
	switch s.kind {
	case argInt, argInts:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return nil, &argError{fmt.Sprintf("argument %s: invalid int value: '%s'", name, v)}
		}
		return n, nil
	case argFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, &argError{fmt.Sprintf("argument %s: invalid float value: '%s'", name, v)}
		}
		return f, nil
	}
	return v, nil
}

func strToBool(name, v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "y", "t", "on":
		return true, nil
	case "false", "0", "no", "n", "f", "off":
		return false, nil
	}
	return false, &argError{fmt.Sprintf("argument %s: invalid bool value: '%s' (use true or false)", name, v)}
}

// parseArgs parses argv the way argparse.parse_args does for `sglang generate`: options in
// any order, "--opt value" and "--opt=value", unique prefixes, nargs="+" lists, store_true /
// store_false, StoreBoolean; the first consumption error stops parsing; tokens nothing
// consumed are reported together as unrecognized arguments.
func parseArgs(specs []argSpec, argv []string) (parsedArgs, error) {
	out := parsedArgs{}
	var extras []string
	for i := 0; i < len(argv); i++ {
		tok := argv[i]
		if tok == "--" {
			extras = append(extras, argv[i+1:]...)
			break
		}
		if !looksLikeOption(specs, tok) {
			extras = append(extras, tok)
			continue
		}
		if len(tok) > 2 && tok[:2] == "-h" {
			// argparse reads "-hX..." as -h followed by the short flag -X; there is none.
			return nil, &argError{fmt.Sprintf("argument -h/--help: ignored explicit argument '%s'", tok[2:])}
		}
		opt, val, hasVal := tok, "", false
		if strings.HasPrefix(tok, "--") {
			if eq := strings.IndexByte(tok, '='); eq > 0 {
				opt, val, hasVal = tok[:eq], tok[eq+1:], true
			}
		}
		s, name, err := lookup(specs, opt)
		if err != nil {
			return nil, err
		}
		if s == nil {
			extras = append(extras, tok)
			continue
		}
		switch s.kind {
		case argTrue, argFalse:
			if hasVal {
				return nil, &argError{fmt.Sprintf("argument %s: ignored explicit argument '%s'", name, val)}
			}
			out[s.dest] = s.kind == argTrue
		case argStoreBool:
			b := true
			if hasVal {
				if b, err = strToBool(name, val); err != nil {
					return nil, err
				}
			} else if i+1 < len(argv) && !looksLikeOption(specs, argv[i+1]) {
				i++
				if b, err = strToBool(name, argv[i]); err != nil {
					return nil, err
				}
			}
			out[s.dest] = b
		case argStrs, argInts:
			var vals []string
			if hasVal {
				vals = append(vals, val)
			} else {
				for i+1 < len(argv) && !looksLikeOption(specs, argv[i+1]) && argv[i+1] != "--" {
					i++
					vals = append(vals, argv[i])
				}
			}
			if len(vals) == 0 {
				return nil, &argError{fmt.Sprintf("argument %s: expected at least one argument", name)}
			}
			if s.kind == argStrs {
				out[s.dest] = vals
				continue
			}
			var ns []int
			for _, v := range vals {
				n, err := convert(s, name, v)
				if err != nil {
					return nil, err
				}
				ns = append(ns, n.(int))
			}
			out[s.dest] = ns
		default:
			if !hasVal {
				if i+1 >= len(argv) || looksLikeOption(specs, argv[i+1]) {
					return nil, &argError{fmt.Sprintf("argument %s: expected one argument", name)}
				}
				i++
				val = argv[i]
			}
			v, err := convert(s, name, val)
			if err != nil {
				return nil, err
			}
			out[s.dest] = v
		}
	}
	if !out.has("model_path") && !out.has("config") {
		return nil, &argError{"the following arguments are required: --model-path"}
	}
	if len(extras) > 0 {
		return nil, &argError{"unrecognized arguments: " + strings.Join(extras, " ")}
	}
	return out, nil
}

// usage renders argparse's usage line for prog, wrapped the way argparse wraps long ones.
func usage(prog string, specs []argSpec) string {
	parts := []string{"[-h]"}
	for _, s := range specs {
		f := s.flags[0]
		meta := strings.ToUpper(strings.TrimLeft(s.dest, "0123456789"))
		if len(s.choices) > 0 {
			meta = "{" + strings.Join(s.choices, ",") + "}"
		}
		switch s.kind {
		case argTrue, argFalse:
			parts = append(parts, "["+f+"]")
		case argStoreBool:
			parts = append(parts, "["+f+" ["+meta+"]]")
		case argStrs, argInts:
			parts = append(parts, "["+f+" "+meta+" ["+meta+" ...]]")
		default:
			parts = append(parts, "["+f+" "+meta+"]")
		}
	}
	head := "usage: " + prog + " "
	indent := strings.Repeat(" ", len(head))
	var b strings.Builder
	line := head
	for i, p := range parts {
		if i > 0 && len(line)+1+len(p) > 100 {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		} else if i > 0 {
			line += " "
		}
		line += p
	}
	b.WriteString(line + "\n")
	return b.String()
}

// help renders a short -h text: usage plus the option list.
func help(prog string, specs []argSpec) string {
	var b strings.Builder
	b.WriteString(usage(prog, specs))
	b.WriteString("\noptions:\n  -h, --help            show this help message and exit\n")
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, strings.Join(s.flags, ", "))
	}
	sort.Strings(names)
	for _, n := range names {
		b.WriteString("  " + n + "\n")
	}
	return b.String()
}
