package bench

import (
	"encoding/json"
	"errors"
)

// LoadReport decodes a report as `airlock bench --json` prints it.
func LoadReport(b []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Start == "" || r.Stats == nil {
		return nil, errors.New("not a report of airlock bench --json (no start time or no stats)")
	}
	return &r, nil
}

// Stat is the timing stored under key, and whether the report has it.
func (r *Report) Stat(key string) (Stat, bool) { return figure[Stat](r, key) }

// Number is the number stored under key, and whether the report has it.
func (r *Report) Number(key string) (float64, bool) { return figure[float64](r, key) }

// Text is the text stored under key, and whether the report has it.
func (r *Report) Text(key string) (string, bool) { return figure[string](r, key) }

// Numbers is the named numbers stored under key, and whether the report
// has them.
func (r *Report) Numbers(key string) (map[string]float64, bool) {
	return figure[map[string]float64](r, key)
}

// Floats is the list of numbers stored under key, and whether the report
// has it.
func (r *Report) Floats(key string) ([]float64, bool) { return figure[[]float64](r, key) }

// figure is the value of Stats[key] as a T: as stored by a run, or as
// decoded from its JSON.
func figure[T any](r *Report, key string) (T, bool) {
	var out T
	v, ok := r.Stats[key]
	if !ok {
		return out, false
	}
	if t, ok := v.(T); ok {
		return t, true
	}
	b, err := json.Marshal(v)
	if err != nil || json.Unmarshal(b, &out) != nil {
		return out, false
	}
	return out, true
}
