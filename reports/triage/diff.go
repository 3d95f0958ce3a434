package triage

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/sglprof/runner/reports/rundir"
)

// Kernel diff statuses (KernelDiff.Status).
const (
	// DiffChanged: the kernel runs on both sides with another total time or launch count.
	DiffChanged = "changed"
	// DiffAdded: the kernel runs only in the new triage.
	DiffAdded = "added"
	// DiffRemoved: the kernel runs only in the base triage.
	DiffRemoved = "removed"
	// DiffSame: the same total time, to the nanosecond, and the same launch count.
	DiffSame = "same"
)

// Kernel diff matches (KernelDiff.Match).
const (
	// MatchExact pairs a base and a new kernel of the same canonical name.
	MatchExact = "exact"
	// MatchNormalized pairs a base and a new kernel whose names differ only in what changes
	// between builds (template arguments, hashes, numeric suffixes; NormalizeKernelName).
	MatchNormalized = "normalized"
)

// DiffReport is the kernel diff of two triages of the same workload (a base and a new run):
// per stage, every kernel of either side once, ranked by how much its total time changed, and
// the fusion rows whose status changed. Diff builds it from two Reports; its JSON is the
// "diff" key of `runner triage --diff --format json` and the "diff" of each entry of
// compare's "kernel_diff".
type DiffReport struct {
	BaseInputs []InputInfo `json:"base_inputs"`
	NewInputs  []InputInfo `json:"new_inputs"`
	Stages     []StageDiff `json:"stages"`
	Warnings   []string    `json:"warnings"`
}

// StageDiff is the diff of one stage. Its kernel totals add up to the stages' kernel times of
// the two triages (the share denominators), when the triages list every kernel.
type StageDiff struct {
	Stage string `json:"stage"`
	// BaseKernelTimeUS and NewKernelTimeUS are the stage's summed GPU op time in each triage
	// (Stage.KernelTimeUS; 0 for a stage the side does not have); DeltaUS is new minus base.
	BaseKernelTimeUS float64 `json:"base_kernel_time_us"`
	NewKernelTimeUS  float64 `json:"new_kernel_time_us"`
	DeltaUS          float64 `json:"delta_us"`
	// BaseKernelCount and NewKernelCount are the stage's GPU op launches (Stage.KernelCount).
	BaseKernelCount int `json:"base_kernel_count"`
	NewKernelCount  int `json:"new_kernel_count"`
	// Kernels are ranked by |DeltaUS|, largest first (ties: the larger total first, then by
	// name); every kernel of either side appears exactly once.
	Kernels []KernelDiff `json:"kernels"`
	// Fusions are the fusion rows whose status differs (a row on one side only included).
	Fusions []FusionDiff `json:"fusions"`

	baseNS, newNS int64
}

// KernelDiff is one kernel of a stage on both sides (or on one, for added and removed).
type KernelDiff struct {
	// Name is the kernel's canonical name: the new side's, or the base's for a removed kernel.
	Name string `json:"name"`
	// BaseName is the base side's name when it differs from Name (a normalised match).
	BaseName string `json:"base_name,omitempty"`
	// Match is MatchExact or MatchNormalized for a kernel of both sides, "" otherwise.
	Match    string `json:"match,omitempty"`
	Category string `json:"category"`
	// Totals are in microseconds, counts are launches; a side without the kernel has 0 of both.
	BaseTotalUS float64 `json:"base_total_us"`
	NewTotalUS  float64 `json:"new_total_us"`
	BaseCount   int     `json:"base_count"`
	NewCount    int     `json:"new_count"`
	// BaseMeanUS and NewMeanUS are the mean launch durations (0 without launches).
	BaseMeanUS float64 `json:"base_mean_us"`
	NewMeanUS  float64 `json:"new_mean_us"`
	// DeltaUS is NewTotalUS minus BaseTotalUS.
	DeltaUS float64 `json:"delta_us"`
	Status  string  `json:"status"`

	baseNS, newNS int64
}

