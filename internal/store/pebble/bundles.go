package pebble

import (
	"cmp"
	"context"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
)

// CreateBundle stores a pending bundle if its id is unused, its group has no
// pending bundle and the cursor is unchanged.
func (s *Store) CreateBundle(ctx context.Context, recipient string, bun bundle.Record, cursor catalog.Cursor) error {
	r, id, err := parseIDs(recipient, bun.ID)
	if err != nil {
		return err
	}
	// Many document types are not kept: retention reads every record a
	// recipient retains, at every visit.
	bun.DocumentTypes = bundle.StoredDocumentTypes(bun.DocumentTypes)
	return s.write(ctx, func(tx *txn) error {
		rec, err := tx.records(r)
		if err != nil {
			return err
		}
		if _, ok := rec.pending[bun.ID]; ok {
			return conflict("bundle %s is pending", bun.ID)
		}
		for _, p := range rec.pending {
			if p.Group == bun.Group {
				return conflict("a bundle is pending in group %d", bun.Group)
			}
		}
		if rec.cursorVersion(cursor.Key()) != cursor.Version {
			return conflict("cursor %v moved", cursor.Key())
		}
		if dequeued, err := tx.dequeuedExists(dequeuedKey(r, id)); err != nil || dequeued {
			return cmp.Or(err, conflict("bundle %s was dequeued", bun.ID)) // a lookup failure beats the conflict it checked for
		}
		bun.Version = s.nextVersion()
		p, err := setPut(pendingKey(r, id), bun)
		if err != nil {
			return err
		}
		tx.apply([]put{p})
		tx.change(r, rec, pendingMap, func(rec *records) { rec.pending[bun.ID] = bun })
		return nil
	})
}

// Acknowledge moves a pending bundle to the dequeued ones and writes the cursor.
func (s *Store) Acknowledge(ctx context.Context, recipient string, bun bundle.Record, cursor catalog.Cursor) error {
	bun.DocumentTypes = bundle.StoredDocumentTypes(bun.DocumentTypes) // as CreateBundle
	return s.whilePending(ctx, recipient, bun, func(tx *txn, r, id [16]byte, rec *records) error {
		if rec.cursorVersion(cursor.Key()) != cursor.Version {
			return conflict("cursor %v moved", cursor.Key())
		}
		bun.Version = s.nextVersion()
		cursor.Version = s.nextVersion()
		dq, err := setPut(dequeuedKey(r, id), bun)
		if err != nil {
			return err
		}
		cur, err := setPut(cabinetKey(kindCursor, r, cursor.Key()), cursor)
		if err != nil {
			return err
		}
		index, err := retentionPuts(bun, r, id, false)
		if err != nil {
			return err
		}
		puts := append([]put{{key: pendingKey(r, id), del: true}, dq, cur}, index...)
		if bun.Notice {
			puts = append(puts, put{key: noticeKey(bun.Origin, bun.DequeuedAt.UnixNano(), r, id), value: []byte{}})
		}
		tx.apply(puts)
		tx.dequeued[string(dq.key)] = true
		tx.change(r, rec, pendingMap|cursorsMap, func(rec *records) {
			delete(rec.pending, bun.ID)
			rec.cursors[cursor.Key()] = cursor
		})
		return nil
	})
}

// ReleaseBundle moves a pending bundle, at the version read, to where the
// dequeued ones are, marked released; the cursor is left alone.
func (s *Store) ReleaseBundle(ctx context.Context, recipient string, bun bundle.Record) error {
	bun.DocumentTypes = bundle.StoredDocumentTypes(bun.DocumentTypes) // as CreateBundle
	return s.whilePending(ctx, recipient, bun, func(tx *txn, r, id [16]byte, rec *records) error {
		bun.Version = s.nextVersion()
		rel, err := setPut(dequeuedKey(r, id), bun)
		if err != nil {
			return err
		}
		index, err := retentionPuts(bun, r, id, false)
		if err != nil {
			return err
		}
		tx.apply(append([]put{{key: pendingKey(r, id), del: true}, rel}, index...))
		tx.dequeued[string(rel.key)] = true
		tx.change(r, rec, pendingMap, func(rec *records) { delete(rec.pending, bun.ID) })
		return nil
	})
}

// whilePending runs fn in a write, provided bun is pending at the version
// it names (else it is a conflict), with the recipient's and the bundle's
// ids as keys take them and the recipient's records.
func (s *Store) whilePending(ctx context.Context, recipient string, bun bundle.Record, fn func(tx *txn, r, id [16]byte, rec *records) error) error {
	r, id, err := parseIDs(recipient, bun.ID)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error {
		rec, err := tx.records(r)
		if err != nil {
			return err
		}
		if bun.Version == "" || rec.pending[bun.ID].Version != bun.Version {
			return conflict("bundle %s is not pending at version %q", bun.ID, bun.Version)
		}
		return fn(tx, r, id, rec)
	})
}

func parseIDs(recipient, bundleID string) (r, id [16]byte, err error) {
	if r, err = uuidBytes(recipient); err != nil {
		return r, id, err
	}
	id, err = uuidBytes(bundleID)
	return r, id, err
}
