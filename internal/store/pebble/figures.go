package pebble

import (
	"context"
	"encoding/json"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/store"
)

// The backlog figures (store.Figures) are three records under a prefix of
// their own: the totals, the lists and the history, so that a gauge reads
// the few bytes of the totals only. The store is local: its recount reads
// the cached records where it can and costs no request units.
const prefixFigures = 'g'

var (
	figuresTotalsKey  = []byte{prefixFigures, 't'}
	figuresListsKey   = []byte{prefixFigures, 'l'}
	figuresHistoryKey = []byte{prefixFigures, 'h'}
)

// figureRecord is one record of the figures: the totals, the lists or the
// history.
type figureRecord struct {
	part    byte
	figures store.BacklogFigures
}

// figureRecords splits f into the records a write of parts replaces.
func figureRecords(f store.BacklogFigures, parts store.FigureParts) []figureRecord {
	var out []figureRecord
	if parts&store.FigureLists != 0 {
		out = append(out, figureRecord{'l', store.BacklogFigures{ComputedAt: f.ComputedAt, Oldest: f.Oldest, Largest: f.Largest}})
	}
	if parts&store.FigureHistory != 0 {
		out = append(out, figureRecord{'h', store.BacklogFigures{ComputedAt: f.ComputedAt, History: f.History}})
	}
	f.Oldest, f.Largest, f.History = nil, nil, nil
	return append(out, figureRecord{'t', f}) // the totals last
}

// ScanBacklog implements store.Figures: every recipient with a head, from
// memory where cached, else read, and neither kept in memory nor marked as
// used: the app recounts this store several times an eviction round
// (telemetry.DefaultBacklogInterval), and a recount that counted as a use
// would keep every recipient it counts in memory for good.
func (s *Store) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	return 0, s.Recipients(ctx, func(recipient string) error {
		r, err := uuidBytes(recipient)
		if err != nil {
			return err
		}
		rec := s.peekCache(r)
		if rec == nil {
			if rec, err = s.readRecords(r); err != nil {
				return err
			}
		}
		st := rec.state()
		if len(st.Entries) == 0 && len(st.Cursors) == 0 && len(st.Pending) == 0 {
			return nil
		}
		return fn(store.RecipientRecords{Recipient: recipient, Entries: st.Entries, Cursors: st.Cursors, Pending: pendingOf(st.Pending)})
	})
}

// WriteFigures implements store.Figures. One process opens the store and
// holds every lease (store.Solo): no other holder can take one over.
func (s *Store) WriteFigures(ctx context.Context, _ string, f store.BacklogFigures, parts store.FigureParts) error {
	var puts []put
	for _, p := range figureRecords(f, parts) {
		raw, err := json.Marshal(p.figures)
		if err != nil {
			return err
		}
		puts = append(puts, put{key: []byte{prefixFigures, p.part}, value: raw})
	}
	return s.write(ctx, func(tx *txn) error {
		tx.apply(puts)
		return nil
	})
}

// ReadFigures implements store.Figures.
func (s *Store) ReadFigures(_ context.Context, parts store.FigureParts) (store.BacklogFigures, error) {
	var f store.BacklogFigures
	if err := s.readFigure(figuresTotalsKey, &f); err != nil {
		return f, err
	}
	if parts&store.FigureLists != 0 {
		var l store.BacklogFigures
		if err := s.readFigure(figuresListsKey, &l); err != nil {
			return f, err
		}
		f.Oldest, f.Largest = l.Oldest, l.Largest
	}
	if parts&store.FigureHistory != 0 {
		var h store.BacklogFigures
		if err := s.readFigure(figuresHistoryKey, &h); err != nil {
			return f, err
		}
		f.History = h.History
	}
	return f, nil
}

func (s *Store) readFigure(key []byte, v *store.BacklogFigures) error {
	raw, ok, err := s.get(key)
	if err != nil || !ok {
		return err
	}
	return json.Unmarshal(raw, v)
}

// ChangedBacklog implements store.Figures: the store is local, so every
// answer is a recount of every recipient (All), which costs no request
// units.
func (s *Store) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	changes := store.BacklogChanges{Cursor: "all"}
	if cursor == "" {
		return changes, nil
	}
	changes.All = true
	_, err := s.ScanBacklog(ctx, func(r store.RecipientRecords) error {
		changes.Recipients = append(changes.Recipients, r)
		return nil
	})
	return changes, err
}

// pendingOf is what the figures count of pending bundles.
func pendingOf(recs []bundle.Record) []store.PendingBundle {
	out := make([]store.PendingBundle, len(recs))
	for i, rec := range recs {
		out[i] = store.PendingBundle{Origin: rec.Origin, Created: rec.CreatedAt}
	}
	return out
}
