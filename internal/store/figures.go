package store

import (
	"cmp"
	"slices"
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
)

// The backlog figures: what the backlog gauges, the list of recipients with
// a backlog and the backlog's history show. One instance of a cluster
// recounts them now and then (ScanBacklog) and stores them in a few small
// records that every instance reads, so that neither a gauge nor an admin
// call ever reads every recipient.

// Bounds of what the figures keep.
const (
	// MaxListed is how many recipients each list of the figures keeps: the
	// ones with the oldest waiting notifications and the ones with the
	// most (a recipient may be in both).
	MaxListed = 1000
	// HistoryStep is the time between two samples of the history (the
	// first update in each HistoryStep of the clock), and HistorySpan how
	// far back it goes.
	HistoryStep = 5 * time.Minute
	HistorySpan = 24 * time.Hour
)

// RecipientRecords is what a recount reads of one recipient.
type RecipientRecords struct {
	Recipient string
	Entries   []catalog.Entry
	Cursors   []catalog.Cursor
	Pending   []PendingBundle // bundles peeked and not yet dequeued
}

// PendingBundle is what the figures count of a pending bundle.
type PendingBundle struct {
	Origin  domain.Origin
	Created time.Time
}

// BacklogChanges is what changed in the recipients' records since a
// cursor (Figures.ChangedBacklog).
type BacklogChanges struct {
	Recipients []RecipientRecords
	// All says that Recipients are every recipient with records.
	All bool
	// Cursor is where the next read goes on.
	Cursor string
	// Cost is what the read cost, as ScanBacklog's.
	Cost float64
}

// RecipientBacklog is one recipient's line in the figures' lists.
type RecipientBacklog struct {
	Recipient string    `json:"r"`
	Waiting   int64     `json:"w"`           // notifications saved and not yet dequeued
	Oldest    time.Time `json:"o,omitzero"`  // when the oldest of them was saved (estimated within its drawer); zero when unknown
	Pending   int       `json:"p,omitempty"` // bundles peeked and not yet dequeued
}

// BacklogSample is the backlog per domain at one moment.
type BacklogSample struct {
	At       time.Time                       `json:"at"`
	ByOrigin map[domain.Origin]OriginBacklog `json:"b,omitempty"`
}

// FigureParts says which parts of the figures a read wants, or a write
// replaces, besides the totals, which every read gets and every write
// replaces.
type FigureParts uint8

// The parts of the figures.
const (
	FigureTotals  FigureParts = 0
	FigureLists   FigureParts = 1 << 0
	FigureHistory FigureParts = 1 << 1
)

// BacklogFigures are the backlog figures as last recounted.
type BacklogFigures struct {
	// ComputedAt is when the recount ended; zero when there was none.
	ComputedAt time.Time `json:"at,omitzero"`
	// Cost is what the update that computed them cost (reading what
	// changed), FullAt when the last recount of every recipient was and
	// FullCost what it cost: they pace the next of each.
	Cost     float64   `json:"cost,omitempty"`
	FullAt   time.Time `json:"fat,omitzero"`
	FullCost float64   `json:"fcost,omitempty"`
	Backlog  Backlog   `json:"bl"`
	// Notices and OldestNotice are the outbox (Outbox.NoticeBacklog).
	Notices      int       `json:"n,omitempty"`
	OldestNotice time.Time `json:"no,omitzero"`
	// Oldest lists up to MaxListed recipients by their oldest waiting
	// notification, oldest first; Largest up to MaxListed by their waiting
	// notifications, most first (FigureLists).
	Oldest  []RecipientBacklog `json:"old,omitempty"`
	Largest []RecipientBacklog `json:"big,omitempty"`
	// History holds one sample per HistoryStep over HistorySpan, oldest
	// first (FigureHistory).
	History []BacklogSample `json:"h,omitempty"`
}

// Tally is the backlog of every recipient, kept recipient by recipient:
// from a recount, then from the recipients that changed.
type Tally struct {
	lines map[string]tallyLine
}

// tallyLine is one recipient's part: its line in the lists and its
// backlog by domain.
type tallyLine struct {
	RecipientBacklog
	byOrigin map[domain.Origin]OriginBacklog
}

