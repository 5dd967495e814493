package store

import (
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// Backlog is what is saved and not yet dequeued, over every recipient: for
// operators' metrics, with no label per recipient.
type Backlog struct {
	ByOrigin   map[domain.Origin]OriginBacklog `json:"o,omitempty"`
	Recipients int                             `json:"r,omitempty"` // recipients with at least one notification not dequeued
}

// OriginBacklog is one domain's part of the backlog.
type OriginBacklog struct {
	Notifications int64 `json:"n"`
	// Oldest is when the oldest notification not yet dequeued was saved
	// (estimated within its drawer, see drawer.Meta.SavedAt); zero when
	// unknown.
	Oldest time.Time `json:"o,omitzero"`
	// PendingBundles counts the domain's bundles peeked and not yet
	// dequeued; OldestPending is when the oldest of them was cut (zero
	// without one).
	PendingBundles int64     `json:"pb,omitempty"`
	OldestPending  time.Time `json:"po,omitzero"`
}

// AddPending counts one pending bundle of origin, cut at created.
func (b *Backlog) AddPending(origin domain.Origin, created time.Time) {
	if b.ByOrigin == nil {
		b.ByOrigin = map[domain.Origin]OriginBacklog{}
	}
	o := b.ByOrigin[origin]
	o.PendingBundles++
	if o.OldestPending.IsZero() || created.Before(o.OldestPending) {
		o.OldestPending = created
	}
	b.ByOrigin[origin] = o
}

// Add counts one recipient's catalog entries and cursors (the positions
// after each cursor that the entry's drawer runs hold), and returns the
// recipient's own waiting notifications and when the oldest was saved.
func (b *Backlog) Add(entries []catalog.Entry, cursors []catalog.Cursor) (waiting int64, oldest time.Time) {
	if b.ByOrigin == nil {
		b.ByOrigin = map[domain.Origin]OriginBacklog{}
	}
	acked := make(map[catalog.Key]int64, len(cursors))
	for _, c := range cursors {
		acked[c.Key()] = c.Acked
	}
	for _, e := range entries {
		head, i := drawer.First(e.Drawers, acked[e.Key()])
		if i < 0 {
			continue
		}
		n := drawer.Held(e.Drawers[i:], head)
		if n <= 0 {
			continue
		}
		waiting += n
		o := b.ByOrigin[e.Origin]
		o.Notifications += n
		if at := e.Drawers[i].SavedAt(head); at > 0 {
			t := time.UnixMilli(at)
			if o.Oldest.IsZero() || t.Before(o.Oldest) {
				o.Oldest = t
			}
			if oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
		b.ByOrigin[e.Origin] = o
	}
	if waiting > 0 {
		b.Recipients++
	}
	return waiting, oldest
}
