package triage

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Fusion statuses. The anchor printed "Confirmed" both for a fused kernel that already runs and
// for a large share of split kernels (W6); these say which it is.
const (
	StatusPresent   = "fused path present"
	StatusAvailable = "split kernels, fusion available"
	StatusUpstream  = "split kernels, fusion upstream"
)

// Fusion confidences.
const (
	ConfHigh   = "high"
	ConfMedium = "medium"
	ConfLow    = "low"
)

// MaxEvidence bounds the evidence and location lists of a fusion row.
const MaxEvidence = 4

//go:embed fusions.json
var fusionsJSON []byte

// Pattern is one catalog entry (see fusions.json for the field semantics).
type Pattern struct {
	Name           string   `json:"name"`
	Origin         string   `json:"origin"`    // mainline | upstream | inflight
	Framework      string   `json:"framework"` // sglang | sglang-diffusion | vllm | trtllm | tokenspeed | any
	Fused          []string `json:"fused"`
	Split          []Group  `json:"split"`
	ModelInclude   []string `json:"model_include"`
	ModelExclude   []string `json:"model_exclude"`
	MinTP          int      `json:"min_tp"`
	MinShare       float64  `json:"min_share"`
	LikelyShare    float64  `json:"likely_share"`
	Subsumes       []string `json:"subsumes"`
	CandidatePaths []string `json:"candidate_paths"`
	Toggle         string   `json:"toggle"`
	Rationale      string   `json:"rationale"`

	fused []matcher
}

// Group is one split-kernel group: every group must be matched for a split match.
type Group struct {
	Any        []string `json:"any"`
	Categories []string `json:"categories"`

	m []matcher
}

type matcher struct {
	sub string
	re  *regexp.Regexp
}

func (m matcher) match(s string) bool {
	if m.re != nil {
		return m.re.MatchString(s)
	}
	return strings.Contains(s, m.sub)
}

func compile(kws []string) ([]matcher, error) {
	out := make([]matcher, 0, len(kws))
	for _, k := range kws {
		if rx, ok := strings.CutPrefix(k, "re:"); ok {
			re, err := regexp.Compile(rx)
			if err != nil {
				return nil, err
			}
			out = append(out, matcher{re: re})
		} else {
			out = append(out, matcher{sub: strings.ToLower(k)})
		}
	}
	return out, nil
}

func anyMatch(ms []matcher, s string) bool {
	for _, m := range ms {
		if m.match(s) {
			return true
		}
	}
	return false
}

// Catalog is the parsed fusion catalog.
type Catalog struct {
	Version  int       `json:"version"`
	Patterns []Pattern `json:"patterns"`
}

// ParseCatalog reads a catalog in the fusions.json format and checks it: every pattern needs a
// name, fused keywords or split groups, and valid regular expressions.
func ParseCatalog(b []byte) (*Catalog, error) {
	var c Catalog
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("fusion catalog: %w", err)
	}
	names := map[string]bool{}
	for i := range c.Patterns {
		p := &c.Patterns[i]
		if p.Name == "" {
			return nil, fmt.Errorf("fusion catalog pattern %d has no name", i)
		}
		if names[p.Name] {
			return nil, fmt.Errorf("fusion catalog: duplicate pattern %q", p.Name)
		}
		names[p.Name] = true
		if len(p.Fused) == 0 && len(p.Split) == 0 {
			return nil, fmt.Errorf("fusion catalog pattern %q has neither fused keywords nor split groups", p.Name)
		}
		var err error
		if p.fused, err = compile(p.Fused); err != nil {
			return nil, fmt.Errorf("fusion catalog pattern %q: %w", p.Name, err)
		}
		for j := range p.Split {
			if p.Split[j].m, err = compile(p.Split[j].Any); err != nil {
				return nil, fmt.Errorf("fusion catalog pattern %q group %d: %w", p.Name, j, err)
			}
		}
	}
	for _, p := range c.Patterns {
		for _, s := range p.Subsumes {
			if !names[s] {
				return nil, fmt.Errorf("fusion catalog pattern %q subsumes unknown pattern %q", p.Name, s)
			}
		}
	}
	return &c, nil
}

var defaultCatalog = func() *Catalog {
	c, err := ParseCatalog(fusionsJSON)
	if err != nil {
		panic("embedded fusions.json is invalid: " + err.Error())
	}
	return c
}()

// DefaultCatalog returns the embedded catalog.
func DefaultCatalog() *Catalog { return defaultCatalog }

// diffusionModels are model-name fragments of diffusion pipelines; they enable the diffusion
// patterns when the Python sites do not say which framework ran.
var diffusionModels = []string{"flux", "qwen-image", "wan2", "wan-", "ltx", "z-image", "zimage", "hunyuan", "stable-diffusion", "sd3", "cogvideo", "mochi", "diffusion"}

