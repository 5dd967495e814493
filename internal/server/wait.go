package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// MaxWait is the longest a Peek may wait for a bundle (PeekRequest.wait_ms).
const MaxWait = 30 * time.Second

// DefaultWaitRecheck is how often a waiting Peek looks again by itself
// while Saves through other instances sharing the store cannot wake it (the
// hub does not follow their bells: reading them fails), or when it found no
// place among the hub's waiters. Once per 5 s costs the store no more than
// the 5 s polling that waiting replaces.
const DefaultWaitRecheck = 5 * time.Second

// unwokenRecheck is the longest re-check of a waiter without a wake-up
// (a variable for tests, which make it longer than they wait).
var unwokenRecheck = DefaultWaitRecheck

// waitMargin is how long before the call's deadline a wait ends, so that
// the caller gets its empty answer rather than DEADLINE_EXCEEDED.
const waitMargin = time.Second

// Waker registers a waiting Peek for wake-up (hub.Hub.Watch): the channel is
// closed when a Save for recipient commits, on this instance or (while
// FollowingOthers says so) on another sharing the store, or when waits
// stop. stop unregisters.
type Waker interface {
	Watch(recipient string) (wake <-chan struct{}, stop func(), err error)
	// FollowingOthers reports whether Saves through the other instances
	// sharing the store wake the waiters now, and returns a channel closed
	// when that stops (hub.Hub.FollowingOthers).
	FollowingOthers() (bool, <-chan struct{})
	// WaitsStopped returns a channel closed when waits stop, which also
	// ends the wait of a Peek that found no place among the waiters
	// (hub.Hub.WaitsStopped).
	WaitsStopped() <-chan struct{}
}

// WithWaitRecheck sets how often a waiting Peek looks again by itself when
// it cannot rely on being woken (DefaultWaitRecheck when zero): shorter
// finds another instance's Saves sooner while the hub does not follow them,
// at a store read per waiting Peek each time. A Peek without a place among
// the waiters re-checks every DefaultWaitRecheck at the longest.
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
// still wakes it. Without a place in the waker (too many waiting), or while
// the waker does not follow the other instances' Saves, it re-checks every
// waitRecheck; once waits have stopped (a shutdown) the answer is that of
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
	for {
		var wake, halted <-chan struct{}
		stop := func() {}
		if s.waker != nil {
			w, st, err := s.waker.Watch(recipient)
			switch {
			case errors.Is(err, hub.ErrTooManyWaiters):
				// No place to be woken from: the re-checks alone find
				// the bundle, rather than an answer at once that the
				// client would follow with another wait at once. Waits
				// stopping still end it, as they end the others.
				halted = s.waker.WaitsStopped()
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
		ended, err := s.sleep(ctx, wake, halted, over.C)
		stop()
		switch {
		case err != nil:
			return nil, err
		case ended:
			select {
			case <-wake: // a Save came as the wait ended
				return s.hub.Peek(ctx, recipient, group, bundleID)
			default:
				return nil, nil
			}
		}
	}
}

// sleep waits for the wake-up, the waits stopping (halted: for a waiter
// without a wake-up), the end of the wait (ended) or, when the waiter
// cannot rely on being woken, the next re-check. A waker that stops
// following the other instances' Saves while it sleeps starts the
// re-checks from then on, without a look at once (all waiters would look
// at the same moment).
func (s *Service) sleep(ctx context.Context, wake, halted <-chan struct{}, over <-chan time.Time) (ended bool, err error) {
	recheck := cmp.Or(s.waitRecheck, DefaultWaitRecheck)
	if wake == nil {
		// Without a place among the waiters nothing wakes it, not even a
		// Save on this instance: a longer recheck, set where the wake-up
		// is trusted alone (an embedded store), would find no Save made
		// during the wait.
		recheck = min(recheck, unwokenRecheck)
	}
	var again <-chan time.Time
	var lost <-chan struct{}
	following := false
	if s.waker != nil && wake != nil {
		following, lost = s.waker.FollowingOthers()
	}
	if !following {
		t := time.NewTimer(recheck)
		defer t.Stop()
		again, lost = t.C, nil
	}
	for {
		select {
		case <-wake:
			return false, nil
		case <-halted:
			return false, nil
		case <-again:
			return false, nil
		case <-lost:
			t := time.NewTimer(recheck)
			defer t.Stop() //nolint:gocritic // at most once: lost is nil from here on
			again, lost = t.C, nil
		case <-over:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
