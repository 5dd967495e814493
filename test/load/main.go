// Command load is MessageHub's native gRPC load generator. It drives a
// running hub (or one it starts itself with -spawn) through a few fixed
// scenarios and prints throughput and latency percentiles:
//
//	go run ./test/load -spawn -scenario save-batch
//	go run ./test/load -addr 127.0.0.1:50051 -scenario save-single,drain -json
//
// Every scenario is bounded both in time (-duration, plus a fixed cap on its
// preparation) and in count (-requests, -notifications, -repeat). See
// README.md for what each scenario does and what its numbers mean.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/energydatahub/messagehub/codec"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// The hub's own codec serves the tool's calls: vtprotobuf's generated
// (un)marshalling costs less CPU than protobuf's reflection. It is
// registered as the proto codec rather than forced per call, which would
// make every call name it in its content type (a string built per call).
func init() { encoding.RegisterCodecV2(codec.New()) }

// gcPercent is the tool's GOGC unless the environment sets one.
const gcPercent = 400

// Limits of the API (validation and bundling, internal/domain) the scenarios
// rely on.
const (
	maxPerSave             = 10_000
	defaultMaxBundleWeight = 51_200
	maxUint31              = 1<<31 - 1
)

// scenarioNames lists the scenarios in the order "all" runs them.
var scenarioNames = []string{"save-batch", "save-single", "drain", "peek-full", "dequeue-rate", "backlog", "call-floor"}

// Config is everything the tool is told on its command line.
type Config struct {
	Addr            string
	Scenarios       []string
	Spawn           bool
	ServerBin       string // with Spawn: a prebuilt binary; empty builds ./cmd/messagehub
	MaxBundleWeight int64  // 0: not given (server default, or bundle-size for drain with -spawn)
	Concurrency     int    // 0: the scenario's default
	Conns           int
	Duration        time.Duration
	Requests        int
	Batch           int
	Recipients      int
	RecipientSeed   uint64 // save-*, backlog: recipients from this seed (0: new random ones)
	Spread          bool   // save-batch: each Save's notifications round-robin over the recipients
	DataDir         string // with Spawn: the hub's data dir, kept (empty: a fresh temporary one)
	Notifications   int
	BundleSize      int
	PeekSize        int
	Repeat          int
	Rate            int
	CallTimeout     time.Duration
	PrepTimeout     time.Duration
	JSON            bool
	Verbose         bool
}

func defaultConfig() Config {
	return Config{
		Addr:          "127.0.0.1:50051",
		Scenarios:     []string{"save-batch"},
		Conns:         1,
		Duration:      10 * time.Second,
		Batch:         1000,
		Recipients:    64,
		Notifications: 300_000,
		BundleSize:    1000,
		PeekSize:      defaultMaxBundleWeight,
		Repeat:        20,
		Rate:          1000,
		CallTimeout:   30 * time.Second,
		PrepTimeout:   5 * time.Minute,
	}
}

func parseFlags(args []string, out io.Writer) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(out)
	scenarios := fs.String("scenario", strings.Join(cfg.Scenarios, ","), "comma-separated scenarios, or all: "+strings.Join(scenarioNames, ", "))
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "address of a running hub (ignored with -spawn)")
	fs.BoolVar(&cfg.Spawn, "spawn", false, "build and start ./cmd/messagehub on 127.0.0.1:0 with a temporary data dir, once per scenario, and stop it after (SIGTERM)")
	fs.StringVar(&cfg.ServerBin, "server-bin", "", "with -spawn: use this messagehub binary instead of building one")
	fs.Int64Var(&cfg.MaxBundleWeight, "max-bundle-weight", 0, "the hub's bundle weight limit; with -spawn it is passed to the hub (default: the hub's 51200, or -bundle-size for drain)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "concurrent workers (default: save-batch 8, save-single 64, call-floor 64, drain 8; peek-full runs one)")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "gRPC connections, used round-robin by the workers")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each scenario's measured phase runs at most")
	fs.IntVar(&cfg.Requests, "requests", 0, "save-batch, save-single, call-floor: stop after this many calls (0: only -duration)")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "save-batch: notifications per Save (1..10000)")
	fs.IntVar(&cfg.Recipients, "recipients", cfg.Recipients, "save-batch, save-single, dequeue-rate: how many recipients the notifications are spread over")
	fs.Uint64Var(&cfg.RecipientSeed, "recipient-seed", 0, "save-batch, save-single, backlog: take the recipients from this seed's sequence (0: new random ones), so that saves go to the recipients a backlog run on the same -data-dir filled")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "with -spawn: run the hub on this data dir and keep it (to measure with a backlog; see the backlog scenario) instead of a fresh temporary one")
	fs.BoolVar(&cfg.Spread, "spread", false, "save-batch, save-single: give each Save's notifications to the recipients in turn (a Save of 1,000 over 100 recipients: 10 each) instead of at random")
	fs.IntVar(&cfg.Notifications, "notifications", cfg.Notifications, "drain: notifications pre-loaded, then drained")
	fs.IntVar(&cfg.BundleSize, "bundle-size", cfg.BundleSize, "drain: notifications per bundle")
	fs.IntVar(&cfg.PeekSize, "peek-size", cfg.PeekSize, "peek-full: notifications (of weight 1) in the bundle peeked")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "peek-full: peeks measured (each followed by an untimed dequeue and refill)")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "dequeue-rate: dequeues per second, open loop")
	fs.DurationVar(&cfg.CallTimeout, "call-timeout", cfg.CallTimeout, "deadline of each call")
	fs.DurationVar(&cfg.PrepTimeout, "prep-timeout", cfg.PrepTimeout, "bound on each scenario's untimed preparation (pre-loading)")
	fs.BoolVar(&cfg.JSON, "json", false, "also print one JSON object per scenario (on stdout, after the table)")
	fs.BoolVar(&cfg.Verbose, "v", false, "log progress and the spawned hub's output to stderr")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg.Scenarios = nil
	for s := range strings.SplitSeq(*scenarios, ",") {
		s = strings.TrimSpace(s)
		var names []string
		switch {
		case s == "":
		case s == "all":
			names = scenarioNames
		case slices.Contains(scenarioNames, s):
			names = []string{s}
		default:
			return cfg, fmt.Errorf("unknown scenario %q (known: %s, all)", s, strings.Join(scenarioNames, ", "))
		}
		for _, n := range names {
			if !slices.Contains(cfg.Scenarios, n) {
				cfg.Scenarios = append(cfg.Scenarios, n)
			}
		}
	}
	return cfg, cfg.validate()
}