// FusionDiff is one fusion pattern whose status is not the same on both sides; a status is ""
// on the side where the pattern did not match.
type FusionDiff struct {
	Pattern       string  `json:"pattern"`
	BaseStatus    string  `json:"base_status"`
	NewStatus     string  `json:"new_status"`
	BaseRelatedUS float64 `json:"base_related_us"`
	NewRelatedUS  float64 `json:"new_related_us"`
}

// DeltaPct is the kernel's change in percent of its base total; ok is false for a kernel
// without base time (added, or 0 µs).
func (k *KernelDiff) DeltaPct() (pct float64, ok bool) {
	if k.BaseTotalUS <= 0 {
		return 0, false
	}
	return k.DeltaUS * 100 / k.BaseTotalUS, true
}

// DeltaPct is the stage's change in percent of its base kernel time; ok is false when the base
// has none.
func (s *StageDiff) DeltaPct() (pct float64, ok bool) {
	if s.BaseKernelTimeUS <= 0 {
		return 0, false
	}
	return s.DeltaUS * 100 / s.BaseKernelTimeUS, true
}

// ExplainedPct is the share of the stage's change that kernels explain, in percent of
// DeltaUS (their summed deltas over the stage's); ok is false when the stage did not change.
func (s *StageDiff) ExplainedPct(kernels []KernelDiff) (pct float64, ok bool) {
	if s.DeltaUS == 0 {
		return 0, false
	}
	var d float64
	for _, k := range kernels {
		d += k.DeltaUS
	}
	return d * 100 / s.DeltaUS, true
}

// Stage returns the diff of the named stage, or nil.
func (d *DiffReport) Stage(name string) *StageDiff {
	for i := range d.Stages {
		if d.Stages[i].Stage == name {
			return &d.Stages[i]
		}
	}
	return nil
}

// nsOf is a total in nanoseconds: the row's own when the analyzer built it, else its
// microseconds read back (exact for any total under 52 days, as us() divided an int64).
func nsOf(usv float64, ns int64) int64 {
	if ns != 0 {
		return ns
	}
	return int64(math.Round(usv * 1e3))
}

// Diff compares two triages of the same workload. Stages are matched by name (a stage of one
// side only is diffed against nothing); within a stage, kernels are matched by their canonical
// name first, then, among those left, by NormalizeKernelName when exactly one kernel of each
// side has that normalised name (never a guess between several). Sums are kept in integer
// nanoseconds, so the kernel totals of a stage add up to the triage's stage total exactly when
// the triage lists every kernel; a stage whose kernel table does not (a triage rendered with a
// cutoff) gets a warning saying how much is missing. Neither report is modified.
func Diff(base, cur *Report) *DiffReport {
	d := &DiffReport{BaseInputs: nonNil(base.Inputs), NewInputs: nonNil(cur.Inputs), Stages: []StageDiff{}, Warnings: []string{}}
	type pair struct{ b, n *Stage }
	var order []string
	pairs := map[string]*pair{}
	add := func(s *Stage, isBase bool) {
		p := pairs[s.Stage]
		if p == nil {
			p = &pair{}
			pairs[s.Stage] = p
			order = append(order, s.Stage)
		}
		side := &p.n
		if isBase {
			side = &p.b
		}
		if *side != nil {
			d.Warnings = append(d.Warnings, fmt.Sprintf("stage %s appears twice in one triage; only its first table is diffed", s.Stage))
			return
		}
		*side = s
	}
	// Stages in the new triage's order (pipeline order), then those only the base has.
	for i := range cur.Stages {
		add(&cur.Stages[i], false)
	}
	for i := range base.Stages {
		add(&base.Stages[i], true)
	}
	for _, name := range order {
		p := pairs[name]
		d.Stages = append(d.Stages, diffStage(name, p.b, p.n, &d.Warnings))
	}
	return d
}

