package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Pages are the bulk of the data and are read whole on every Peek, so they
// use a compact binary form (as do heads and catalog entries, recordcodec.go).
//
// A page is a format byte (pageFormat), its item count, then per item: its
// position and sequence number as the difference from the item before
// (zigzag varints; a page's positions follow one another, so the first is
// one byte), its id (16 bytes), its document type as a reference into the
// page's own list of them (a new type is its length and bytes, once), and
// weight<<1 | bundling flag: about 20 bytes an item
// (TestAPageOfOneDocumentTypeIsSmall).

var errCorrupt = errors.New("embedded: corrupt record")

// pageFormat is a page's first byte.
const pageFormat = 0

func encodePage(items []drawer.Item) ([]byte, error) {
	buf := append(make([]byte, 0, 2+len(items)*22), pageFormat)
	buf = binary.AppendUvarint(buf, uint64(len(items)))
	var types typeRefs
	prevPos, prevSeq := int64(-1), int64(0)
	for _, it := range items {
		id, err := uuidBytes(it.ID)
		if err != nil {
			return nil, err
		}
		buf = binary.AppendVarint(buf, it.Pos-prevPos-1)
		buf = binary.AppendVarint(buf, it.Seq-prevSeq)
		prevPos, prevSeq = it.Pos, it.Seq
		buf = append(buf, id[:]...)
		ref, known := types.ref(it.DocumentType)
		buf = binary.AppendUvarint(buf, uint64(ref))
		if !known {
			buf = appendString(buf, it.DocumentType)
		}
		flag := uint64(0)
		if it.SupportsBundling {
			flag = 1
		}
		buf = binary.AppendUvarint(buf, uint64(it.Weight)<<1|flag)
	}
	return buf, nil
}

// typeRefs numbers a page's document types in the order they first appear.
// Pages mostly hold one or a few, compared in turn; a page of many different
// ones (each item may name its own) looks them up in a map instead.
type typeRefs struct {
	list  []string
	index map[string]int
}

// ref returns the type's number, and whether it had one already.
func (t *typeRefs) ref(s string) (int, bool) {
	if t.index != nil {
		if i, ok := t.index[s]; ok {
			return i, true
		}
	} else if i := slices.Index(t.list, s); i >= 0 {
		return i, true
	}
	t.list = append(t.list, s)
	if t.index == nil && len(t.list) > 8 {
		t.index = make(map[string]int, 2*len(t.list))
		for i, s := range t.list {
			t.index[s] = i
		}
	} else if t.index != nil {
		t.index[s] = len(t.list) - 1
	}
	return len(t.list) - 1, false
}

// pageReader decodes a page item by item without allocating the whole page;
// items of one document type share one string.
type pageReader struct {
	fieldReader
	left    uint64
	prevPos int64
	prevSeq int64
	types   []string
}

// newPageReader starts reading a page; one of another format reads no item
// and sets err.
func newPageReader(buf []byte) *pageReader {
	p := &pageReader{prevPos: -1}
	if len(buf) == 0 || buf[0] != pageFormat {
		p.err = errCorrupt
		return p
	}
	p.buf = buf[1:]
	p.left = p.uvarint()
	return p
}

// fieldReader reads varints and bytes off a buffer. The first that cannot
// be read sets err; those after it read zeros.
type fieldReader struct {
	buf []byte
	err error
}

// uvarint and varint read a varint; on a corrupt one they set err and
// return 0 (as encoding/binary does).
func (r *fieldReader) uvarint() uint64 {
	v, k := binary.Uvarint(r.buf)
	r.skip(k)
	return v
}

func (r *fieldReader) varint() int64 {
	v, k := binary.Varint(r.buf)
	r.skip(k)
	return v
}

// skip moves past a varint of k bytes; k <= 0 means none could be read.
func (r *fieldReader) skip(k int) {
	if k <= 0 {
		r.err, r.buf = errCorrupt, nil
		return
	}
	r.buf = r.buf[k:]
}

func (r *fieldReader) bytes(n uint64) []byte {
	if uint64(len(r.buf)) < n {
		r.err, r.buf = errCorrupt, nil
		return nil
	}
	b := r.buf[:n]
	r.buf = r.buf[n:]
	return b
}

// next decodes the next item; ok is false at the end or on error (see err).
func (p *pageReader) next() (it drawer.Item, ok bool) {
	if p.err != nil || p.left == 0 {
		return it, false
	}
	p.left--
	it.Pos = p.prevPos + 1 + p.varint()
	it.Seq = p.prevSeq + p.varint()
	p.prevPos, p.prevSeq = it.Pos, it.Seq
	if id := p.bytes(16); id != nil {
		it.ID = uuid.UUID(id).String()
	}
	switch ref := p.uvarint(); {
	case ref < uint64(len(p.types)):
		it.DocumentType = p.types[ref]
	case ref == uint64(len(p.types)):
		it.DocumentType = p.string()
		p.types = append(p.types, it.DocumentType)
	default:
		p.err = errCorrupt
	}
	v := p.uvarint()
	it.Weight, it.SupportsBundling = int64(v>>1), v&1 == 1
	if p.err != nil {
		return drawer.Item{}, false
	}
	return it, true
}

// An id record is a format byte (idRecordXXH3), the fingerprint and the
// drawer holding the notification.
const (
	idRecordXXH3 = 1
	idRecordLen  = 33
)

// appendIDRecord appends the record, whose drawer id's bytes are drawer, to b.
func appendIDRecord(b []byte, rec store.IDRecord, drawer *[16]byte) []byte {
	b = append(b, idRecordXXH3)
	b = append(b, rec.Fingerprint[:]...)
	return append(b, drawer[:]...)
}

func decodeIDRecord(id string, v []byte) (store.IDRecord, error) {
	if len(v) != idRecordLen || v[0] != idRecordXXH3 {
		return store.IDRecord{}, fmt.Errorf("%w: id record of %d bytes", errCorrupt, len(v))
	}
	rec := store.IDRecord{ID: id, DrawerID: uuid.UUID(v[17:]).String()}
	copy(rec.Fingerprint[:], v[1:17])
	return rec, nil
}
