package bundle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/sglprof/runner/runner"
)

// Redacted is what every secret is replaced with, the same marker the run directory uses.
const Redacted = runner.Redacted

// Kinds of redaction, as the bundle's README and bundle.json list them.
const (
	KindEnv        = "env"            // the value of a secret-named variable (from the plan or the environment)
	KindAssignment = "assignment"     // NAME=value in text where NAME looks secret
	KindFlag       = "flag"           // --hf-token VALUE, --api-key=VALUE
	KindHFToken    = "hf-token"       // hf_ followed by 20+ letters or digits
	KindBearer     = "bearer-token"   // Authorization: Bearer ..., Bearer <token>
	KindURLCreds   = "url-credential" // scheme://user:pass@host
	KindAWSKey     = "aws-key"        // AKIA.../ASIA... access key ids and aws_secret_access_key values
	KindPlan       = "plan-pattern"   // a [bundle] redact pattern of the plan
)

// minLiteral is the shortest secret value searched for literally: shorter values ("1", "true")
// would redact unrelated text everywhere.
const minLiteral = 6

// rule is one regular expression; group is the submatch that holds the secret (0 = all).
// A rule only runs on a line its prefilter accepts: most log and trace lines hold nothing
// secret-looking, and skipping the regular expressions there is what makes redaction fast
// (BenchmarkRedactorStream). A prefilter must accept every line the expression could match.
type rule struct {
	kind  string
	name  string // what the README lists: the kind, or "plan pattern N"
	re    *regexp.Regexp
	group int
	pre   func(line, lower []byte) bool // nil: always run
}

// markers are the lower-case ends of secret-looking names.
var markers = []string{"token", "key", "secret", "password", "passwd", "credential", "credentials"}

// has is a prefilter: every needle in all must be in the lower-cased line.
func has(all ...string) func(line, lower []byte) bool {
	return func(_, lower []byte) bool {
		for _, n := range all {
			if !bytes.Contains(lower, []byte(n)) {
				return false
			}
		}
		return true
	}
}

// markerThen is a prefilter: a marker ends a name and is followed by one of the suffixes
// (lower case), e.g. "token='" for hf_token='...'.
func markerThen(prefix string, suffixes ...string) func(line, lower []byte) bool {
	var needles [][]byte
	for _, m := range markers {
		for _, suf := range suffixes {
			needles = append(needles, []byte(m+suf))
		}
	}
	return func(_, lower []byte) bool {
		if prefix != "" && !bytes.Contains(lower, []byte(prefix)) {
			return false
		}
		for _, n := range needles {
			if bytes.Contains(lower, n) {
				return true
			}
		}
		return false
	}
}

// upperMarkers are the markers of environment-style names, with what may follow one that
// ends a word of the name: '_' (more name), a separator, a quote or a space.
var upperMarkers = [][]byte{[]byte("TOKEN"), []byte("KEY"), []byte("SECRET"), []byte("PASSWORD"), []byte("PASSWD"), []byte("CREDENTIAL"), []byte("CREDENTIALS")}

func upperAssignment(line, _ []byte) bool {
	for _, m := range upperMarkers {
		for off := 0; ; {
			i := bytes.Index(line[off:], m)
			if i < 0 {
				break
			}
			j := off + i + len(m)
			if j == len(line) {
				break
			}
			switch line[j] {
			case '_', '=', ':', '"', '\'', ' ', '\t', '\r', '\f':
				return true
			}
			off = j
		}
	}
	return false
}

