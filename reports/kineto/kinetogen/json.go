package kinetogen

import (
	"io"
	"math"
	"strconv"
)

// jsonSink formats events the way Kineto's ChromeTraceLogger does (one object per event,
// "ph" first, µs with three decimals) into a private buffer that is handed to the writer in
// large chunks. No fmt and no reflection per event: this is the hot path of 500 MB traces.
type jsonSink struct {
	w     io.Writer
	buf   []byte
	n     int64 // bytes handed to w
	err   error
	g     *gen
	first bool
	endT  int64
	ranks []byte // "Process Group Ranks" value, a JSON string like "[0, 1]"
}

const flushAt = 1 << 16

func (j *jsonSink) flush() {
	if j.err != nil || len(j.buf) == 0 {
		j.buf = j.buf[:0]
		return
	}
	m, err := j.w.Write(j.buf)
	j.n += int64(m)
	if err != nil {
		j.err = err
	}
	j.buf = j.buf[:0]
}

func (j *jsonSink) full() bool {
	return j.err != nil || j.n+int64(len(j.buf)) >= j.g.cfg.TargetBytes
}

// appendStr appends s as a JSON string literal.
func appendStr(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\t':
			b = append(b, '\\', 't')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendUS appends ns as Kineto's "<µs>.<3-digit ns>".
func appendUS(b []byte, ns int64) []byte {
	if ns < 0 {
		ns = 0
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	r := ns % 1000
	return append(b, '.', byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
}

func appendKV(b []byte, key string, v int64) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, '"', ':', ' ')
	return strconv.AppendInt(b, v, 10)
}

func appendDim(b []byte, key string, d [3]int32) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, "\": ["...)
	b = strconv.AppendInt(b, int64(d[0]), 10)
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(d[1]), 10)
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(d[2]), 10)
	return append(b, ']')
}

func (j *jsonSink) sep() {
	if j.first {
		j.first = false
		j.buf = append(j.buf, "\n  "...)
	} else {
		j.buf = append(j.buf, ",\n  "...)
	}
	j.g.stats.Events++
}

