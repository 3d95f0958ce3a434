package secrets

import (
	"bytes"
)

// Passwords given to a program on its command line: the value is secret because of the
// program and the option it follows, not because of a name (-p is a port to ssh and docker
// run, a password to sshpass, docker login and, attached, mysql). The rule is anchored at the
// program's name and reads the words of that one command, as a shell line, a JSON or TOML
// string or a one-line array writes them, up to the command's end (a newline, ;, |, &, a
// closing bracket).

// commandKeywords are the programs the command rule knows (config also anchors configure).
var commandKeywords = []string{"mysql", "mariadb", "sshpass", "docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras", "wandb", "config"}

// commandExpr is what the command rule's scanner finds, as one expression for each program
// in its simplest form (words separated by blanks, no quotes): FuzzCommandSpans checks that
// the scanner finds every secret this expression finds. The first submatch that matched
// holds the secret.
var commandExpr = lazy(
	// mysql -pSECRET (with a space, -p prompts and the next word is the database)
	`(?:mysql|mariadb)[a-z0-9_-]*(?:[ \t]+` + cmdWordExpr + `)*?[ \t]+-p(` + cmdWordExpr + `)` +
		// sshpass -p SECRET, -pSECRET
		`|sshpass(?:[ \t]+-[ev])*[ \t]+-p[ \t]*(` + cmdWordExpr + `)` +
		// docker login -p SECRET, --password SECRET, --password=SECRET
		`|(?:docker|podman|nerdctl|buildah|skopeo|helm|oras)(?:[ \t]+` + cmdWordExpr + `)*?[ \t]+login(?:[ \t]+` + cmdWordExpr + `)*?[ \t]+(?:-p[ \t]*|--password[ \t]+|--password=)(` + cmdWordExpr + `)` +
		// wandb login KEY
		`|wandb[ \t]+login(?:[ \t]+-` + cmdWordExpr + `)*[ \t]+([A-Za-z0-9_][A-Za-z0-9_.-]{7,})(?:[\s"',\[\]\\(){};|&\x60]|$)` +
		// aws configure set aws_secret_access_key SECRET
		`|config(?:ure)?[ \t]+set[ \t]+(?:[A-Za-z0-9_-]+\.)?aws_secret_access_key[ \t]+(` + cmdWordExpr + `)`)

// cmdWordExpr is a word of a command line: what lies between isCmdSep and isCmdEnd bytes.
const cmdWordExpr = `[^\s"',\[\]\\(){};|&\x60]+`

// isCmdSep: a byte between the words of one command (blanks, quotes, the commas and brackets
// of an array, the backslash of an escaped quote).
func isCmdSep(c byte) bool {
	switch c {
	case ' ', '\t', '\f', '"', '\'', ',', '[', '{', '(', '\\':
		return true
	}
	return false
}

// isCmdEnd: a byte that ends a command (a line end, a shell operator, a closing bracket).
func isCmdEnd(c byte) bool {
	switch c {
	case '\n', '\r', ';', '|', '&', '`', ')', ']', '}':
		return true
	}
	return false
}

// cmdScan reads the words of a command in line from i on.
type cmdScan struct {
	line []byte
	i    int
}

// next is the next word of the command, or s < 0 at its end.
func (c *cmdScan) next() (s, e int) {
	for c.i < len(c.line) && isCmdSep(c.line[c.i]) {
		c.i++
	}
	if c.i == len(c.line) || isCmdEnd(c.line[c.i]) {
		return -1, -1
	}
	s = c.i
	for c.i < len(c.line) && !isCmdSep(c.line[c.i]) && !isCmdEnd(c.line[c.i]) {
		c.i++
	}
	return s, c.i
}

// value is the value of the option word just read (-p X): the next word, or, when a quote
// opens it ('x y', "x y", \"x y\" in a JSON string, the next element of an array), what lies
// up to the matching quote.
func (c *cmdScan) value() (s, e int) {
	j := c.i
	for j < len(c.line) && isCmdSep(c.line[j]) {
		j++
	}
	if j > c.i {
		if s, e, end := quoted(c.line, j-1); s >= 0 {
			c.i = end
			return s, e
		}
	}
	return c.next()
}

// attached is the value written onto its option at i (-pX, -p'x y', --password=X): a quoted
// one up to its quote, else the rest of the word (up to e).
func (c *cmdScan) attached(i, e int) (s, end int) {
	if i < len(c.line) && (c.line[i] == '\'' || c.line[i] == '"' || c.line[i] == '\\') {
		q := i
		if c.line[i] == '\\' {
			q = i + 1
		}
		if s, e, end := quoted(c.line, q); s >= 0 {
			c.i = end
			return s, e
		}
		return -1, -1
	}
	return i, e
}

