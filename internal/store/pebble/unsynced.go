package pebble

import "slices"

// unsyncedRecords are the control records of groups applied to pebble and
// not yet known durable, newest per recipient, under the groups' numbers
// (durability). Only the writer goroutine reads and changes them.
type unsyncedRecords struct {
	latest map[[16]byte]unsyncedRecord
	groups []unsyncedGroup
}

type unsyncedRecord struct {
	rec   *records
	group uint64
}

type unsyncedGroup struct {
	seq        uint64
	recipients [][16]byte
}

// add records the changed records of group seq.
func (u *unsyncedRecords) add(seq uint64, touched map[[16]byte]*records) {
	g := unsyncedGroup{seq: seq, recipients: make([][16]byte, 0, len(touched))}
	for r, rec := range touched {
		u.latest[r] = unsyncedRecord{rec: rec, group: seq}
		g.recipients = append(g.recipients, r)
	}
	u.groups = append(u.groups, g)
}

func (u *unsyncedRecords) get(r [16]byte) *records {
	if v, ok := u.latest[r]; ok {
		return v.rec
	}
	return nil
}

// settle forgets the records of the groups up to durable, the last one
// published: the published ones are the same.
func (u *unsyncedRecords) settle(durable uint64) {
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
