package cosmos

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

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