// diffStage diffs one stage; b or n is nil for a stage of one side only.
func diffStage(name string, b, n *Stage, warn *[]string) StageDiff {
	sd := StageDiff{Stage: name, Kernels: []KernelDiff{}, Fusions: []FusionDiff{}}
	var bk, nk []KernelRow
	if b != nil {
		sd.baseNS, sd.BaseKernelCount, bk = nsOf(b.KernelTimeUS, 0), b.KernelCount, b.Kernels
		checkComplete(name, "base", b, warn)
	}
	if n != nil {
		sd.newNS, sd.NewKernelCount, nk = nsOf(n.KernelTimeUS, 0), n.KernelCount, n.Kernels
		checkComplete(name, "new", n, warn)
	}
	sd.BaseKernelTimeUS, sd.NewKernelTimeUS, sd.DeltaUS = us(sd.baseNS), us(sd.newNS), us(sd.newNS-sd.baseNS)
	bk, nk = uniqueRows(name, "base", bk, warn), uniqueRows(name, "new", nk, warn)

	byName := make(map[string]int, len(bk))
	for i := range bk {
		byName[bk[i].Name] = i
	}
	usedB := make([]bool, len(bk))
	pairedN := make([]int, len(nk)) // base row of each new row, -1 when none yet
	for j := range nk {
		pairedN[j] = -1
		if i, ok := byName[nk[j].Name]; ok && !usedB[i] {
			pairedN[j], usedB[i] = i, true
		}
	}
	// Normalised names, only among the rows left and only one to one.
	normB, normN := map[string][]int{}, map[string][]int{}
	for i := range bk {
		if !usedB[i] {
			k := NormalizeKernelName(bk[i].Name)
			normB[k] = append(normB[k], i)
		}
	}
	for j := range nk {
		if pairedN[j] < 0 {
			k := NormalizeKernelName(nk[j].Name)
			normN[k] = append(normN[k], j)
		}
	}
	for k, js := range normN {
		if is := normB[k]; len(is) == 1 && len(js) == 1 {
			pairedN[js[0]], usedB[is[0]] = is[0], true
		}
	}
	for j := range nk {
		r := &nk[j]
		kd := KernelDiff{Name: r.Name, Category: r.Category, newNS: nsOf(r.TotalUS, r.totalNS), NewCount: r.Count, Status: DiffAdded}
		if i := pairedN[j]; i >= 0 {
			br := &bk[i]
			kd.baseNS, kd.BaseCount, kd.Match = nsOf(br.TotalUS, br.totalNS), br.Count, MatchExact
			if br.Name != r.Name {
				kd.BaseName, kd.Match = br.Name, MatchNormalized
			}
			kd.Status = DiffChanged
			if kd.baseNS == kd.newNS && kd.BaseCount == kd.NewCount {
				kd.Status = DiffSame
			}
		}
		sd.Kernels = append(sd.Kernels, kd)
	}
	for i := range bk {
		if !usedB[i] {
			r := &bk[i]
			sd.Kernels = append(sd.Kernels, KernelDiff{Name: r.Name, Category: r.Category, baseNS: nsOf(r.TotalUS, r.totalNS), BaseCount: r.Count, Status: DiffRemoved})
		}
	}
	for i := range sd.Kernels {
		k := &sd.Kernels[i]
		k.BaseTotalUS, k.NewTotalUS, k.DeltaUS = us(k.baseNS), us(k.newNS), us(k.newNS-k.baseNS)
		if k.BaseCount > 0 {
			k.BaseMeanUS = k.BaseTotalUS / float64(k.BaseCount)
		}
		if k.NewCount > 0 {
			k.NewMeanUS = k.NewTotalUS / float64(k.NewCount)
		}
	}
	sort.SliceStable(sd.Kernels, func(i, j int) bool {
		a, c := &sd.Kernels[i], &sd.Kernels[j]
		da, dc := absNS(a.newNS-a.baseNS), absNS(c.newNS-c.baseNS)
		if da != dc {
			return da > dc
		}
		ma, mc := max(a.baseNS, a.newNS), max(c.baseNS, c.newNS)
		if ma != mc {
			return ma > mc
		}
		return a.Name < c.Name
	})
	sd.Fusions = diffFusions(b, n)
	return sd
}

