package pebble

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
)

// Key layout. Everything one Peek needs about a recipient sits under one
// prefix, so it is read by one range scan; dequeued bundles sit elsewhere so
// that scan stays short.
//
//	r <recipient> h                        head
//	r <recipient> e <origin> <contentType> catalog entry, with its last drawer
//	r <recipient> m <origin> <len> <contentType> <start>  an earlier drawer (entries.go)
//	r <recipient> c <origin> <contentType> cursor
//	r <recipient> p <bundle>               pending bundle
//	x <recipient> <bundle>                 dequeued (or released) bundle
//	y <at> <recipient> <bundle>            retention index: that bundle by when it was dequeued (or released), unix µs
//	z <recipient> <at> <bundle>            the same, by recipient: what a visit of it reads (LoadRetention)
//	w <recipient> <drawer> <at> <bundle>   a drawer a dequeued bundle names, by when it was dequeued
//	d <drawer> <start position>            page of a drawer
//	j <group> <notification id>            id record (idindex.go)
//	o <origin> <dequeued at> <recipient> <bundle>  notice: a domain to tell of a dequeue
//	a <recipient> <event key>              audit event (audit.go)
//	f                                      token of the saved id index (idindex_file.go)
//	g <part>                               backlog figures (figures.go)
//	v                                      format version (format.go)
const (
	prefixRecipient   = 'r'
	prefixDequeued    = 'x'
	prefixRetained    = 'y'
	prefixRetainedBy  = 'z'
	prefixNamedBy     = 'w'
	prefixDrawer      = 'd'
	prefixIDByGroup   = 'j'
	prefixNotice      = 'o'
	prefixFilterToken = 'f'
	prefixFormat      = 'v'

	kindHead    = 'h'
	kindEntry   = 'e'
	kindCursor  = 'c'
	kindPending = 'p'
)

// uuidBytes parses the canonical ids the domain has already validated.
func uuidBytes(s string) ([16]byte, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return [16]byte{}, fmt.Errorf("bad id %q: %w", s, err)
	}
	return u, nil
}

func recipientPrefix(r [16]byte) []byte {
	return append([]byte{prefixRecipient}, r[:]...)
}

func headKey(r [16]byte) []byte { return append(recipientPrefix(r), kindHead) }

func cabinetKey(kind byte, r [16]byte, k catalog.Key) []byte {
	key := append(recipientPrefix(r), kind, byte(k.Origin))
	return append(key, k.ContentType...)
}

func pendingPrefix(r [16]byte) []byte { return append(recipientPrefix(r), kindPending) }

func pendingKey(r, b [16]byte) []byte { return append(pendingPrefix(r), b[:]...) }

func dequeuedPrefix(r [16]byte) []byte { return append([]byte{prefixDequeued}, r[:]...) }

func dequeuedKey(r, b [16]byte) []byte { return append(dequeuedPrefix(r), b[:]...) }

// retainedKey indexes a dequeued or released bundle by when it left the
// pending ones (rec.DequeuedAt or rec.ReleasedAt), for DueRecipients.
func retainedKey(rec bundle.Record, r, b [16]byte) []byte {
	return append(append(retainedAt(leftPendingAt(rec)), r[:]...), b[:]...)
}

// retentionPuts stages the keys that index a dequeued or released bundle's
// record for retention, to set with it (or to delete with it, del): its
// place in the retention index, in its recipient's (retainedByKey) and, of
// a dequeued bundle, under each drawer it names (namedByKey). Released
// bundles read nothing back, so they keep no drawer.
func retentionPuts(rec bundle.Record, r, b [16]byte, del bool) ([]put, error) {
	puts := []put{{key: retainedKey(rec, r, b), value: []byte{}, del: del}, {key: retainedByKey(r, leftPendingAt(rec), b), value: []byte{}, del: del}}
	if rec.State != bundle.Dequeued {
		return puts, nil
	}
	for _, d := range rec.Drawers {
		id, err := uuidBytes(d.ID)
		if err != nil {
			return nil, err
		}
		key := namedByKey(r, id, rec.DequeuedAt, b)
		if !slices.ContainsFunc(puts, func(p put) bool { return bytes.Equal(p.key, key) }) { // a drawer of several runs
			puts = append(puts, put{key: key, value: []byte{}, del: del})
		}
	}
	return puts, nil
}

// retainedByKey is a bundle's key in its recipient's retention index.
func retainedByKey(r [16]byte, at time.Time, b [16]byte) []byte {
	return append(retainedByAt(r, at), b[:]...)
}

// retainedByAt is where the recipient's retention index reaches at.
func retainedByAt(r [16]byte, at time.Time) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{prefixRetainedBy}, r[:]...), uint64(max(at.UnixMicro(), 0)))
}

// namedByKey indexes a drawer a dequeued bundle names by when the bundle
// was dequeued: LoadRetention tells by one seek whether a bundle that is
// not due yet names a drawer.
func namedByKey(r, d [16]byte, at time.Time, b [16]byte) []byte {
	return append(namedByAt(r, d, at), b[:]...)
}

// namedByAt is where the drawer's keys of namedByKey reach at.
func namedByAt(r, d [16]byte, at time.Time) []byte {
	return binary.BigEndian.AppendUint64(namedByPrefix(r, d), uint64(max(at.UnixMicro(), 0)))
}

func namedByPrefix(r, d [16]byte) []byte {
	return append(append([]byte{prefixNamedBy}, r[:]...), d[:]...)
}

// leftPendingAt is when a dequeued or released bundle stopped being
// pending: the time its retention counts from.
func leftPendingAt(rec bundle.Record) time.Time {
	if rec.State == bundle.Released {
		return rec.ReleasedAt
	}
	return rec.DequeuedAt
}

// retainedAt is where the retention index reaches at (the times before it
// sort below). Times before 1970 are at its start.
func retainedAt(at time.Time) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixRetained}, uint64(max(at.UnixMicro(), 0)))
}

func drawerPrefix(d [16]byte) []byte { return append([]byte{prefixDrawer}, d[:]...) }

func pageKey(d [16]byte, start int64) []byte {
	return binary.BigEndian.AppendUint64(drawerPrefix(d), uint64(start))
}

// idKey is where an id's record is, under its write group.
func idKey(group uint32, id *[16]byte) []byte {
	return append([]byte{prefixIDByGroup, byte(group >> 16), byte(group >> 8), byte(group)}, id[:]...)
}

// idKeyParts splits an id record's key into its group and id.
func idKeyParts(key []byte) (group uint32, id [16]byte, ok bool) {
	if len(key) != 20 || key[0] != prefixIDByGroup {
		return 0, id, false
	}
	return uint32(key[1])<<16 | uint32(key[2])<<8 | uint32(key[3]), [16]byte(key[4:]), true
}

// prefixEnd is the first key after every key that starts with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func uuidString(b []byte) string { return uuid.UUID(b).String() }

// noticeKey orders a domain's notices by the time of their dequeue, so one
// domain's notices are read without touching another's.
func noticeKey(o domain.Origin, at int64, r, b [16]byte) []byte {
	key := noticePrefix(o)
	key = binary.BigEndian.AppendUint64(key, uint64(at)) //nolint:gosec // times after 1970
	key = append(key, r[:]...)
	return append(key, b[:]...)
}

func noticePrefix(o domain.Origin) []byte { return []byte{prefixNotice, byte(o)} }
