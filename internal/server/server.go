// Package server is MessageHub's gRPC transport: it validates requests at the
// edge, converts them between the public API and the domain, and maps domain
// errors to status codes in one place (errors.go).
package server

import (
	"context"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// Hub is what the transport needs from the core: the hub's three
// operations. Inputs are already validated and normalised.
type Hub interface {
	Save(ctx context.Context, notifications []domain.Notification) (domain.SaveResult, error)
	Peek(ctx context.Context, recipient string, group domain.PeekGroup, bundleID string) (*domain.Bundle, error)
	Dequeue(ctx context.Context, recipient, bundleID string) error
}

// Service implements messagehubv1.MessageHubServer over a Hub. It returns
// domain errors as they are; the interceptor of errors.go turns them into
// status codes.
type Service struct {
	messagehubv1.UnimplementedMessageHubServer
	hub     Hub
	metrics *telemetry.Metrics

	documents      Documents // nil: bundles are served without documents
	contentTimeout time.Duration

	// waker wakes waiting peeks (wait.go); nil when the hub is no Waker,
	// and then a waiting peek re-checks only.
	waker       Waker
	waitRecheck time.Duration
}

// NewService returns the gRPC service over hub. A hub that is also a Waker
// wakes waiting peeks when a Save for their recipient commits.
func NewService(hub Hub) *Service {
	s := &Service{hub: hub, metrics: telemetry.Discard()}
	s.waker, _ = hub.(Waker)
	return s
}

// Save validates and normalises the notifications and saves them all or nothing.
func (s *Service) Save(ctx context.Context, req *messagehubv1.SaveRequest) (*messagehubv1.SaveResponse, error) {
	notifications := make([]domain.Notification, len(req.GetNotifications()))
	for i, n := range req.GetNotifications() {
		notifications[i] = apiconv.Notification(n)
	}
	if err := domain.NormalizeNotifications(notifications); err != nil {
		return nil, err
	}
	res, err := s.hub.Save(ctx, notifications)
	if err != nil {
		return nil, err
	}
	s.metrics.RecordSave(ctx, res.Saved, res.Duplicates)
	// Both counts are bounded by MaxNotificationsPerSave, so they fit an int32.
	return &messagehubv1.SaveResponse{
		Saved:      int32(res.Saved),
		Duplicates: int32(res.Duplicates),
	}, nil
}

// Peek returns the recipient's next bundle for the group, or no bundle when
// there is nothing to deliver, after waiting up to the request's wait for
// one.
func (s *Service) Peek(ctx context.Context, req *messagehubv1.PeekRequest) (*messagehubv1.PeekResponse, error) {
	peeked, err := s.peek(ctx, req)
	if err != nil {
		return nil, err
	}
	s.metrics.RecordPeek(ctx, peeked.GetBundle() != nil)
	return peeked, nil
}

// peek is Peek, not counted: a content peek picks its bundle this way and
// counts once it has answered (PeekContent).
func (s *Service) peek(ctx context.Context, req *messagehubv1.PeekRequest) (*messagehubv1.PeekResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	group := domain.PeekGroup(req.GetGroup())
	if err := domain.ValidatePeekGroup(group); err != nil {
		return nil, err
	}
	bundleID, err := domain.ParseOptionalUUID("bundle_id", req.GetBundleId())
	if err != nil {
		return nil, err
	}
	wait, err := parseWait(req.GetWaitMs())
	if err != nil {
		return nil, err
	}
	b, err := s.peekWaiting(ctx, recipient, group, bundleID, wait)
	if err != nil {
		return nil, err
	}
	return &messagehubv1.PeekResponse{Bundle: apiconv.Bundle(b)}, nil
}

// Dequeue acknowledges a pending bundle of the recipient.
func (s *Service) Dequeue(ctx context.Context, req *messagehubv1.DequeueRequest) (*messagehubv1.DequeueResponse, error) {
	recipient, err := domain.ParseUUID("recipient", req.GetRecipient())
	if err != nil {
		return nil, err
	}
	bundleID, err := domain.ParseUUID("bundle_id", req.GetBundleId())
	if err != nil {
		return nil, err
	}
	if err := s.hub.Dequeue(ctx, recipient, bundleID); err != nil {
		return nil, err
	}
	return &messagehubv1.DequeueResponse{}, nil
}

// Compile-time check that Service serves the whole contract.
var _ messagehubv1.MessageHubServer = (*Service)(nil)
