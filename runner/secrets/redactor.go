package secrets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// minLiteral is the shortest secret value searched for literally: shorter values ("1", "true")
// would redact unrelated text everywhere.
const minLiteral = 6

// Redaction is one line of a redaction list: what kind of secret, under which name (a
// variable name or the rule, never the value), and how often.
type Redaction struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// ruleSet is the compiled, immutable part of a redactor: its rules and the keyword prefilter
// that picks the rules worth running on a line.
type ruleSet struct {
	rules  []rule
	block  []int // rules that run on the whole text
	pf     *prefilter
	byWord [][]int // keyword index -> rules
}

// base is the catalogue plus the name-based rules, made once per process.
var base = sync.OnceValue(func() []rule {
	return append(append([]rule{}, builtinRules...), catalogueRules()...)
})

func compile(rules []rule) *ruleSet {
	s := &ruleSet{rules: rules}
	words := map[string]int{}
	var list []string
	for i, r := range rules {
		// A rule without keywords (a plan pattern) would run on every line: it runs once on
		// the whole text instead, which the regexp engine does far faster.
		if r.block || len(r.keywords) == 0 || shortest(r.keywords) < 2 {
			s.block = append(s.block, i)
			continue
		}
		for _, k := range r.keywords {
			w, ok := words[k]
			if !ok {
				w = len(list)
				words[k] = w
				list = append(list, k)
				s.byWord = append(s.byWord, nil)
			}
			s.byWord[w] = append(s.byWord[w], i)
		}
	}
	s.pf = newPrefilter(list)
	return s
}

// shortest is the length of the shortest word.
func shortest(words []string) int {
	n := -1
	for _, w := range words {
		if n < 0 || len(w) < n {
			n = len(w)
		}
	}
	return n
}

// Redactor replaces secrets in text. It knows the literal values of secret-named variables
// (so a token echoed into a log under any shape is caught), the catalogue, the name-based
// rules and the plan's patterns. It counts what it replaced; it is not safe for concurrent
// use (Clone gives each goroutine its own).
type Redactor struct {
	literals []literal
	set      *ruleSet
	counts   map[[2]string]int
	stamp    []int    // scratch: per rule, the last line (+1) it was chosen for
	pick     []int    // scratch: the rules chosen for the current line
	hits     []hit    // scratch: the anchored rules' keywords on the current line
	spans    []span   // scratch: the secrets the anchored rules found on the current line
	found    [][2]int // scratch: the spans of one command rule hit
	scratch  []byte   // scratch: Stream's output
	// onFound, when set, is told every secret a rule replaces (commandLiterals collects them).
	onFound func(kind, name string, v []byte)
}

type literal struct {
	name  string
	kind  string // what it is counted under; "": KindEnv
	value []byte
}

// New builds a redactor from the secret-named variables of env (KEY=VALUE, the plan's and
// the environment's), and the extra regular expressions of a plan's [bundle] redact. A pattern
// that does not compile is an error naming it.
func New(env []string, extra []string) (*Redactor, error) {
	rules := append([]rule{}, base()...)
	for i, p := range extra {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("[bundle] redact pattern %d does not compile: %w; fix it in the plan (Go regular expression syntax)", i+1, err)
		}
		rules = append(rules, rule{kind: KindPlan, name: fmt.Sprintf("plan pattern %d", i+1), re: compiled(re)})
	}
	r := &Redactor{counts: map[[2]string]int{}, set: compile(rules), literals: literals(env)}
	return r, nil
}

// ForRun builds the redactor of one run's files, the one way both writers of those files get
// theirs: the runner for cells.json, command.json, manifest.json and server.json, the bundle
// for every file it packs. It searches literally for the values of the secret-named variables
// of the plan's [backend.env] and of env (the runner's environment when it runs, the bundling
// shell's when it bundles), so a token a probe or a backend prints in free text is caught
// whatever its shape, and it applies the plan's [bundle] redact patterns.
//
// commands are the plan's command lines (backend.command, extra_args, setup lines, each an
// argv): the secrets the rules find in them (sshpass -p X, --api-key X, PGPASSWORD=X) are
// searched for literally too. A file that writes an argv one element to a line (the run
// directory's JSON, a plan's multi-line array) puts a flag and its value on different lines,
// where no rule sees them together; the value itself is found wherever it is.
func ForRun(planEnv map[string]string, env []string, patterns []string, commands ...[]string) (*Redactor, error) {
	all := make([]string, 0, len(planEnv)+len(env))
	for k, v := range planEnv {
		all = append(all, k+"="+v)
	}
	r, err := New(append(all, env...), patterns)
	if err != nil {
		return nil, err
	}
	r.literals = append(r.literals, commandLiterals(r.Clone(), commands)...)
	sortLiterals(r.literals)
	return r, nil
}

