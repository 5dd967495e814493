package cosmos

import (
	"context"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/repository"
)

var _ repository.SweepCoordinator = (*Store)(nil)

// The sweep lease is one document in the recipients container, in a
// partition of its own: whoever holds it, and until when (unix ms of the
// holder's clock; instances' clocks need only agree to well within the
// sweep interval).
const (
	sweepLeasePartition = "_sweep"
	sweepLeaseID        = "sweep"
)

// holdSweepLease takes the sweep lease for holder until d from now, or
// extends it when holder has it. The lease is read on the primary and
// written on its etag (or created), so of two instances only one wins.
func (s *Store) holdSweepLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	var cur leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, sweepLeasePartition, sweepLeaseID, &cur)
	if err != nil {
		return false, err
	}
	now := s.cfg.Now()
	if found && cur.Holder != holder && cur.Expires > now.UnixMilli() {
		return false, nil
	}
	next := leaseDoc{ID: sweepLeaseID, PK: sweepLeasePartition, T: typeLease, Holder: holder, Expires: now.Add(d).UnixMilli()}
	pk := azcosmos.NewPartitionKeyString(sweepLeasePartition)
	if found {
		_, err = s.recipients.ReplaceItem(ctx, pk, sweepLeaseID, mustJSON(next), &azcosmos.ItemOptions{IfMatchEtag: etag(cur.ETag)})
	} else {
		_, err = s.recipients.CreateItem(ctx, pk, mustJSON(next), nil)
	}
	if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusConflict) {
		return false, nil // another instance took it first
	}
	return err == nil, err
}

// releaseSweepLease ends holder's lease, if it still has it.
func (s *Store) releaseSweepLease(ctx context.Context, holder string) error {
	var cur leaseDoc
	found, err := s.readOnPrimary(ctx, s.recipients, sweepLeasePartition, sweepLeaseID, &cur)
	if err != nil || !found || cur.Holder != holder {
		return err
	}
	version := cur.ETag
	cur.Expires, cur.ETag = 0, ""
	_, err = s.recipients.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(sweepLeasePartition), sweepLeaseID, mustJSON(cur),
		&azcosmos.ItemOptions{IfMatchEtag: etag(version)})
	if isStatus(err, http.StatusPreconditionFailed) {
		return nil // taken over meanwhile
	}
	return err
}

type lowPriorityKey struct{}

// LowPriority marks ctx: the store's requests made with it carry
// x-ms-cosmos-priority-level: Low, so that with priority-based execution
// enabled on the account they are throttled before Save, Peek and Dequeue.
// (azcosmos sets the header per operation; marking the context reaches
// every request of the sweep, whichever helper sends it.)
func (s *Store) LowPriority(ctx context.Context) context.Context {
	return context.WithValue(ctx, lowPriorityKey{}, true)
}

// prioritized adds the priority header to the requests of low-priority
// contexts. It sits above the retries, so that every attempt carries it.
type prioritized struct{ next policy.Transporter }

// priorityHeader is the header azcosmos v1.5.0 sends for PriorityLevel.
const priorityHeader = "x-ms-cosmos-priority-level"

func (p prioritized) Do(req *http.Request) (*http.Response, error) {
	if low, _ := req.Context().Value(lowPriorityKey{}).(bool); low && req.Header.Get(priorityHeader) == "" {
		req.Header.Set(priorityHeader, string(azcosmos.PriorityLevelLow))
	}
	return p.next.Do(req)
}
