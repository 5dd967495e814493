package hub

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Default bounds of the wake-up registry: a recipient's actor runs a few
// pollers at most, and each waiter is a goroutine of a waiting call.
const (
	DefaultMaxWaitersPerRecipient = 16
	DefaultMaxWaiters             = 10_000
)

// ErrTooManyWaiters refuses a waiter beyond the registry's bounds; the
// caller answers at once instead (or the client peeks again later).
var ErrTooManyWaiters = fmt.Errorf("%w: too many peeks waiting", domain.ErrUnavailable)

// errWaitsStopped refuses a waiter once waits have stopped (StopWaits,
// Close): the caller answers with what a plain Peek finds.
var errWaitsStopped = fmt.Errorf("%w: waits have stopped", domain.ErrUnavailable)

// wakeups is the per-recipient wake-up registry of waiting peeks: a Save
// that commits closes the channels of its recipients' waiters. A channel is
// closed once; the waiter registers again for its next wait.
type wakeups struct {
	mu          sync.Mutex
	byRecipient map[string]map[chan struct{}]struct{}
	stopped     bool
	// halted is closed when waits stop: what a waiter without a place
	// (ErrTooManyWaiters), which no channel of its own wakes, waits on.
	halted       chan struct{}
	perRecipient int
	total        int
	// n counts the waiters, read without the lock so that a Save finds
	// there is nobody to wake at the cost of one atomic load.
	n atomic.Int64
	// bell tells the other instances sharing the store whom a Save woke
	// (bells.go).
	bell *bell
	// heldTimers wake a recipient's waiters when the lease of a save that
	// holds its notifications out of sight ends (wakeAfter), one per
	// recipient.
	heldTimers map[string]*time.Timer
}

func newWakeups(perRecipient, total int) *wakeups {
	if perRecipient <= 0 {
		perRecipient = DefaultMaxWaitersPerRecipient
	}
	if total <= 0 {
		total = DefaultMaxWaiters
	}
	return &wakeups{byRecipient: make(map[string]map[chan struct{}]struct{}), heldTimers: make(map[string]*time.Timer), halted: make(chan struct{}), perRecipient: perRecipient, total: total}
}

// Watch registers a waiter for recipient. Its channel is closed when a Save
// for recipient commits on this hub, or when waits stop (StopWaits, Close).
// The caller registers before it peeks, so that a Save committing between
// its peek and its wait still wakes it, and calls stop when it no longer
// waits. ErrTooManyWaiters beyond the bounds of Options; an error wrapping
// domain.ErrUnavailable once waits have stopped.
func (r *Hub) Watch(recipient string) (wake <-chan struct{}, stop func(), err error) {
	w := r.wakes
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil, nil, errWaitsStopped
	}
	set := w.byRecipient[recipient]
	if int(w.n.Load()) >= w.total || len(set) >= w.perRecipient {
		return nil, nil, ErrTooManyWaiters
	}
	if set == nil {
		set = make(map[chan struct{}]struct{})
		w.byRecipient[recipient] = set
	}
	ch := make(chan struct{})
	set[ch] = struct{}{}
	w.n.Add(1)
	return ch, func() { w.remove(recipient, ch) }, nil
}

// WaitsStopped returns a channel that is closed when waits stop
// (StopWaits, Close): a waiting call refused a place (ErrTooManyWaiters)
// ends its wait on it, as the registered waiters end theirs.
func (r *Hub) WaitsStopped() <-chan struct{} { return r.wakes.halted }

// Waiting is the number of registered waiters: what tests wait for before
// they save, and an operator's measure of long polls in progress.
func (r *Hub) Waiting() int { return int(r.wakes.n.Load()) }

// StopWaits wakes every waiter and refuses new ones, so that waiting calls
// answer now: at the start of a shutdown's drain, and in Close.
func (r *Hub) StopWaits() {
	w := r.wakes
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		close(w.halted)
	}
	w.stopped = true
	for recipient := range w.byRecipient {
		w.wakeLocked(recipient)
	}
	for recipient, t := range w.heldTimers {
		t.Stop()
		delete(w.heldTimers, recipient)
	}
}

// wake wakes the waiters of the recipients of calls, after their Save
// committed or failed, and has the bell rung for those of the Saves that
// stored something, so that the other instances sharing the store wake
// theirs.
//
// A failed Save wakes this hub's waiters but rings no bell: one that failed
// after it reserved positions (Cosmos DB) may, as it rolls back, make
// visible the notifications of the saves that finished behind it meanwhile,
// whose own rings found nothing visible yet. Only the store knows whether
// it did, and rings the bell itself then; a Save refused for a conflict or
// an invalid request costs no bell.
func (w *wakeups) wake(calls []*saveCall, outcomes []saveOutcome) {
	var saved, failed []string
	for i, c := range calls {
		switch {
		case outcomes[i].err != nil:
			failed = appendRecipients(failed, c)
		case outcomes[i].result.Saved > 0:
			saved = appendRecipients(saved, c)
		}
	}
	w.bell.ring(saved)
	w.wakeRecipients(append(saved, failed...))
}

// appendRecipients appends the recipients of c's notifications.
func appendRecipients(recipients []string, c *saveCall) []string {
	for _, n := range c.notifications {
		recipients = append(recipients, n.Recipient)
	}
	return recipients
}

// wakeRecipients wakes the waiters of recipients.
func (w *wakeups) wakeRecipients(recipients []string) {
	if w.n.Load() == 0 || len(recipients) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range recipients {
		w.wakeLocked(r)
	}
}

// wakeAll wakes every waiter; they register again for their next wait.
func (w *wakeups) wakeAll() {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for recipient := range w.byRecipient {
		w.wakeLocked(recipient)
	}
}

func (w *wakeups) wakeLocked(recipient string) {
	// The woken look again, and set a timer anew if a save still holds
	// the recipient's notifications (wakeAfter).
	if t := w.heldTimers[recipient]; t != nil {
		t.Stop()
		delete(w.heldTimers, recipient)
	}
	set := w.byRecipient[recipient]
	if set == nil {
		return
	}
	for ch := range set {
		close(ch)
	}
	w.n.Add(-int64(len(set)))
	delete(w.byRecipient, recipient)
}

// wakeAfter wakes recipient's waiters after held
// (store.RecipientState.HeldFor) when it has any: a peek that found nothing
// because a save holds the recipient's notifications out of sight looks
// again once that save's lease ends, when its load settles the save. The
// save's process may have died, and then no Save and no bell says so. One
// timer per recipient, stopped when its waiters are woken otherwise (their
// next peek sets it again if needed), so a live save's reservation costs no
// look more: its commit wakes them.
func (w *wakeups) wakeAfter(recipient string, held time.Duration) {
	if held <= 0 || w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byRecipient[recipient] == nil || w.heldTimers[recipient] != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(held, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		// Stopped as it fired: the waiters were woken, and a later timer
		// may be this recipient's now.
		if w.heldTimers[recipient] == t {
			w.wakeLocked(recipient)
		}
	})
	w.heldTimers[recipient] = t
}

// remove unregisters a waiter that stopped waiting; one already woken is
// gone already.
func (w *wakeups) remove(recipient string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.byRecipient[recipient]
	if _, ok := set[ch]; !ok {
		return
	}
	delete(set, ch)
	w.n.Add(-1)
	if len(set) == 0 {
		delete(w.byRecipient, recipient)
	}
}
