package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestScenariosAgainstSpawnedHub runs every scenario very briefly against a
// hub the tool spawns itself, so the tool keeps working as the hub changes.
// The numbers are only checked for sanity, not against the goals.
func TestScenariosAgainstSpawnedHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the hub")
	}
	cfg := defaultConfig()
	cfg.Scenarios = scenarioNames
	cfg.Spawn = true
	cfg.Duration = 300 * time.Millisecond
	cfg.Batch = 100
	cfg.Recipients = 8
	cfg.Notifications = 1600 // 8 recipients × 200, two bundles of 100 each
	cfg.BundleSize = 100
	cfg.PeekSize = 2000
	cfg.MaxBundleWeight = 2000 // peek-full: bundles of 2000 of weight 1; drain: of 100 of weight 20
	cfg.Repeat = 2
	cfg.Rate = 200
	cfg.PrepTimeout = 2 * time.Minute
	var log logFunc = func(format string, args ...any) { t.Logf(format, args...) }
	if !testing.Verbose() {
		log = func(string, ...any) {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := runAll(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(scenarioNames) {
		t.Fatalf("got %d results, want %d", len(results), len(scenarioNames))
	}
	want := map[string]map[string]func(float64) bool{
		"save-batch": {
			"notifications_per_s": positive, "requests_per_s": positive, "latency_p50_ms": positive,
			"hub_cpu_s": positive, "hub_cpu_us_per_notification": positive,
		},
		"save-single": {"notifications_per_s": positive, "latency_p99_ms": positive, "tool_cpu_us_per_request": positive, "hub_cpu_us_per_request": atLeast(0)},
		"call-floor": {
			"requests_per_s": positive, "latency_p99_ms": positive, "requests_done": atLeast(1),
			"tool_cpu_us_per_request": positive, "hub_cpu_us_per_request": atLeast(0),
		},
		"drain": {
			"notifications_per_s": positive, "drained_fraction": equals(1), "mean_bundle_size": equals(100),
			"peek_p50_ms": positive, "dequeue_p50_ms": positive,
		},
		"peek-full":    {"peek_p50_ms": positive, "peek_samples": atLeast(1), "repeek_p50_ms": positive},
		"dequeue-rate": {"achieved_rps": positive, "dequeue_samples": equals(60), "dequeue_p99_ms": positive, "skipped_ticks": equals(0)},
		"backlog": {"notifications_per_s": positive, "hub_startup_s": positive, "hub_rss_start_mib": positive, "hub_rss_end_mib": positive,
			// In clock ticks of 10 ms: the test's small backlog may take less.
			"hub_cpu_s": atLeast(0), "hub_cpu_us_per_notification": atLeast(0)},
	}
	for _, r := range results {
		if r.Errors != 0 {
			t.Errorf("%s: %d errors: %v", r.Scenario, r.Errors, r.ErrorSamples)
		}
		for name, ok := range want[r.Scenario] {
			v, found := r.Metric(name)
			if !found || !ok(v) {
				t.Errorf("%s: %s = %v (present: %v), not sane", r.Scenario, name, v, found)
			}
		}
	}

	var table bytes.Buffer
	printTable(&table, results)
	for _, name := range scenarioNames {
		if !strings.Contains(table.String(), name+" (") {
			t.Errorf("table lacks %s:\n%s", name, table.String())
		}
	}
	for _, r := range results {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Scenario string             `json:"scenario"`
			Metrics  map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal(data, &back); err != nil || back.Scenario != r.Scenario || len(back.Metrics) != len(r.Metrics) {
			t.Errorf("JSON of %s = %s (%v)", r.Scenario, data, err)
		}
	}
	if t.Failed() {
		t.Logf("results:\n%s", table.String())
	}
}

func positive(v float64) bool { return v > 0 }

func equals(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{args: nil, want: []string{"save-batch"}},
		{args: []string{"-scenario", "drain,peek-full"}, want: []string{"drain", "peek-full"}},
		{args: []string{"-scenario", "all"}, want: scenarioNames},
		{args: []string{"-scenario", "drain,all,drain"}, want: []string{"drain", "save-batch", "save-single", "peek-full", "dequeue-rate", "backlog", "call-floor"}},
		{args: []string{"-scenario", "nope"}, wantErr: "unknown scenario"},
		{args: []string{"-batch", "10001"}, wantErr: "-batch"},
		{args: []string{"-rate", "0"}, wantErr: "-rate"},
		{args: []string{"extra"}, wantErr: "unexpected"},
	}
	for _, tt := range tests {
		cfg, err := parseFlags(tt.args, io.Discard)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseFlags(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("parseFlags(%q): %v", tt.args, err)
		case strings.Join(cfg.Scenarios, ",") != strings.Join(tt.want, ","):
			t.Errorf("parseFlags(%q) scenarios = %v, want %v", tt.args, cfg.Scenarios, tt.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	s := make([]time.Duration, 100)
	for i := range s {
		s[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.9, 90 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(s, tt.q); got != tt.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("percentile of one sample = %v, want it", got)
	}
}

// TestSpreadGivesEveryRecipientItsShare checks the users' shape: a Save of
// 1,000 spread over 100 recipients holds 10 notifications for each.
func TestSpreadGivesEveryRecipientItsShare(t *testing.T) {
	recipients := newRecipients(100)
	ns := newGen().saveBatch(recipients, 1000, true)
	count := map[string]int{}
	for _, n := range ns {
		count[n.GetRecipient()]++
	}
	for _, r := range recipients {
		if count[r] != 10 {
			t.Errorf("recipient %s got %d notifications, want 10", r, count[r])
		}
	}
}

// TestRecipientSeedGivesTheSameRecipients: with -recipient-seed, a run of
// fewer recipients saves for the first of those a backlog run filled.
func TestRecipientSeedGivesTheSameRecipients(t *testing.T) {
	seeded := &env{cfg: Config{RecipientSeed: 7}}
	filled, measured := seeded.recipients(10_000), seeded.recipients(100)
	if !slices.Equal(measured, filled[:100]) {
		t.Fatalf("seeded recipients differ between runs: %v… against %v…", measured[:2], filled[:2])
	}
	for _, r := range filled[:100] {
		if u, err := uuid.Parse(r); err != nil || u.Version() != 4 {
			t.Fatalf("recipient %q is not a version-4 UUID (%v)", r, err)
		}
	}
	if other := (&env{cfg: Config{RecipientSeed: 8}}).recipients(1); other[0] == filled[0] {
		t.Fatal("two seeds gave the same recipient")
	}
	random := &env{}
	if a, b := random.recipients(1), random.recipients(1); a[0] == b[0] {
		t.Fatal("without a seed, two runs gave the same recipient")
	}
}

// TestDataDirIsKeptForTheNextRun checks that a hub spawned on -data-dir
// leaves its data there, so a later run measures with that backlog.
func TestDataDirIsKeptForTheNextRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the hub")
	}
	cfg := defaultConfig()
	cfg.Scenarios = []string{"backlog", "backlog"}
	cfg.Spawn = true
	cfg.DataDir = t.TempDir()
	cfg.Notifications = 500
	cfg.Recipients = 5
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := runAll(ctx, cfg, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(cfg.DataDir)
	if err != nil || len(entries) == 0 || len(results) != 2 {
		t.Fatalf("data dir after the runs: %v entries (%v); %d results", len(entries), err, len(results))
	}
}
