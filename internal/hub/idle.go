package hub

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// idleMarks decides when a Peek marks its recipient idle (store.MarkIdle),
// so that the next Peeks read the head alone. A mark is a write that costs
// several reads, so it is made for a recipient whose Peeks keep finding
// nothing, not for the one look that finds a recipient drained after its
// last Dequeue: the second full load of this instance that finds nothing
// waiting at the same head version marks it.
type idleMarks struct {
	mu sync.Mutex
	// empty holds, per recipient, the head version at which a full load
	// found nothing waiting and no mark was made yet.
	empty map[string]string
}

// maxEmptyRemembered bounds idleMarks.empty. A recipient stays in it from
// its first empty look to its second (or to a look that finds something),
// so it holds the recipients polled once in a while; beyond the bound one
// is forgotten, which only delays its mark.
const maxEmptyRemembered = 10_000

func newIdleMarks() *idleMarks { return &idleMarks{empty: make(map[string]string)} }

// seen records a full state of the recipient and says whether to mark it
// idle now: it has nothing waiting, and the last full state seen had
// nothing waiting at the same head version.
func (m *idleMarks) seen(recipient string, state store.RecipientState) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !nothingWaits(state) {
		delete(m.empty, recipient)
		return false
	}
	if m.empty[recipient] == state.Head.Version {
		delete(m.empty, recipient)
		return true
	}
	if _, known := m.empty[recipient]; !known && len(m.empty) >= maxEmptyRemembered {
		for r := range m.empty {
			delete(m.empty, r)
			break
		}
	}
	m.empty[recipient] = state.Head.Version
	return false
}

// markTimeout bounds the idle mark a Peek writes before it answers. The
// mark only saves later Peeks a read, so a store that cannot take it at
// once (throttled, failing) is not waited for: the Peek answers without it.
const markTimeout = time.Second

// noteState lets a Peek's full state count towards the recipient's mark,
// and writes the mark when it is due, at low priority, as the first
// request to give way when the store is busy. A mark that fails changes
// nothing: the next Peeks load in full, as this one did.
func (r *Hub) noteState(ctx context.Context, recipient string, state store.RecipientState) {
	if state.Idle || !r.idle.seen(recipient, state) {
		return
	}
	ctx, cancel := context.WithTimeout(r.store.LowPriority(ctx), markTimeout)
	defer cancel()
	_ = r.store.MarkIdle(ctx, recipient, state.Head)
}

// nothingWaits says a full state has nothing for any Peek of any group:
// a stored head, no pending bundle, no save under way (every sequence
// number handed out is below the watermark) and no position a cabinet's
// runs hold after its cursor. Only then may the recipient be marked idle.
func nothingWaits(state store.RecipientState) bool {
	if state.Head.Version == "" || len(state.Pending) > 0 || state.Head.Watermark != state.Head.NextSeq-1 {
		return false
	}
	acked := make(map[catalog.Key]int64, len(state.Cursors))
	for _, c := range state.Cursors {
		acked[c.Key()] = c.Acked
	}
	return !slices.ContainsFunc(state.Entries, func(e catalog.Entry) bool {
		return drawer.Held(e.Drawers, acked[e.Key()]) > 0
	})
}
