package secrets

import (
	"bytes"
	"math"
	"regexp"
	"sync"
)

// Kinds of redaction of the name-based rules, as a bundle's README and bundle.json list them.
// The catalogue's rules are listed under their gitleaks id (github-pat, private-key, ...).
const (
	KindEnv        = "env"            // the value of a secret-named variable (from the plan or the environment)
	KindAssignment = "assignment"     // NAME=value in text where NAME looks secret
	KindFlag       = "flag"           // --hf-token VALUE, --api-key=VALUE, curl -u user:pass
	KindHFToken    = "hf-token"       // hf_ followed by 20+ letters or digits
	KindBearer     = "bearer-token"   // Authorization: Bearer ..., Bearer <token>
	KindURLCreds   = "url-credential" // scheme://user:pass@host, scheme://token@host, ?token=...
	KindAWSKey     = "aws-key"        // AKIA.../ASIA... access key ids and aws_secret_access_key values
	KindSKKey      = "sk-key"         // OpenAI-style sk-... keys of any generation
	KindPlan       = "plan-pattern"   // a [bundle] redact pattern of the plan
	KindCommand    = "command"        // sshpass -p X, docker login -p X, mysql -pX, wandb login KEY, aws configure set NAME X
)

// rule is one regular expression; group is the submatch that holds the secret (0 = all;
// firstGroup: the first submatch that matched, gitleaks' convention). A rule only runs on a
// line that holds one of its keywords (lower case): most log and trace lines hold nothing
// secret-looking, and skipping the regular expressions there is what makes redaction fast
// (BenchmarkRedactStream). A rule's keywords must include a substring of every text its
// expression matches (FuzzKeywords checks the name-based rules).
type rule struct {
	kind       string
	name       string // what the README lists: the kind, or "plan pattern N"
	re         *lazyRE
	group      int
	firstGroup bool
	entropy    float64  // a secret with less Shannon entropy (bits per byte) is not one
	keywords   []string // lower case; empty: run on every line
	block      bool     // the expression may cross lines: run it on the whole text
	pre        func(line []byte) bool
	// at, when set, is re anchored at its start: the rule's expression begins with one of
	// its keywords, so it is tried only where a keyword is (see anchor).
	at *lazyRE
	// check, when set, judges an anchored match (offsets in line[p:]) beyond what the
	// expression can say: whether the name is secret (secretName) and where the value ends.
	// s < 0: not a secret. url: count it as a URL credential.
	check func(line []byte, p int, m []int) (s, e int, url bool)
	// scan, when set, is at written by hand (the same submatches): sglang's logs hold
	// "token" several times a line, and the expression cost more than the rest of redaction.
	scan func(rest []byte) []int
	// spans, when set, finds the rule's secrets by hand instead of at and check, all of them
	// from the keyword at p of line (a command line can hold several): offsets in line.
	spans func(line []byte, p int, out [][2]int) [][2]int
	// boundary: the keyword must not follow a letter or a digit (the sk- of task-… is no key).
	// It is what `\b` meant, minus '_': a file named after a prompt puts '_' before a token
	// (outputs/a_cat_sk-proj-…_20260101-000000_ab12cd34.png), and `\b` let it through.
	boundary bool
}

// anchor marks rules whose expression begins with one of their keywords.
func anchor(rules []rule) []rule {
	for i := range rules {
		rules[i].at = lazy(`^(?:` + rules[i].re.String() + `)`)
	}
	return rules
}