// commandLiterals are the secrets r's rules find in commands (each written as a one-line
// array), as literals counted under the kind and name of the rule that found them (what the
// rule would have counted had it seen the value beside its flag), as written and as a JSON
// string holds them. A number is left to the rules: the value of a flag that is secret only by
// its name (--token-limit 100000) would otherwise be replaced inside every number of a perf
// dump.
func commandLiterals(r *Redactor, commands [][]string) []literal {
	seen := map[string]bool{}
	for _, l := range r.literals {
		seen[string(l.value)] = true
	}
	var out []literal
	add := func(kind, name string, v []byte) {
		if len(v) < minLiteral || isNumber(v) || seen[string(v)] {
			return
		}
		seen[string(v)] = true
		out = append(out, literal{name: name, kind: kind, value: bytes.Clone(v)})
	}
	r.onFound = func(kind, name string, v []byte) {
		add(kind, name, v) // as the JSON line holds it
		var raw string
		if json.Unmarshal(append(append([]byte{'"'}, v...), '"'), &raw) == nil {
			add(kind, name, []byte(raw))
		}
	}
	for _, argv := range commands {
		r.Bytes(argvLine(argv))
	}
	return out
}

// argvLine is argv as a one-line JSON array (what a TOML plan's one-line array looks like to
// the rules: "--api-key", "X").
func argvLine(argv []string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(argv) != nil {
		return nil
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Argv returns argv with the secrets of its arguments replaced, as the catalogue and the
// name-based rules find them when the arguments are written on one line: a flag's value in
// the next element (--api-key X, sshpass -p X), NAME=value elements, mysql -pX. argv itself
// is not modified. A file that records an argv one element to a line (cells.json,
// command.json, server.json) is redacted line by line afterwards, where a flag and its value
// are never seen together.
func Argv(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	r := Default()
	line := argvLine(argv)
	red := r.Bytes(line)
	if bytes.Equal(red, line) {
		return argv
	}
	var out []string
	if json.Unmarshal(red, &out) == nil && len(out) == len(argv) {
		return out
	}
	// A replacement that crossed an element's end: each element on its own.
	out = make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.String(a)
	}
	return out
}

// defaultSet is Default's rule set, compiled once per process.
var defaultSet = sync.OnceValue(func() *ruleSet { return compile(base()) })

// Default returns a redactor with the catalogue and the name-based rules only, for text that
// belongs to no run (no plan patterns or variable values are known); a run's files go through
// ForRun's.
func Default() *Redactor {
	return &Redactor{counts: map[[2]string]int{}, set: defaultSet()}
}

// literals are the values of the secret-named variables of env, longest first so a value
// that contains another is replaced whole.
func literals(env []string) []literal {
	var out []literal
	seen := map[string]bool{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !IsSecretName(k) || len(v) < minLiteral || v == Redacted || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, literal{name: k, value: []byte(v)})
		// A multi-line value (a PEM key) is also searched for line by line.
		if strings.ContainsRune(v, '\n') {
			for _, part := range strings.Split(v, "\n") {
				if part = strings.TrimRight(part, "\r"); len(part) >= minLiteral && !seen[part] {
					seen[part] = true
					out = append(out, literal{name: k, value: []byte(part)})
				}
			}
		}
		// The same value as it appears inside a JSON string.
		if js, err := json.Marshal(v); err == nil && string(js[1:len(js)-1]) != v {
			out = append(out, literal{name: k, value: js[1 : len(js)-1]})
		}
	}
	sortLiterals(out)
	return out
}

// sortLiterals puts the longest values first, so a value that contains another is replaced
// whole.
func sortLiterals(ls []literal) {
	sort.SliceStable(ls, func(i, j int) bool { return len(ls[i].value) > len(ls[j].value) })
}

// Clone returns a redactor with the same secrets and rules and fresh counts.
func (r *Redactor) Clone() *Redactor {
	return &Redactor{literals: r.literals, set: r.set, counts: map[[2]string]int{}}
}

// String is Bytes for a string.
func (r *Redactor) String(s string) string { return string(r.Bytes([]byte(s))) }

