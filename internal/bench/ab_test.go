package bench

import (
	"maps"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want quartiles
	}{
		{nil, quartiles{}},
		{[]float64{3}, quartiles{3, 3, 3, 3, 3}},
		{[]float64{4, 1, 3, 2}, quartiles{Median: 2.5, Q1: 1.75, Q3: 3.25, Min: 1, Max: 4}},
		{[]float64{5, 1, 4, 2, 3}, quartiles{Median: 3, Q1: 2, Q3: 4, Min: 1, Max: 5}},
	} {
		if got := spreadOf(c.in); got != c.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
		// The report's form of it.
		want := map[string]float64{}
		if len(c.in) > 0 {
			want = map[string]float64{"median": c.want.Median, "p25": c.want.Q1, "p75": c.want.Q3, "min": c.want.Min, "max": c.want.Max, "n": float64(len(c.in))}
		}
		if got := spread(c.in); !maps.Equal(got, want) {
			t.Errorf("spread(%v) = %v, want %v", c.in, got, want)
		}
	}
}

// A variant's change is the median of its rounds' changes, each against
// the first variant's p50 of the same round: a round where the whole
// machine was slower moves both sides, not the change.
func TestRoundChanges(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*float64(time.Millisecond)))
		}
		return d
	}
	off := [][]time.Duration{ms(1, 1, 1), ms(2, 2, 2), ms(1, 1, 1), ms(4, 4, 4)}
	on := [][]time.Duration{ms(1.1, 1.1, 1.1), ms(2.2, 2.2, 2.2), ms(1.05, 1.05, 1.05), ms(4.2, 4.2, 4.2)}
	c := roundChanges(off, on)
	if c.Median < 7.4 || c.Median > 7.6 || c.Min < 4.9 || c.Min > 5.1 || c.Max < 9.9 || c.Max > 10.1 {
		t.Errorf("changes %+v, want a median of 7.5 %% between 5 and 10", c)
	}
	// Pooled, the slow rounds would have set the p50s: 2 ms against 2.2.
	if p := (stats(append(append(append(on[0], on[1]...), on[2]...), on[3]...)).P50/stats(append(append(append(off[0], off[1]...), off[2]...), off[3]...)).P50 - 1) * 100; p < 9 {
		t.Fatalf("the pooled change is %.1f %%: the test's rounds no longer show the difference", p)
	}
}
