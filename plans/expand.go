package plans

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Expand returns the cells of the plan: the cross product of the matrix axes, outermost first
// model, prompt, resolution, steps, seed, input_len, output_len, server_args (in file order),
// concurrency, request_rate, profiler, repeat. The order and
// the ids depend only on the plan's contents, so re-reading the same plan gives the same cells
// (resume relies on it). [[matrix.exclude]] and [[matrix.include]] rules (matrixrules.go) drop
// cells of the cross product; the cells that stay are numbered in order.
//
// Expand expects a plan returned by Load or Parse; on a hand-built plan, an absent resolution or
// steps axis means the model's default, and an unparsable resolution is treated as absent.
func (p *Plan) Expand() []Cell {
	a := newExpandAxes(p)
	var cells []Cell
	a.each(func(pt cellPoint) {
		key, lens := a.key(pt)
		for _, prof := range a.profilers {
			for rep := 1; rep <= a.repeats; rep++ {
				if !p.Matrix.keep(a.ruleCell(pt, prof, rep)) {
					continue
				}
				c := p.newCell(pt, len(cells), a.id(pt, len(cells), lens, prof, rep), key, prof, rep)
				cells = append(cells, c)
			}
		}
	})
	return cells
}

// expandAxes holds the values of every matrix axis as Expand walks them: an absent axis is
// one value that leaves no trace in ids and keys.
type expandAxes struct {
	m          Matrix
	slugs      []string
	res        []Resolution
	steps      []int
	seeds      []int64
	inLens     []int
	outLens    []int
	showRes    bool // ids carry the resolution
	profilers  []string
	repeats    int
	promptHash []string
	points     []llmPoint
}

func newExpandAxes(p *Plan) *expandAxes {
	m := p.Matrix
	a := &expandAxes{m: m, slugs: modelSlugs(m.Model)}
	a.res = []Resolution{{}}
	if len(m.Resolution) > 0 {
		a.res = make([]Resolution, len(m.Resolution))
		for i, s := range m.Resolution {
			a.res[i], _ = ParseResolution(s)
		}
	}
	a.steps = m.NumInferenceSteps
	if len(a.steps) == 0 {
		a.steps = []int{0}
	}
	a.seeds = m.Seed
	if len(a.seeds) == 0 {
		a.seeds = []int64{0}
	}
	// Absent token axes are one value, 0 ("not used"), and leave no trace in ids and keys.
	a.inLens, a.outLens = m.InputLen, m.OutputLen
	if len(a.inLens) == 0 {
		a.inLens = []int{0}
	}
	if len(a.outLens) == 0 {
		a.outLens = []int{0}
	}
	// An LLM plan has no image size: its ids leave out the "default" resolution part.
	a.showRes = len(m.Resolution) > 0 || (len(m.InputLen) == 0 && len(m.OutputLen) == 0)
	a.profilers = p.Profile.Profilers
	if len(a.profilers) == 0 {
		a.profilers = []string{ProfilerNone}
	}
	a.repeats = max(m.Repeats, 1)
	a.promptHash = make([]string, len(m.Prompt))
	for i, pr := range m.Prompt {
		a.promptHash[i] = PromptHash(pr)
	}
	if len(m.Prompt) == 0 {
		// An LLM plan may have no prompt (its dataset makes the prompts): one empty prompt that
		// leaves no trace in ids and keys.
		a.m.Prompt = []string{""}
		a.promptHash = []string{""}
	}
	a.points = llmPoints(m)
	return a
}

// cellPoint is one combination of the matrix axes outside profiler and repeat: the cells of
// one point share a key.
type cellPoint struct {
	mi, pi  int // model and prompt index
	r       Resolution
	st      int
	seed    int64
	in, out int
	pt      llmPoint
}

// each calls f for every point, outermost first model, prompt, resolution, steps, seed,
// input_len, output_len, then the server_args/concurrency/request_rate points.
func (a *expandAxes) each(f func(cellPoint)) {
	for mi := range a.m.Model {
		for pi := range a.m.Prompt {
			for _, r := range a.res {
				for _, st := range a.steps {
					for _, seed := range a.seeds {
						for _, in := range a.inLens {
							for _, out := range a.outLens {
								for _, pt := range a.points {
									f(cellPoint{mi: mi, pi: pi, r: r, st: st, seed: seed, in: in, out: out, pt: pt})
								}
							}
						}
					}
				}
			}
		}
	}
}

// ruleCell is what [[matrix.exclude]] and [[matrix.include]] rules see of one cell.
func (a *expandAxes) ruleCell(c cellPoint, prof string, rep int) ruleCell {
	return ruleCell{model: a.m.Model[c.mi], prompt: a.m.Prompt[c.pi], profiler: prof, res: c.r, steps: c.st,
		in: c.in, out: c.out, seed: c.seed, conc: c.pt.conc, hasConc: c.pt.hasConc, rate: c.pt.rate,
		hasRate: c.pt.hasRates, repeat: rep}
}

// PromptHash is a prompt's part of a cell key without its "p": the first 4 bytes of the
// prompt's SHA-256 in hex, which keeps keys short whatever the prompt's length. The report
// reads it back to say which prompt a key's "p…" part stands for.
func PromptHash(prompt string) string {
	sum := sha256.Sum256([]byte(prompt))
	return hex.EncodeToString(sum[:4])
}