// uniqueRows returns rows with one row per name: a triage lists each kernel once, but one read
// back from an edited triage.json may not, and the diff lists every kernel once. Rows of one
// name are summed into the first (with a warning); rows is copied only then.
func uniqueRows(stage, side string, rows []KernelRow, warn *[]string) []KernelRow {
	seen := make(map[string]bool, len(rows))
	dups := false
	for i := range rows {
		if seen[rows[i].Name] {
			dups = true
			break
		}
		seen[rows[i].Name] = true
	}
	if !dups {
		return rows
	}
	idx := make(map[string]int, len(rows))
	out := make([]KernelRow, 0, len(rows))
	warned := map[string]bool{}
	for _, r := range rows {
		j, dup := idx[r.Name]
		if !dup {
			idx[r.Name] = len(out)
			out = append(out, r)
			continue
		}
		if !warned[r.Name] {
			warned[r.Name] = true
			*warn = append(*warn, fmt.Sprintf("stage %s, %s: kernel %s is listed more than once; its rows are summed", stage, side, r.Name))
		}
		m := &out[j]
		m.totalNS = nsOf(m.TotalUS, m.totalNS) + nsOf(r.TotalUS, r.totalNS)
		m.TotalUS = us(m.totalNS)
		m.Count += r.Count
	}
	return out
}

func absNS(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// checkComplete warns when a stage's kernel table does not account for its kernel time and
// launches: the triage was rendered with a cutoff, so the diff lacks the hidden kernels.
func checkComplete(stage, side string, s *Stage, warn *[]string) {
	var ns int64
	var count int
	for i := range s.Kernels {
		ns += nsOf(s.Kernels[i].TotalUS, s.Kernels[i].totalNS)
		count += s.Kernels[i].Count
	}
	total := nsOf(s.KernelTimeUS, 0)
	if count == s.KernelCount && absNS(ns-total) <= int64(len(s.Kernels)) { // 1 ns of rounding per row at most
		return
	}
	*warn = append(*warn, fmt.Sprintf("stage %s, %s: the kernel table lists %d of %d launches (%s of %s); the triage was written with a cutoff, so the kernels under it are not in the diff (triage with --cutoff 0)",
		stage, side, count, s.KernelCount, ms(us(ns)), ms(us(total))))
}

// Complete reports whether every stage's kernel table accounts for all of the stage's
// launches, i.e. the report was not rendered with a cutoff that hid kernels (a diff of it then
// covers every kernel).
func (r *Report) Complete() bool {
	for i := range r.Stages {
		var count int
		for _, k := range r.Stages[i].Kernels {
			count += k.Count
		}
		if count != r.Stages[i].KernelCount {
			return false
		}
	}
	return true
}

// diffFusions lists the fusion patterns whose status differs between b and n (either nil).
func diffFusions(b, n *Stage) []FusionDiff {
	out := []FusionDiff{}
	type row struct {
		status string
		us     float64
	}
	bs := map[string]row{}
	if b != nil {
		for _, f := range b.Fusions {
			if _, dup := bs[f.Pattern]; !dup {
				bs[f.Pattern] = row{f.Status, f.RelatedUS}
			}
		}
	}
	seen := map[string]bool{}
	if n != nil {
		for _, f := range n.Fusions {
			if seen[f.Pattern] {
				continue
			}
			seen[f.Pattern] = true
			br := bs[f.Pattern]
			if br.status != f.Status {
				out = append(out, FusionDiff{Pattern: f.Pattern, BaseStatus: br.status, NewStatus: f.Status, BaseRelatedUS: br.us, NewRelatedUS: f.RelatedUS})
			}
		}
	}
	if b != nil {
		for _, f := range b.Fusions {
			if !seen[f.Pattern] {
				seen[f.Pattern] = true
				out = append(out, FusionDiff{Pattern: f.Pattern, BaseStatus: f.Status, BaseRelatedUS: f.RelatedUS})
			}
		}
	}
	return out
}

// reNumSuffix is a trailing numeric suffix (_12, .3, _0_1): Triton numbers the kernels of a
// compiled graph, and the numbers move when the graph changes.
var reNumSuffix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`([_.]\d+)+$`) })

