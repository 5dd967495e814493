// Command summary prints ghz JSON reports as one table:
//
//	go run ./test/load/ghz/summary out/*.json
//
// Latencies are ghz's (client-side, nearest-rank percentiles over every
// call); see ../README.md for how to read them.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the part of a ghz JSON report the table shows.
type report struct {
	Count        uint64        `json:"count"`
	Total        time.Duration `json:"total"`
	Slowest      time.Duration `json:"slowest"`
	Rps          float64       `json:"rps"`
	Distribution []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
	Status map[string]int `json:"statusCodeDistribution"`
	Errors map[string]int `json:"errorDistribution"`
}

func (r report) percentile(p int) string {
	for _, d := range r.Distribution {
		if d.Percentage == p {
			return ms(d.Latency)
		}
	}
	return "-"
}

// maxErrorLines bounds the error messages shown per report (ghz keys them by
// message, and a message often holds an id).
const maxErrorLines = 5

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: summary REPORT.json...")
		os.Exit(2)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tcalls\terrors\tcalls/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\twall s\t")
	var problems []string
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path) //nolint:gosec // the operator names the reports
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var r report
		if err := json.Unmarshal(data, &r); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
		errs := 0
		for code, n := range r.Status {
			if code != "OK" {
				errs += n
			}
		}
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		fmt.Fprintf(w, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%.1f\t\n", name, r.Count, errs, r.Rps,
			r.percentile(50), r.percentile(90), r.percentile(99), ms(r.Slowest), r.Total.Seconds())
		shown := 0
		for msg, n := range r.Errors {
			if shown == maxErrorLines {
				problems = append(problems, fmt.Sprintf("%s: ... and %d more kinds of error", name, len(r.Errors)-shown))
				break
			}
			problems = append(problems, fmt.Sprintf("%s: %d x %s", name, n, msg))
			shown++
		}
	}
	_ = w.Flush()
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}
