package metrics

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"airlock/internal/apitype"
	"airlock/internal/egress"
	"airlock/internal/session"
)

// Family describes one metric a server exports.
type Family struct {
	Name, Type, Help string
	Labels           []string
}

// Catalog describes every airlock_ metric a server may export (the Go
// runtime's and the process's are left out), read from the collectors
// themselves: a fresh registry with every collector a server registers,
// each fed one sample so that it shows. The reference in
// docs/reference/metrics.md is generated from it.
func Catalog() []Family {
	m := New()
	m.Pools(func() map[string]any {
		return map[string]any{"python": apitype.PoolStats{MemoryBudget: 1}, apitype.TemplateKey: apitype.TemplateStats{Lean: &apitype.TemplateStats{}}}
	})
	m.Quotas(func() map[string]map[string]uint64 { return map[string]map[string]uint64{"t": {"q": 1}} })
	m.Egress(func() egress.SharedStats { return egress.SharedStats{} })
	m.Audit(func() apitype.AuditHealth { return apitype.AuditHealth{Status: "ok"} })
	m.Paused(func() map[string]session.PausedUsage { return map[string]session.PausedUsage{"t": {}} })
	m.Ptys(1, 1, func() (int, error) { return 0, nil })
	for _, c := range m.own {
		switch v := c.(type) {
		case *prometheus.CounterVec:
			touch(v.MetricVec)
		case *prometheus.GaugeVec:
			touch(v.MetricVec)
		case *prometheus.HistogramVec:
			touch(v.MetricVec)
		}
	}
	fams, err := m.reg.Gather()
	if err != nil {
		panic(err) // the collectors are airlock's own: a bug
	}
	var out []Family
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), Namespace+"_") {
			continue
		}
		fam := Family{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		if len(f.Metric) > 0 {
			for _, l := range f.Metric[0].GetLabel() {
				fam.Labels = append(fam.Labels, l.GetName())
			}
		}
		out = append(out, fam)
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// touch makes one child of v, whatever the number of its labels, so that
// it is gathered.
func touch(v *prometheus.MetricVec) {
	for n := 0; n <= 16; n++ {
		if _, err := v.GetMetricWithLabelValues(slices.Repeat([]string{"x"}, n)...); err == nil {
			return
		}
	}
}
