package secrets

// prefilter finds the keywords of the rules in text, in any ASCII case. It indexes every
// keyword by its first two bytes (all four case variants), so a scan costs one table lookup
// per byte and a comparison only where a keyword can begin; BobuSumisu/aho-corasick (what
// gitleaks uses) walked the same logs at less than half the speed (docs/performance.md).
type prefilter struct {
	first  [1 << 16]uint16 // bigram -> 1 + index into groups; 0: no keyword begins so
	groups [][]int         // per bigram: indexes into words
	words  []string        // lower case, at least two bytes
}

func newPrefilter(words []string) *prefilter {
	p := &prefilter{words: words}
	for wi, w := range words {
		a, b := w[0], w[1]
		for _, x := range caseVariants(a) {
			for _, y := range caseVariants(b) {
				k := uint16(x)<<8 | uint16(y)
				if p.first[k] == 0 {
					p.groups = append(p.groups, nil)
					p.first[k] = uint16(len(p.groups))
				}
				g := p.first[k] - 1
				p.groups[g] = append(p.groups[g], wi)
			}
		}
	}
	return p
}

func caseVariants(c byte) []byte {
	switch {
	case 'a' <= c && c <= 'z':
		return []byte{c, c - 'a' + 'A'}
	case 'A' <= c && c <= 'Z':
		return []byte{c, c - 'A' + 'a'}
	}
	return []byte{c}
}

// walk calls fn with the start of every keyword found in text and the keyword's index, in
// order of position.
func (p *prefilter) walk(text []byte, fn func(pos, word int)) {
	if len(text) < 2 {
		return
	}
	prev := uint16(text[0])
	for i, c := range text[1:] {
		g := p.first[prev<<8|uint16(c)]
		prev = uint16(c)
		if g == 0 {
			continue
		}
		for _, wi := range p.groups[g-1] {
			if hasPrefixFold(text[i:], p.words[wi]) {
				fn(i, wi)
			}
		}
	}
}

// hasPrefixFold reports whether b begins with the lower-case word w in any ASCII case.
func hasPrefixFold(b []byte, w string) bool {
	if len(b) < len(w) {
		return false
	}
	for j := 0; j < len(w); j++ {
		c := b[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[j] {
			return false
		}
	}
	return true
}
