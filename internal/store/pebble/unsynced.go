package pebble

import (
	"slices"
	"sync/atomic"
)

// unsyncedRecords are the control records of groups applied to pebble and
// not yet known durable, newest per recipient. Only the writer goroutine
// reads and changes them; durable is set by the finishing goroutine.
type unsyncedRecords struct {
	latest  map[[16]byte]unsyncedRecord
	groups  []unsyncedGroup
	last    uint64
	durable atomic.Uint64 // the last group published
}

type unsyncedRecord struct {
	rec   *records
	group uint64
}

type unsyncedGroup struct {
	seq        uint64
	recipients [][16]byte
}

// add records a group's changed records and returns the group's number.
func (u *unsyncedRecords) add(touched map[[16]byte]*records) uint64 {
	u.last++
	g := unsyncedGroup{seq: u.last, recipients: make([][16]byte, 0, len(touched))}
	for r, rec := range touched {
		u.latest[r] = unsyncedRecord{rec: rec, group: u.last}
		g.recipients = append(g.recipients, r)
	}
	u.groups = append(u.groups, g)
	return u.last
}

func (u *unsyncedRecords) get(r [16]byte) *records {
	if v, ok := u.latest[r]; ok {
		return v.rec
	}
	return nil
}

// settle forgets the records of groups that are now durable: the published
// ones are the same.
func (u *unsyncedRecords) settle() {
	durable := u.durable.Load()
	n := 0
	for _, g := range u.groups {
		if g.seq > durable {
			break
		}
		for _, r := range g.recipients {
			if u.latest[r].group == g.seq {
				delete(u.latest, r)
			}
		}
		n++
	}
	u.groups = slices.Delete(u.groups, 0, n)
}
