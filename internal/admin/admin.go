// Package admin is the operators' API (messagehub.admin.v1.Admin): the
// read-only inspection of a recipient's backlog, what its next Peek would
// return and where one notification is, the two remedies, releasing a
// pending bundle and acknowledging on an actor's behalf (remedies.go), and
// a backup of the hub's data (backup.go), which changes nothing an actor
// sees. It converts between the API and the hub's calls
// (internal/hub/admin.go, internal/hub/remedy.go); only the remedies write
// to the queues. Authorization (the admin role) and the mapping of errors
// to status codes are the gRPC server's, as for MessageHub.
package admin

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
)

// Hub is what the service needs from the hub: its read-only calls and the
// remedies (remedies.go).
type Hub interface {
	Backlog(ctx context.Context, recipient string) (hub.RecipientBacklog, error)
	PreviewNextBundle(ctx context.Context, recipient string, group domain.PeekGroup) (*hub.Preview, error)
	TraceNotification(ctx context.Context, recipient, id string) (hub.Trace, error)
	Figures
	Remedies
	AuditLog
}

// Service implements adminv1.AdminServer over a Hub.
type Service struct {
	adminv1.UnimplementedAdminServer
	hub    Hub
	backup Backuper // see backup.go
}

// NewService returns the Admin service over h.
func NewService(h Hub, opts ...Option) *Service {
	s := &Service{hub: h}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Register registers the Admin service over h on srv, a server of
// server.NewGRPCServer: its requests are read after the caller's token and
// role are checked, as MessageHub's are.
func Register(srv grpc.ServiceRegistrar, h Hub, opts ...Option) {
	server.RegisterService(srv, &adminv1.Admin_ServiceDesc, NewService(h, opts...))
}

// GetBacklog lists the recipient's cabinets with waiting notifications and
// its pending bundles.
func (s *Service) GetBacklog(ctx context.Context, req *adminv1.GetBacklogRequest) (*adminv1.GetBacklogResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	b, err := s.hub.Backlog(ctx, recipient)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.GetBacklogResponse{CabinetCount: int32(min(b.CabinetCount, math.MaxInt32))} //nolint:gosec // bounded
	for _, c := range b.Cabinets {
		resp.Cabinets = append(resp.Cabinets, &adminv1.CabinetBacklog{
			Domain:                 messagehubv1.Domain(c.Origin),
			ContentType:            c.ContentType,
			Waiting:                c.Waiting,
			InPendingBundle:        c.InPending,
			OldestWaitingSavedAtMs: c.OldestSavedAt,
			TotalPositions:         c.Total,
			AcknowledgedPositions:  c.Acked,
			WaitingWeight:          c.Weight,
			WeightPartial:          c.WeightPartial,
		})
	}
	for _, rec := range b.Pending {
		resp.PendingBundles = append(resp.PendingBundles, pendingBundle(rec))
	}
	return resp, nil
}

// pendingBundle is a pending bundle's record as the API shows it.
func pendingBundle(rec bundle.Record) *adminv1.PendingBundle {
	return &adminv1.PendingBundle{
		BundleId:          rec.ID,
		Group:             messagehubv1.PeekGroup(rec.Group),
		Domain:            messagehubv1.Domain(rec.Origin),
		ContentType:       rec.ContentType,
		NotificationCount: int32(rec.Count),
		Weight:            rec.Weight,
		CreatedAtMs:       unixMilli(rec.CreatedAt),
		StartPosition:     rec.Start,
		EndPosition:       rec.End,
	}
}

// PreviewNextBundle says what the group's next Peek would return, creating
// nothing.
func (s *Service) PreviewNextBundle(ctx context.Context, req *adminv1.PreviewNextBundleRequest) (*adminv1.PreviewNextBundleResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	group := domain.PeekGroup(req.GetGroup())
	if err := domain.ValidatePeekGroup(group); err != nil {
		return nil, err
	}
	p, err := s.hub.PreviewNextBundle(ctx, recipient, group)
	if err != nil || p == nil {
		return &adminv1.PreviewNextBundleResponse{}, err
	}
	out := &adminv1.BundlePreview{
		Pending:           p.Pending,
		Domain:            messagehubv1.Domain(p.Record.Origin),
		ContentType:       p.Record.ContentType,
		NotificationIds:   p.Bundle.NotificationIDs,
		NotificationCount: int32(len(p.Bundle.NotificationIDs)),
		Weight:            p.Bundle.Weight,
		DocumentTypes:     p.Bundle.DocumentTypes,
		StartPosition:     p.Record.Start,
		EndPosition:       p.Record.End,
	}
	if p.Pending {
		out.BundleId = p.Record.ID
		out.CreatedAtMs = unixMilli(p.Record.CreatedAt)
	}
	return &adminv1.PreviewNextBundleResponse{Bundle: out}, nil
}

// TraceNotification says where a notification of the recipient is.
func (s *Service) TraceNotification(ctx context.Context, req *adminv1.TraceNotificationRequest) (*adminv1.TraceNotificationResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	id, err := domain.ParseUUID("notification_id", req.GetNotificationId())
	if err != nil {
		return nil, err
	}
	t, err := s.hub.TraceNotification(ctx, recipient, id)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.TraceNotificationResponse{State: traceStates[t.State]}
	if t.State == hub.TraceWaiting || t.State == hub.TracePending || t.State == hub.TraceDequeued {
		resp.Domain = messagehubv1.Domain(t.Origin)
		resp.ContentType = t.ContentType
		resp.Position = t.Position
		resp.SavedAtMs = t.SavedAt
	}
	if t.Bundle != nil {
		resp.BundleId = t.Bundle.ID
		resp.BundleCreatedAtMs = unixMilli(t.Bundle.CreatedAt)
		if t.Bundle.State == bundle.Dequeued {
			resp.DequeuedAtMs = unixMilli(t.Bundle.DequeuedAt)
		}
	}
	return resp, nil
}

var traceStates = map[hub.TraceState]adminv1.NotificationState{
	hub.TraceNotFound:  adminv1.NotificationState_NOTIFICATION_STATE_NOT_FOUND,
	hub.TraceElsewhere: adminv1.NotificationState_NOTIFICATION_STATE_OTHER_RECIPIENT_OR_REMOVED,
	hub.TraceWaiting:   adminv1.NotificationState_NOTIFICATION_STATE_WAITING,
	hub.TracePending:   adminv1.NotificationState_NOTIFICATION_STATE_PENDING,
	hub.TraceDequeued:  adminv1.NotificationState_NOTIFICATION_STATE_DEQUEUED,
}

// unixMilli is t in unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Compile-time check that Service serves the whole contract.
var _ adminv1.AdminServer = (*Service)(nil)
