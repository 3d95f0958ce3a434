package bundle

import "github.com/sglprof/runner/runner/secrets"

// Redacted is what every secret is replaced with, the same marker the run directory uses.
const Redacted = secrets.Redacted

// Kinds of redaction, as the bundle's README and bundle.json list them; the catalogue's
// rules are listed under their gitleaks id.
const (
	KindEnv        = secrets.KindEnv
	KindAssignment = secrets.KindAssignment
	KindFlag       = secrets.KindFlag
	KindHFToken    = secrets.KindHFToken
	KindBearer     = secrets.KindBearer
	KindURLCreds   = secrets.KindURLCreds
	KindAWSKey     = secrets.KindAWSKey
	KindPlan       = secrets.KindPlan
)

// Redactor replaces secrets in every file a bundle holds (runner/secrets owns it).
type Redactor = secrets.Redactor

// Redaction is one line of the README's redaction list.
type Redaction = secrets.Redaction

// NewRedactor builds a redactor from the secret-named variables of env and the plan's
// [bundle] redact patterns (secrets.New).
func NewRedactor(env []string, extra []string) (*Redactor, error) { return secrets.New(env, extra) }
