package nsysdb

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Version is an nsys export schema version (EXPORT_SCHEMA_VERSION), e.g. 3.28.1.
type Version struct {
	Major, Minor, Micro int
}

// String formats the version as nsys writes it.
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// Less orders versions.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Micro < o.Micro
}

// The export schemas this reader was checked against: 2.9.1 (nsys 2022.2, metadata table
// EXPORT_META_DATA) through 3.28.1 (nsys 2026.4, META_DATA_EXPORT). Anything newer is read
// column by column with a warning, since NVIDIA says the SQLite schema "can and will change".
var (
	OldestKnown = Version{2, 9, 0}
	NewestKnown = Version{3, 28, 1}
)

// ParseVersion parses "MAJOR.MINOR[.MICRO]" (surrounding space allowed). Each part must be a
// decimal number of at most 6 digits, so hostile metadata cannot overflow anything.
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("schema version %q is not MAJOR.MINOR[.MICRO]", s)
	}
	var n [3]int
	for i, p := range parts {
		if p == "" || len(p) > 6 || strings.TrimLeft(p, "0123456789") != "" {
			return Version{}, fmt.Errorf("schema version %q is not MAJOR.MINOR[.MICRO]", s)
		}
		n[i], _ = strconv.Atoi(p)
	}
	return Version{n[0], n[1], n[2]}, nil
}

// apiVersionSuffix is the "_v7000" / "_v10000" / "_ptsz_v7000" tail nsys appends to CUDA API names.
var apiVersionSuffix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`_v[0-9]+$`) })

// StripAPIVersion removes nsys's API version suffix, so cudaLaunchKernel_v7000 reads as
// cudaLaunchKernel, the name Kineto traces and the CUDA documentation use.
func StripAPIVersion(name string) string {
	if loc := apiVersionSuffix().FindStringIndex(name); loc != nil && loc[0] > 0 {
		return name[:loc[0]]
	}
	return name
}

// statsAPIName applies `nsys stats`'s own rule for cuda_api_sum names: drop the last six
// characters when they start with "_v" (a four-digit version), and nothing else.
func statsAPIName(raw string) string {
	if len(raw) >= 6 && raw[len(raw)-6:len(raw)-4] == "_v" {
		return raw[:len(raw)-6]
	}
	return raw
}

// IsDriverAPI reports whether a CUDA API name is a driver call (cuLaunchKernel) rather than a
// runtime call (cudaLaunchKernel); nsys stores both in CUPTI_ACTIVITY_KIND_RUNTIME.
func IsDriverAPI(name string) bool {
	return strings.HasPrefix(name, "cu") && !strings.HasPrefix(name, "cuda")
}

// IsGraphLaunch reports whether an API call replays a CUDA graph (cudaGraphLaunch,
// cuGraphLaunch, with or without version and stream-per-thread suffixes). Filtering launches
// with a cudaLaunch prefix would silently drop every kernel such a call replays.
func IsGraphLaunch(name string) bool {
	return strings.HasPrefix(name, "cudaGraphLaunch") || strings.HasPrefix(name, "cuGraphLaunch")
}

// The Sync column of the CUDA API table (SyncKind).
const (
	// SyncExplicit: the call waits for the device (…Synchronize) or polls it (…Query).
	SyncExplicit = "yes"
	// SyncImplicit: a synchronous copy or memset (cudaMemcpy, cudaMemset, cuMemcpyDtoH, ...,
	// not their …Async forms) or a free (cudaFree, cuMemFree), which can block the host until
	// the device's earlier work is done: a copy to pageable host memory returns when it is
	// complete, and cudaFree synchronises the device.
	SyncImplicit = "implicit"
)

// IsSyncAPI reports whether an API call blocks, or can block, the host on the device: an
// explicit synchronisation or query, or an implicitly synchronising call (SyncKind).
func IsSyncAPI(name string) bool { return SyncKind(name) != "" }

// SyncKind is SyncExplicit, SyncImplicit or "" for an API call's name (runtime or driver, with
// or without a _v<N>, _ptsz or _ptds suffix).
func SyncKind(name string) string {
	if strings.Contains(name, "Synchronize") ||
		strings.HasPrefix(name, "cudaEventQuery") || strings.HasPrefix(name, "cudaStreamQuery") ||
		strings.HasPrefix(name, "cuEventQuery") || strings.HasPrefix(name, "cuStreamQuery") {
		return SyncExplicit
	}
	if strings.Contains(name, "Async") {
		return ""
	}
	base := name
	if i := strings.IndexByte(base, '_'); i >= 0 {
		base = base[:i]
	}
	switch {
	case strings.HasPrefix(base, "cudaMemcpy"), strings.HasPrefix(base, "cuMemcpy"),
		strings.HasPrefix(base, "cudaMemset"), strings.HasPrefix(base, "cuMemset"),
		base == "cudaFree", base == "cuMemFree":
		return SyncImplicit
	}
	return ""
}

// RangeLabel is the Range column of nvtx_sum: "domain:text", with an empty domain for the
// default one (so ":forward"), exactly as nsys prints it.
func RangeLabel(domain, text string) string { return domain + ":" + text }

// nvtxText picks a range's text the way nsys's own reports do: the registered string
// (textId → StringIds) when there is one, else the inline text, else "".
func nvtxText(text string, hasText bool, registered string, hasRegistered bool) string {
	if hasRegistered {
		return registered
	}
	if hasText {
		return text
	}
	return ""
}

// SplitGlobalID decodes nsys's serialized global thread/process id: (vm<<48)|(pid<<24)|tid.
func SplitGlobalID(g int64) (vm, pid, tid int32) {
	return int32(uint64(g) >> 48), int32((g >> 24) & 0xFFFFFF), int32(g & 0xFFFFFF)
}

// memcpyLabels are ENUM_CUDA_MEMCPY_OPER labels, used when an export lacks the enum table
// (2.9.1 exports have no ENUM_* tables).
var memcpyLabels = map[int32]string{
	0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
	4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
	8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
	11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}

// MemcpyOpName is the operation name nsys stats prints for a copy kind ("[CUDA memcpy
// Host-to-Device]"); memsets are "[CUDA memset]".
func MemcpyOpName(copyKind int32) string {
	label, ok := memcpyLabels[copyKind]
	if !ok {
		label = "kind " + strconv.Itoa(int(copyKind))
	}
	return "[CUDA memcpy " + label + "]"
}

// MemsetOpName is the operation name of memsets.
const MemsetOpName = "[CUDA memset]"
