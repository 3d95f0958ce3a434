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
// (resume relies on it).
//
// Expand expects a plan returned by Load or Parse; on a hand-built plan, an absent resolution or
// steps axis means the model's default, and an unparsable resolution is treated as absent.
func (p *Plan) Expand() []Cell {
	m := p.Matrix
	slugs := modelSlugs(m.Model)

	res := []Resolution{{}}
	if len(m.Resolution) > 0 {
		res = make([]Resolution, len(m.Resolution))
		for i, s := range m.Resolution {
			res[i], _ = ParseResolution(s)
		}
	}
	steps := m.NumInferenceSteps
	if len(steps) == 0 {
		steps = []int{0}
	}
	seeds := m.Seed
	if len(seeds) == 0 {
		seeds = []int64{0}
	}
	// Absent token axes are one value, 0 ("not used"), and leave no trace in ids and keys.
	inLens, outLens := m.InputLen, m.OutputLen
	if len(inLens) == 0 {
		inLens = []int{0}
	}
	if len(outLens) == 0 {
		outLens = []int{0}
	}
	// An LLM plan has no image size: its ids leave out the "default" resolution part.
	showRes := len(m.Resolution) > 0 || (len(m.InputLen) == 0 && len(m.OutputLen) == 0)
	profilers := p.Profile.Profilers
	if len(profilers) == 0 {
		profilers = []string{ProfilerNone}
	}
	repeats := max(m.Repeats, 1)
	promptHash := make([]string, len(m.Prompt))
	for i, pr := range m.Prompt {
		sum := sha256.Sum256([]byte(pr))
		promptHash[i] = hex.EncodeToString(sum[:4])
	}

	points := llmPoints(m)

	var cells []Cell
	for mi, model := range m.Model {
		for pi, prompt := range m.Prompt {
			for _, r := range res {
				for _, st := range steps {
					for _, seed := range seeds {
						for _, in := range inLens {
							for _, out := range outLens {
								for _, pt := range points {
									stepKey := "default"
									if st > 0 {
										stepKey = fmt.Sprint(st)
									}
									key := fmt.Sprintf("%s/%s/%sst/s%d/p%s", slugs[mi], r.size(), stepKey, seed, promptHash[pi])
									lens := tokenLens(m, in, out)
									if lens != "" {
										key += "/" + strings.ReplaceAll(lens[1:], "-", "/")
									}
									key += pt.key
									for _, prof := range profilers {
										for rep := 1; rep <= repeats; rep++ {
											var id strings.Builder
											fmt.Fprintf(&id, "%03d-%s", len(cells), slugs[mi])
											if showRes {
												fmt.Fprintf(&id, "-%s", r)
											}
											if len(steps) > 1 {
												fmt.Fprintf(&id, "-%sst", stepKey)
											}
											if len(m.Prompt) > 1 {
												fmt.Fprintf(&id, "-p%d", pi)
											}
											id.WriteString(lens)
											id.WriteString(pt.id)
											fmt.Fprintf(&id, "-s%d-%s-r%d", seed, prof, rep)
											c := Cell{
												Index:      len(cells),
												ID:         id.String(),
												Model:      model,
												Prompt:     prompt,
												Resolution: r,
												Steps:      st,
												Seed:       seed,
												Repeat:     rep,
												Profiler:   prof,
												InputLen:   in,
												OutputLen:  out,
												Key:        key,
												Backend:    p.Backend.clone(),
												Profile:    p.Profile.clone(),
												NSys:       p.NSys.clone(),
												Gate:       p.Gate,
												Load:       p.Load,
											}
											pt.apply(&c)
											cells = append(cells, c)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return cells
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
