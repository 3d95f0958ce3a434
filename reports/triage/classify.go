package triage

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
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
}

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

var defaultClassifier = func() *Classifier {
	c, err := ParseClassifier(classifierRules)
	if err != nil {
		panic("embedded classifier.rules is invalid: " + err.Error())
	}
	return c
}()

// DefaultClassifier returns the classifier built from the embedded classifier.rules.
func DefaultClassifier() *Classifier { return defaultClassifier }

// Classify returns the category of a kernel name. The name is canonicalised first, so the raw
// trace name may be passed.
func (c *Classifier) Classify(name string) string {
	s := strings.ToLower(Canonical(name))
	for _, r := range c.rules {
		if r.re != nil {
			if r.re.MatchString(s) {
				return r.cat
			}
		} else if strings.Contains(s, r.sub) {
			return r.cat
		}
	}
	return CatOther
}

// Classify categorises a kernel name with the embedded rules.
func Classify(name string) string { return defaultClassifier.Classify(name) }

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
