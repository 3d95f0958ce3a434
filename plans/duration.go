package plans

import (
	"encoding/json"
	"fmt"
	"time"
)

// UnmarshalTOML accepts only a duration string. BurntSushi/toml would otherwise decode a bare
// integer into a time.Duration as nanoseconds, so `delay = 30` would silently mean 30ns.
func (d *Duration) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		x, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration; use a string such as \"30s\", \"2m\" or \"1h30m\"", v)
		}
		d.Duration = x
		return nil
	case int64:
		return fmt.Errorf("bare number %d is ambiguous (seconds? nanoseconds?); use a string such as \"%ds\"", v, v)
	case float64:
		return fmt.Errorf("bare number %v is ambiguous; use a string such as \"30s\"", v)
	default:
		return fmt.Errorf("expected a duration string such as \"30s\", got %s", describe(v))
	}
}

// MarshalJSON writes the duration as a string ("30s") so cells.json stays readable and
// round-trips through UnmarshalJSON.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}

// UnmarshalJSON reads the string form written by MarshalJSON; "" means zero.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: expected a JSON string such as \"30s\": %w", err)
	}
	if s == "" {
		d.Duration = 0
		return nil
	}
	x, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	d.Duration = x
	return nil
}