// Set replaces the recipient's part with what r says; a recipient with
// nothing waiting and nothing pending leaves the tally.
func (t *Tally) Set(r RecipientRecords) {
	if t.lines == nil {
		t.lines = map[string]tallyLine{}
	}
	var b Backlog
	waiting, oldest := b.Add(r.Entries, r.Cursors)
	for _, p := range r.Pending {
		b.AddPending(p.Origin, p.Created)
	}
	if waiting <= 0 && len(r.Pending) == 0 {
		delete(t.lines, r.Recipient)
		return
	}
	t.lines[r.Recipient] = tallyLine{
		RecipientBacklog: RecipientBacklog{Recipient: r.Recipient, Waiting: waiting, Oldest: oldest, Pending: len(r.Pending)},
		byOrigin:         b.ByOrigin,
	}
}

// Reset empties the tally.
func (t *Tally) Reset() { t.lines = nil }

// Figures returns the figures of the tally at now, with history carried on
// and a sample of now added to it when it is the first of its HistoryStep.
func (t *Tally) Figures(now time.Time, history []BacklogSample) BacklogFigures {
	f := BacklogFigures{ComputedAt: now}
	listed := make([]RecipientBacklog, 0, len(t.lines))
	for _, l := range t.lines {
		listed = append(listed, l.RecipientBacklog)
		if l.Waiting > 0 {
			f.Backlog.Recipients++
		}
		for o, ob := range l.byOrigin {
			if f.Backlog.ByOrigin == nil {
				f.Backlog.ByOrigin = map[domain.Origin]OriginBacklog{}
			}
			sum := f.Backlog.ByOrigin[o]
			sum.Notifications += ob.Notifications
			if !ob.Oldest.IsZero() && (sum.Oldest.IsZero() || ob.Oldest.Before(sum.Oldest)) {
				sum.Oldest = ob.Oldest
			}
			sum.PendingBundles += ob.PendingBundles
			if !ob.OldestPending.IsZero() && (sum.OldestPending.IsZero() || ob.OldestPending.Before(sum.OldestPending)) {
				sum.OldestPending = ob.OldestPending
			}
			f.Backlog.ByOrigin[o] = sum
		}
	}
	oldest := slices.Clone(listed)
	slices.SortFunc(oldest, func(x, y RecipientBacklog) int {
		switch {
		case x.Oldest.IsZero() != y.Oldest.IsZero():
			if x.Oldest.IsZero() {
				return 1 // unknown ages last
			}
			return -1
		case !x.Oldest.Equal(y.Oldest):
			return x.Oldest.Compare(y.Oldest)
		}
		return cmp.Compare(x.Recipient, y.Recipient)
	})
	f.Oldest = oldest[:min(len(oldest), MaxListed)]
	largest := listed
	slices.SortFunc(largest, func(x, y RecipientBacklog) int {
		if c := cmp.Compare(y.Waiting, x.Waiting); c != 0 {
			return c
		}
		return cmp.Compare(x.Recipient, y.Recipient)
	})
	f.Largest = largest[:min(len(largest), MaxListed)]
	f.History = nextHistory(history, BacklogSample{At: now, ByOrigin: f.Backlog.ByOrigin})
	return f
}

// nextHistory adds the sample when it is the first in its HistoryStep of
// the clock, and drops the samples older than the span. The steps are the
// clock's, not counted from the last sample: updates come every so often,
// each ending a little earlier or later into its turn, and a sample due a
// whole step after the last one waited for the next update whenever this
// one ended earlier than the last sample's had.
func nextHistory(history []BacklogSample, sample BacklogSample) []BacklogSample {
	out := slices.DeleteFunc(slices.Clone(history), func(s BacklogSample) bool {
		return !s.At.After(sample.At.Add(-HistorySpan)) || s.At.After(sample.At)
	})
	if n := len(out); n == 0 || sample.At.Truncate(HistoryStep).After(out[n-1].At.Truncate(HistoryStep)) {
		out = append(out, sample)
	}
	return out
}
