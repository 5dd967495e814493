package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one scenario measured.
type Result struct {
	Scenario     string
	Params       map[string]any
	Metrics      []Metric // in the order printed
	Errors       int64
	ErrorSamples []string
}

// Metric is one number of a Result. Name includes the unit (e.g.
// "latency_p99_ms"), so the JSON output needs no separate unit field.
type Metric struct {
	Name  string
	Value float64
}

func newResult(params map[string]any) *Result {
	if params == nil {
		params = map[string]any{}
	}
	return &Result{Params: params}
}

func (r *Result) add(name string, v float64) { r.Metrics = append(r.Metrics, Metric{name, v}) }

// Metric returns the value of the named metric and whether it is there.
func (r *Result) Metric(name string) (float64, bool) {
	i := slices.IndexFunc(r.Metrics, func(m Metric) bool { return m.Name == name })
	if i < 0 {
		return 0, false
	}
	return r.Metrics[i].Value, true
}

// addLatencies adds p50, p90, p99 and max of the samples, in milliseconds,
// under prefix (e.g. "latency" gives "latency_p50_ms").
func (r *Result) addLatencies(prefix string, samples []time.Duration) {
	s := slices.Clone(samples)
	slices.Sort(s)
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}} {
		r.add(prefix+"_"+p.name+"_ms", ms(percentile(s, p.q)))
	}
	if len(s) > 0 {
		r.add(prefix+"_max_ms", ms(s[len(s)-1]))
	} else {
		r.add(prefix+"_max_ms", 0)
	}
	r.add(prefix+"_samples", float64(len(s)))
}

// MarshalJSON writes one flat object per scenario.
func (r *Result) MarshalJSON() ([]byte, error) {
	metrics := make(map[string]float64, len(r.Metrics))
	for _, m := range r.Metrics {
		metrics[m.Name] = round(m.Value, 3)
	}
	return json.Marshal(struct {
		Scenario     string             `json:"scenario"`
		Params       map[string]any     `json:"params"`
		Metrics      map[string]float64 `json:"metrics"`
		Errors       int64              `json:"errors"`
		ErrorSamples []string           `json:"error_samples,omitempty"`
	}{r.Scenario, r.Params, metrics, r.Errors, r.ErrorSamples})
}

// percentile is the nearest-rank percentile of sorted samples: the smallest
// sample that at least q of all samples are less than or equal to.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// rate is count per second of elapsed (0 when nothing elapsed).
func rate(count int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(count) / elapsed.Seconds()
}

// errorLog counts errors and keeps the first few messages.
type errorLog struct {
	n       atomic.Int64
	mu      sync.Mutex
	samples []string
}

const keepErrors = 5

func (e *errorLog) add(err error) {
	e.n.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.samples) < keepErrors {
		e.samples = append(e.samples, err.Error())
	}
}

func (e *errorLog) fill(r *Result) {
	r.Errors = e.n.Load()
	e.mu.Lock()
	defer e.mu.Unlock()
	r.ErrorSamples = slices.Clone(e.samples)
}

// printTable prints every result as a block of "metric value" lines.
func printTable(w io.Writer, results []*Result) {
	for _, r := range results {
		fmt.Fprintf(w, "%s (%s)\n", r.Scenario, paramString(r.Params))
		for _, m := range r.Metrics {
			fmt.Fprintf(w, "  %-28s %14s\n", m.Name, format(m.Value))
		}
		fmt.Fprintf(w, "  %-28s %14d\n", "errors", r.Errors)
		for _, s := range r.ErrorSamples {
			fmt.Fprintf(w, "    error: %s\n", s)
		}
	}
}

func paramString(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, p[k])
	}
	return strings.Join(parts, " ")
}

func format(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