// frameworks infers which frameworks' code launched the kernels, from their Python sites and
// the model name. An unknown framework is treated as SGLang (the runner's main target, and the
// anchor's default); diffusion patterns then need a diffusion model name.
func frameworks(rows []KernelRow, model string) map[string]bool {
	fw := map[string]bool{}
	for _, r := range rows {
		for _, l := range r.Locations {
			s := strings.ToLower(l.Location)
			switch {
			case strings.HasPrefix(s, "python/sglang/multimodal_gen/"):
				fw["sglang-diffusion"], fw["sglang"] = true, true
			case strings.HasPrefix(s, "python/sglang/"), strings.HasPrefix(s, "sgl_kernel/"):
				fw["sglang"] = true
			case strings.HasPrefix(s, "vllm_omni/"):
				fw["vllm"], fw["sglang-diffusion"] = true, true
			case strings.HasPrefix(s, "vllm/"):
				fw["vllm"] = true
			case strings.HasPrefix(s, "tensorrt_llm/"):
				fw["trtllm"] = true
			case strings.Contains(s, "tokenspeed/"):
				fw["tokenspeed"] = true
			}
		}
	}
	for _, m := range diffusionModels {
		if strings.Contains(model, m) {
			fw["sglang-diffusion"] = true
		}
	}
	if len(fw) == 0 {
		fw["sglang"] = true
	}
	return fw
}

type rowText struct {
	name string // lower-cased canonical name
	site string // lower-cased locations and CPU ops
}

// Match evaluates the catalog against a stage's kernel rows (all of them, whatever the
// cutoff). total is the stage's summed kernel time in ns, the share denominator.
func (c *Catalog) Match(rows []KernelRow, total int64, model string, tp int) []FusionRow {
	model = strings.ToLower(model)
	fw := frameworks(rows, model)
	texts := make([]rowText, len(rows))
	for i, r := range rows {
		var b strings.Builder
		for _, l := range r.Locations {
			b.WriteString(strings.ToLower(l.Location))
			b.WriteByte(' ')
			b.WriteString(strings.ToLower(l.CPUOp))
			b.WriteByte(' ')
		}
		texts[i] = rowText{name: strings.ToLower(r.Name), site: b.String()}
	}
	type hit struct {
		p   *Pattern
		row FusionRow
	}
	var hits []hit
	for pi := range c.Patterns {
		p := &c.Patterns[pi]
		if p.Framework != "" && p.Framework != "any" && !fw[p.Framework] {
			continue
		}
		// A model-specific pattern needs the model (server_args.json or --model): without it a
		// DeepSeek row would be claimed for a Qwen trace that happens to run the same kernel.
		if (model == "" && len(p.ModelInclude) > 0) || (model != "" && !modelOK(p, model)) {
			continue
		}
		var active []int
		isActive := map[int]bool{}
		for i := range rows {
			if anyMatch(p.fused, texts[i].name) {
				active = append(active, i)
				isActive[i] = true
			}
		}
		groups := make([][]int, len(p.Split))
		weak := false
		for gi, g := range p.Split {
			strong := false
			for i, r := range rows {
				if isActive[i] {
					continue
				}
				catOK := len(g.Categories) == 0 || contains(g.Categories, r.Category)
				byName := anyMatch(g.m, texts[i].name)
				switch {
				case byName && catOK:
					groups[gi] = append(groups[gi], i)
					strong = true
				case !byName && len(g.Categories) > 0 && catOK && anyMatch(g.m, texts[i].site):
					// Location evidence only counts for a kernel whose own category fits.
					groups[gi] = append(groups[gi], i)
				}
			}
			if !strong && len(groups[gi]) > 0 {
				weak = true
			}
		}
		allGroups := len(p.Split) > 0
		for _, g := range groups {
			if len(g) == 0 {
				allGroups = false
			}
		}
		var fr FusionRow
		var related []int
		switch {
		case len(active) > 0:
			fr.Status = StatusPresent
			fr.Confidence = ConfHigh
			related = active
		case allGroups:
			if p.MinTP > 0 && tp > 0 && tp < p.MinTP {
				continue
			}
			fr.Status = StatusAvailable
			if p.Origin == "upstream" || p.Origin == "inflight" {
				fr.Status = StatusUpstream
			}
			seen := map[int]bool{}
			for _, g := range groups {
				for _, i := range g {
					if !seen[i] {
						seen[i] = true
						related = append(related, i)
					}
				}
			}
		default:
			continue
		}
		// Adjacency: a fusion joins kernels that run back to back. Split groups whose kernels
		// never ran next to each other on a stream are a weaker match (W6: the anchor matched
		// a bag of rows). Communication runs on its own stream, so it is exempt.
		apart := false
		if fr.Status != StatusPresent {
			for gi := 0; gi+1 < len(groups); gi++ {
				if commGroup(p.Split[gi]) || commGroup(p.Split[gi+1]) {
					continue
				}
				if !anyAdjacent(rows, groups[gi], groups[gi+1]) {
					apart = true
				}
			}
		}
		var rel int64
		for _, i := range related {
			rel += rows[i].totalNS
		}
		share := pct(rel, total)
		if fr.Status != StatusPresent {
			if share < p.MinShare {
				continue
			}
			switch {
			case weak || apart:
				fr.Confidence = ConfLow
			case share >= p.LikelyShare:
				fr.Confidence = ConfHigh
			default:
				fr.Confidence = ConfMedium
			}
		}
		sort.Slice(related, func(a, b int) bool {
			if rows[related[a]].totalNS != rows[related[b]].totalNS {
				return rows[related[a]].totalNS > rows[related[b]].totalNS
			}
			return rows[related[a]].Name < rows[related[b]].Name
		})
		fr.Pattern = p.Name
		fr.RelatedUS = us(rel)
		fr.SharePct = share
		fr.CandidatePaths = append([]string{}, p.CandidatePaths...)
		if p.Toggle != "" {
			fr.CandidatePaths = append(fr.CandidatePaths, p.Toggle)
		}
		locSeen := map[string]bool{}
		for k, i := range related {
			if k < MaxEvidence {
				fr.Evidence = append(fr.Evidence, fmt.Sprintf("%s (%.1f%%)", shortenName(rows[i].Name, 100), rows[i].SharePct))
			}
			if len(rows[i].Locations) > 0 && len(fr.Locations) < MaxEvidence {
				l := rows[i].Locations[0].Location
				if !locSeen[l] {
					locSeen[l] = true
					fr.Locations = append(fr.Locations, l)
				}
			}
		}
		if len(related) > MaxEvidence {
			fr.Evidence = append(fr.Evidence, fmt.Sprintf("+%d more kernels", len(related)-MaxEvidence))
		}
		fr.Rationale = rationale(p, fr, tp)
		if apart {
			fr.Rationale += " The split kernels never run back to back on one stream, so they may not be the pair this fusion joins."
		}
		hits = append(hits, hit{p, fr})
	}
	// Subsumption: a matched pattern hides the patterns it subsumes, except that a split-only
	// match never hides a fused kernel that is actually present.
	hidden := map[string]bool{}
	for _, h := range hits {
		for _, s := range h.p.Subsumes {
			for _, o := range hits {
				if o.p.Name == s && (h.row.Status == StatusPresent || o.row.Status != StatusPresent) {
					hidden[s] = true
				}
			}
		}
	}
	out := make([]FusionRow, 0, len(hits))
	for _, h := range hits {
		if !hidden[h.p.Name] {
			out = append(out, h.row)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].RelatedUS != out[j].RelatedUS {
			return out[i].RelatedUS > out[j].RelatedUS
		}
		return out[i].Pattern < out[j].Pattern
	})
	return out
}