// builtinRules are this project's name- and shape-based rules: what the catalogue does not
// know (a value is secret because of the name it is given) and the older shapes it misses.
var builtinRules = append(
	[]rule{
		{kind: KindBearer, re: lazy(`(?i)\bbearer\s+([A-Za-z0-9._~+/-]{8,}=*)`), group: 1, keywords: []string{"bearer"}},
		// Signed URLs (?sig=…): a query parameter named like a secret is the assignment rule's.
		{kind: KindURLCreds, re: lazy(`(?i)[?&;#](?:sig|signature)=([^&\s"'#\\<>]+)`), group: 1, keywords: []string{"sig=", "signature="}},
		// curl -u user:pass, --user user:pass (the password part).
		{kind: KindFlag, re: lazy(`(?:^|[\s"'\[,])(?:-u|--user)(?:=|\s+|["']\s*,\s*["']|["']\s+["'])['"]?[^\s'":]+:([^\s'"\\,]+)`), group: 1, keywords: []string{"-u"}},
	},
	anchor([]rule{
		// Shaped keys, anchored at their prefix with boundary (not `\b`, which fails after the
		// '_' of a file name built from a prompt); the key id ends at anything but a letter
		// or digit, '_' included, for the same reason.
		{kind: KindSKKey, re: lazy(`sk-[A-Za-z0-9_-]{20,}`), keywords: []string{"sk-"}, boundary: true},
		{kind: KindAWSKey, re: lazy(`((?:AKIA|ASIA)[A-Z0-9]{16})(?:[^A-Za-z0-9]|$)`), group: 1, keywords: []string{"akia", "asia"}, boundary: true},
		{kind: KindHFToken, re: lazy(`hf_[A-Za-z0-9]{20,}`), keywords: []string{"hf_"}},
		{kind: KindBearer, re: lazy(`(?i)authorization["']?\s*[:=]\s*["']?(?:basic\s+|token\s+)?([A-Za-z0-9._~+/-]{8,}=*)`), group: 1, keywords: []string{"authorization"}},
		{kind: KindURLCreds, re: lazy(`://([^/\s:@"'\\]+:[^/\s@"'\\]+)@`), group: 1, keywords: []string{"://"}, pre: hasAt},
		// A token as the user of a URL (https://ghp_...@github.com): a user name that long is one.
		{kind: KindURLCreds, re: lazy(`://([A-Za-z0-9_.~%+-]{16,})@`), group: 1, keywords: []string{"://"}, pre: hasAt},
		{kind: KindAWSKey, re: lazy(`(?i)aws_secret_access_key["']?\s*[=:]\s*["']?([A-Za-z0-9/+=]{40})`), group: 1, keywords: []string{"aws_secret_access_key"}},
		// NAME=value, NAME: value, "name": "value", name='value' and URL parameters
		// (?hf_token=…, #access_token=…): anchored at a marker word, the whole name (scanned
		// back from the marker) judged by secretName, the value by nameValue.
		// The expression is what scanAssign does by hand, faster (FuzzScanAssign).
		{kind: KindAssignment, re: lazy(`((?i:token|key|secret|pass|pwd|auth|credential)[A-Za-z0-9_-]*)(\\?["'])?\s*([:=])\s*(\\?["'])?([^\s"',;}\]\\]+)`), keywords: assignKeywords, scan: scanAssign, check: nameValue},
		// Flags whose name is secret: --hf-token X, --hf_token X, --api-key=X (not
		// --tokenizer-path), also as consecutive JSON array elements ("--api-key", "X").
		{kind: KindFlag, re: lazy(`--([A-Za-z][A-Za-z0-9_-]*)(?:=|\s+|["']\s*,\s*["']|["']\s+["'])['"]?([^\s'"\\,]+)`), keywords: []string{"--"}, check: flagValue},
		// Passwords on a program's command line (command.go): commandExpr is what the scanner
		// finds at the least (FuzzCommandSpans).
		{kind: KindCommand, re: commandExpr, keywords: commandKeywords, spans: commandSpans, boundary: true},
	})...,
)

// hasAt: a URL credential needs an '@'.
func hasAt(line []byte) bool { return bytes.IndexByte(line, '@') >= 0 }

// assignKeywords are the anchors of the assignment rule: the marker words of secretName (a
// compound such as apikey or pgpassword holds one of them; pass stands for password,
// passwd and passphrase too).
var assignKeywords = []string{"token", "key", "secret", "pass", "pwd", "auth", "credential"}

