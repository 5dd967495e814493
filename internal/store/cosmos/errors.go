package cosmos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Statuses and substatuses (x-ms-substatus) the store tells apart, as
// https://learn.microsoft.com/en-us/rest/api/cosmos-db/http-status-codes-for-cosmosdb
// and the troubleshooting pages
// https://learn.microsoft.com/en-us/azure/cosmos-db/nosql/troubleshoot-not-found and
// https://learn.microsoft.com/en-us/azure/cosmos-db/nosql/troubleshoot-forbidden
// describe them.
const (
	// statusRetryWith is 449: the write met a transient conflict and did
	// not apply; the client retries it.
	statusRetryWith = 449
	// substatusReadSessionNotAvailable with 404: no replica the read
	// reached has caught up with its session token. The item may exist.
	substatusReadSessionNotAvailable = 1002
	// substatusPartitionFull with 403: the logical partition reached its
	// 20 GB; nothing more can be written to it.
	substatusPartitionFull = 1014
)

// statusError is the store error a Cosmos DB status (with its substatus)
// stands for, or nil when it stands for none. This is the one mapping;
// requests and batch operations both go through it.
//
//   - 404, 409, 412: the record a conditional write relied on is gone,
//     exists already or changed: the repository reloads and retries.
//
//   - 404 with substatus 1002 (a session read no replica could serve yet),
//     449 (a write refused, not applied), 410 (a partition key range gone
//     in a split or a move, past the SDK's few retries of it), 429, 408,
//     500, 502, 503, 504:
//     still unavailable after the transport's and the SDK's retries; the
//     caller may try again later. None of them says anything about what
//     exists: a 408 or 503 may even answer a write that applied.
//
//   - 413: a request or document over 2 MB: beyond the store's limits (a
//     save's 400, a batch or query over its limit, is mapped by CommitSaves).
//
//   - 403 with substatus 1014: a logical partition is full (storage full);
//     any other 403 (keys, RBAC, firewall, a disabled account): the
//     account refuses the service, which an operator must fix.
//
// Anything else (400, 401, ...) is this store's or the operator's mistake
// and stays as it is.
func statusError(status, substatus int) error {
	switch {
	case status == http.StatusNotFound && substatus == substatusReadSessionNotAvailable, status == statusRetryWith:
		return domain.ErrUnavailable
	case status == http.StatusNotFound, status == http.StatusConflict, status == http.StatusPreconditionFailed:
		return store.ErrConflict
	case status == http.StatusRequestEntityTooLarge:
		return store.ErrTooLarge
	case status == http.StatusForbidden && substatus == substatusPartitionFull:
		return domain.ErrStorageFull
	case status == http.StatusForbidden:
		return domain.ErrStoreRefuses
	case status == http.StatusTooManyRequests, status == http.StatusRequestTimeout, status == http.StatusGone, status == http.StatusInternalServerError,
		status == http.StatusBadGateway, status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return domain.ErrUnavailable
	}
	return nil
}

// substatus returns the x-ms-substatus of an answer (0 when none).
func substatus(re *azcore.ResponseError) int {
	if re == nil || re.RawResponse == nil {
		return 0
	}
	n, _ := strconv.Atoi(re.RawResponse.Header.Get("x-ms-substatus"))
	return n
}

// storeError maps a failed request to the store's errors. The SDK's error
// stays wrapped, so that isStatus still sees its status. A request whose
// answer never came (the connection cut or reset, after the transport's own
// retries) is ErrUnavailable: its write may have applied, so the caller
// must try again with the same ids, as after a 503. What the error says of
// the account is private (private).
func storeError(err error) error {
	return private(mapError(err))
}

// private marks the parts of err's text that name the account: the SDK's
// errors say the request's URL (the account's address, the database, the
// container, the document) and Cosmos DB's answer, and the transport's
// the address it could not reach. A client is told only the status Cosmos
// DB answered, or that it did not answer (domain.Private); the log keeps
// the whole text.
func private(err error) error {
	if err == nil || errors.As(err, new(*domain.Private)) {
		return err
	}
	public := err.Error()
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		public = strings.ReplaceAll(public, re.Error(), fmt.Sprintf("Cosmos DB answered %d (substatus %d)", re.StatusCode, substatus(re)))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		public = strings.ReplaceAll(public, ue.Error(), "no answer from Cosmos DB")
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		public = strings.ReplaceAll(public, oe.Error(), "no answer from Cosmos DB")
	}
	if public == err.Error() {
		return err
	}
	return &domain.Private{Err: err, Public: public}
}