func (j *jsonSink) header() {
	c := &j.g.cfg
	b := j.buf
	b = append(b, "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": ["...)
	for i := 0; i < c.WorldSize; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    {\n      \"id\": "...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, ", \"name\": "...)
		b = appendStr(b, c.DeviceName)
		b = append(b, ", \"totalGlobalMem\": 84929347584,\n      \"computeMajor\": 9, \"computeMinor\": 0,\n      \"maxThreadsPerBlock\": 1024, \"maxThreadsPerMultiprocessor\": 2048,\n      \"regsPerBlock\": 65536, \"warpSize\": 32,\n      \"sharedMemPerBlock\": 49152, \"numSms\": 132\n      , \"regsPerMultiprocessor\": 65536, \"sharedMemPerBlockOptin\": 232448, \"sharedMemPerMultiprocessor\": 233472\n    }"...)
	}
	b = append(b, "\n  ],\n  \"cupti_version\": 26,\n  \"cuda_runtime_version\": 12080,\n  \"cuda_driver_version\": 12080,\n  \"with_flops\": 0,\n  \"record_shapes\": 1,\n"...)
	if c.WithStack {
		b = append(b, "  \"with_stack\": 1,\n"...)
	} else {
		b = append(b, "  \"with_stack\": 0,\n"...)
	}
	b = append(b, "  \"profile_memory\": 0,\n"...)
	if c.Model != "" {
		b = append(b, "  \"model\": "...)
		b = appendStr(b, c.Model)
		b = append(b, ",\n"...)
	}
	b = append(b, "  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": "...)
	b = strconv.AppendInt(b, int64(c.Rank), 10)
	b = append(b, ", \"world_size\": "...)
	b = strconv.AppendInt(b, int64(c.WorldSize), 10)
	b = append(b, ", \"pg_count\": 1, \"pg_config\": [{\"pg_name\": \"0\", \"pg_desc\": \"default_pg\", \"backend_config\": \"cuda:nccl\", \"pg_size\": "...)
	b = strconv.AppendInt(b, int64(c.WorldSize), 10)
	ranks := make([]byte, 0, 4*c.WorldSize)
	ranks = append(ranks, '[')
	for i := 0; i < c.WorldSize; i++ {
		if i > 0 {
			ranks = append(ranks, ", "...)
		}
		ranks = strconv.AppendInt(ranks, int64(i), 10)
	}
	ranks = append(ranks, ']')
	j.ranks = appendStr(nil, string(ranks))
	b = append(b, ", \"ranks\": "...)
	b = append(b, ranks...)
	b = append(b, "}], \"nccl_version\": \"2.27.3\"},\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": "...)
	b = strconv.AppendInt(b, c.BaseTimeNS, 10)
	b = append(b, ",\n  \"traceEvents\": ["...)
	j.buf = b
	j.first = true

	host := "python3"
	if c.Flavor == FlavorLLM {
		host = "sglang::scheduler"
	}
	pid, dev := int64(j.g.pid), int64(j.g.dev)
	j.meta("process_name", pid, 0, "name", host, -1)
	j.meta("process_labels", pid, 0, "labels", "CPU", -1)
	j.meta("process_sort_index", pid, 0, "sort_index", "", pid)
	j.meta("thread_name", pid, pid, "name", "thread "+strconv.FormatInt(pid, 10)+" ("+host+")", -1)
	j.meta("thread_sort_index", pid, pid, "sort_index", "", pid)
	j.meta("process_name", dev, 0, "name", host, -1)
	j.meta("process_labels", dev, 0, "labels", "GPU "+strconv.FormatInt(dev, 10), -1)
	j.meta("process_sort_index", dev, 0, "sort_index", "", 0x1000000+dev)
	streams := []int64{computeStream}
	if c.CommStream {
		streams = append(streams, commStream)
	}
	for _, s := range streams {
		j.meta("thread_name", dev, s, "name", "stream "+strconv.FormatInt(s, 10)+" ", -1)
		j.meta("thread_sort_index", dev, s, "sort_index", "", s)
	}
	j.buf = append(j.buf, ",\n  {\n    \"name\": \"Iteration Start: PyTorch Profiler\", \"ph\": \"i\", \"s\": \"g\",\n    \"pid\": \"Traces\", \"tid\": \"Trace PyTorch Profiler\", \"ts\": 0.000\n  }"...)
	j.g.stats.Events++
}

// meta writes an M event; a string value when num < 0, else the number.
func (j *jsonSink) meta(name string, pid, tid int64, key, val string, num int64) {
	j.sep()
	b := append(j.buf, "{\n    \"name\": \""...)
	b = append(b, name...)
	b = append(b, "\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": "...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, ", \"tid\": "...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, ",\n    \"args\": {\n      \""...)
	b = append(b, key...)
	b = append(b, "\": "...)
	if num < 0 {
		b = appendStr(b, val)
	} else {
		b = strconv.AppendInt(b, num, 10)
	}
	j.buf = append(b, "\n    }\n  }"...)
}

func (j *jsonSink) footer() {
	end := j.endT + 10_000
	b := append(j.buf, ",\n  {\n    \"ph\": \"X\", \"cat\": \"Trace\", \"ts\": 0.000, \"dur\": "...)
	b = appendUS(b, end)
	b = append(b, ",\n    \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\",\n    \"name\": \"PyTorch Profiler (0)\",\n    \"args\": {\n      \"Op count\": 0\n    }\n  },\n  {\n    \"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\",\n    \"pid\": \"\", \"tid\": \"\",\n    \"ts\": "...)
	b = appendUS(b, end)
	b = append(b, "\n  }\n  ],\n  \"traceName\": "...)
	j.g.stats.Events += 2
	name := j.g.cfg.TraceName
	if name == "" {
		name = "/tmp/kinetogen-rank" + strconv.Itoa(j.g.cfg.Rank) + ".pt.trace.json"
	}
	b = appendStr(b, name)
	j.buf = append(b, "\n}\n"...)
}

var cbid = map[string]int64{"cudaLaunchKernel": 211, "cudaGraphLaunch": 311, "cudaMemcpyAsync": 41}

func (j *jsonSink) emit(op *Op) {
	if j.err != nil {
		return
	}
	if e := op.StartNS + op.DurNS; e > j.endT {
		j.endT = e
	}
	j.sep()
	b := append(j.buf, "{\n    \"ph\": \"X\", \"cat\": \""...)
	b = append(b, opCat[op.Kind]...)
	b = append(b, "\", \"name\": "...)
	b = appendStr(b, op.Name)
	b = append(b, ", \"pid\": "...)
	b = strconv.AppendInt(b, int64(op.PID), 10)
	b = append(b, ", \"tid\": "...)
	b = strconv.AppendInt(b, int64(op.TID), 10)
	b = append(b, ",\n    \"ts\": "...)
	b = appendUS(b, op.StartNS)
	b = append(b, ", \"dur\": "...)
	b = appendUS(b, op.DurNS)
	b = append(b, ",\n    \"args\": {\n      "...)
	switch op.Kind {
	case OpCPU, OpAnnotation:
		b = appendKV(b, "External id", op.ExternalID)
		b = append(b, ", "...)
		b = appendKV(b, "Record function id", 0)
		b = append(b, ", "...)
		b = appendKV(b, "Ev Idx", op.ExternalID-1)
	case OpGPUAnnotation:
		b = appendKV(b, "External id", op.ExternalID)
	case OpPython:
		b = appendKV(b, "Python parent id", op.PyParent)
		b = append(b, ", "...)
		b = appendKV(b, "Python id", op.PyID)
		b = append(b, ", "...)
		b = appendKV(b, "Ev Idx", op.PyID)
	case OpRuntime:
		b = appendKV(b, "External id", op.ExternalID)
		b = append(b, ", "...)
		b = appendKV(b, "cbid", cbid[op.Name])
		b = append(b, ", "...)
		b = appendKV(b, "correlation", op.Correlation)
	case OpKernel:
		b = j.appendKernelArgs(b, op)
	case OpMemcpy:
		b = appendMemcpyArgs(b, op)
	}
	b = append(b, "\n    }\n  }"...)
	j.buf = b
	switch {
	case op.Kind == OpRuntime && op.Flow:
		j.flow('s', op.Correlation, int64(op.PID), int64(op.TID), op.StartNS)
	case op.Kind == OpKernel || op.Kind == OpMemcpy:
		j.flow('f', op.Correlation, int64(op.PID), int64(op.TID), op.StartNS)
	}
	if len(j.buf) >= flushAt {
		j.flush()
	}
}

// appendKernelArgs appends the "args" members of a kernel event as PyTorch's Kineto writes
// them (launch geometry, occupancy estimates, CUDA graph ids and collective fields).
func (j *jsonSink) appendKernelArgs(b []byte, op *Op) []byte {
	b = appendKV(b, "External id", op.ExternalID)
	b = append(b, ",\n      \"queued\": 0, "...)
	b = appendKV(b, "device", int64(op.Device))
	b = append(b, ", \"context\": 1,\n      "...)
	b = appendKV(b, "stream", int64(op.Stream))
	b = append(b, ", "...)
	b = appendKV(b, "correlation", op.Correlation)
	b = append(b, ",\n      "...)
	b = appendKV(b, "registers per thread", int64(op.Registers))
	b = append(b, ",\n      "...)
	b = appendKV(b, "shared memory", int64(op.SharedMem))
	blocksPerSM := float64(op.Grid[0]*op.Grid[1]*op.Grid[2]) / 132
	b = append(b, ",\n      \"blocks per SM\": "...)
	b = strconv.AppendFloat(b, math.Round(blocksPerSM*1e6)/1e6, 'f', -1, 64)
	b = append(b, ",\n      \"warps per SM\": "...)
	warps := blocksPerSM * float64(op.Block[0]*op.Block[1]*op.Block[2]) / 32
	b = strconv.AppendFloat(b, math.Round(warps*1e6)/1e6, 'f', -1, 64)
	b = append(b, ",\n      "...)
	b = appendDim(b, "grid", op.Grid)
	b = append(b, ",\n      "...)
	b = appendDim(b, "block", op.Block)
	occ := int64(math.Min(100, warps/64*100))
	b = append(b, ",\n      "...)
	b = appendKV(b, "est. achieved occupancy %", occ)
	if op.GraphID > 0 {
		b = append(b, ",\n      "...)
		b = appendKV(b, "graph id", int64(op.GraphID))
		b = append(b, ", "...)
		b = appendKV(b, "graph node id", op.GraphNode)
	}
	if op.Collective != "" {
		ws := int64(j.g.cfg.WorldSize)
		b = append(b, ",\n      \"Collective name\": "...)
		b = appendStr(b, op.Collective)
		b = append(b, ", \"In msg nelems\": 4194304, \"Out msg nelems\": 4194304, "...)
		b = appendKV(b, "Group size", ws)
		b = append(b, ", \"dtype\": \"BFloat16\", \"In split size\": \"[]\", \"Out split size\": \"[]\", \"Process Group Name\": \"0\", \"Process Group Description\": \"default_pg\", \"Process Group Ranks\": "...)
		b = append(b, j.ranks...)
	}
	return b
}

// appendMemcpyArgs appends the "args" members of a memcpy event, bytes and bandwidth included.
func appendMemcpyArgs(b []byte, op *Op) []byte {
	b = appendKV(b, "External id", op.ExternalID)
	b = append(b, ", "...)
	b = appendKV(b, "device", int64(op.Device))
	b = append(b, ", \"context\": 1,\n      "...)
	b = appendKV(b, "stream", int64(op.Stream))
	b = append(b, ", "...)
	b = appendKV(b, "correlation", op.Correlation)
	b = append(b, ",\n      "...)
	b = appendKV(b, "bytes", op.Bytes)
	b = append(b, ", \"memory bandwidth (GB/s)\": "...)
	bw := float64(op.Bytes) / float64(max(op.DurNS, 1))
	b = strconv.AppendFloat(b, math.Round(bw*1e4)/1e4, 'f', -1, 64)
	return b
}

func (j *jsonSink) flow(ph byte, id, pid, tid, ts int64) {
	j.sep()
	b := append(j.buf, "{\n    \"ph\": \""...)
	b = append(b, ph)
	b = append(b, "\", \"id\": "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, ", \"pid\": "...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, ", \"tid\": "...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, ", \"ts\": "...)
	b = appendUS(b, ts)
	b = append(b, ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\""...)
	if ph == 'f' {
		b = append(b, ", \"bp\": \"e\""...)
	}
	j.buf = append(b, "\n  }"...)
}
