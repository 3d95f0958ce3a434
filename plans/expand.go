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
// model, prompt, resolution, steps, seed, profiler, repeat. The order and the ids depend only on
// the plan's contents, so re-reading the same plan gives the same cells (resume relies on it).
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

	var cells []Cell
	for mi, model := range m.Model {
		for pi, prompt := range m.Prompt {
			for _, r := range res {
				for _, st := range steps {
					for _, seed := range seeds {
						stepKey := "default"
						if st > 0 {
							stepKey = fmt.Sprint(st)
						}
						key := fmt.Sprintf("%s/%s/%sst/s%d/p%s", slugs[mi], r.size(), stepKey, seed, promptHash[pi])
						for _, prof := range profilers {
							for rep := 1; rep <= repeats; rep++ {
								var id strings.Builder
								fmt.Fprintf(&id, "%03d-%s-%s", len(cells), slugs[mi], r)
								if len(steps) > 1 {
									fmt.Fprintf(&id, "-%sst", stepKey)
								}
								if len(m.Prompt) > 1 {
									fmt.Fprintf(&id, "-p%d", pi)
								}
								fmt.Fprintf(&id, "-s%d-%s-r%d", seed, prof, rep)
								cells = append(cells, Cell{
									Index:      len(cells),
									ID:         id.String(),
									Model:      model,
									Prompt:     prompt,
									Resolution: r,
									Steps:      st,
									Seed:       seed,
									Repeat:     rep,
									Profiler:   prof,
									Key:        key,
									Backend:    p.Backend.clone(),
									Profile:    p.Profile.clone(),
									NSys:       p.NSys.clone(),
									Gate:       p.Gate,
								})
							}
						}
					}
				}
			}
		}
	}
	return cells
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
	return p
}

func (n NSys) clone() NSys {
	n.Trace = slices.Clone(n.Trace)
	return n
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
