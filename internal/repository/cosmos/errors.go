package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/repository"
)

// statusRetryWith is Cosmos DB's 449: a write met a transient conflict.
const statusRetryWith = 449

// statusError is the store error a Cosmos DB status stands for, or nil when
// it stands for none. This is the one mapping; requests and batch
// operations both go through it.
//
//   - 404, 409, 412, 449: the record a conditional write relied on is gone,
//     exists already or changed (or a replica lags): the repository reloads
//     and retries.
//
//   - 429, 408, 500, 502, 503, 504: still throttled or unavailable after
//     the transport's and the SDK's retries: the caller may try again later.
//
//   - 413: a request or document over 2 MB: beyond the store's limits (a
//     save's 400, a batch or query over its limit, is mapped by CommitSaves).
//
// Anything else (400, 401, 403, ...) is this store's or the operator's
// mistake and stays as it is.
func statusError(status int) error {
	switch status {
	case http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed, statusRetryWith:
		return repository.ErrConflict
	case http.StatusRequestEntityTooLarge:
		return repository.ErrTooLarge
	case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return domain.ErrUnavailable
	}
	return nil
}

// storeError maps a failed request to the store's errors. The SDK's error
// stays wrapped, so that isStatus still sees its status.
func storeError(err error) error {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || errors.Is(err, repository.ErrConflict) || errors.Is(err, domain.ErrUnavailable) ||
		errors.Is(err, repository.ErrTooLarge) {
		return err // not an answer, or mapped already
	}
	if mapped := statusError(re.StatusCode); mapped != nil {
		return fmt.Errorf("%w: %w", mapped, err)
	}
	return err
}

// batchError maps a batch's outcome to the store's errors: the request's
// failure, else the operation that made the batch fail (the first one not
// answering 424, which only says another operation failed).
func batchError(resp azcosmos.TransactionalBatchResponse, err error) error {
	if err != nil {
		return storeError(err)
	}
	if resp.Success {
		return nil
	}
	for _, r := range resp.OperationResults {
		if r.StatusCode == http.StatusFailedDependency || r.StatusCode < 300 {
			continue
		}
		if mapped := statusError(int(r.StatusCode)); mapped != nil {
			return fmt.Errorf("%w: batch operation answered %d", mapped, r.StatusCode)
		}
		break
	}
	return fmt.Errorf("cosmos: transactional batch failed: %+v", statusCodes(resp))
}

func statusCodes(resp azcosmos.TransactionalBatchResponse) []int32 {
	var codes []int32
	for _, r := range resp.OperationResults {
		codes = append(codes, r.StatusCode)
	}
	return codes
}

// The Store methods below are the store's boundary: whatever Cosmos DB
// answered reaches the repository as a store error (storeError), 413 as
// ErrTooLarge.

// CommitSaves is commitSaves, its errors mapped.
func (s *Store) CommitSaves(ctx context.Context, saves []repository.RecipientSave) error {
	return storeError(s.commitSaves(ctx, saves))
}

// LookupIDs is lookupIDs, its errors mapped.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]repository.IDRecord, error) {
	v, err := s.lookupIDs(ctx, ids)
	return v, storeError(err)
}

// ReadDrawer is readDrawer, its errors mapped.
func (s *Store) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	v, err := s.readDrawer(ctx, drawerID, from, to, limit)
	return v, storeError(err)
}

// Backlog is backlog, its errors mapped.
func (s *Store) Backlog(ctx context.Context) (repository.Backlog, error) {
	v, err := s.backlog(ctx)
	return v, storeError(err)
}

// ApplySweep is applySweep, its errors mapped.
func (s *Store) ApplySweep(ctx context.Context, sw repository.Sweep) error {
	return storeError(s.applySweep(ctx, sw))
}

// Notices is listNotices, its errors mapped.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]repository.Notice, error) {
	v, err := s.listNotices(ctx, origins, limit)
	return v, storeError(err)
}

// NoticeBacklog is noticeBacklog, its errors mapped.
func (s *Store) NoticeBacklog(ctx context.Context) (int, time.Time, error) {
	v, w, err := s.noticeBacklog(ctx)
	return v, w, storeError(err)
}

// DequeuedBundle is dequeuedBundle, its errors mapped.
func (s *Store) DequeuedBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error) {
	v, err := s.dequeuedBundle(ctx, recipient, bundleID)
	return v, storeError(err)
}

// RemoveNotices is removeNotices, its errors mapped.
func (s *Store) RemoveNotices(ctx context.Context, notices []repository.Notice) error {
	return storeError(s.removeNotices(ctx, notices))
}

// AcquireBuild is acquireBuild, its errors mapped.
func (s *Store) AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	current, until, err := s.acquireBuild(ctx, recipient, bundleID, holder, d)
	return current, until, storeError(err)
}

// ReleaseBuild is releaseBuild, its errors mapped.
func (s *Store) ReleaseBuild(ctx context.Context, recipient, bundleID, holder string) error {
	return storeError(s.releaseBuild(ctx, recipient, bundleID, holder))
}

// HoldSweepLease is holdSweepLease, its errors mapped.
func (s *Store) HoldSweepLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	v, err := s.holdSweepLease(ctx, holder, d)
	return v, storeError(err)
}

// ReleaseSweepLease is releaseSweepLease, its errors mapped.
func (s *Store) ReleaseSweepLease(ctx context.Context, holder string) error {
	return storeError(s.releaseSweepLease(ctx, holder))
}
