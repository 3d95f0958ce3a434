package plans

import (
	"fmt"
	"strconv"
	"strings"
)

// presets are sglang's resolution flags (--720p, --1080p, --2k, --4k) and the sizes they set.
var presets = map[string]Resolution{
	"720p":  {Width: 1280, Height: 720, Preset: "720p"},
	"1080p": {Width: 1920, Height: 1080, Preset: "1080p"},
	"2k":    {Width: 2560, Height: 1440, Preset: "2k"},
	"4k":    {Width: 3840, Height: 2160, Preset: "4k"},
}

// maxSide bounds a resolution side so that W*H cannot overflow and typos like 10240000 are
// caught before a GPU tries to allocate them.
const maxSide = 65536

// ParseResolution parses "WxH" (the x may be upper case) or one of the presets 720p, 1080p, 2k,
// 4k (case-insensitive). Both sides must be positive integers.
func ParseResolution(s string) (Resolution, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if r, ok := presets[t]; ok {
		return r, nil
	}
	w, h, ok := strings.Cut(t, "x")
	if !ok {
		return Resolution{}, fmt.Errorf("resolution %q is neither WxH nor a preset; write it as \"1024x1024\" or one of 720p, 1080p, 2k, 4k", s)
	}
	wi, werr := parseSide(w)
	hi, herr := parseSide(h)
	if werr != nil || herr != nil {
		return Resolution{}, fmt.Errorf("resolution %q: width and height must be whole numbers between 1 and %d, as in \"1024x1024\"", s, maxSide)
	}
	return Resolution{Width: wi, Height: hi}, nil
}

func parseSide(s string) (int, error) {
	// Only plain digits: strconv.Atoi would also accept "+1024" and "-8".
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("not a number")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxSide {
		return 0, fmt.Errorf("out of range")
	}
	return n, nil
}

// String is the form used in cell ids: the preset name when the resolution was given as one,
// "WxH" otherwise, and "default" for the zero value (no flag: the model's own default size).
func (r Resolution) String() string {
	switch {
	case r.Preset != "":
		return r.Preset
	case r.Width == 0 && r.Height == 0:
		return "default"
	default:
		return strconv.Itoa(r.Width) + "x" + strconv.Itoa(r.Height)
	}
}

// size is "WxH" even for presets, or "default"; two spellings of one size share it.
func (r Resolution) size() string {
	if r.Width == 0 && r.Height == 0 {
		return "default"
	}
	return strconv.Itoa(r.Width) + "x" + strconv.Itoa(r.Height)
}
