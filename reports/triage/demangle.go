package triage

import (
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// demangled is the readable form of a mangled C++ (Itanium ABI) kernel name, "" when name is
// not one or does not demangle: Kineto and some nsys exports record the symbol as compiled
// ("_ZN5aiter24add_rmsnorm_quant_kernel…"). Tables show it; JSON keeps the raw name as "name"
// and this beside it. Names repeat across rows, stages and reports, so results are cached.
func demangled(name string) string {
	if !strings.HasPrefix(name, "_Z") {
		return ""
	}
	if v, ok := demangleCache.Load(name); ok {
		return v.(string)
	}
	// NoClones drops ".cold"/".isra" suffix notes, which a kernel name never needs.
	out, err := demangle.ToString(name, demangle.NoClones)
	if err != nil {
		out = ""
	}
	demangleCache.Store(name, out)
	return out
}

var demangleCache sync.Map // mangled name → demangled ("" when it did not demangle)

// displayName is what a table shows for a kernel name: demangled when it is mangled.
func displayName(name string) string {
	if d := demangled(name); d != "" {
		return d
	}
	return name
}
