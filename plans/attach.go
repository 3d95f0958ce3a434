package plans

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/BurntSushi/toml"
)

// Attaching to a running server: [backend] url names a server the runner did
// not start. Its load and profiling windows run against it; nothing is started or stopped, so
// every key that would have shaped the server process is refused, as are the profilers that
// need the process (nsys wraps it) or its configuration (vLLM-Omni's trace directory is a
// server argument).

type rawAttach struct {
	URL toml.Primitive `toml:"url"`
}

// decodeAttach decodes backend.url (prim is the [backend] table).
func (d *decoder) decodeAttach(prim toml.Primitive, b *Backend) {
	var ra rawAttach
	if d.md.PrimitiveDecode(prim, &ra) != nil {
		return // decodeBackend reported the table
	}
	decodeField(d, path("backend", "url"), ra.URL, &b.URL, `a string such as "http://10.0.0.5:30000"`)
}

// attachRefused are the keys that describe the server process, which an attached server
// already has.
var attachRefused = [][]string{
	{"backend", "command"}, {"backend", "extra_args"}, {"backend", "env"}, {"backend", "host"},
	{"backend", "port"}, {"backend", "restart"},
}

// validateAttach checks backend.url and what cannot go with it.
func (d *decoder) validateAttach(p *Plan) {
	k := path("backend", "url")
	if !d.check(k...) || !d.md.IsDefined(k...) {
		return
	}
	if msg := checkServerURL(p.Backend.URL); msg != "" {
		d.addKey(k, msg)
		return
	}
	for _, r := range attachRefused {
		if d.check(r...) && d.md.IsDefined(r...) {
			d.addKey(r, fmt.Sprintf("backend.url attaches to a running server, whose %s the runner does not set; drop the key (or drop url to let the runner start the server)", r[1]))
		}
	}
	if pk := path("profile", "profilers"); d.check(pk...) {
		if inList(p.Profile.Profilers, ProfilerNsys) {
			d.addKey(pk, `"nsys" needs a server the runner starts under nsys profile; with backend.url use "torch" or "none", or drop url`)
		}
		if inList(p.Profile.Profilers, ProfilerTorch) && d.check("backend", "kind") && (p.Backend.Kind == "vllm-omni" || p.Backend.Kind == KindVLLM) {
			d.addKey(pk, `"torch" on an attached vLLM or vLLM-Omni server: its trace directory is the server's own --profiler-config, which the runner cannot read back; use "none", or drop url to let the runner start the server`)
		}
	}
	if nk := path("profile", "num_steps"); d.check(nk...) && d.md.IsDefined(nk...) {
		d.addKey(nk, "a window that stops itself is closed when the server logs so, and an attached server's log is not the runner's; with backend.url the window lasts until /stop_profile after the measured requests; drop num_steps")
	}
	if mk := path("matrix", "model"); d.check(mk...) && len(p.Matrix.Model) > 1 {
		d.addKey(mk, fmt.Sprintf("%d models, but an attached server (backend.url) serves one; list only the model it serves", len(p.Matrix.Model)))
	}
}

// checkServerURL returns what is wrong with a server URL ("" when nothing is).
func checkServerURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a URL (%v); write it as \"http://host:port\"", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q: the scheme must be http or https, e.g. \"http://127.0.0.1:30000\"", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("%q has no host; write it as \"http://host:port\"", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return fmt.Sprintf("%q: give the server's base URL only (scheme, host, port), without a path, query or credentials", s)
	}
	return ""
}