// mapError is storeError before its text is made private.
func mapError(err error) error {
	var re *azcore.ResponseError
	if err != nil && !errors.As(err, &re) && !errors.Is(err, domain.ErrUnavailable) && noAnswer(err) {
		return fmt.Errorf("%w: Cosmos DB did not answer: %w", domain.ErrUnavailable, err)
	}
	if !errors.As(err, &re) || errors.Is(err, store.ErrConflict) || errors.Is(err, domain.ErrUnavailable) ||
		errors.Is(err, store.ErrTooLarge) || errors.Is(err, domain.ErrStorageFull) || errors.Is(err, domain.ErrStoreRefuses) {
		return err // not an answer, or mapped already
	}
	sub := substatus(re)
	mapped := statusError(re.StatusCode, sub)
	switch {
	case mapped == nil:
		return err
	case errors.Is(mapped, domain.ErrStorageFull):
		return fmt.Errorf("%w: a logical partition of Cosmos DB container %s reached its 20 GB (403, substatus %d): %w",
			mapped, containerOfRequest(re), sub, err)
	case errors.Is(mapped, domain.ErrStoreRefuses):
		return fmt.Errorf("%w: Cosmos DB refused a request to container %s (403, substatus %d: check the key or role "+
			"assignments, the firewall and that the account is enabled): %w", mapped, containerOfRequest(re), sub, err)
	}
	return fmt.Errorf("%w: %w", mapped, err)
}

// containerOfRequest names the container a failed request addressed.
func containerOfRequest(re *azcore.ResponseError) string {
	if re.RawResponse == nil || re.RawResponse.Request == nil {
		return "(unknown)"
	}
	parts := strings.Split(strings.Trim(re.RawResponse.Request.URL.Path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "colls" {
			return parts[i+1]
		}
	}
	return "(none)"
}

// isNotFound reports whether err is a 404 that says the item does not
// exist: a 404 with substatus 1002 only says no replica has caught up.
func isNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound && substatus(re) != substatusReadSessionNotAvailable
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
	if i := failedOperation(resp); i >= 0 {
		// A batch runs on the primary: its operations' 404s are final.
		code := resp.OperationResults[i].StatusCode
		if mapped := statusError(int(code), 0); mapped != nil {
			return fmt.Errorf("%w: batch operation answered %d", mapped, code)
		}
	}
	return fmt.Errorf("cosmos: transactional batch failed: %+v", statusCodes(resp))
}

// failedOperation is the index of the operation that failed a batch (the
// others answer 424), or -1.
func failedOperation(resp azcosmos.TransactionalBatchResponse) int {
	if resp.Success {
		return -1
	}
	for i, r := range resp.OperationResults {
		if r.StatusCode != http.StatusFailedDependency && r.StatusCode >= 300 {
			return i
		}
	}
	return -1
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
func (s *Store) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	return storeError(s.commitSaves(ctx, saves))
}

// LookupIDs is lookupIDs, its errors mapped.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]store.IDRecord, error) {
	v, err := s.lookupIDs(ctx, ids)
	return v, storeError(err)
}

// ReadDrawer is readDrawer, its errors mapped.
func (s *Store) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	v, err := s.readDrawer(ctx, drawerID, from, to, limit)
	return v, storeError(err)
}

// ReadDrawerLatest is readDrawerLatest, its errors mapped.
func (s *Store) ReadDrawerLatest(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	v, err := s.readDrawerLatest(ctx, drawerID, from, to, limit)
	return v, storeError(err)
}

// ApplySweep is applySweep, its errors mapped.
func (s *Store) ApplySweep(ctx context.Context, sw store.Sweep) error {
	return storeError(s.applySweep(ctx, sw))
}

// Notices is listNotices, its errors mapped.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
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
func (s *Store) RemoveNotices(ctx context.Context, notices []store.Notice) error {
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

// AppendAudit is appendAudit, its errors mapped.
func (s *Store) AppendAudit(ctx context.Context, events []audit.Event) error {
	return storeError(s.appendAudit(ctx, events))
}

// AuditEvents is auditEvents, its errors mapped.
func (s *Store) AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error) {
	v, err := s.auditEvents(ctx, q)
	return v, storeError(err)
}

// PruneAudit implements store.AuditLog: the documents' ttl removes the
// events, and this process stops returning them at once.
func (s *Store) PruneAudit(_ context.Context, before time.Time) error {
	s.pruneAudit(before)
	return nil
}

// noAnswer reports whether err says a request got no answer: the transport
// failed (a reset or closed connection, an unexpected end of the answer),
// not the caller's own cancellation or deadline, nor an error of this code.
func noAnswer(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var urlErr *url.Error
	var netErr net.Error
	return errors.As(err, &urlErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
