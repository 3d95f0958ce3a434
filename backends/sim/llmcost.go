package sim

import "math"

// The LLM server's costs, in simulated milliseconds. At tp-size 1 and one request in flight
// they are the costs the non-streaming simulator always had (15 ms + 0.04 ms a token of
// prefill, 11.5 ms a decoded token).
const (
	prefillBaseMS     = 15.0
	prefillPerTokenMS = 0.04
	decodeTokenMS     = 11.5
	decodeBatchSlope  = 0.04 // +4 % step time for each other request in the decode batch
)

// Scheduler limits when the server's flags leave them unset. They are the simulator's, not
// upstream's (upstream sizes the KV pool from the GPU's free memory and the model): a pool
// large enough that the shipped sweeps are bounded by compute, not memory, unless a plan sets
// --max-total-tokens (SGLang) or --num-gpu-blocks-override (vLLM).
const (
	defaultKVTokensPerGPU = 400_000
	defaultMaxRunning     = 256
	defaultChunkTokens    = 8192
)

// llmCost is the cost model of one LLM server, shared by every simulated engine (SGLang's and
// vLLM's LLM servers): what a forward step costs for a batch, and the limits that bound the
// batch. It is a value with no state, so a test or a second server builds one from numbers.
type llmCost struct {
	// TP is the tensor-parallel size: a forward pass runs faster on more GPUs, sublinearly,
	// since the all-reduce after every layer costs more as TP grows.
	TP int
	// Backend is the relative decode cost of the attention backend (1: the default).
	Backend float64
	// SlowPrefill and SlowDecode are RUNNER_SIM_SLOWDOWN's factors (1: none).
	SlowPrefill, SlowDecode float64
	// KVTokens is the KV-cache capacity in tokens: the running requests' prompt and output
	// tokens must fit in it, so it bounds the running batch (the rest wait in the queue).
	KVTokens int
	// MaxRunning bounds the running batch by count (SGLang --max-running-requests, vLLM
	// --max-num-seqs).
	MaxRunning int
	// ChunkTokens is the most prompt tokens one step prefills (chunked prefill): a long
	// queue of prompts takes several prefill steps, so TTFT grows with the queue.
	ChunkTokens int
	// Mixed runs prefill chunks in the same step as the decodes (vLLM V1's scheduler); false
	// alternates: a step prefills or decodes, prefill first (SGLang's default scheduler).
	Mixed bool
}

// withDefaults fills the zero fields.
func (c llmCost) withDefaults() llmCost {
	c.TP = max(c.TP, 1)
	if c.Backend <= 0 {
		c.Backend = 1
	}
	if c.SlowPrefill <= 0 {
		c.SlowPrefill = 1
	}
	if c.SlowDecode <= 0 {
		c.SlowDecode = 1
	}
	if c.KVTokens <= 0 {
		c.KVTokens = defaultKVTokensPerGPU * c.TP
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = defaultMaxRunning
	}
	if c.ChunkTokens <= 0 {
		c.ChunkTokens = defaultChunkTokens
	}
	return c
}

func (c llmCost) speedup(exp float64) float64 { return math.Pow(float64(max(c.TP, 1)), exp) }

// prefillMS is a prefill step over tokens prompt tokens (of one or several requests): one base
// cost for the step, plus the tokens.
func (c llmCost) prefillMS(tokens int) float64 {
	return (prefillBaseMS + prefillPerTokenMS*float64(tokens)) / c.speedup(0.9) * c.SlowPrefill
}

// decodeMS is a decode step of batch requests: each decodes one token, and the step grows with
// the batch (more KV to read, larger GEMMs).
func (c llmCost) decodeMS(batch int) float64 {
	batch = max(batch, 1)
	return decodeTokenMS * (1 + decodeBatchSlope*float64(batch-1)) * c.Backend / c.speedup(0.7) * c.SlowDecode
}

// mixedMS is one step that decodes batch requests and prefills tokens prompt tokens: the
// decode step plus the prompt tokens' share of a prefill (one forward pass, one base cost).
func (c llmCost) mixedMS(batch, tokens int) float64 {
	if batch == 0 {
		return c.prefillMS(tokens)
	}
	return c.decodeMS(batch) + prefillPerTokenMS*float64(tokens)/c.speedup(0.9)*c.SlowPrefill
}

// llmCostOf is the cost model SGLang's launch_server flags give.
func (s *server) llmCostOf() llmCost {
	backend := 1.0
	switch s.p.str("attention_backend") {
	case "fa3":
		backend = 0.92
	case "triton", "torch_native":
		backend = 1.25
	}
	chunk := s.p.intv("chunked_prefill_size", 0)
	if chunk < 0 { // -1 disables chunked prefill: a step takes every waiting prompt whole
		chunk = math.MaxInt32
	}
	return llmCost{TP: s.p.intv("tp_size", 1), Backend: backend, SlowPrefill: s.slowdown("prefill"), SlowDecode: s.slowdown("decode"),
		KVTokens: s.p.intv("max_total_tokens", 0), MaxRunning: s.p.intv("max_running_requests", 0), ChunkTokens: chunk}.withDefaults()
}

// slowdown is RUNNER_SIM_SLOWDOWN's factor for an LLM phase ("prefill=1.2,decode=1.3"), 1 when
// unset: how compare's LLM regressions are exercised.
func (s *server) slowdown(phase string) float64 {
	if f, ok := s.k.slow[phase]; ok {
		return f
	}
	return 1
}
