package repository

import (
	"context"
	"errors"
	"log/slog"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Repository is MessageHub's core: Save, Peek and Dequeue over a Store.
type Repository struct {
	store  Store
	opts   Options
	logger *slog.Logger
}

// New starts a Repository over store. Close stops its background work; the
// caller closes the store afterwards.
func New(store Store, opts Options, logger *slog.Logger) *Repository {
	return &Repository{store: store, opts: opts, logger: logger}
}

// Save stores notifications (already validated and normalised) all or nothing.
func (r *Repository) Save(ctx context.Context, notifications []domain.Notification) (domain.SaveResult, error) {
	return domain.SaveResult{}, errors.New("not implemented yet")
}

// Peek returns the recipient's next bundle for group, or nil when there is
// nothing to deliver. bundleID may be empty.
func (r *Repository) Peek(ctx context.Context, recipient string, group domain.PeekGroup, bundleID string) (*domain.Bundle, error) {
	return nil, errors.New("not implemented yet")
}

// Dequeue acknowledges a pending bundle of the recipient.
func (r *Repository) Dequeue(ctx context.Context, recipient, bundleID string) error {
	return errors.New("not implemented yet")
}

// Close stops background work and waits for it; in-flight saves finish.
func (r *Repository) Close() {}