// quoted is the text after the opening quote at q up to its closing quote (the same byte, or
// \" when the opening one was escaped) and the offset after the closing quote; s < 0 when q
// holds no quote or it does not close on this line. A text that would cross an unescaped "
// (the end of a JSON string) is refused, so a redaction never breaks a JSON document.
func quoted(line []byte, q int) (s, e, end int) {
	if q < 0 || q >= len(line) || (line[q] != '\'' && line[q] != '"') {
		return -1, -1, -1
	}
	esc := line[q] == '"' && q > 0 && line[q-1] == '\\'
	for j := q + 1; j < len(line) && line[j] != '\n'; j++ {
		switch {
		case line[j] == '\\' && j+1 < len(line):
			if esc && line[j+1] == '"' {
				return q + 1, j, j + 2
			}
			j++ // an escaped byte is part of the text
		case line[j] == '"':
			if line[q] == '"' && !esc {
				return q + 1, j, j + 1
			}
			return -1, -1, -1
		case line[j] == '\'' && line[q] == '\'':
			return q + 1, j, j + 1
		}
	}
	return -1, -1, -1
}

// commandSpans appends to out the secrets of the command whose program's name begins at p
// of line (commandExpr says which).
func commandSpans(line []byte, p int, out [][2]int) [][2]int {
	e := p
	for e < len(line) && isNameByte(line[e]) {
		e++
	}
	// mysql:8.0, mysql.sock, MYSQL_PWD=x, a URL's scheme: no program.
	if e < len(line) && !isCmdSep(line[e]) && !isCmdEnd(line[e]) {
		return out
	}
	prog := line[p:e]
	c := &cmdScan{line: line, i: e}
	add := func(s, e int) {
		if s >= 0 && e > s {
			out = append(out, [2]int{s, e})
		}
	}
	// shortFlag reads the value of -pX, -p'X' and, when spaced is set, -p X (word s:e, which
	// begins with -p).
	shortFlag := func(s, e int, spaced bool) {
		switch {
		case e-s > 2 || quoteAttached(line, s, e):
			add(c.attached(s+2, e))
		case spaced:
			add(c.value())
		}
	}
	// longFlag reads the value of --password=X and, when spaced is set, --password X.
	longFlag := func(s, e int, spaced bool) {
		const eq = "--password="
		switch w := line[s:e]; {
		case bytes.HasPrefix(w, []byte(eq)):
			add(c.attached(s+len(eq), e))
		case spaced && string(w) == "--password":
			add(c.value())
		}
	}
	isP := func(w []byte) bool { return len(w) >= 2 && w[0] == '-' && w[1] == 'p' }
	switch {
	case bytes.HasPrefix(prog, []byte("mysql")) || bytes.HasPrefix(prog, []byte("mariadb")):
		// -pX and --password=X only: with a space, -p and --password prompt for the password
		// and the next word is the database.
		for s, e := c.next(); s >= 0; s, e = c.next() {
			if isP(line[s:e]) {
				shortFlag(s, e, false)
			} else {
				longFlag(s, e, false)
			}
		}
	case string(prog) == "sshpass":
		for s, e := c.next(); s >= 0; s, e = c.next() {
			switch w := line[s:e]; {
			case isP(w):
				shortFlag(s, e, true)
			case string(w) == "-f" || string(w) == "-d" || string(w) == "-P":
				c.next()
			case w[0] != '-':
				return out // the command sshpass runs (ssh -p 22 is a port)
			}
		}
	case isLoginTool(prog):
		login := false
		for s, e := c.next(); s >= 0; s, e = c.next() {
			switch w := line[s:e]; {
			case !login:
				login = string(w) == "login"
			case isP(w):
				shortFlag(s, e, true)
			default:
				longFlag(s, e, true)
			}
		}
	case string(prog) == "wandb":
		// wandb login [options] KEY: the key is its one argument (--host's URL is none). What
		// follows it is no longer wandb's: an argv written on one line goes on with the next
		// program's arguments.
		if s, e := c.next(); s < 0 || string(line[s:e]) != "login" {
			return out
		}
		for s, e := c.next(); s >= 0; s, e = c.next() {
			if w := line[s:e]; w[0] != '-' && !bytes.Contains(w, []byte("://")) {
				if len(w) >= 8 {
					add(s, e)
				}
				return out
			}
		}
	case string(prog) == "config" || string(prog) == "configure":
		// aws configure set aws_secret_access_key X, npm config set _authToken X
		if s, e := c.next(); s < 0 || string(line[s:e]) != "set" {
			return out
		}
		if s, e := c.next(); s >= 0 && IsSecretName(string(line[s:e])) {
			add(c.value())
		}
	}
	return out
}

// quoteAttached: a quote follows word s:e directly (-p'x y', -p\"x y\") and does not close
// a quote that opened the word ("-p" as an element of an array).
func quoteAttached(line []byte, s, e int) bool {
	if e >= len(line) {
		return false
	}
	q := line[e]
	if q == '\\' && e+1 < len(line) {
		q = line[e+1]
	}
	if q != '\'' && q != '"' {
		return false
	}
	return s == 0 || line[s-1] != q
}

// isLoginTool: a program whose login subcommand takes -p/--password (container registries).
func isLoginTool(prog []byte) bool {
	switch string(prog) {
	case "docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras":
		return true
	}
	return false
}