// stepKey is the id and key form of the steps axis ("default": the model's own).
func (c cellPoint) stepKey() string {
	if c.st > 0 {
		return fmt.Sprint(c.st)
	}
	return "default"
}

// key returns the point's key and the id part of its token lengths.
func (a *expandAxes) key(c cellPoint) (key, lens string) {
	key = fmt.Sprintf("%s/%s/%sst/s%d", a.slugs[c.mi], c.r.size(), c.stepKey(), c.seed)
	if h := a.promptHash[c.pi]; h != "" {
		key += "/p" + h
	}
	lens = tokenLens(a.m, c.in, c.out)
	if lens != "" {
		key += "/" + strings.ReplaceAll(lens[1:], "-", "/")
	}
	return key + c.pt.key, lens
}

// id is the id of the index'th cell: only the axes with more than one value (or that an LLM
// cell measures) appear in it.
func (a *expandAxes) id(c cellPoint, index int, lens, prof string, rep int) string {
	var id strings.Builder
	fmt.Fprintf(&id, "%03d-%s", index, a.slugs[c.mi])
	if a.showRes {
		fmt.Fprintf(&id, "-%s", c.r)
	}
	if len(a.steps) > 1 {
		fmt.Fprintf(&id, "-%sst", c.stepKey())
	}
	if len(a.m.Prompt) > 1 {
		fmt.Fprintf(&id, "-p%d", c.pi)
	}
	id.WriteString(lens)
	id.WriteString(c.pt.id)
	fmt.Fprintf(&id, "-s%d-%s-r%d", c.seed, prof, rep)
	return id.String()
}

// newCell is the cell at index for point c, with its own copies of the plan's settings.
func (p *Plan) newCell(c cellPoint, index int, id, key, prof string, rep int) Cell {
	cell := Cell{
		Index:      index,
		ID:         id,
		Model:      p.Matrix.Model[c.mi],
		Prompt:     promptAt(p.Matrix.Prompt, c.pi),
		Resolution: c.r,
		Steps:      c.st,
		Seed:       c.seed,
		Repeat:     rep,
		Profiler:   prof,
		InputLen:   c.in,
		OutputLen:  c.out,
		Key:        key,
		Backend:    p.Backend.clone(),
		Profile:    p.Profile.clone(),
		NSys:       p.NSys.clone(),
		Gate:       p.Gate,
		Load:       p.Load,
	}
	kind := p.Backend.Kind
	if c.pt.engine != "" {
		kind = c.pt.engine
	}
	cell.Backend.ExtraArgs = append(cell.Backend.ExtraArgs, p.Backend.EngineArgs[kind]...)
	cell.Backend.EngineArgs = nil // the cell's own flags are in ExtraArgs
	c.pt.apply(&cell)
	capTraceSteps(&cell)
	return cell
}

// promptAt is the prompt at index i, "" for a plan without prompts (an LLM plan).
func promptAt(prompts []string, i int) string {
	if i < len(prompts) {
		return prompts[i]
	}
	return ""
}

// tokenLens is the id part of the token-length axes: "-i{in}" when the plan has input_len,
// "-o{out}" when it has output_len (even with one value: the lengths are what an LLM cell
// measures), "" for a plan without them, so that the ids of such plans never change.
func tokenLens(m Matrix, in, out int) string {
	var b strings.Builder
	if len(m.InputLen) > 0 {
		fmt.Fprintf(&b, "-i%d", in)
	}
	if len(m.OutputLen) > 0 {
		fmt.Fprintf(&b, "-o%d", out)
	}
	return b.String()
}

// maxSlug keeps cell directory names well below file-system limits.
const maxSlug = 48

// ModelSlug is the id form of a model: the last path element, lower-cased, with every run of
// characters outside [a-z0-9] turned into '-' ("Qwen/Qwen-Image" → "qwen-image").
func ModelSlug(model string) string {
	s := strings.TrimRight(model, `/\`)
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	s = strings.ToLower(s)
	var b strings.Builder
	dash := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteByte(c)
			if b.Len() >= maxSlug {
				break
			}
			continue
		}
		dash = true
	}
	if b.Len() == 0 {
		return "model"
	}
	return b.String()
}

// modelSlugs gives each model its slug, adding "-m<index>" to every model whose slug another
// model of the axis shares, so that ids stay unique.
func modelSlugs(models []string) []string {
	slugs := make([]string, len(models))
	count := map[string]int{}
	for i, m := range models {
		slugs[i] = ModelSlug(m)
		count[slugs[i]]++
	}
	for i := range slugs {
		if count[slugs[i]] > 1 {
			slugs[i] = fmt.Sprintf("%s-m%d", slugs[i], i)
		}
	}
	return slugs
}

func (b Backend) clone() Backend {
	b.Command = slices.Clone(b.Command)
	b.ExtraArgs = slices.Clone(b.ExtraArgs)
	b.Env = maps.Clone(b.Env)
	return b
}

func (p Profile) clone() Profile {
	p.Profilers = slices.Clone(p.Profilers)
	p.Activities = slices.Clone(p.Activities)
	p.ProfileStages = slices.Clone(p.ProfileStages)
	return p
}

func (n NSys) clone() NSys {
	n.Trace = slices.Clone(n.Trace)
	return n
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
