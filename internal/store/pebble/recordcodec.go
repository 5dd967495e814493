package pebble

import (
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Every save writes its recipients' heads and catalog entries, and a drawer's
// record when it fills, into the log and pebble's memtable: so they are
// binary, recordBinary and then their fields as varints and length-prefixed
// strings, a drawer's id as its 16 bytes. A single save's head and entry take
// about 80 bytes, under half their JSON size (TestASavesHeadAndEntryAreSmall).
// Cursors and bundles, written by peeks and dequeues, are JSON.
const recordBinary = 1

// encodeHead encodes a recipient's head: NextSeq, Watermark, Version.
func encodeHead(h store.Head) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+1+len(h.Version))
	b = append(b, recordBinary)
	b = binary.AppendVarint(b, h.NextSeq)
	b = binary.AppendVarint(b, h.Watermark)
	return appendString(b, h.Version)
}

func decodeHead(v []byte) (store.Head, error) {
	return decodeRecord("head", v, func(r *fieldReader) store.Head {
		return store.Head{NextSeq: r.varint(), Watermark: r.varint(), Version: r.string()}
	})
}

// encodeEntry encodes a catalog entry: origin, content type, drawers, total,
// version.
func encodeEntry(e catalog.Entry) ([]byte, error) {
	b := make([]byte, 0, 16+len(e.ContentType)+len(e.Drawers)*48+len(e.Version))
	b = append(b, recordBinary)
	b = binary.AppendVarint(b, int64(e.Origin))
	b = appendString(b, e.ContentType)
	b = binary.AppendUvarint(b, uint64(len(e.Drawers)))
	for _, d := range e.Drawers {
		var err error
		if b, err = appendDrawer(b, d); err != nil {
			return nil, err
		}
	}
	b = binary.AppendVarint(b, e.Total)
	return appendString(b, e.Version), nil
}

func decodeEntry(v []byte) (catalog.Entry, error) {
	return decodeRecord("catalog entry", v, func(r *fieldReader) catalog.Entry {
		e := catalog.Entry{Origin: domain.Origin(r.varint()), ContentType: r.string()}
		for n := r.uvarint(); n > 0 && r.err == nil; n-- {
			e.Drawers = append(e.Drawers, r.drawer())
		}
		e.Total = r.varint()
		e.Version = r.string()
		return e
	})
}

// encodeDrawerMeta encodes the record of a drawer that is not its cabinet's
// last (entries.go).
func encodeDrawerMeta(m drawer.Meta) ([]byte, error) {
	return appendDrawer(append(make([]byte, 0, 1+16+6*binary.MaxVarintLen64), recordBinary), m)
}

func decodeDrawerMeta(v []byte) (drawer.Meta, error) {
	return decodeRecord("drawer record", v, (*fieldReader).drawer)
}

// appendDrawer appends a drawer's id (its 16 bytes: the id must be a UUID in
// canonical form, as the planner makes them, to read back the same) and its
// numbers.
func appendDrawer(b []byte, m drawer.Meta) ([]byte, error) {
	id, err := uuid.Parse(m.ID)
	if err != nil || id.String() != m.ID {
		return nil, fmt.Errorf("embedded: drawer id %q is not a UUID in canonical form", m.ID)
	}
	b = append(b, id[:]...)
	for _, n := range [...]int64{m.Start, int64(m.Count), m.FirstSeq, m.LastSeq, m.FirstAt, m.LastAt} {
		b = binary.AppendVarint(b, n)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeRecord decodes v; read reads its fields after its format byte.
func decodeRecord[T any](what string, v []byte, read func(*fieldReader) T) (T, error) {
	if len(v) == 0 || v[0] != recordBinary {
		var zero T
		return zero, fmt.Errorf("%w: %s of %d bytes in no known format", errCorrupt, what, len(v))
	}
	r := &fieldReader{buf: v[1:]}
	x := read(r)
	if r.err == nil && len(r.buf) > 0 {
		r.err = errCorrupt
	}
	if r.err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %s", r.err, what)
	}
	return x, nil
}

func (r *fieldReader) string() string { return string(r.bytes(r.uvarint())) }

func (r *fieldReader) drawer() drawer.Meta {
	id := r.bytes(16)
	if r.err != nil {
		return drawer.Meta{}
	}
	m := drawer.Meta{ID: uuid.UUID(id).String(), Start: r.varint(), Count: int(r.varint())}
	m.FirstSeq, m.LastSeq, m.FirstAt, m.LastAt = r.varint(), r.varint(), r.varint(), r.varint()
	return m
}