func commGroup(g Group) bool { return contains(g.Categories, CatCommunication) }

func anyAdjacent(rows []KernelRow, a, b []int) bool {
	for _, i := range a {
		for _, j := range b {
			if adjacent(rows, i, j) {
				return true
			}
		}
	}
	return false
}

func modelOK(p *Pattern, model string) bool {
	for _, x := range p.ModelExclude {
		if strings.Contains(model, strings.ToLower(x)) {
			return false
		}
	}
	if len(p.ModelInclude) == 0 {
		return true
	}
	for _, x := range p.ModelInclude {
		if strings.Contains(model, strings.ToLower(x)) {
			return true
		}
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func rationale(p *Pattern, fr FusionRow, tp int) string {
	var s string
	switch fr.Status {
	case StatusPresent:
		s = fmt.Sprintf("The fused kernel already runs (%.1f%% of kernel time); nothing to enable.", fr.SharePct)
	case StatusAvailable:
		s = fmt.Sprintf("Split kernels of this family take %.1f%% of kernel time and the framework has a fused path.", fr.SharePct)
	default:
		s = fmt.Sprintf("Split kernels of this family take %.1f%% of kernel time; a fused path exists upstream or in an open PR (%s).", fr.SharePct, p.Origin)
	}
	if fr.Confidence == ConfLow && fr.Status != StatusPresent {
		s += " Some groups matched only through Python locations."
	}
	if p.MinTP > 0 && tp == 0 && fr.Status != StatusPresent {
		s += fmt.Sprintf(" Needs TP >= %d; TP size unknown (no server_args.json).", p.MinTP)
	}
	if p.Rationale != "" {
		s += " " + p.Rationale
	}
	return s
}