// isNameByte: a byte of a variable, key, flag or parameter name.
func isNameByte(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

// nameValue is the secret of an assignment match m (offsets in line[p:], p the marker): the
// name is the marker's whole word run (HF_TOKEN, not TOKEN), judged by secretName. A query
// parameter or fragment (?hf_token=X, #access_token=X) gives its value up to the next '&'.
// Elsewhere an upper-case (environment) name, a strong name (password, api_key) and a
// Python keyword argument (hf_token='X') give any value; other names (a lower-case "token",
// "cache_key") only a value that looks like a credential, 8 bytes or more and not a number,
// so "#token: 53120" and "output_token_throughput": 1234.5678 in logs and perf dumps stay.
// A bare lower-case "key" is a lookup key ("key": "qwen-image/default/4st/s0"), not a secret.
func nameValue(line []byte, p int, m []int) (s, e int, url bool) {
	start := p
	for start > 0 && isNameByte(line[start-1]) {
		start--
	}
	name := bytes.TrimLeft(line[start:p+m[3]], "-")
	secret, strong := secretName(name)
	if !secret {
		return -1, -1, false
	}
	rest := line[p:]
	vs, ve := m[10], m[11]
	sep := rest[m[6]]
	if start > 0 && bytes.IndexByte([]byte("?&#;"), line[start-1]) >= 0 && sep == '=' && m[6] == m[3] && m[8] < 0 {
		e := vs
		for e < len(rest) && bytes.IndexByte([]byte("&#\"'<> \t\r\n\f\\"), rest[e]) < 0 {
			e++
		}
		return vs, e, true
	}
	lower := bytes.IndexFunc(name, func(r rune) bool { return 'a' <= r && r <= 'z' }) >= 0
	switch {
	case lower && len(name) == 3 && hasPrefixFold(name, "key"):
		return -1, -1, false
	case strong || !lower:
		return vs, ve, false
	case sep == '=' && m[8] == m[7]: // name='value', a keyword argument
		return vs, ve, false
	case ve-vs >= 8 && !isNumber(rest[vs:ve]):
		return vs, ve, false
	}
	return -1, -1, false
}

// scanAssign is the assignment rule's anchored expression at the start of rest, by hand:
// the submatch indexes FindSubmatchIndex would give, or nil. No step can backtrack: the name
// is every name byte after the marker, and what follows a part never begins the part before.
func scanAssign(rest []byte) []int {
	n := 0
	for _, k := range assignKeywords {
		if hasPrefixFold(rest, k) {
			n = len(k)
			break
		}
	}
	if n == 0 {
		return nil
	}
	m := []int{0, 0, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0}
	i := n
	for i < len(rest) && isNameByte(rest[i]) {
		i++
	}
	m[3] = i
	quote := func(i int) int { // the end of \?["'] at i, or -1
		if i < len(rest) && rest[i] == '\\' {
			i++
		}
		if i < len(rest) && (rest[i] == '"' || rest[i] == '\'') {
			return i + 1
		}
		return -1
	}
	if q := quote(i); q >= 0 {
		m[4], m[5], i = i, q, q
	}
	for i < len(rest) && isSpace(rest[i]) {
		i++
	}
	if i == len(rest) || (rest[i] != ':' && rest[i] != '=') {
		return nil
	}
	m[6], m[7] = i, i+1
	i++
	for i < len(rest) && isSpace(rest[i]) {
		i++
	}
	if q := quote(i); q >= 0 {
		m[8], m[9], i = i, q, q
	}
	j := i
	for j < len(rest) && !isSpace(rest[j]) && bytes.IndexByte([]byte(`"',;}]\`), rest[j]) < 0 {
		j++
	}
	if j == i {
		return nil
	}
	m[10], m[11], m[1] = i, j, j
	return m
}

// isSpace is `\s`.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// isNumber: b is made of the bytes of a decimal number (1234.5678, 1e-05).
func isNumber(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}

// flagValue is the value of a flag match whose name is secret (--hf_token X, --api-key=X).
func flagValue(line []byte, p int, m []int) (s, e int, url bool) {
	if ok, _ := secretName(line[p+m[2] : p+m[3]]); !ok {
		return -1, -1, false
	}
	return m[4], m[5], false
}

// entropy is the Shannon entropy of b in bits per byte, gitleaks' measure.
func entropy(b []byte) float64 {
	var n [256]int
	for _, c := range b {
		n[c]++
	}
	var h float64
	for _, k := range n {
		if k > 0 {
			p := float64(k) / float64(len(b))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// lazyRE is a rule's expression, compiled the first time a line holding one
// of its keywords reaches it. Every runner process (each run, cell, server
// and bundle) builds a redactor, and compiling the whole catalogue up front
// cost each of them milliseconds for expressions that almost never run.
type lazyRE struct {
	src  string
	once sync.Once
	re   *regexp.Regexp
}

// lazy returns the expression src, to be compiled on first use. src must
// compile: it is this project's own rule or the embedded catalogue's
// (TestCatalogueCompiles compiles every one); a plan's pattern is compiled
// at once with compiled instead, so that its error reaches the user.
func lazy(src string) *lazyRE { return &lazyRE{src: src} }

// compiled wraps an expression compiled already.
func compiled(re *regexp.Regexp) *lazyRE { return &lazyRE{src: re.String(), re: re} }

// get compiles the expression the first time, unless it came compiled.
func (l *lazyRE) get() *regexp.Regexp {
	l.once.Do(func() {
		if l.re == nil {
			l.re = regexp.MustCompile(l.src)
		}
	})
	return l.re
}

// String is the expression's source.
func (l *lazyRE) String() string { return l.src }
