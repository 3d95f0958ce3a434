package plans

import (
	"fmt"
	"strings"
)

// MaxNesting is how deeply arrays and inline tables may nest in a plan file. No plan key needs
// more than two levels (`backend = { env = { … } }`, `[[…]]`); the limit leaves room for
// mistakes worth a type error, while refusing input built to make the decoder crawl (BurntSushi
// takes minutes and hundreds of MB on an array nested 100,000 deep, and a type error would
// describe every level).
const MaxNesting = 16

// nestingProblem scans src once, before it is decoded, and reports the first place where
// brackets ([ or {) outside strings and comments nest deeper than MaxNesting. It follows TOML's
// lexical rules only as far as needed to skip strings and comments; anything it misreads in a
// malformed file is left to the decoder's syntax error.
func nestingProblem(src string) (Problem, bool) {
	depth, line, lineStart := 0, 1, 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '\n':
			line, lineStart = line+1, i+1
		case '#':
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			end := stringEnd(src, i)
			line += strings.Count(src[i:end], "\n")
			if nl := strings.LastIndexByte(src[i:end], '\n'); nl >= 0 {
				lineStart = i + nl + 1
			}
			i = end - 1
		case '[', '{':
			depth++
			if depth > MaxNesting {
				return Problem{Line: line, Col: i - lineStart + 1, Msg: fmt.Sprintf(
					"arrays or inline tables nested more than %d deep; no plan key takes more than 2 levels, so check the brackets here",
					MaxNesting)}, true
			}
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return Problem{}, false
}

// stringEnd returns the offset just past the TOML string starting at src[i] (a quote): basic
// "…" and literal '…' strings end at their line's end at the latest, multi-line ones at their
// closing triple quote (or the end of the file).
func stringEnd(src string, i int) int {
	q := src[i]
	if strings.HasPrefix(src[i:], strings.Repeat(string(q), 3)) {
		closing := strings.Repeat(string(q), 3)
		for j := i + 3; j < len(src); j++ {
			switch {
			case q == '"' && src[j] == '\\':
				j++
			case strings.HasPrefix(src[j:], closing):
				// Up to two more quotes may belong to the string ("""a"""" ends with a quote).
				k := j + 3
				for n := 0; n < 2 && k < len(src) && src[k] == q; n++ {
					k++
				}
				return k
			}
		}
		return len(src)
	}
	for j := i + 1; j < len(src); j++ {
		switch {
		case src[j] == '\n':
			return j
		case q == '"' && src[j] == '\\':
			j++
		case src[j] == q:
			return j + 1
		}
	}
	return len(src)
}