var builtinRules = []rule{
	{kind: KindHFToken, re: regexp.MustCompile(`hf_[A-Za-z0-9]{20,}`), pre: has("hf_")},
	{kind: KindBearer, re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/-]{8,}=*)`), group: 1, pre: has("bearer")},
	{kind: KindBearer, re: regexp.MustCompile(`(?i)authorization["']?\s*[:=]\s*["']?(?:basic\s+|token\s+)?([A-Za-z0-9._~+/-]{8,}=*)`), group: 1, pre: has("authorization")},
	{kind: KindURLCreds, re: regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://([^/\s:@"'\\]+:[^/\s@"'\\]+)@`), group: 1, pre: has("://", "@")},
	{kind: KindAWSKey, re: regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`), pre: func(line, _ []byte) bool {
		return bytes.Contains(line, []byte("AKIA")) || bytes.Contains(line, []byte("ASIA"))
	}},
	{kind: KindAWSKey, re: regexp.MustCompile(`(?i)aws_secret_access_key["']?\s*[=:]\s*["']?([A-Za-z0-9/+=]{40})`), group: 1, pre: has("aws_secret_access_key")},
	// Environment-style names are upper case, so "key" in JSON ("key": "qwen-image/...") is
	// not one; the marker must end a word of the name, so MAX_TOKENS and TOKENIZER_PATH
	// (counts and paths a bug report needs) are kept.
	{kind: KindAssignment, re: regexp.MustCompile(`\b[A-Z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_[A-Z0-9_]*)?\b["']?\s*[=:]\s*["']?([^\s"'\\,;}\]]+)`), group: 1, pre: upperAssignment},
	// Python reprs of server arguments: hf_token='...', api_key="...".
	{kind: KindAssignment, re: regexp.MustCompile(`(?i)\b[a-z0-9_]*(?:token|api_key|apikey|secret|password|passwd|credentials?)=['"]([^'"\s\\]+)['"]`), group: 1, pre: markerThen("", "='", `="`)},
	// Flags whose name ends in the marker: --hf-token X, --api-key=X (not --tokenizer-path).
	{kind: KindFlag, re: regexp.MustCompile(`(?i)--[a-z0-9-]*(?:token|key|secret|password|passwd|credentials?)(?:=|\s+)['"]?([^\s'"\\,]+)`), group: 1, pre: markerThen("--", "=", " ", "\t", "\r", "\f")},
}

// Redaction is one line of the README's redaction list: what kind of secret, under which name
// (a variable name or the pattern kind, never the value), and how often.
type Redaction struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// Redactor replaces secrets in text. It knows the literal values of secret-named variables
// (so a token echoed into a log under any shape is caught) and the built-in and plan patterns.
// It counts what it replaced; it is not safe for concurrent use.
type Redactor struct {
	literals []literal
	rules    []rule
	counts   map[[2]string]int
	lower    []byte // scratch: the current line in lower case
}

type literal struct {
	name  string
	value []byte
}

// NewRedactor builds a redactor from the secret-named variables of env (KEY=VALUE, the plan's
// and the environment's), and the extra regular expressions of the plan's [bundle] redact. A
// pattern that does not compile is an error naming it.
func NewRedactor(env []string, extra []string) (*Redactor, error) {
	r := &Redactor{counts: map[[2]string]int{}}
	seen := map[string]bool{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !runner.IsSecretName(k) || len(v) < minLiteral || v == Redacted || seen[v] {
			continue
		}
		seen[v] = true
		r.literals = append(r.literals, literal{name: k, value: []byte(v)})
		// Redaction works line by line: a multi-line value (a PEM key) is also searched for
		// line by line.
		if strings.ContainsRune(v, '\n') {
			for _, part := range strings.Split(v, "\n") {
				if part = strings.TrimRight(part, "\r"); len(part) >= minLiteral && !seen[part] {
					seen[part] = true
					r.literals = append(r.literals, literal{name: k, value: []byte(part)})
				}
			}
		}
		// The same value as it appears inside a JSON string.
		if js, err := json.Marshal(v); err == nil && string(js[1:len(js)-1]) != v {
			r.literals = append(r.literals, literal{name: k, value: js[1 : len(js)-1]})
		}
	}
	// Longest first, so a value that contains another is replaced whole.
	sort.SliceStable(r.literals, func(i, j int) bool { return len(r.literals[i].value) > len(r.literals[j].value) })
	r.rules = append(r.rules, builtinRules...)
	for i, p := range extra {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("[bundle] redact pattern %d does not compile: %w; fix it in the plan (Go regular expression syntax)", i+1, err)
		}
		r.rules = append(r.rules, rule{kind: KindPlan, name: fmt.Sprintf("plan pattern %d", i+1), re: re})
	}
	return r, nil
}

// Bytes returns b with every secret replaced by Redacted. The patterns work line by line (a
// secret never spans lines); b itself is not modified.
func (r *Redactor) Bytes(b []byte) []byte {
	// Whole multi-line values first, while the buffer still holds them whole.
	for _, l := range r.literals {
		if bytes.IndexByte(l.value, '\n') >= 0 {
			if n := bytes.Count(b, l.value); n > 0 {
				b = bytes.ReplaceAll(b, l.value, []byte(Redacted))
				r.counts[[2]string{KindEnv, l.name}] += n
			}
		}
	}
	var out []byte
	for len(b) > 0 {
		n := bytes.IndexByte(b, '\n') + 1
		if n == 0 {
			n = len(b)
		}
		out = append(out, r.line(b[:n])...)
		b = b[n:]
	}
	return out
}

// line redacts one line (with its newline, if any).
func (r *Redactor) line(b []byte) []byte {
	for _, l := range r.literals {
		if n := bytes.Count(b, l.value); n > 0 {
			b = bytes.ReplaceAll(b, l.value, []byte(Redacted))
			r.counts[[2]string{KindEnv, l.name}] += n
		}
	}
	r.lower = append(r.lower[:0], b...)
	for i, c := range r.lower {
		if 'A' <= c && c <= 'Z' {
			r.lower[i] = c + 'a' - 'A'
		}
	}
	for i := range r.rules {
		ru := &r.rules[i]
		if ru.pre != nil && !ru.pre(b, r.lower) {
			continue
		}
		name := ru.name
		if name == "" {
			name = ru.kind
		}
		b = replaceGroup(b, ru.re, ru.group, func() { r.counts[[2]string{ru.kind, name}]++ })
	}
	return b
}

// String is Bytes for a string.
func (r *Redactor) String(s string) string { return string(r.Bytes([]byte(s))) }

// replaceGroup replaces submatch group of every match of re with Redacted, calling hit for
// each replacement that changed something (an already redacted value is not counted again).
func replaceGroup(b []byte, re *regexp.Regexp, group int, hit func()) []byte {
	idx := re.FindAllSubmatchIndex(b, -1)
	if len(idx) == 0 {
		return b
	}
	var out bytes.Buffer
	last := 0
	for _, m := range idx {
		s, e := m[2*group], m[2*group+1]
		if s < 0 || s < last {
			continue
		}
		if string(b[s:e]) == Redacted {
			continue
		}
		out.Write(b[last:s])
		out.WriteString(Redacted)
		last = e
		hit()
	}
	out.Write(b[last:])
	return out.Bytes()
}

// maxLine bounds one line of a streamed file; a longer line is redacted in pieces of this size
// (a secret that straddles two pieces would survive, so the bound is generous).
const maxLine = 16 << 20

// Stream copies in to out line by line, redacting each line, for files too big to hold at
// once (full traces, long logs).
func (r *Redactor) Stream(out io.Writer, in io.Reader) error {
	br := bufio.NewReaderSize(in, 1<<20)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull && len(line) < maxLine {
			continue
		}
		if len(line) > 0 {
			if _, werr := out.Write(r.Bytes(line)); werr != nil {
				return werr
			}
			line = line[:0]
		}
		if err == io.EOF {
			return nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return err
		}
	}
}

// Report lists what was redacted so far, sorted by kind and name.
func (r *Redactor) Report() []Redaction {
	out := make([]Redaction, 0, len(r.counts))
	for k, n := range r.counts {
		out = append(out, Redaction{Kind: k[0], Name: k[1], Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// clone returns a redactor with the same secrets and fresh counts.
func (r *Redactor) clone() *Redactor {
	return &Redactor{literals: r.literals, rules: r.rules, counts: map[[2]string]int{}}
}

// Scan counts the secrets in a file without changing it or this redactor's counts; binary
// files that cannot be redacted are left out of a bundle when it finds any.
func (r *Redactor) Scan(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("scan %s: %w", path, err)
	}
	defer f.Close()
	c := r.clone()
	if err := c.Stream(io.Discard, f); err != nil {
		return 0, fmt.Errorf("scan %s: %w", path, err)
	}
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n, nil
}
