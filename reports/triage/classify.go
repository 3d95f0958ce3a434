package triage

import (
	_ "embed"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
)

// Kernel categories. One classifier assigns them for every table (W5: the anchor had two that
// disagreed).
const (
	CatAttention     = "attention"
	CatGEMM          = "gemm"
	CatNorm          = "norm"
	CatCommunication = "communication"
	CatElementwise   = "elementwise"
	CatActivation    = "activation"
	CatRoPE          = "rope"
	CatMemory        = "memory"
	CatConv          = "conv"
	CatQuantization  = "quantization"
	CatMoE           = "moe"
	CatSampling      = "sampling"
	CatReduce        = "reduce"
	CatSoftmax       = "softmax"
	CatSSM           = "ssm"
	CatOther         = "other"
)

//go:embed classifier.rules
var classifierRules string

type classRule struct {
	cat string
	sub string
	re  *regexp.Regexp
	// need holds literals one of which every match of re contains (nil: unknown); a name
	// without any of them skips the regexp (regexps over unique 1 KB names ran at
	// 0.16 MB/s).
	need []string
}

// RegexpWindow is how many leading bytes of a lower-cased canonical name the regular-expression
// rules look at; substring rules see the whole name. Every "re:" rule matches a short token, and
// a kernel's family is named near the start, so this bounds the cost of hostile long names
// without changing any real kernel's category.
const RegexpWindow = 512

// Classifier maps canonical kernel names to categories with ordered rules.
type Classifier struct {
	rules []classRule
}

// ParseClassifier reads rules in the classifier.rules format: "<category> <pattern>" per line,
// '#' comments, "re:" prefix for regular expressions. Line numbers appear in errors.
func ParseClassifier(text string) (*Classifier, error) {
	c := &Classifier{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cat, pat, ok := strings.Cut(line, " ")
		pat = strings.TrimSpace(pat)
		if !ok || pat == "" {
			return nil, fmt.Errorf("classifier rule line %d %q: want \"<category> <pattern>\"", i+1, line)
		}
		r := classRule{cat: cat}
		if rx, isRe := strings.CutPrefix(pat, "re:"); isRe {
			re, err := regexp.Compile(rx)
			if err != nil {
				return nil, fmt.Errorf("classifier rule line %d: %w", i+1, err)
			}
			r.re = re
			r.need = requiredLiterals(rx)
		} else {
			r.sub = strings.ToLower(pat)
		}
		c.rules = append(c.rules, r)
	}
	if len(c.rules) == 0 {
		return nil, fmt.Errorf("classifier has no rules")
	}
	return c, nil
}

// defaultClassifier is built on first use, not at start: every runner
// process (each cell, server and simulator) links this package, and most of
// them never classify a kernel.
var defaultClassifier = sync.OnceValue(func() *Classifier {
	c, err := ParseClassifier(classifierRules)
	if err != nil {
		panic("embedded classifier.rules is invalid: " + err.Error())
	}
	return c
})

// DefaultClassifier returns the classifier built from the embedded classifier.rules.
func DefaultClassifier() *Classifier { return defaultClassifier() }

// Classify returns the category of a kernel name. The name is canonicalised first, so the raw
// trace name may be passed.
func (c *Classifier) Classify(name string) string {
	return c.classifyLower(strings.ToLower(Canonical(name)))
}

// classifyLower is Classify for a lower-cased canonical name (the analyzer keeps that string
// for the fusion catalog too).
func (c *Classifier) classifyLower(s string) string {
	w := s
	if len(w) > RegexpWindow {
		w = w[:RegexpWindow]
	}
	var bg *bigrams
	if len(s) >= bigramMin {
		bg = bigramPool.Get().(*bigrams)
		bg.fill(s)
		defer bigramPool.Put(bg)
		defer bg.reset()
	}
	for _, r := range c.rules {
		if r.re != nil {
			if containsAny(bg, w, r.need) && r.re.MatchString(w) {
				return r.cat
			}
		} else if bg.may(r.sub) && strings.Contains(s, r.sub) {
			return r.cat
		}
	}
	return CatOther
}

// bigramMin is the name length from which Classify first records the name's byte pairs, so
// that most rules are ruled out without scanning the name (about 70 substring scans of a 1 KB
// name cost more than the rest of its triage).
const bigramMin = 128

// bigrams is the set of adjacent byte pairs of one name; set lists them for a cheap reset.
type bigrams struct {
	bits [1 << 16 / 64]uint64
	set  []uint16
}

var bigramPool = sync.Pool{New: func() any { return new(bigrams) }}

func (b *bigrams) fill(s string) {
	for i := 0; i+1 < len(s); i++ {
		k := uint16(s[i])<<8 | uint16(s[i+1])
		if b.bits[k>>6]&(1<<(k&63)) == 0 {
			b.bits[k>>6] |= 1 << (k & 63)
			b.set = append(b.set, k)
		}
	}
}

func (b *bigrams) reset() {
	for _, k := range b.set {
		b.bits[k>>6] = 0
	}
	b.set = b.set[:0]
}

// may reports whether lit can occur in the name: false when one of its byte pairs is absent.
// A nil set (a short name) says yes to everything.
func (b *bigrams) may(lit string) bool {
	if b == nil {
		return true
	}
	for i := 0; i+1 < len(lit); i++ {
		k := uint16(lit[i])<<8 | uint16(lit[i+1])
		if b.bits[k>>6]&(1<<(k&63)) == 0 {
			return false
		}
	}
	return true
}

func containsAny(bg *bigrams, s string, lits []string) bool {
	if lits == nil {
		return true
	}
	for _, l := range lits {
		if bg.may(l) && strings.Contains(s, l) {
			return true
		}
	}
	return false
}

// requiredLiterals returns literals one of which every match of the expression contains, or
// nil when it cannot tell (then the regexp always runs).
func requiredLiterals(expr string) []string {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	return required(re.Simplify())
}

func required(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []string
		for _, sub := range re.Sub {
			if r := required(sub); r != nil && (best == nil || shortest(r) > shortest(best)) {
				best = r
			}
		}
		return best
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			r := required(sub)
			if r == nil {
				return nil
			}
			out = append(out, r...)
		}
		return out
	}
	return nil
}

func shortest(ls []string) int {
	n := -1
	for _, l := range ls {
		if n < 0 || len(l) < n {
			n = len(l)
		}
	}
	return n
}

// Classify categorises a kernel name with the embedded rules.
func Classify(name string) string { return defaultClassifier().Classify(name) }

// isCompute reports categories that do the math of a layer; overlap ranks them last because
// hiding them is rarely possible (the anchor's 0.35 weight).
func isCompute(cat string) bool {
	switch cat {
	case CatGEMM, CatAttention, CatConv, CatMoE, CatSSM:
		return true
	}
	return false
}

// isLight reports pointwise-like categories whose hidden time is cheap to leave alone.
func isLight(cat string) bool {
	switch cat {
	case CatElementwise, CatMemory, CatActivation, CatRoPE, CatNorm, CatQuantization, CatSoftmax, CatReduce, CatSampling:
		return true
	}
	return false
}
