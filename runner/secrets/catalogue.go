// Package secrets finds and replaces credentials in text: the literal values of secret-named
// variables, a catalogue of credential formats (gitleaks' rule set, compiled in as a table), the
// name-based rules of this project (NAME=value, --api-key X, "password": "…") and a plan's own
// [bundle] redact patterns. Bundles, issue bodies and the run directory's JSON files all go
// through one Redactor, so what one place hides no other place shows.
//
// It imports nothing of this module, so the runner (which writes the run directory) and the
// bundle (which packs it) can both use it.
package secrets

import (
	"bytes"
	"strings"
)

// Redacted is what every secret is replaced with.
const Redacted = "<redacted>"

// secretMarkers are the words of a name that say it holds a secret (upper case). TOKENS is
// not one: MAX_TOKENS and NUM_TOKENS are counts. The compounds are names written as one word
// (apikey, accessToken splits at the case change but ACCESSTOKEN does not).
var secretMarkers = map[string]bool{
	"TOKEN": true, "KEY": true, "KEYS": true, "SECRET": true, "SECRETS": true,
	"PASSWORD": true, "PASSWORDS": true, "PASSWD": true, "PASSPHRASE": true,
	"CREDENTIAL": true, "CREDENTIALS": true,
	"APIKEY": true, "APIKEYS": true, "ACCESSKEY": true, "SECRETKEY": true, "PRIVATEKEY": true,
	"HFTOKEN": true, "ACCESSTOKEN": true, "AUTHTOKEN": true, "REFRESHTOKEN": true,
	"SSHPASS": true,
}

// lastWordMarkers are abbreviations that say password or credential only as the last word of
// a name of two words or more: MYSQL_PWD, DB_PASS, REDIS_AUTH, REDISCLI_AUTH. Alone or
// followed by another word they are something else: PWD is the working directory, PASS_THROUGH
// and AUTH_TYPE are settings. They are weak (the value must look like a secret in lower-case
// free text), since first_pass or use_auth may hold a count or a switch.
var lastWordMarkers = map[string]bool{"PWD": true, "PASS": true, "AUTH": true}

// strongMarkers hold a secret whatever their value looks like (password: 1234); the others
// (TOKEN, KEY, CREDENTIAL) do in free text only when the value looks like one (nameValue).
var strongMarkers = map[string]bool{
	"SECRET": true, "SECRETS": true, "PASSWORD": true, "PASSWORDS": true, "PASSWD": true, "PASSPHRASE": true,
	"APIKEY": true, "APIKEYS": true, "ACCESSKEY": true, "SECRETKEY": true, "PRIVATEKEY": true,
	"SSHPASS": true,
}

// strongKeyPrefixes make KEY strong: API_KEY, ACCESS_KEY, PRIVATE_KEY, SECRET_KEY.
var strongKeyPrefixes = map[string]bool{"API": true, "ACCESS": true, "PRIVATE": true, "SECRET": true}

// referenceWords after the last marker say the value is where a secret is, not the secret:
// KEY_FILE, HF_TOKEN_PATH, SSH_KEYS_DIR, --password-stdin (docker login's, which takes no
// value: the next word is the registry).
var referenceWords = map[string]bool{"FILE": true, "FILES": true, "FILENAME": true, "PATH": true, "DIR": true, "STDIN": true}

// tokenIDWords after TOKEN say it is a tokenizer's vocabulary entry: PAD_TOKEN_ID, token_ids.
var tokenIDWords = map[string]bool{"ID": true, "IDS": true}

// IsSecretName reports whether a variable, flag or key name names a secret: the rule of
// secretName (docs/bundle.md lists it).
func IsSecretName(name string) bool {
	ok, _ := secretName([]byte(name))
	return ok
}

