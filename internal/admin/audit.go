package admin

import (
	"context"
	"fmt"
	"time"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/domain"
)

// AuditLog is what ListAuditEvents reads: one page of a recipient's
// audit log (the hub's AuditEvents).
type AuditLog interface {
	AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error)
}

// ListAuditEvents pages through one recipient's audit log over a time
// range, oldest first. The page token is the key of the last event of the
// previous page.
func (s *Service) ListAuditEvents(ctx context.Context, req *adminv1.ListAuditEventsRequest) (*adminv1.ListAuditEventsResponse, error) {
	q, err := auditQuery(req)
	if err != nil {
		return nil, err
	}
	page, err := s.hub.AuditEvents(ctx, q)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.ListAuditEventsResponse{NextPageToken: page.Next}
	for _, e := range page.Events {
		resp.Events = append(resp.Events, &adminv1.AuditEvent{
			AtMs: e.At.UnixMilli(), Action: adminv1.AuditAction(e.Action), Subject: e.Subject,
			Recipient: e.Recipient, BundleId: e.BundleID, Detail: e.Detail,
		})
	}
	return resp, nil
}

// auditQuery checks the request and makes the query it asks for.
func auditQuery(req *adminv1.ListAuditEventsRequest) (audit.Query, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return audit.Query{}, err
	}
	fromMs, toMs := req.GetFromMs(), req.GetToMs()
	switch {
	case fromMs < 0 || toMs < 0:
		return audit.Query{}, fmt.Errorf("%w: from_ms and to_ms are unix milliseconds, not negative", domain.ErrInvalidArgument)
	case toMs != 0 && toMs < fromMs:
		return audit.Query{}, fmt.Errorf("%w: to_ms (%d) is before from_ms (%d)", domain.ErrInvalidArgument, toMs, fromMs)
	}
	size, err := bounded("page_size", req.GetPageSize(), defaultPageSize, maxPageSize)
	if err != nil {
		return audit.Query{}, err
	}
	if token := req.GetPageToken(); token != "" {
		if _, err := audit.ParseKey(token); err != nil {
			return audit.Query{}, fmt.Errorf("%w: page_token is not one a previous answer gave", domain.ErrInvalidArgument)
		}
	}
	var from, to time.Time
	if fromMs > 0 {
		from = time.UnixMilli(fromMs)
	}
	if toMs > 0 {
		to = time.UnixMilli(toMs)
	}
	return audit.Range(recipient, from, to, req.GetPageToken(), size), nil
}
