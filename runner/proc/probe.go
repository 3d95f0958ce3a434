package proc

import (
	"context"
	"log/slog"
)

// ProbeLimit is how much output Probe keeps by default: the answer of a probe (nvidia-smi's
// CSV for a node of GPUs, a version, check_env's report) is a few KiB, so 4 MiB is far beyond
// any honest one, and small enough that a probe that prints without end (a broken or hostile
// stand-in on the PATH) cannot drive the runner's memory up.
const ProbeLimit = 4 << 20

// ProbeOutput is what a probe printed, each stream on its own. Lines end in '\n' whatever
// ended them ("\r\n", "\r", or nothing at the very end).
type ProbeOutput struct {
	Stdout, Stderr []byte
	// Cut is set when the probe printed more than its limit: it was stopped with the stop
	// ladder as soon as that was seen, and Stdout and Stderr hold only what came before.
	Cut bool
}

// Probe runs a short query whose answer the runner reads (nvidia-smi, a program's version,
// check_env) and returns what it printed. It is Run in every other respect: the supervisor,
// the process group, s.Timeout and the stop ladder, and nothing it started outlives the call
// (a probe that leaves a background process behind has it swept). What it adds is the bound:
// at most limit bytes of the two streams together are kept (limit <= 0: ProbeLimit), and a
// probe that prints more is stopped at once and its output marked Cut, so that its answer
// costs the runner a few MiB whatever it prints. s.Log, s.OnLine, s.Select and s.Tail are
// Probe's own and ignored. Result.Interrupted means ctx was cancelled, not the cut.
func Probe(ctx context.Context, s Spec, limit int, log *slog.Logger) (ProbeOutput, Result) {
	if limit <= 0 {
		limit = ProbeLimit
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var out ProbeOutput
	kept := 0
	var contOut, contErr bool // the stream's last line was cut at MaxLine and continues
	s.Log, s.Select, s.Tail = nil, nil, 0
	// OnLine runs on one goroutine and Run returns only after its last call.
	s.OnLine = func(l Line) {
		if out.Cut {
			return
		}
		buf, cont := &out.Stdout, &contOut
		if l.Stream == Stderr {
			buf, cont = &out.Stderr, &contErr
		}
		text := l.Text
		if *cont && len(text) >= Overlap {
			text = text[Overlap:] // a continuation repeats the end of the piece before it
		}
		*cont = l.Partial
		n := len(text)
		if !l.Partial {
			n++
		}
		if kept+n > limit {
			out.Cut = true
			stop()
			return
		}
		kept += n
		*buf = append(*buf, text...)
		if !l.Partial {
			*buf = append(*buf, '\n')
		}
	}
	res := Run(pctx, s, log)
	if res.Interrupted && ctx.Err() == nil {
		res.Interrupted = false // stopped for its output, which Cut says
	}
	return out, res
}
