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
	ByOrigin   map[domain.Origin]OriginBacklog
	Recipients int // recipients with at least one notification not dequeued
}

// OriginBacklog is one domain's part of the backlog.
type OriginBacklog struct {
	Notifications int64
	// Oldest is when the oldest notification not yet dequeued was saved
	// (estimated within its drawer, see drawer.Meta.SavedAt); zero when
	// unknown.
	Oldest time.Time
	// PendingBundles counts the domain's bundles peeked and not yet
	// dequeued; OldestPending is when the oldest of them was cut (zero
	// without one).
	PendingBundles int64
	OldestPending  time.Time
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

// Add counts one recipient's catalog entries and cursors: the positions
// after each cursor that the entry's drawer runs hold.
func (b *Backlog) Add(entries []catalog.Entry, cursors []catalog.Cursor) {
	if b.ByOrigin == nil {
		b.ByOrigin = map[domain.Origin]OriginBacklog{}
	}
	acked := make(map[catalog.Key]int64, len(cursors))
	for _, c := range cursors {
		acked[c.Key()] = c.Acked
	}
	waiting := false
	for _, e := range entries {
		head, i := drawer.First(e.Drawers, acked[e.Key()])
		if i < 0 {
			continue
		}
		waiting = true
		o := b.ByOrigin[e.Origin]
		o.Notifications += drawer.Held(e.Drawers[i:], head)
		if at := e.Drawers[i].SavedAt(head); at > 0 {
			if t := time.UnixMilli(at); o.Oldest.IsZero() || t.Before(o.Oldest) {
				o.Oldest = t
			}
		}
		b.ByOrigin[e.Origin] = o
	}
	if waiting {
		b.Recipients++
	}
}
