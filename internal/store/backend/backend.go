// Package backend opens the store a deployment names and composes the chain
// the hub runs on: the backend (pebble or Cosmos DB) and, around it, the
// disk guard (embedded store) and the metrics. The binary and the shared
// suites open stores through Open, so the suites check the chain the binary
// runs.
package backend

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/instrumented"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// Kind names a backend.
type Kind string

// The backends.
const (
	Pebble Kind = "embedded" // the embedded store in a local directory
	Cosmos Kind = "cosmos"   // Azure Cosmos DB, shared by several instances
)

// Config says which backend to open and how.
type Config struct {
	Kind    Kind
	DataDir string // Pebble: the store's directory
	// Guard, when set, keeps the embedded store's volume from filling: its
	// writes are refused below the guard's reserve (saves) or floor (the
	// rest), and a store found below the floor at start opens read-only.
	Guard  *diskguard.Guard
	Cosmos cosmos.Config // Cosmos: the account and database (its OnRequest defaults to Metrics)
	Logger *slog.Logger
	// Metrics records every store operation, and every request of a remote
	// backend; nil records nothing.
	Metrics *telemetry.Metrics
}

// Open opens the backend and returns it behind the decorators: the disk
// guard, then the metrics of every operation. Closing the result closes the
// backend.
func Open(ctx context.Context, cfg Config) (store.Store, error) {
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.Discard()
	}
	var (
		s   store.Store
		err error
	)
	switch cfg.Kind {
	case Pebble:
		s, err = openPebble(cfg)
	case Cosmos:
		c := cfg.Cosmos
		if c.Logger == nil {
			c.Logger = cfg.Logger
		}
		if c.OnRequest == nil {
			c.OnRequest = cfg.Metrics.RecordRequest
		}
		s, err = cosmos.Open(ctx, c)
		if err != nil {
			err = fmt.Errorf("open cosmos store at %s: %w", c.Endpoint, err)
		}
	default:
		err = fmt.Errorf("unknown store backend %q", cfg.Kind)
	}
	if err != nil {
		return nil, err
	}
	return instrumented.New(s, cfg.Metrics), nil
}

// openPebble opens the embedded store, behind the disk guard when there is
// one.
func openPebble(cfg Config) (store.Store, error) {
	if cfg.Guard == nil {
		return pebble.Open(cfg.DataDir, cfg.Logger)
	}
	s, err := pebble.OpenWith(cfg.DataDir, cfg.Logger, pebble.Options{ReadOnly: cfg.Guard.ReadOnlyAtStart(), Room: cfg.Guard.Room})
	if err != nil {
		return nil, err
	}
	return diskguard.Store(s, cfg.Guard), nil
}
