package cosmos

import (
	"context"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// The sweep lease is one document in the recipients container, in a
// partition of its own: whoever holds it, and until when (unix ms of the
// holder's clock; instances' clocks need only agree to well within the
// sweep interval).
const (
	sweepLeasePartition = "_sweep"
	sweepLeaseID        = "sweep"
)

// holdSweepLease takes the sweep lease for holder until d from now, or
// extends it when holder has it; of two instances only one wins (takeLease).
func (s *Store) holdSweepLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	cur, err := s.takeLease(ctx, sweepLeasePartition, sweepLeaseID, holder, d, 0)
	return err == nil && cur.Holder == holder, err
}

// releaseSweepLease ends holder's lease, if it still has it.
func (s *Store) releaseSweepLease(ctx context.Context, holder string) error {
	return s.dropLease(ctx, sweepLeasePartition, sweepLeaseID, holder)
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
	if token, _ := req.Context().Value(sessionTokenKey{}).(string); token != "" && req.Header.Get(sessionTokenHeader) == "" {
		req.Header.Set(sessionTokenHeader, token)
	}
	return p.next.Do(req)
}

// sessionTokenKey marks a context with a session token for requests whose
// options have none (azcosmos v1.5.0's change feed): under Session
// consistency a read with the token sees every write the token covers, so
// that the figures' holder reads the changes its own instance made and
// those whose tokens it learnt.
type sessionTokenKey struct{}

const sessionTokenHeader = "x-ms-session-token" //nolint:gosec // a header name, not a credential

func withSessionToken(ctx context.Context, token *string) context.Context {
	if token == nil || *token == "" {
		return ctx
	}
	return context.WithValue(ctx, sessionTokenKey{}, *token)
}
