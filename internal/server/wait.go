package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// MaxWait is the longest a Peek may wait for a bundle (PeekRequest.wait_ms).
const MaxWait = 30 * time.Second

// DefaultWaitRecheck is how often a waiting Peek looks again without being
// woken. A Save through this instance wakes it at once; the re-check is what
// finds a Save made through another instance sharing the store, so it is
// what such a Save waits for at worst. Once per 5 s costs the store no more
// than the 5 s polling that waiting replaces.
const DefaultWaitRecheck = 5 * time.Second

// waitMargin is how long before the call's deadline a wait ends, so that
// the caller gets its empty answer rather than DEADLINE_EXCEEDED.
const waitMargin = time.Second

// Waker registers a waiting Peek for wake-up (hub.Hub.Watch): the channel is
// closed when a Save for recipient commits on this instance, or when waits
// stop. stop unregisters.
type Waker interface {
	Watch(recipient string) (wake <-chan struct{}, stop func(), err error)
}

// WithWaitRecheck sets how often a waiting Peek looks again without being
// woken (DefaultWaitRecheck when zero): shorter finds another instance's
// Saves sooner, at a store read per waiting Peek each time. Over MaxWait
// turns the re-check off, for a store no other instance writes (pebble):
// there every Save wakes its waiters.
func WithWaitRecheck(d time.Duration) Option { return func(o *options) { o.waitRecheck = d } }

// parseWait validates a request's wait.
func parseWait(ms uint32) (time.Duration, error) {
	wait := time.Duration(ms) * time.Millisecond
	if wait > MaxWait {
		return 0, fmt.Errorf("%w: wait_ms %d is over the most a Peek may wait, %d (%s)",
			domain.ErrInvalidArgument, ms, MaxWait.Milliseconds(), MaxWait)
	}
	return wait, nil
}

// peekWaiting peeks, and while there is nothing to deliver waits up to wait
// for a Save for the recipient and peeks again. It registers with the waker
// before each peek, so that a Save committing between the peek and the wait
// still wakes it. Without a place in the waker (too many waiting) it
// re-checks only; once waits have stopped (a shutdown) the answer is that of
// one plain peek.
func (s *Service) peekWaiting(ctx context.Context, recipient string, group domain.PeekGroup, bundleID string, wait time.Duration) (*domain.Bundle, error) {
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)-waitMargin)
	}
	if wait <= 0 {
		return s.hub.Peek(ctx, recipient, group, bundleID)
	}
	over := time.NewTimer(wait)
	defer over.Stop()
	recheck := s.waitRecheck
	if recheck <= 0 {
		recheck = DefaultWaitRecheck
	}
	for {
		var wake <-chan struct{}
		stop := func() {}
		if s.waker != nil {
			w, st, err := s.waker.Watch(recipient)
			switch {
			case errors.Is(err, hub.ErrTooManyWaiters):
				// No place to be woken from: the re-checks alone find
				// the bundle, rather than an answer at once that the
				// client would follow with another wait at once.
			case err != nil:
				// Waits have stopped (a shutdown): answer now.
				return s.hub.Peek(ctx, recipient, group, bundleID)
			default:
				wake, stop = w, st
			}
		}
		b, err := s.hub.Peek(ctx, recipient, group, bundleID)
		if err != nil || b != nil {
			stop()
			return b, err
		}
		again := time.NewTimer(recheck)
		select {
		case <-wake:
		case <-again.C:
		case <-over.C:
			again.Stop()
			stop()
			select {
			case <-wake: // a Save came as the wait ended
				return s.hub.Peek(ctx, recipient, group, bundleID)
			default:
				return nil, nil
			}
		case <-ctx.Done():
			again.Stop()
			stop()
			return nil, ctx.Err()
		}
		again.Stop()
		stop()
	}
}