// NormalizeKernelName is the name Diff matches kernels by when their canonical names differ:
// without template argument lists and parameter lists, with build hashes (a word part of 8 or
// more hex digits with a digit among them) replaced by "#", without a trailing numeric suffix
// and without a leading "void ", so `void k<float, 128>(...)` matches `void k<float, 256>(...)`
// and `triton_poi_fused_add_0` matches `triton_poi_fused_add_3`.
func NormalizeKernelName(name string) string {
	s := strings.TrimPrefix(strings.TrimSpace(name), "void ")
	s = dropGroups(s, '<', '>')
	s = dropGroups(s, '(', ')')
	s = replaceHashes(s)
	s = reNumSuffix().ReplaceAllString(s, "")
	return strings.Join(strings.Fields(s), " ")
}

// replaceHashes replaces every maximal run of letters and digits that is 8 or more hex digits,
// at least one a decimal digit, by "#".
func replaceHashes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if !isAlnum(s[i]) {
			b.WriteByte(s[i])
			i++
			continue
		}
		j, hex, digit := i, true, false
		for j < len(s) && isAlnum(s[j]) {
			c := s[j]
			hex = hex && isHex(c)
			digit = digit || (c >= '0' && c <= '9')
			j++
		}
		if hex && digit && j-i >= 8 {
			b.WriteByte('#')
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// dropGroups removes every balanced open..close group, nesting included; an unbalanced group
// is kept as it is.
func dropGroups(s string, open, close byte) string {
	if strings.IndexByte(s, open) < 0 {
		return s
	}
	var b strings.Builder
	depth, start, last := 0, -1, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case open:
			if depth == 0 {
				start = i
			}
			depth++
		case close:
			if depth > 0 {
				depth--
				if depth == 0 {
					b.WriteString(s[last:start])
					last = i + 1
				}
			}
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// ShortKernelName is a kernel's name for a sentence: the last name component before any
// template or parameter list, without "void " (`void flash::FlashAttnFwdSm90<...>(...)` is
// FlashAttnFwdSm90); names without C++ decoration come back unchanged.
func ShortKernelName(name string) string {
	s := strings.TrimPrefix(strings.TrimSpace(name), "void ")
	if i := strings.IndexAny(s, "<("); i > 0 {
		s = s[:i]
	}
	if i := strings.LastIndex(s, "::"); i >= 0 && i+2 < len(s) {
		s = s[i+2:]
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return name
	}
	return s
}

// MaxReportFile bounds the triage.json ReadReportFile reads: a cell's complete triage is a few
// hundred kernel rows, so a larger file is not one the runner wrote.
const MaxReportFile = 64 << 20

// ReadReportFile reads a triage report written as JSON (a cell's triage.json) through the run
// directory's reader (regular files only), refusing a file over MaxReportFile.
func ReadReportFile(path string) (*Report, error) {
	f, err := rundir.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxReportFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxReportFile {
		return nil, fmt.Errorf("%s is over %d MiB; it is no triage the runner wrote", path, MaxReportFile>>20)
	}
	var r Report
	if err := rundir.DecodeJSON(path, data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
