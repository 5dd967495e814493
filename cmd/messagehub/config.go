package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Config is everything the binary is configured with. Each setting comes from
// a flag, else from its environment variable, else from its default.
type Config struct {
	GRPCAddr        string        // address the gRPC server listens on
	Store           string        // store backend: only "embedded" for now
	DataDir         string        // folder of the embedded store
	MaxBundleWeight int64         // largest total weight of a bundle (≥ 1)
	Retention       time.Duration // how long acknowledged data is kept (> 0)
	LogLevel        slog.Level    // minimum level logged
}

// StoreEmbedded is the default (and for now only) store backend.
const StoreEmbedded = "embedded"

// setting describes one configuration value: its flag, its environment
// variable, its default and how it is stored into Config.
type setting struct {
	flag, env, def, usage string
	set                   func(c *Config, v string) error
}

var settings = []setting{
	{"grpc-addr", "MESSAGEHUB_GRPC_ADDR", "127.0.0.1:50051", "address the gRPC server listens on (port 0 picks a free one)",
		func(c *Config, v string) error {
			if v == "" {
				return errors.New("must not be empty")
			}
			c.GRPCAddr = v
			return nil
		}},
	{"store", "MESSAGEHUB_STORE", StoreEmbedded, "store backend (embedded)",
		func(c *Config, v string) error {
			if v != StoreEmbedded {
				return fmt.Errorf("store %q is not supported: the only store available is %q", v, StoreEmbedded)
			}
			c.Store = v
			return nil
		}},
	{"data-dir", "MESSAGEHUB_DATA_DIR", "./data", "folder of the embedded store (created if missing)",
		func(c *Config, v string) error {
			if v == "" {
				return errors.New("must not be empty")
			}
			c.DataDir = v
			return nil
		}},
	{"max-bundle-weight", "MESSAGEHUB_MAX_BUNDLE_WEIGHT", strconv.Itoa(domain.DefaultMaxBundleWeight), "largest total weight of a bundle (at least 1)",
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("not an integer: %q", v)
			}
			if n < 1 {
				return fmt.Errorf("must be at least 1, got %d", n)
			}
			c.MaxBundleWeight = n
			return nil
		}},
	{"retention", "MESSAGEHUB_RETENTION", "168h", "how long acknowledged notifications and dequeued bundles are kept (Go duration, e.g. 168h)",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("not a duration: %q", v)
			}
			if d <= 0 {
				return fmt.Errorf("must be positive, got %s", d)
			}
			c.Retention = d
			return nil
		}},
	{"log-level", "MESSAGEHUB_LOG_LEVEL", "info", "minimum log level: debug, info, warn or error",
		func(c *Config, v string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(v)); err != nil {
				return fmt.Errorf("not a log level (debug, info, warn, error): %q", v)
			}
			c.LogLevel = l
			return nil
		}},
}

// ParseConfig reads the configuration from the command-line arguments (without
// the program name) and the environment (getenv). A flag beats its environment
// variable, which beats the default. Usage and errors go to output; -h returns
// flag.ErrHelp.
func ParseConfig(args []string, getenv func(string) string, output io.Writer) (Config, error) {
	fs := flag.NewFlagSet("messagehub", flag.ContinueOnError)
	fs.SetOutput(output)
	values := make([]*string, len(settings))
	for i, s := range settings {
		values[i] = fs.String(s.flag, s.def, fmt.Sprintf("%s (env %s)", s.usage, s.env))
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fromFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fromFlag[f.Name] = true })

	var cfg Config
	for i, s := range settings {
		v, source := *values[i], "--"+s.flag
		if !fromFlag[s.flag] {
			if e, ok := lookup(getenv, s.env); ok {
				v, source = e, s.env
			} else {
				source = "default of --" + s.flag
			}
		}
		if err := s.set(&cfg, v); err != nil {
			return Config{}, fmt.Errorf("%s: %w", source, err)
		}
	}
	return cfg, nil
}

// lookup treats an empty variable as unset, as most deployment tools do.
func lookup(getenv func(string) string, name string) (string, bool) {
	if getenv == nil {
		return "", false
	}
	v := getenv(name)
	return v, v != ""
}