func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(len(c.Scenarios) > 0, "no scenario given")
	check(c.Batch >= 1 && c.Batch <= maxPerSave, "-batch must be 1..%d", maxPerSave)
	check(c.Concurrency >= 0 && c.Concurrency <= 10_000, "-concurrency must be 0..10000")
	check(c.Conns >= 1 && c.Conns <= 64, "-conns must be 1..64")
	check(c.Duration > 0, "-duration must be positive")
	check(c.Requests >= 0, "-requests must not be negative")
	check(c.Recipients >= 1 && c.Recipients <= 100_000, "-recipients must be 1..100000")
	check(c.Notifications >= 1 && c.Notifications <= 50_000_000, "-notifications must be 1..50000000")
	check(c.BundleSize >= 1 && c.BundleSize <= maxUint31, "-bundle-size must be at least 1")
	check(c.PeekSize >= 1 && c.PeekSize <= 1_000_000, "-peek-size must be 1..1000000")
	check(c.Repeat >= 1 && c.Repeat <= 10_000, "-repeat must be 1..10000")
	check(c.Rate >= 1 && c.Rate <= 100_000, "-rate must be 1..100000")
	check(c.MaxBundleWeight >= 0 && c.MaxBundleWeight <= maxUint31, "-max-bundle-weight must be 0..%d", maxUint31)
	check(c.CallTimeout > 0 && c.PrepTimeout > 0, "timeouts must be positive")
	return errors.Join(errs...)
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	if os.Getenv("GOGC") == "" {
		// The tool keeps little (latency samples, the requests in flight)
		// and makes much garbage per call: collecting a small heap often
		// costs CPU that the hub, on the same machine, needs. GOGC, when
		// set, decides instead.
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := runAll(ctx, cfg, logf(cfg.Verbose))
	printTable(os.Stdout, results)
	if cfg.JSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				fmt.Fprintln(os.Stderr, "load:", err)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	for _, r := range results {
		if r.Errors > 0 {
			os.Exit(1)
		}
	}
}

type logFunc func(format string, args ...any)

func logf(verbose bool) logFunc {
	if !verbose {
		return func(string, ...any) {}
	}
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s load: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// runAll runs the scenarios one after another, each against its own spawned
// hub when cfg.Spawn is set. It stops at the first scenario that cannot run.
func runAll(ctx context.Context, cfg Config, log logFunc) ([]*Result, error) {
	var results []*Result
	var builder serverBuilder
	defer builder.cleanup()
	for _, name := range cfg.Scenarios {
		r, err := runOne(ctx, cfg, name, &builder, log)
		if r != nil {
			results = append(results, r)
		}
		if err != nil {
			return results, fmt.Errorf("%s: %w", name, err)
		}
	}
	return results, nil
}

func runOne(ctx context.Context, cfg Config, name string, builder *serverBuilder, log logFunc) (res *Result, err error) {
	addr := cfg.Addr
	maxWeight := cfg.MaxBundleWeight
	if name == "drain" && cfg.Spawn && maxWeight == 0 {
		// Bundles of exactly -bundle-size notifications of weight 1.
		maxWeight = int64(cfg.BundleSize)
	}
	var srv *server
	if cfg.Spawn {
		bin, err := builder.binary(ctx, cfg.ServerBin, log)
		if err != nil {
			return nil, err
		}
		srv, err = spawnServer(ctx, bin, maxWeight, cfg.DataDir, log)
		if err != nil {
			return nil, err
		}
		defer func() {
			if serr := srv.stop(); serr != nil {
				err = errors.Join(err, serr)
			}
		}()
		addr = srv.Addr
	}
	if maxWeight == 0 {
		maxWeight = defaultMaxBundleWeight
	}
	conns := make([]*grpc.ClientConn, cfg.Conns)
	clients := make([]messagehubv1.MessageHubClient, cfg.Conns)
	health := make([]healthpb.HealthClient, cfg.Conns)
	for i := range conns {
		c, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(32<<20)),
		)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		defer func() { _ = c.Close() }()
		conns[i], clients[i], health[i] = c, messagehubv1.NewMessageHubClient(c), healthpb.NewHealthClient(c)
	}
	e := &env{cfg: cfg, clients: clients, health: health, maxWeight: maxWeight, log: log}
	if err := e.warmUp(ctx); err != nil {
		return nil, fmt.Errorf("hub at %s not answering: %w", addr, err)
	}
	log("%s: starting against %s (max bundle weight %d)", name, addr, maxWeight)
	if srv != nil {
		srv.begin()
	}
	res, err = scenarios[name](ctx, e)
	if res != nil {
		res.Scenario = name
		res.Params["spawn"] = cfg.Spawn
		res.Params["max_bundle_weight"] = maxWeight
		if srv != nil {
			srv.report(res)
		}
	}
	return res, err
}
