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

// MaxKeyDots is how many dots a dotted key (or a table header) may hold. Plan keys have at most
// three parts (`backend.env.NAME`); BurntSushi's time grows with the square of a key's length
// (a key of 4,000 parts takes seconds, 20,000 minutes).
const MaxKeyDots = 16

// nestingProblem scans src once, before it is decoded, and reports the first place where
// brackets ([ or {) outside strings and comments nest deeper than MaxNesting, or a run of dots
// between delimiters (a dotted key; a value holds at most one dot) exceeds MaxKeyDots. It
// follows TOML's lexical rules only as far as needed to skip strings and comments; anything it
// misreads in a malformed file is left to the decoder's syntax error.
func nestingProblem(src string) (Problem, bool) {
	depth, dots, line, lineStart := 0, 0, 1, 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '.':
			if dots++; dots > MaxKeyDots {
				return Problem{Line: line, Col: i - lineStart + 1, Msg: fmt.Sprintf(
					"a dotted key with more than %d dots; plan keys have at most 3 parts (such as backend.env.NAME)",
					MaxKeyDots)}, true
			}
		case '=', ',':
			dots = 0
		case '\n':
			line, lineStart, dots = line+1, i+1, 0
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
			dots = 0
			if depth > MaxNesting {
				return Problem{Line: line, Col: i - lineStart + 1, Msg: fmt.Sprintf(
					"arrays or inline tables nested more than %d deep; no plan key takes more than 2 levels, so check the brackets here",
					MaxNesting)}, true
			}
		case ']', '}':
			dots = 0
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
