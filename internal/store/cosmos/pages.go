package cosmos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
)

// pageDoc is a run of consecutive positions of one drawer, written by one
// save. Every byte of it is paid for three times (written, read, deleted),
// so items are packed: the page names the defaults of its items (those of
// the first), and an item that matches them is only its id, 22 characters,
// with sequence number Seq+i at index i. Others are [id, dq] (sequence
// number Seq+i+dq) or [id, dq, weight, bundling 0/1, document type].
type pageDoc struct {
	ID       string            `json:"id"`
	PK       string            `json:"pk"`
	Start    int64             `json:"s"`
	End      int64             `json:"e"`
	Seq      int64             `json:"q,omitempty"`
	Weight   int64             `json:"w,omitempty"`
	Bundling int               `json:"b,omitempty"`
	DocType  string            `json:"t,omitempty"`
	X        []json.RawMessage `json:"x,omitempty"`
	Save     string            `json:"sv,omitempty"` // the save that wrote it: retention finds its id documents through it
}

func pageID(start int64) string { return fmt.Sprintf("%012d", start) }

func encodePage(p drawer.Page) (pageDoc, error) {
	doc := pageDoc{ID: pageID(p.Start()), PK: p.DrawerID, Start: p.Start(), End: p.Start() + int64(len(p.Items))}
	first := p.Items[0]
	doc.Seq, doc.Weight, doc.Bundling, doc.DocType = first.Seq, first.Weight, flag(first.SupportsBundling), first.DocumentType
	for i, it := range p.Items {
		if it.Pos != doc.Start+int64(i) {
			return doc, fmt.Errorf("page of drawer %s: positions are not consecutive", p.DrawerID)
		}
		var v any
		id, dq := packID(it.ID), it.Seq-doc.Seq-int64(i)
		switch {
		case it.Weight != doc.Weight || flag(it.SupportsBundling) != doc.Bundling || it.DocumentType != doc.DocType:
			v = []any{id, dq, it.Weight, flag(it.SupportsBundling), it.DocumentType}
		case dq != 0:
			v = []any{id, dq}
		default:
			v = id
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return doc, err
		}
		doc.X = append(doc.X, raw)
	}
	return doc, nil
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// items decodes the page's items from index off on (a query may return a
// slice of X that starts at off).
func (p pageDoc) items(off int64) ([]drawer.Item, error) {
	var out []drawer.Item
	for i, raw := range p.X {
		idx := off + int64(i)
		it := drawer.Item{Pos: p.Start + idx, Seq: p.Seq + idx, Weight: p.Weight, SupportsBundling: p.Bundling == 1, DocumentType: p.DocType}
		var packed string
		if len(raw) > 0 && raw[0] == '"' {
			if err := json.Unmarshal(raw, &packed); err != nil {
				return nil, fmt.Errorf("corrupt page item at %d: %w", it.Pos, err)
			}
		} else {
			var fields []json.RawMessage
			if err := json.Unmarshal(raw, &fields); err != nil || (len(fields) != 2 && len(fields) != 5) {
				return nil, fmt.Errorf("corrupt page item at %d", it.Pos)
			}
			var dq int64
			var bundling int
			dst := []any{&packed, &dq, &it.Weight, &bundling, &it.DocumentType}
			for k := range fields {
				if err := json.Unmarshal(fields[k], dst[k]); err != nil {
					return nil, fmt.Errorf("corrupt page item at %d: %w", it.Pos, err)
				}
			}
			it.Seq += dq
			if len(fields) == 5 {
				it.SupportsBundling = bundling == 1
			}
		}
		id, err := unpackID(packed)
		if err != nil {
			return nil, fmt.Errorf("corrupt page item at %d: %w", it.Pos, err)
		}
		it.ID = id
		out = append(out, it)
	}
	return out, nil
}

// packID writes a canonical UUID as its 16 bytes in unpadded base64url (22
// characters instead of 36); any other id as "=" and itself, which no
// base64url text starts with.
func packID(id string) string {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return "=" + id
	}
	return base64.RawURLEncoding.EncodeToString(u[:])
}

func unpackID(s string) (string, error) {
	if len(s) > 0 && s[0] == '=' {
		return s[1:], nil
	}
	var u uuid.UUID
	n, err := base64.RawURLEncoding.Decode(u[:], []byte(s))
	if err != nil || n != len(u) || len(s) != 22 {
		return "", fmt.Errorf("corrupt packed id %q", s)
	}
	return u.String(), nil
}

// writtenPages remembers, per drawer, where the pages this instance wrote
// start and end, so that a read of positions one of them holds reads that
// page by id (1 RU for a page under 1 KB) instead of querying the drawer
// (2.3 RU a page of answer plus what it loads). A page's positions are
// written once, by one save, and never rewritten (a replay writes the same
// items), so the page read by id is the one the query would return; a
// page deleted since (by retention or a rollback) is not found, and the
// read falls back to the query. The memory is a few dozen bytes a page
// and forgetting one only costs its read the query.
type writtenPages struct {
	mu sync.Mutex
	m  map[pageKey]int64 // → end
}

type pageKey struct {
	drawer string
	start  int64
}

// maxWrittenPages bounds the pages remembered.
const maxWrittenPages = 8192

func (w *writtenPages) wrote(drawerID string, start, end int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[pageKey]int64{}
	}
	k := pageKey{drawerID, start}
	if _, ok := w.m[k]; !ok && len(w.m) >= maxWrittenPages {
		for old := range w.m { // any one: map order is random
			delete(w.m, old)
			break
		}
	}
	w.m[k] = end
}

// end returns the end of the page this instance wrote at start in the
// drawer, when it remembers one.
func (w *writtenPages) end(drawerID string, start int64) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	end, ok := w.m[pageKey{drawerID, start}]
	return end, ok
}

// readOwnPage reads [from, to) of the drawer from the page this instance
// wrote at from, by id and with token, when that page holds every position
// asked for and at most as many more (so the read loads at most twice
// what the query's slice would). ok is false when it did not answer (no
// such page remembered, or not found, or any failure): the caller queries.
func (s *Store) readOwnPage(ctx context.Context, token *string, drawerID string, from, to int64) ([]drawer.Item, bool) {
	end, known := s.pages.end(drawerID, from)
	if !known || end < to || end-to > to-from {
		return nil, false
	}
	opts := &azcosmos.ItemOptions{SessionToken: token}
	resp, err := s.drawers.ReadItem(ctx, azcosmos.NewPartitionKeyString(drawerID), pageID(from), opts)
	if err != nil {
		return nil, false
	}
	var p pageDoc
	if err := json.Unmarshal(resp.Value, &p); err != nil || p.Start != from || p.End < to {
		return nil, false
	}
	got, err := p.items(0)
	if err != nil {
		return nil, false
	}
	var items []drawer.Item
	for _, it := range got {
		if it.Pos < to {
			items = append(items, it)
		}
	}
	return items, true
}
