package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/backend"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// This file is the one place in the package that names the hub and the
// store: the store chain (backend.Open), the hub over it and the disk guard
// are wired here.

// The defaults and the check of the Cosmos DB settings, which are the
// backend's own.
const (
	defaultCosmosIDBuckets  = cosmos.DefaultIDBuckets
	defaultCosmosThroughput = string(cosmos.DefaultThroughput)
	// cosmosSaveGroups is how many save groups an instance writes at once on
	// Cosmos DB, each with a request per recipient in flight at a time (up
	// to cosmos.Parallel) and its page batches.
	cosmosSaveGroups = 8
)

func validateCosmosThroughput(v string) error { return cosmos.Throughput(v).Validate() }

// storeWrapper wraps the opened store under everything else (Config's
// wrapStore): tests use it to make the real store misbehave.
type storeWrapper = func(store.Store) store.Store

// openHub opens the store, the documents next to it and the hub over both,
// and returns the core the gRPC servers serve; the document service is nil
// without a place for documents.
func (a *App) openHub(ctx context.Context) (*hub.Hub, *content.Service, error) {
	if a.cfg.Store == StoreEmbedded && a.cfg.MinFreeDisk > 0 {
		// Before anything is opened: a reserve the volume can never have
		// free refuses the start rather than every save.
		if err := diskguard.CheckReserve(a.cfg.DataDir, a.cfg.MinFreeDisk); err != nil {
			return nil, nil, err
		}
		a.guard = diskguard.New(a.cfg.DataDir, a.cfg.MinFreeDisk, nil, 0, a.logger)
		a.onClose("disk guard", func() error { a.guard.Close(); return nil })
		if err := a.tel.WatchDiskGuard(a.guard); err != nil {
			return nil, nil, err
		}
	}
	measured, err := a.openStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	a.onClose("store", func() error {
		if err := measured.Close(); err != nil {
			return fmt.Errorf("close store: %w", err)
		}
		a.logger.Info("store closed")
		return nil
	})
	if a.cfg.wrapStore != nil {
		measured = a.cfg.wrapStore(measured)
	}
	a.backup = backup{dataDir: a.cfg.DataDir, store: measured, copying: &sync.RWMutex{}}
	hubOpts := hub.Options{MaxBundleWeight: a.cfg.MaxBundleWeight, Retention: a.cfg.Retention,
		BellErrors: func(op string) { a.tel.Metrics.RecordBellError(context.Background(), op) }}
	if a.cfg.Store == StoreCosmos {
		hubOpts.PlanParallel = cosmos.Parallel
		// A recipient whose partition is throttled holds up only the Saves
		// that name it: the groups of other recipients commit meanwhile.
		hubOpts.ConcurrentGroups = cosmosSaveGroups
	}
	// Bundles' documents live next to the embedded store, or in Azure Blob
	// Storage with Cosmos DB, and are served even for a domain whose
	// provider has since been removed.
	documents, err := a.openDocuments(ctx)
	if err != nil {
		return nil, nil, err
	}
	if documents != nil {
		hubOpts.ForgetBundles = a.backup.forget(content.Forget(documents))
		// Domains with a provider hear of their bundles' dequeues.
		hubOpts.Notices = func(o domain.Origin) bool { _, ok := a.cfg.Content.Providers[o]; return ok }
	}
	// This instance's dequeues wake its notifier; it polls only for other
	// instances' notices, rarely when there are none.
	signal := content.NewNoticeSignal()
	hubOpts.OnNotice = signal.Send
	if err := a.keepFigures(measured, documents != nil); err != nil {
		return nil, nil, err
	}
	core := hub.New(measured, hubOpts, a.logger)
	a.stopWaits, a.waiting = core.StopWaits, core.Waiting
	// Queued saves commit here; a store that does not answer holds this
	// stage up until the shutdown deadline (shutdown.go).
	a.onClose("hub", func() error { core.Close(); return nil })
	if err := a.tel.ObserveRetention(core.StuckSweeps); err != nil {
		return nil, nil, err
	}
	if documents == nil {
		return core, nil, nil
	}
	var grace time.Duration
	if a.cfg.Store == StoreCosmos {
		// Instances share the outbox: each tells its own dequeues, and
		// another's only once they are overdue.
		grace = a.cfg.Content.NoticeGrace
	}
	if a.guard != nil { // new documents are new data on the store's volume
		documents = diskguard.Documents(documents, a.guard)
	}
	docs, closeDocs, err := contentService(a.cfg.Content, a.providerCreds,
		content.Options{
			Store: documents,
			// Shared through the store, whose leases make the instances
			// sharing it ask a domain once.
			Lease: measured,
			// An instance that died holds a build up for this long at most.
			LeaseDuration:  a.cfg.Content.Lease,
			MaxBuildMemory: a.cfg.Content.BuildMemory,
			Pending:        core.IsPending,
			Holds:          core.HoldsBundle,
			Logger:         a.logger,
			Metrics:        a.tel.Metrics,
		},
		content.NotifierOptions{
			Notices: measured,
			Bundle:  core.NoticedBundle,
			Signal:  signal,
			Grace:   grace,
			Logger:  a.logger,
			Metrics: a.tel.Metrics,
		})
	if err != nil {
		return nil, nil, err
	}
	// Closed before the hub: builds ask it whether bundles are pending.
	a.onClose("documents service", func() error { closeDocs(); return nil })
	return core, docs, nil
}

// keepFigures recounts the backlog figures when they are due and this
// instance holds their lease, and shows them (with the outbox's when there
// is one) in the gauges. The embedded store is local: its figures are
// recounted as often as the gauges are read.
func (a *App) keepFigures(s store.Store, outbox bool) error {
	opts := figures.Options{Logger: a.logger}
	if a.cfg.Store == StoreEmbedded {
		opts.Every = telemetry.DefaultBacklogInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); figures.New(s, opts).Run(ctx) }()
	a.onClose("figures keeper", func() error { cancel(); <-done; return nil })
	stop, err := a.tel.WatchBacklog(func(ctx context.Context) (store.BacklogFigures, error) {
		return s.ReadFigures(ctx, store.FigureTotals)
	}, telemetry.DefaultBacklogInterval, outbox, a.logger)
	if err != nil {
		return err
	}
	a.onClose("backlog watcher", func() error { stop(); return nil })
	return nil
}

// openStore opens the configured store chain (backend.Open), the embedded
// store behind the disk guard when there is one.
func (a *App) openStore(ctx context.Context) (store.Store, error) {
	cfg := a.cfg
	kind := backend.Pebble
	if cfg.Store == StoreCosmos {
		kind = backend.Cosmos
	}
	return backend.Open(ctx, backend.Config{
		Kind:    kind,
		DataDir: cfg.DataDir,
		Guard:   a.guard,
		Cosmos: cosmos.Config{
			Endpoint:         cfg.Cosmos.Endpoint,
			Key:              cfg.Cosmos.Key,
			Database:         cfg.Cosmos.Database,
			Provision:        cfg.Cosmos.Provision,
			IDBuckets:        cfg.Cosmos.IDBuckets,
			MigrateIDBuckets: cfg.Cosmos.MigrateIDBuckets,
			Throughput:       cosmos.Throughput(cfg.Cosmos.Throughput),
			Retention:        cfg.Retention,
		},
		Logger:  a.logger,
		Metrics: a.tel.Metrics,
	})
}