// Bytes returns b with every secret replaced by Redacted; b itself is not modified.
func (r *Redactor) Bytes(b []byte) []byte {
	return r.appendRedacted(nil, b)
}

// appendRedacted appends b, redacted, to out.
func (r *Redactor) appendRedacted(out, b []byte) []byte {
	b = r.literalPass(b)
	b = r.blockPass(b)
	if len(r.stamp) < len(r.set.rules) {
		r.stamp = make([]int, len(r.set.rules))
	}
	clear(r.stamp)
	last := 0 // b[:last] is in out already
	ls, le, n := -1, -1, 0
	flush := func() {
		if len(r.pick) == 0 && len(r.hits) == 0 {
			return
		}
		line := r.lineRules(b[ls:le], ls)
		out = append(out, b[last:ls]...)
		out = append(out, line...)
		last = le
	}
	r.pick, r.hits = r.pick[:0], r.hits[:0]
	r.set.pf.walk(b, func(pos, word int) {
		if pos >= le {
			flush()
			ls = max(bytes.LastIndexByte(b[:pos], '\n')+1, last)
			le = lineEnd(b, pos)
			n++
			r.pick, r.hits = r.pick[:0], r.hits[:0]
		}
		for _, ri := range r.set.byWord[word] {
			if r.set.rules[ri].at != nil {
				r.hits = append(r.hits, hit{rule: ri, pos: pos})
			} else if r.stamp[ri] != n {
				r.stamp[ri] = n
				r.pick = append(r.pick, ri)
			}
		}
	})
	flush()
	return append(out, b[last:]...)
}

// hit is a keyword of an anchored rule found at pos (an offset in the whole text).
type hit struct{ rule, pos int }

// lineEnd is the end of the line holding b[pos] (after its newline).
func lineEnd(b []byte, pos int) int {
	if i := bytes.IndexByte(b[pos:], '\n'); i >= 0 {
		return pos + i + 1
	}
	return len(b)
}

// lineRules redacts one line (which begins at offset base of the text): first the anchored
// rules at their keywords, then the other chosen rules in catalogue order.
func (r *Redactor) lineRules(line []byte, base int) []byte {
	if len(r.hits) > 0 {
		line = r.applyAt(line, base)
	}
	sort.Ints(r.pick)
	for _, ri := range r.pick {
		ru := &r.set.rules[ri]
		if ru.pre != nil && !ru.pre(line) {
			continue
		}
		line = r.apply(line, ru)
	}
	return line
}

// applyAt runs each anchored rule where its keyword was found: a regular expression that
// starts with its keyword need not be tried at every byte of the line. Every rule is tried on
// the line as it came, and the secrets found are replaced in the order they appear, a secret
// that overlaps one before it being left to that one.
func (r *Redactor) applyAt(line []byte, base int) []byte {
	r.spans = r.spans[:0]
	for _, h := range r.hits {
		ru := &r.set.rules[h.rule]
		p := h.pos - base
		if (ru.pre != nil && !ru.pre(line)) || (ru.boundary && p > 0 && isAlnum(line[p-1])) {
			continue
		}
		if ru.spans != nil {
			r.found = ru.spans(line, p, r.found[:0])
			for _, f := range r.found {
				r.spans = append(r.spans, span{s: f[0], e: f[1], rule: h.rule, kind: ru.kind})
			}
			continue
		}
		var m []int
		if ru.scan != nil {
			m = ru.scan(line[p:])
		} else {
			m = ru.at.get().FindSubmatchIndex(line[p:])
		}
		if m == nil {
			continue
		}
		s, e := secretSpan(m, ru)
		kind := ru.kind
		if ru.check != nil {
			var url bool
			if s, e, url = ru.check(line, p, m); url {
				kind = KindURLCreds
			}
		}
		if s >= 0 && e > s {
			r.spans = append(r.spans, span{s: s + p, e: e + p, rule: h.rule, kind: kind})
		}
	}
	// The hits come in order of their keyword, and most secrets follow their keyword before
	// the next one: the spans are nearly sorted already.
	slices.SortStableFunc(r.spans, func(a, b span) int { return a.s - b.s })
	var out []byte
	last := 0
	for _, sp := range r.spans {
		ru := &r.set.rules[sp.rule]
		if sp.s < last || string(line[sp.s:sp.e]) == Redacted || (ru.entropy > 0 && entropy(line[sp.s:sp.e]) < ru.entropy) {
			continue
		}
		name := r.count(sp.kind, ru)
		if r.onFound != nil {
			r.onFound(sp.kind, name, line[sp.s:sp.e])
		}
		out = append(out, line[last:sp.s]...)
		out = append(out, Redacted...)
		last = sp.e
	}
	if out == nil {
		return line
	}
	return append(out, line[last:]...)
}

