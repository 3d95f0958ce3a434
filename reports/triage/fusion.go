package triage

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
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

// MaxEvidence bounds the location list of a fusion row, and the evidence and remaining lists
// a text or Markdown table prints (JSON and CSV carry every kernel).
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
	// None are name keywords that disqualify a kernel: a fused add+mul is not a gate multiply.
	None []string `json:"none"`

	m, none []matcher
}

type matcher struct {
	sub  string
	re   *regexp.Regexp
	need []string // literals one of which every match of re contains (see requiredLiterals)
}

// matchBG is match with the byte pairs of s, which rule most keywords out without a scan.
func (m matcher) matchBG(bg *bigrams, s string) bool {
	if m.re != nil {
		return containsAny(bg, s, m.need) && m.re.MatchString(s)
	}
	return bg.may(m.sub) && strings.Contains(s, m.sub)
}

func compile(kws []string) ([]matcher, error) {
	out := make([]matcher, 0, len(kws))
	for _, k := range kws {
		if rx, ok := strings.CutPrefix(k, "re:"); ok {
			re, err := regexp.Compile(rx)
			if err != nil {
				return nil, err
			}
			out = append(out, matcher{re: re, need: requiredLiterals(rx)})
		} else {
			out = append(out, matcher{sub: strings.ToLower(k)})
		}
	}
	return out, nil
}

// anyWord is anyMatch with substrings that must stand as whole words (delimited by anything
// but a letter or digit), for Python locations and CPU ops.
func anyWord(ms []matcher, s string) bool {
	for _, m := range ms {
		if m.re != nil {
			if m.re.MatchString(s) {
				return true
			}
		} else if containsWord(s, m.sub) {
			return true
		}
	}
	return false
}

func containsWord(s, w string) bool {
	if w == "" {
		return false
	}
	for off := 0; ; {
		i := strings.Index(s[off:], w)
		if i < 0 {
			return false
		}
		i += off
		j := i + len(w)
		if (i == 0 || !isAlnum(s[i-1])) && (j == len(s) || !isAlnum(s[j])) {
			return true
		}
		off = i + 1
	}
}

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

