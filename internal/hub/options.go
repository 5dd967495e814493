package hub

import (
	"context"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Options configure a Repository.
type Options struct {
	MaxBundleWeight int64         // 0 means domain.DefaultMaxBundleWeight
	Retention       time.Duration // 0 means 7 days
	SweepInterval   time.Duration // 0 means derived from Retention
	Now             func() time.Time
	NewID           func() string // bundle and drawer ids; nil means random UUIDs
	// MaxCabinetDrawers bounds the drawers of one cabinet's entry; 0 means
	// catalog.MaxDrawers. Tests set a small one.
	MaxCabinetDrawers int
	// ForgetBundles, when set, removes what is kept elsewhere for bundles
	// that retention removes or an operator releases (their documents).
	// Retention runs it before the records go, so a failure leaves nothing
	// behind that no record points to. Every caller passes asRead, which is
	// nil only while the bundles under the ids are still as the caller read
	// them: for retention, the records it read
	// (store.Retention.BundlesAsRead); for a release, the bundle pending at
	// the version read, and after the release's write none pending. What
	// is found stored before asRead succeeds is theirs, not a later
	// bundle's under a freed id.
	ForgetBundles func(ctx context.Context, recipient string, bundleIDs []string, asRead func(context.Context) error) error
	// Notices, when set, says which domains hear of their bundles'
	// dequeues: their Acknowledge puts a notice in the store's outbox.
	Notices func(domain.Origin) bool
	// OnNotice, when set, is called with the notice a dequeue wrote, so
	// that the notifier looks at once instead of at its next poll, and
	// knows the notice for one of this instance's.
	OnNotice func(store.Notice)
	// PlanParallel is how many recipients of a save group are loaded and
	// planned at once. 0 suits an embedded store, whose loads use the CPU:
	// two from parallelPlanRecipients recipients on, else one. A store over
	// the network (Cosmos DB), whose loads wait for round trips, sets as
	// many as a group it accepts may name (cosmos.Parallel), so that the
	// loads of a group are one round trip, not one per few recipients.
	PlanParallel int
	// ConcurrentGroups is how many save groups may be written at once;
	// groups in flight together share no recipient, and a Save for a
	// recipient in flight waits for its group. 0 or 1 suits an embedded
	// store: one group at a time, as large as the queue makes it, so that
	// many saves share one durable write. A store over the network (Cosmos
	// DB) sets more, so that one slow or throttled recipient holds up only
	// the Saves that name it.
	ConcurrentGroups int
	// MaxWaitersPerRecipient and MaxWaiters bound the peeks waiting for a
	// Save (Watch); 0 means DefaultMaxWaitersPerRecipient and
	// DefaultMaxWaiters.
	MaxWaitersPerRecipient, MaxWaiters int
	// BellPoll is how often the bells of the other instances sharing the
	// store are read (bells.go); 0 means DefaultBellPoll.
	BellPoll time.Duration
	// MaxAcknowledgeBundles bounds the bundles one AcknowledgeOnBehalf
	// dequeues (its answer lists each of them, and the audit log records
	// each); 0 means DefaultMaxAcknowledgeBundles. Tests set a small one.
	MaxAcknowledgeBundles int
	// BellErrors, when set, is called for each failed ring or read of the
	// bells (BellRing, BellRead): a metric.
	BellErrors func(op string)
}
