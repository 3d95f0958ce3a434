package secrets

import (
	"bytes"
	"math"
	"regexp"
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
	re         *regexp.Regexp
	group      int
	firstGroup bool
	entropy    float64  // a secret with less Shannon entropy (bits per byte) is not one
	keywords   []string // lower case; empty: run on every line
	block      bool     // the expression may cross lines: run it on the whole text
	pre        func(line []byte) bool
	// at, when set, is re anchored at its start: the rule's expression begins with one of
	// its keywords, so it is tried only where a keyword is (see anchor).
	at *regexp.Regexp
	// boundary: the keyword must not follow a letter or a digit (the sk- of task-… is no key).
	// It is what `\b` meant, minus '_': a file named after a prompt puts '_' before a token
	// (outputs/a_cat_sk-proj-…_20260101-000000_ab12cd34.png), and `\b` let it through.
	boundary bool
}

// anchor marks rules whose expression begins with one of their keywords.
func anchor(rules []rule) []rule {
	for i := range rules {
		rules[i].at = regexp.MustCompile(`^(?:` + rules[i].re.String() + `)`)
	}
	return rules
}

// upperMarkers are the markers of environment-style names, with what may follow one that
// ends a word of the name: '_' (more name), a separator, a quote or a space.
var upperMarkers = [][]byte{[]byte("TOKEN"), []byte("KEY"), []byte("SECRET"), []byte("PASSWORD"), []byte("PASSWD"), []byte("CREDENTIAL"), []byte("CREDENTIALS")}

func upperAssignment(line []byte) bool {
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

var nameMarkers = []string{"token", "key", "secret", "password", "passwd", "credential"}

// reprKeywords are the markers as a Python repr writes them: hf_token='...'.
var reprKeywords = []string{"token='", `token="`, "api_key='", `api_key="`, "apikey='", `apikey="`, "secret='", `secret="`,
	"password='", `password="`, "passwd='", `passwd="`, "credential='", `credential="`, "credentials='", `credentials="`}

// strongKeywords are names that hold a secret whatever their value looks like.
var strongKeywords = []string{"password", "passwd", "secret_key", "secret-key", "secret", "api_key", "api-key", "apikey", "private_key", "private-key", "privatekey", "access_key", "access-key", "accesskey"}

// builtinRules are this project's name- and shape-based rules: what the catalogue does not
// know (a value is secret because of the name it is given) and the older shapes it misses.
var builtinRules = append(
	[]rule{
		{kind: KindBearer, re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/-]{8,}=*)`), group: 1, keywords: []string{"bearer"}},
		{kind: KindURLCreds, re: regexp.MustCompile(`(?i)[?&;](?:access_token|auth_token|token|api_key|apikey|key|secret|password|passwd|sig|signature)=([^&\s"'#\\<>]+)`), group: 1, keywords: []string{"token=", "key=", "secret=", "password=", "passwd=", "sig=", "signature="}},
		// curl -u user:pass, --user user:pass (the password part).
		{kind: KindFlag, re: regexp.MustCompile(`(?:^|[\s"'\[,])(?:-u|--user)(?:=|\s+|["']\s*,\s*["']|["']\s+["'])['"]?[^\s'":]+:([^\s'"\\,]+)`), group: 1, keywords: []string{"-u"}},
	},
	anchor([]rule{
		// Shaped keys, anchored at their prefix with boundary (not `\b`, which fails after the
		// '_' of a file name built from a prompt); the key id ends at anything but a letter
		// or digit, '_' included, for the same reason.
		{kind: KindSKKey, re: regexp.MustCompile(`sk-[A-Za-z0-9_-]{20,}`), keywords: []string{"sk-"}, boundary: true},
		{kind: KindAWSKey, re: regexp.MustCompile(`((?:AKIA|ASIA)[A-Z0-9]{16})(?:[^A-Za-z0-9]|$)`), group: 1, keywords: []string{"akia", "asia"}, boundary: true},
		{kind: KindHFToken, re: regexp.MustCompile(`hf_[A-Za-z0-9]{20,}`), keywords: []string{"hf_"}},
		{kind: KindBearer, re: regexp.MustCompile(`(?i)authorization["']?\s*[:=]\s*["']?(?:basic\s+|token\s+)?([A-Za-z0-9._~+/-]{8,}=*)`), group: 1, keywords: []string{"authorization"}},
		{kind: KindURLCreds, re: regexp.MustCompile(`://([^/\s:@"'\\]+:[^/\s@"'\\]+)@`), group: 1, keywords: []string{"://"}, pre: hasAt},
		// A token as the user of a URL (https://ghp_...@github.com): a user name that long is one.
		{kind: KindURLCreds, re: regexp.MustCompile(`://([A-Za-z0-9_.~%+-]{16,})@`), group: 1, keywords: []string{"://"}, pre: hasAt},
		{kind: KindAWSKey, re: regexp.MustCompile(`(?i)aws_secret_access_key["']?\s*[=:]\s*["']?([A-Za-z0-9/+=]{40})`), group: 1, keywords: []string{"aws_secret_access_key"}},
		// Environment-style names are upper case, so "key" in JSON ("key": "qwen-image/...") is
		// not one; the marker must end a word of the name, so MAX_TOKENS and TOKENIZER_PATH
		// (counts and paths a bug report needs) are kept.
		{kind: KindAssignment, re: regexp.MustCompile(`(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_[A-Z0-9_]*)?\b["']?\s*[=:]\s*["']?([^\s"'\\,;}\]]+)`), group: 1, keywords: nameMarkers, pre: upperAssignment},
		// Python reprs of server arguments: hf_token='...', api_key="...".
		{kind: KindAssignment, re: regexp.MustCompile(`(?i)(?:token|api_key|apikey|secret|password|passwd|credentials?)=['"]([^'"\s\\]+)['"]`), group: 1, keywords: reprKeywords},
		// JSON and YAML keys whose name ends in a strong marker: "openai_api_key": "...",
		// password: ..., x-api-key: ... (a header). "key" alone ("key": "qwen-image/...") is not one.
		{kind: KindAssignment, re: regexp.MustCompile(`(?i)(?:password|passwd|secret[_-]?key|secret|api[_-]?key|private[_-]?key|access[_-]?key)(?:\\?["'])?[ \t]*[:=][ \t]*(?:\\?["'])?([^\s"',;}\]\\]+)`), group: 1, keywords: strongKeywords},
		// ... and "...token": "value" with a quoted value of some length ("max_tokens": 4 is not).
		{kind: KindAssignment, re: regexp.MustCompile(`(?i)(?:token|credentials?)(?:\\?["'])?[ \t]*[:=][ \t]*\\?["']([^\s"'\\]{8,})\\?["']`), group: 1, keywords: []string{"token", "credential"}, pre: hasQuote},
		// Flags whose name ends in the marker: --hf-token X, --api-key=X (not --tokenizer-path),
		// also as consecutive JSON array elements ("--api-key", "X").
		{kind: KindFlag, re: regexp.MustCompile(`(?i)--[a-z0-9-]*(?:token|key|secret|password|passwd|credentials?)(?:=|\s+|["']\s*,\s*["']|["']\s+["'])['"]?([^\s'"\\,]+)`), group: 1, keywords: []string{"--"}},
	})...,
)

// hasAt: a URL credential needs an '@'.
func hasAt(line []byte) bool { return bytes.IndexByte(line, '@') >= 0 }

// hasQuote: a quoted value needs a quote.
func hasQuote(line []byte) bool { return bytes.ContainsAny(line, `"'`) }

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