func anyMatchBG(ms []matcher, bg *bigrams, s string) bool {
	for _, m := range ms {
		if m.matchBG(bg, s) {
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
			if p.Split[j].none, err = compile(p.Split[j].None); err != nil {
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

// defaultCatalog is parsed on first use, as defaultClassifier is built.
var defaultCatalog = sync.OnceValue(func() *Catalog {
	c, err := ParseCatalog(fusionsJSON)
	if err != nil {
		panic("embedded fusions.json is invalid: " + err.Error())
	}
	return c
})

// DefaultCatalog returns the embedded catalog.
func DefaultCatalog() *Catalog { return defaultCatalog() }

// diffusionModels are model-name fragments of diffusion pipelines; they enable the diffusion
// patterns when the Python sites do not say which framework ran.
var diffusionModels = []string{"flux", "qwen-image", "wan2", "wan-", "ltx", "z-image", "zimage", "hunyuan", "stable-diffusion", "sd3", "cogvideo", "mochi", "diffusion"}

// frameworks infers which frameworks' code launched the kernels, from their Python sites and
// the model name. An unknown framework is treated as SGLang (the runner's main target, and the
// anchor's default); diffusion patterns then need a diffusion model name or, in an nsys export
// (no Python frames), an NVTX range of a diffusion pipeline around the launches.
func frameworks(rows []KernelRow, model string) map[string]bool {
	fw := map[string]bool{}
	diffusionNVTX := false
	for _, r := range rows {
		for _, l := range r.Locations {
			s := strings.ToLower(l.Location)
			switch {
			case strings.HasPrefix(s, "nvtx: "):
				diffusionNVTX = diffusionNVTX || diffusionRange(l.Location[len("nvtx: "):])
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
	if diffusionNVTX {
		fw["sglang-diffusion"] = true
	}
	return fw
}

// diffusionRange reports whether an NVTX range (as the kernel table labels it, numbers folded
// to N, "domain:" before it outside the default domain) is a diffusion pipeline's: a pipeline
// stage class (DenoisingStage, DecodingStage, ...) or a denoising step. LLM step ranges are not.
func diffusionRange(name string) bool {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	switch annotationStage(name) {
	case "", StageExtend, StageDecode, StageMixed:
		return false
	}
	return true
}

type rowText struct {
	name string // lower-cased canonical name
	site string // lower-cased locations and CPU ops
}

// member is one kernel row in a split group, and whether its own name (not only its Python
// location or CPU op) matched the group.
type member struct {
	row    int
	byName bool
}

// candidate is one catalog pattern's view of a stage before kernels are shared out: the rows
// whose names prove the fused kernel ran, and the rows of each split group.
type candidate struct {
	p      *Pattern
	index  int // position in the catalog, the last tie-break
	fused  []int
	groups [][]member
}

// Match evaluates the catalog against a stage's kernel rows (all of them, whatever the
// cutoff). total is the stage's summed kernel time in ns, the share denominator.
//
// Each kernel row is evidence for at most one fusion row: patterns take their
// kernels in order of specificity (see orderCandidates), and a pattern whose required parts
// were all taken by a more specific one is dropped. The shares of a stage's fusion rows
// therefore add up to at most the share of the kernels they cite.
func (c *Catalog) Match(rows []KernelRow, total int64, model string, tp int) []FusionRow {
	model = strings.ToLower(model)
	texts := rowTexts(rows)
	cands := c.candidates(rows, texts, model)
	orderCandidates(cands)
	claimed := make([]bool, len(rows))
	var hits []fusionHit
	for _, cd := range cands {
		cd.drop(claimed)
		cd.relate(rows)
		fr, related, ok := evaluate(cd, rows, total, tp)
		if !ok {
			continue
		}
		for _, i := range related {
			claimed[i] = true
		}
		hits = append(hits, fusionHit{cd.p, fr})
	}
	return visibleRows(hits)
}

func rowTexts(rows []KernelRow) []rowText {
	texts := make([]rowText, len(rows))
	for i, r := range rows {
		var b strings.Builder
		for _, l := range r.Locations {
			b.WriteString(strings.ToLower(l.Location))
			b.WriteByte(' ')
			b.WriteString(strings.ToLower(l.CPUOp))
			b.WriteByte(' ')
		}
		low := r.lower
		if low == "" {
			low = strings.ToLower(r.Name)
		}
		texts[i] = rowText{name: low, site: b.String()}
	}
	return texts
}

// candidates collects, per pattern that applies to the framework and model, the rows that
// match its fused keywords and its split groups. Rows are the outer loop so that each name's
// byte pairs are recorded once for all patterns (unique 1 KB names).
func (c *Catalog) candidates(rows []KernelRow, texts []rowText, model string) []*candidate {
	fw := frameworks(rows, model)
	var all []*candidate
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
		all = append(all, &candidate{p: p, index: pi, groups: make([][]member, len(p.Split))})
	}
	bg := new(bigrams)
	for i, r := range rows {
		name := texts[i].name
		if len(name) >= bigramMin {
			bg.fill(name)
		}
		for _, cd := range all {
			cd.addRow(i, r, texts[i], bg)
		}
		bg.reset()
	}
	out := all[:0]
	for _, cd := range all {
		if len(cd.fused) > 0 || cd.complete() {
			out = append(out, cd)
		}
	}
	return out
}

// addRow files row i under the candidate's fused kernels or split groups.
func (cd *candidate) addRow(i int, r KernelRow, t rowText, bg *bigrams) {
	var b *bigrams
	if len(t.name) >= bigramMin {
		b = bg
	}
	p := cd.p
	if anyMatchBG(p.fused, b, t.name) {
		cd.fused = append(cd.fused, i)
		return
	}
	for gi := range p.Split {
		g := &p.Split[gi]
		if anyMatchBG(g.none, b, t.name) {
			continue
		}
		catOK := len(g.Categories) == 0 || contains(g.Categories, r.Category)
		byName := anyMatchBG(g.m, b, t.name)
		switch {
		case byName && catOK:
			cd.groups[gi] = append(cd.groups[gi], member{i, true})
		case !byName && len(g.Categories) > 0 && catOK && anyWord(g.m, t.site):
			// Location evidence only counts for a kernel whose own category fits, and only as
			// a whole word ("mul" is not in "multimodal_gen").
			cd.groups[gi] = append(cd.groups[gi], member{i, false})
		}
	}
}

// complete reports whether every split group has a kernel of its own: a pattern needs all its
// parts, and one kernel cannot be two of them (a plain add is not both the residual add and the
// shift of a modulation).
func (cd *candidate) complete() bool {
	for _, g := range cd.groups {
		if len(g) == 0 {
			return false
		}
	}
	return len(cd.groups) > 0 && distinctCover(cd.groups, 0, nil)
}

// distinctCover reports whether groups[gi:] can each be given a row that is not in used and
// not given to another group. Patterns have at most four groups, so the search is shallow.
func distinctCover(groups [][]member, gi int, used []int) bool {
	if gi == len(groups) {
		return true
	}
	for _, m := range groups[gi] {
		if !slices.Contains(used, m.row) && distinctCover(groups, gi+1, append(used, m.row)) {
			return true
		}
	}
	return false
}

// relate keeps, of each split group, only the kernels related to the rest of the pattern: a
// kernel that ran directly next to (the launch before or after, on the same stream) a kernel
// of another of the pattern's groups. A GELU MLP's activation and a multiply elsewhere in the
// stage are both in the stage, but not one gated activation. It repeats until
// nothing more drops, since dropping a kernel can leave its neighbour unrelated. Communication
// groups run on their own stream and are exempt, and so is a group whose every other group is
// communication. Rows without adjacency (built by hand, or per-name sums) keep every kernel.
func (cd *candidate) relate(rows []KernelRow) {
	if len(cd.groups) < 2 {
		return
	}
	for changed := true; changed; {
		changed = false
		for gi, g := range cd.groups {
			if commGroup(cd.p.Split[gi]) {
				continue
			}
			keep := g[:0]
			for _, m := range g {
				if cd.linked(rows, gi, m.row) {
					keep = append(keep, m)
				} else {
					changed = true
				}
			}
			cd.groups[gi] = keep
		}
	}
}

// linked reports whether row i (a kernel of group gi) ran directly next to another kernel of
// one of the pattern's other non-communication groups, or has no such group to relate to.
func (cd *candidate) linked(rows []KernelRow, gi, i int) bool {
	others := false
	for gj, h := range cd.groups {
		if gj == gi || commGroup(cd.p.Split[gj]) {
			continue
		}
		others = true
		for _, m := range h {
			if m.row != i && adjacent(rows, i, m.row) {
				return true
			}
		}
	}
	return !others
}

// drop removes the rows a more specific pattern already took.
func (cd *candidate) drop(claimed []bool) {
	keep := cd.fused[:0]
	for _, i := range cd.fused {
		if !claimed[i] {
			keep = append(keep, i)
		}
	}
	cd.fused = keep
	for gi, g := range cd.groups {
		k := g[:0]
		for _, m := range g {
			if !claimed[m.row] {
				k = append(k, m)
			}
		}
		cd.groups[gi] = k
	}
}

// orderCandidates puts the most specific patterns first: a pattern before those it subsumes,
// then patterns whose fused kernel runs (the family's fused path is the fact to report), then
// patterns with more split parts, then catalog order.
func orderCandidates(cands []*candidate) {
	sort.SliceStable(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if px, py := len(x.fused) > 0, len(y.fused) > 0; px != py {
			return px
		}
		if len(x.groups) != len(y.groups) {
			return len(x.groups) > len(y.groups)
		}
		return x.index < y.index
	})
	pos := func(name string) int {
		for i, cd := range cands {
			if cd.p.Name == name {
				return i
			}
		}
		return -1
	}
	// Move each subsuming pattern in front of the patterns it subsumes (the catalog's
	// subsumption graph is small and acyclic; the pass count bounds a cycle anyway).
	for pass := 0; pass < len(cands); pass++ {
		moved := false
		for i := 0; i < len(cands); i++ {
			for _, s := range cands[i].p.Subsumes {
				if j := pos(s); j >= 0 && j < i {
					cd := cands[i]
					copy(cands[j+1:i+1], cands[j:i])
					cands[j] = cd
					moved = true
				}
			}
		}
		if !moved {
			return
		}
	}
}

// evaluate decides a candidate's row after the rows taken by more specific patterns are gone;
// related are the rows the row cites (and so takes).
func evaluate(cd *candidate, rows []KernelRow, total int64, tp int) (FusionRow, []int, bool) {
	p := cd.p
	var fr FusionRow
	var related, remaining []int
	switch {
	case len(cd.fused) > 0:
		fr.Status, fr.Confidence = StatusPresent, ConfHigh
		related = append(related, cd.fused...)
		if cd.complete() {
			// Both run: the split launches of the family that remain are the finding.
			remaining = cd.splitRows()
			related = append(related, remaining...)
		}
	case cd.complete():
		if p.MinTP > 0 && tp > 0 && tp < p.MinTP {
			return fr, nil, false
		}
		fr.Status = StatusAvailable
		if p.Origin == "upstream" || p.Origin == "inflight" {
			fr.Status = StatusUpstream
		}
		related = cd.splitRows()
	default:
		return fr, nil, false
	}
	// A split kernel is cited for its launches that ran next to another part; a generic kernel
	// (one add for every residual in the model) is not evidence as a whole because a few of
	// its launches sit beside a norm.
	near := map[int]int64{}
	for _, i := range cd.splitRows() {
		near[i] = cd.nearLaunches(rows, i)
	}
	launches := func(i int) int64 {
		if n, ok := near[i]; ok {
			return n
		}
		return int64(rows[i].Count)
	}
	citedNS := func(i int) int64 {
		if n, c := launches(i), int64(rows[i].Count); n < c && c > 0 {
			return int64(float64(rows[i].totalNS) * float64(n) / float64(c))
		}
		return rows[i].totalNS
	}
	var rel, remNS int64
	for _, i := range related {
		rel += citedNS(i)
	}
	for _, i := range remaining {
		remNS += citedNS(i)
	}
	share := pct(rel, total)
	if fr.Status != StatusPresent {
		if share < p.MinShare {
			return fr, nil, false
		}
		switch {
		case cd.weak():
			fr.Confidence = ConfLow
		case share >= p.LikelyShare:
			fr.Confidence = ConfHigh
		default:
			fr.Confidence = ConfMedium
		}
	}
	sortByTime(rows, related)
	sortByTime(rows, remaining)
	fr.Pattern = p.Name
	fr.RelatedUS = us(rel)
	fr.SharePct = share
	fr.CandidatePaths = append([]string{}, p.CandidatePaths...)
	if p.Toggle != "" {
		fr.CandidatePaths = append(fr.CandidatePaths, p.Toggle)
	}
	disp := func(i int) string { return shortenName(rows[i].Name, 100) }
	if names := distinctShort(len(rows), func(i int) string { return rows[i].Name }, 100); len(names) == len(rows) {
		disp = func(i int) string { return names[i] }
	}
	sharePct := func(i int) float64 { return pct(citedNS(i), total) }
	fr.Evidence, fr.Locations = evidence(rows, related, disp, sharePct)
	for _, i := range related {
		fr.cited = append(fr.cited, rows[i].Name)
		fr.citedPct = append(fr.citedPct, sharePct(i))
	}
	fr.SplitRemaining = remainingSplit(rows, remaining, disp, launches)
	fr.Rationale = rationale(p, fr, tp, pctOf(rows, cd.fused, total), pct(remNS, total))
	return fr, related, true
}

// nearLaunches estimates how many launches of split row i ran directly next to a kernel of
// another of the pattern's parts: the back-to-back counts of the pairs, at most the row's
// launch count. A row without adjacency (built by hand), of a communication part, or of a
// pattern whose other parts are all communication counts every launch.
func (cd *candidate) nearLaunches(rows []KernelRow, i int) int64 {
	all := int64(rows[i].Count)
	if rows[i].adj == nil {
		return all
	}
	var mine []int // the groups row i is in
	for gi, g := range cd.groups {
		for _, m := range g {
			if m.row == i {
				if commGroup(cd.p.Split[gi]) {
					return all
				}
				mine = append(mine, gi)
				break
			}
		}
	}
	var n int64
	others := false
	seen := map[int]bool{i: true}
	for gj, h := range cd.groups {
		if slices.Contains(mine, gj) || commGroup(cd.p.Split[gj]) {
			continue
		}
		others = true
		for _, m := range h {
			if !seen[m.row] {
				seen[m.row] = true
				n += rows[i].adj[adjKey(i, m.row)]
			}
		}
	}
	if !others || n > all {
		return all
	}
	return n
}

// splitRows is the union of the split groups' rows, each once.
func (cd *candidate) splitRows() []int {
	seen := map[int]bool{}
	var out []int
	for _, g := range cd.groups {
		for _, m := range g {
			if !seen[m.row] {
				seen[m.row] = true
				out = append(out, m.row)
			}
		}
	}
	return out
}

// weak reports a group satisfied only through Python locations or CPU ops.
func (cd *candidate) weak() bool {
	for _, g := range cd.groups {
		strong := false
		for _, m := range g {
			strong = strong || m.byName
		}
		if !strong && len(g) > 0 {
			return true
		}
	}
	return false
}

func sortByTime(rows []KernelRow, idx []int) {
	sort.Slice(idx, func(a, b int) bool {
		if rows[idx[a]].totalNS != rows[idx[b]].totalNS {
			return rows[idx[a]].totalNS > rows[idx[b]].totalNS
		}
		return rows[idx[a]].Name < rows[idx[b]].Name
	})
}

func pctOf(rows []KernelRow, idx []int, total int64) float64 {
	var ns int64
	for _, i := range idx {
		ns += rows[i].totalNS
	}
	return pct(ns, total)
}

// evidence lists every cited kernel (the tables abbreviate, see abbrev) and the first Python
// sites (at most MaxEvidence).
func evidence(rows []KernelRow, related []int, disp func(i int) string, share func(i int) float64) (ev, locs []string) {
	locSeen := map[string]bool{}
	for _, i := range related {
		ev = append(ev, fmt.Sprintf("%s (%.1f%%)", disp(i), share(i)))
		if len(rows[i].Locations) > 0 && len(locs) < MaxEvidence {
			l := rows[i].Locations[0].Location
			if !locSeen[l] {
				locSeen[l] = true
				locs = append(locs, l)
			}
		}
	}
	return ev, locs
}

// remainingSplit names the split launches that still run beside a fused kernel of their
// family, with their launch count and Python site, so the engineer knows where to look.
func remainingSplit(rows []KernelRow, idx []int, disp func(i int) string, launches func(i int) int64) []string {
	var out []string
	for k, i := range idx {
		if k == MaxEvidence {
			out = append(out, fmt.Sprintf("+%d more kernels", len(idx)-MaxEvidence))
			break
		}
		r := rows[i]
		s := fmt.Sprintf("%s ×%d", disp(i), launches(i))
		if n := launches(i); n < int64(r.Count) {
			s += fmt.Sprintf(" of %d launches", r.Count)
		}
		if len(r.Locations) > 0 {
			s += " at " + r.Locations[0].Location
		}
		out = append(out, s)
	}
	return out
}

type fusionHit struct {
	p   *Pattern
	row FusionRow
}

// visibleRows applies subsumption (a matched pattern hides the patterns it subsumes, except
// that a split-only match never hides a fused kernel that is actually present) and sorts the
// rows by related time.
func visibleRows(hits []fusionHit) []FusionRow {
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

func rationale(p *Pattern, fr FusionRow, tp int, fusedPct, splitPct float64) string {
	var s string
	switch {
	case fr.Status == StatusPresent && len(fr.SplitRemaining) > 0:
		s = fmt.Sprintf("The fused kernel already runs (%.1f%% of kernel time), but split kernels of the family still run (%.1f%%): %s.",
			fusedPct, splitPct, strings.Join(fr.SplitRemaining, "; "))
	case fr.Status == StatusPresent:
		s = fmt.Sprintf("The fused kernel already runs (%.1f%% of kernel time); nothing to enable.", fr.SharePct)
	case fr.Status == StatusAvailable:
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

// abbrev is a list as a table prints it: the first MaxEvidence items, then a count of the rest.
func abbrev(items []string) []string {
	if len(items) <= MaxEvidence {
		return items
	}
	out := append([]string{}, items[:MaxEvidence]...)
	return append(out, fmt.Sprintf("+%d more kernels", len(items)-MaxEvidence))
}
