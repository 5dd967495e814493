package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/repository"
)

// Pages are the bulk of the data and are read whole on every Peek, so they
// use a compact binary form: per item its position, sequence number, id,
// document type, bundling flag and weight. Small control records are JSON.

var errCorrupt = errors.New("embedded: corrupt record")

func encodePage(items []drawer.Item) ([]byte, error) {
	buf := binary.AppendUvarint(make([]byte, 0, len(items)*48), uint64(len(items)))
	for _, it := range items {
		id, err := uuidBytes(it.ID)
		if err != nil {
			return nil, err
		}
		buf = binary.AppendUvarint(buf, uint64(it.Pos))
		buf = binary.AppendUvarint(buf, uint64(it.Seq))
		buf = append(buf, id[:]...)
		buf = binary.AppendUvarint(buf, uint64(len(it.DocumentType)))
		buf = append(buf, it.DocumentType...)
		flag := byte(0)
		if it.SupportsBundling {
			flag = 1
		}
		buf = append(buf, flag)
		buf = binary.AppendUvarint(buf, uint64(it.Weight))
	}
	return buf, nil
}

// pageReader decodes a page item by item without allocating the whole page.
type pageReader struct {
	buf  []byte
	left uint64
	err  error
}

func newPageReader(buf []byte) *pageReader {
	n, k := binary.Uvarint(buf)
	if k <= 0 {
		return &pageReader{err: errCorrupt}
	}
	return &pageReader{buf: buf[k:], left: n}
}

func (p *pageReader) uvarint() uint64 {
	v, k := binary.Uvarint(p.buf)
	if k <= 0 {
		p.err = errCorrupt
		return 0
	}
	p.buf = p.buf[k:]
	return v
}

func (p *pageReader) bytes(n uint64) []byte {
	if uint64(len(p.buf)) < n {
		p.err = errCorrupt
		return nil
	}
	b := p.buf[:n]
	p.buf = p.buf[n:]
	return b
}

// next decodes the next item; ok is false at the end or on error (see err).
func (p *pageReader) next() (it drawer.Item, ok bool) {
	if p.err != nil || p.left == 0 {
		return it, false
	}
	p.left--
	it.Pos = int64(p.uvarint())
	it.Seq = int64(p.uvarint())
	if id := p.bytes(16); id != nil {
		it.ID = uuid.UUID(id).String()
	}
	it.DocumentType = string(p.bytes(p.uvarint()))
	if flag := p.bytes(1); flag != nil {
		it.SupportsBundling = flag[0] == 1
	}
	it.Weight = int64(p.uvarint())
	if p.err != nil {
		return drawer.Item{}, false
	}
	return it, true
}

// An id record is a format byte, the fingerprint and the drawer holding the
// notification. Records of earlier versions have no format byte and hold a
// truncated SHA-256 fingerprint (32 bytes in all).
const (
	idRecordXXH3      = 1
	idRecordLen       = 33
	legacyIDRecordLen = 32
)

func encodeIDRecord(rec repository.IDRecord) ([]byte, error) {
	return appendIDRecord(nil, rec)
}

// appendIDRecord appends the encoded record to b.
func appendIDRecord(b []byte, rec repository.IDRecord) ([]byte, error) {
	d, err := uuidBytes(rec.DrawerID)
	if err != nil {
		return b, err
	}
	if !rec.LegacyFingerprint {
		b = append(b, idRecordXXH3)
	}
	b = append(b, rec.Fingerprint[:]...)
	return append(b, d[:]...), nil
}

func decodeIDRecord(id string, v []byte) (repository.IDRecord, error) {
	legacy := len(v) == legacyIDRecordLen
	if !legacy {
		if len(v) != idRecordLen || v[0] != idRecordXXH3 {
			return repository.IDRecord{}, fmt.Errorf("%w: id record of %d bytes", errCorrupt, len(v))
		}
		v = v[1:]
	}
	rec := repository.IDRecord{ID: id, DrawerID: uuid.UUID(v[16:]).String(), LegacyFingerprint: legacy}
	copy(rec.Fingerprint[:], v[:16])
	return rec, nil
}