// span is a secret an anchored rule found in a line, and the kind it is counted under.
type span struct {
	s, e, rule int
	kind       string
}

// isAlnum: an ASCII letter or digit.
func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// count counts one replacement by ru, under kind (ru's, or what its check said it was), and
// returns the name it was counted under.
func (r *Redactor) count(kind string, ru *rule) string {
	name := ru.name
	if name == "" || kind != ru.kind {
		name = kind
	}
	r.counts[[2]string{kind, name}]++
	return name
}

// literalPass replaces the literal values of secret-named variables anywhere in b.
func (r *Redactor) literalPass(b []byte) []byte {
	for _, l := range r.literals {
		if n := bytes.Count(b, l.value); n > 0 {
			b = bytes.ReplaceAll(b, l.value, []byte(Redacted))
			kind := l.kind
			if kind == "" {
				kind = KindEnv
			}
			r.counts[[2]string{kind, l.name}] += n
		}
	}
	return b
}

// blockPass runs the rules that may cross lines (PEM private key blocks) on the whole text.
func (r *Redactor) blockPass(b []byte) []byte {
	for _, ri := range r.set.block {
		ru := &r.set.rules[ri]
		hit := len(ru.keywords) == 0
		for _, k := range ru.keywords {
			if containsFold(b, k) {
				hit = true
				break
			}
		}
		if hit {
			b = r.apply(b, ru)
		}
	}
	return b
}

// containsFold reports whether b holds the lower-case word k in any case.
func containsFold(b []byte, k string) bool {
	// Jump between the places where k's leading non-letters are (the dashes of
	// "-----begin"), or where its first letter is, in either case.
	n := 0
	for n < len(k) && (k[n] < 'a' || k[n] > 'z') {
		n++
	}
	for off := 0; off+len(k) <= len(b); {
		var i int
		if n > 0 {
			i = bytes.Index(b[off:], []byte(k[:n]))
		} else {
			i = bytes.IndexAny(b[off:], string([]byte{k[0], k[0] - 'a' + 'A'}))
		}
		if i < 0 {
			return false
		}
		if hasPrefixFold(b[off+i:], k) {
			return true
		}
		off += i + 1
	}
	return false
}

// apply replaces the secret of every match of ru in b with Redacted, counting each
// replacement that changed something (an already redacted value is not counted again).
func (r *Redactor) apply(b []byte, ru *rule) []byte {
	idx := ru.re.get().FindAllSubmatchIndex(b, -1)
	if len(idx) == 0 {
		return b
	}
	name := ru.name
	if name == "" {
		name = ru.kind
	}
	var out []byte
	last := 0
	for _, m := range idx {
		s, e := secretSpan(m, ru)
		if s < 0 || s < last || e <= s {
			continue
		}
		if string(b[s:e]) == Redacted || (ru.entropy > 0 && entropy(b[s:e]) < ru.entropy) {
			continue
		}
		if r.onFound != nil {
			r.onFound(ru.kind, name, b[s:e])
		}
		out = append(out, b[last:s]...)
		out = append(out, Redacted...)
		last = e
		r.counts[[2]string{ru.kind, name}]++
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// secretSpan is where the secret of one match lies.
func secretSpan(m []int, ru *rule) (int, int) {
	if ru.firstGroup {
		for g := 1; 2*g+1 < len(m); g++ {
			if m[2*g] >= 0 {
				return m[2*g], m[2*g+1]
			}
		}
		return m[0], m[1]
	}
	if 2*ru.group+1 >= len(m) {
		return m[0], m[1]
	}
	return m[2*ru.group], m[2*ru.group+1]
}

// toLower appends b in ASCII lower case to dst; the offsets stay those of b.
func toLower(dst, b []byte) []byte {
	dst = append(dst, b...)
	for i, c := range dst {
		if 'A' <= c && c <= 'Z' {
			dst[i] = c + 'a' - 'A'
		}
	}
	return dst
}

// Count is how many secrets were replaced so far.
func (r *Redactor) Count() int {
	n := 0
	for _, v := range r.counts {
		n += v
	}
	return n
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