// secretName is the one word logic of secret names, for variables, flags, keys and query
// parameters alike. A name is split into words at '_', '-', '.' and where a lower-case letter
// is followed by an upper-case one (apiKey); it is secret when one of its words is a marker
// (TOKEN, KEY, SECRET, PASSWORD, ... or a compound such as APIKEY, or a word that ends in
// PASSWORD or PASSWD: PGPASSWORD), or its last word is PWD, PASS or AUTH after another
// (MYSQL_PWD), unless the word after the last marker makes it a reference (KEY_FILE,
// HF_TOKEN_PATH) or a token id (PAD_TOKEN_ID). strong: the last marker holds a secret
// whatever its value looks like.
func secretName(name []byte) (secret, strong bool) {
	var buf [16][2]int
	words := buf[:0]
	start := -1
	for i := 0; i <= len(name); i++ {
		sep := i == len(name) || name[i] == '_' || name[i] == '-' || name[i] == '.'
		camel := !sep && i > 0 && 'A' <= name[i] && name[i] <= 'Z' && 'a' <= name[i-1] && name[i-1] <= 'z'
		if (sep || camel) && start >= 0 {
			words = append(words, [2]int{start, i})
			start = -1
		}
		if !sep && start < 0 {
			start = i
		}
	}
	var mb, nb, pb [32]byte
	for k := len(words) - 1; k >= 0; k-- {
		m := upperWord(mb[:0], name, words[k])
		if k == len(words)-1 && k > 0 && lastWordMarkers[string(m)] {
			return true, false
		}
		// A compound ending in PASSWORD (PGPASSWORD, MONGOROOTPASSWORD) is a strong marker.
		// sudo's NOPASSWD tag is none.
		compound := (bytes.HasSuffix(m, []byte("PASSWORD")) || bytes.HasSuffix(m, []byte("PASSWD"))) && string(m) != "NOPASSWD"
		if !secretMarkers[string(m)] && !compound {
			continue
		}
		strong = strongMarkers[string(m)] || compound
		if k+1 < len(words) {
			next := upperWord(nb[:0], name, words[k+1])
			if referenceWords[string(next)] || (string(m) == "TOKEN" && tokenIDWords[string(next)]) {
				return false, false
			}
		}
		if !strong && (string(m) == "KEY" || string(m) == "KEYS") && k > 0 {
			strong = strongKeyPrefixes[string(upperWord(pb[:0], name, words[k-1]))]
		}
		return true, strong
	}
	return false, false
}

// upperWord appends the word w of name to dst in upper case; a word longer than dst's
// capacity (longer than any marker, or a PASSWORD compound worth knowing) comes back empty.
func upperWord(dst, name []byte, w [2]int) []byte {
	if w[1]-w[0] > cap(dst) {
		return dst[:0]
	}
	for _, c := range name[w[0]:w[1]] {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// The catalogue is gitleaks' default configuration, gitleaks.toml (MIT, see NOTICE.gitleaks),
// kept as upstream ships it so that refreshing it is a copy, and compiled into the table of
// catalogue_gen.go by go generate: a process that redacts starts with the rules in its data
// instead of parsing 100 KB of TOML (TestCatalogueIsGitleaksTOML fails when the two differ).
//
//go:generate go test -run ^TestCatalogueIsGitleaksTOML$ -update-catalogue .

// skipped are catalogue rules left out, with why:
//   - generic-api-key matches any long value after "key", "auth", "access" or "api" and
//     relies on gitleaks' stopword and allowlist machinery to stay quiet; the name-based
//     rules of this package cover the same ground with the shapes this project's files use.
var skipped = map[string]bool{"generic-api-key": true}

// glRule is one [[rules]] entry of gitleaks.toml, the fields redaction uses.
type glRule struct {
	ID          string   `toml:"id"`
	Regex       string   `toml:"regex"`
	SecretGroup int      `toml:"secretGroup"`
	Entropy     float64  `toml:"entropy"`
	Keywords    []string `toml:"keywords"`
	Path        string   `toml:"path"`
}

// catalogueRules turns the catalogue into rules. Rules bound to a file path (a .php or .tf
// file) or without a regular expression are left out: a bundle's files are logs, JSON and
// TOML, and the path tells nothing about them.
func catalogueRules() []rule {
	var out []rule
	for _, g := range catalogue {
		if g.Regex == "" || g.Path != "" || skipped[g.ID] {
			continue
		}
		kw := make([]string, len(g.Keywords))
		for i, k := range g.Keywords {
			kw[i] = strings.ToLower(k)
		}
		out = append(out, rule{
			kind: g.ID, re: lazy(g.Regex), group: g.SecretGroup, firstGroup: g.SecretGroup == 0,
			entropy: g.Entropy, keywords: kw,
			// A rule that can cross lines ([\s\S] in the private-key rule) runs on the whole
			// text, not line by line.
			block: strings.Contains(g.Regex, `[\s\S`),
		})
	}
	return out
}
