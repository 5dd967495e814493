package pebble

import (
	"encoding/binary"
	"fmt"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// A catalog entry lists every drawer of its cabinet, up to catalog.MaxDrawers
// (5,000; 50 M notifications). Stored as one value it would be rewritten whole
// by every save to the cabinet: at 1,000 drawers a save of one notification
// wrote 150 KB. So the entry's value holds only its last drawer, the one saves
// fill; every other drawer's metadata is a record of its own, written when
// the drawer stops being the last (it is full then) and deleted with it:
//
//	r <recipient> e <origin> <contentType>                             entry, last drawer
//	r <recipient> m <origin> <len(contentType)> <contentType> <start>  one earlier drawer

const kindDrawerMeta = 'm'

// drawerMetaKey sorts a cabinet's drawers by start position, after the
// cabinet's entry and within the recipient's prefix, so loading a recipient
// is still one scan.
func drawerMetaKey(r [16]byte, k catalog.Key, start int64) []byte {
	key := append(recipientPrefix(r), kindDrawerMeta, byte(k.Origin), byte(len(k.ContentType)))
	key = append(key, k.ContentType...)
	return binary.BigEndian.AppendUint64(key, uint64(start)) //nolint:gosec // positions are never negative
}

// drawerMetaCabinet reads the cabinet out of a drawer record's key.
func drawerMetaCabinet(key []byte) (catalog.Key, error) {
	const head = 1 + 16 + 1 // prefix, recipient, kind
	if len(key) < head+2 || len(key) != head+2+int(key[head+1])+8 {
		return catalog.Key{}, fmt.Errorf("%w: drawer record key of %d bytes", errCorrupt, len(key))
	}
	n := int(key[head+1])
	return catalog.Key{Origin: domain.Origin(key[head]), ContentType: string(key[head+2 : head+2+n])}, nil
}

// appendEntry stages writing e over old, the cabinet's entry as stored (zero
// when new): the entry with its last drawer, and the records of the other
// drawers that are new or changed; records of drawers e no longer has are
// deleted.
func appendEntry(puts []put, r [16]byte, old, e catalog.Entry) ([]put, error) {
	stored := e
	stored.Drawers = lastDrawer(e.Drawers)
	v, err := encodeEntry(stored)
	if err != nil {
		return nil, err
	}
	puts = append(puts, put{key: cabinetKey(kindEntry, r, e.Key()), value: v})
	return appendDrawerChanges(puts, r, e.Key(), earlierDrawers(old.Drawers), earlierDrawers(e.Drawers))
}

// appendEntryDeletion stages deleting old, the cabinet's entry, and its
// drawer records.
func appendEntryDeletion(puts []put, r [16]byte, old catalog.Entry) ([]put, error) {
	puts = append(puts, put{key: cabinetKey(kindEntry, r, old.Key()), del: true})
	return appendDrawerChanges(puts, r, old.Key(), earlierDrawers(old.Drawers), nil)
}

// appendDrawerChanges turns the drawers stored apart, before and after (both
// in start order), into writes and deletions of their records.
func appendDrawerChanges(puts []put, r [16]byte, k catalog.Key, before, after []drawer.Meta) ([]put, error) {
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		var changed *drawer.Meta
		switch {
		case j == len(after) || i < len(before) && before[i].Start < after[j].Start:
			puts = append(puts, put{key: drawerMetaKey(r, k, before[i].Start), del: true})
			i++
			continue
		case i == len(before) || after[j].Start < before[i].Start:
			changed = &after[j]
			j++
		default: // the same drawer: rewritten only if it changed
			if before[i] != after[j] {
				changed = &after[j]
			}
			i++
			j++
		}
		if changed != nil {
			v, err := encodeDrawerMeta(*changed)
			if err != nil {
				return nil, err
			}
			puts = append(puts, put{key: drawerMetaKey(r, k, changed.Start), value: v})
		}
	}
	return puts, nil
}

func lastDrawer(ds []drawer.Meta) []drawer.Meta {
	if len(ds) == 0 {
		return nil
	}
	return ds[len(ds)-1:]
}

func earlierDrawers(ds []drawer.Meta) []drawer.Meta {
	if len(ds) == 0 {
		return nil
	}
	return ds[:len(ds)-1]
}

// cabinetDrawers collects the drawer records of a recipient while its
// records are read, and gives each entry its drawers back.
type cabinetDrawers map[catalog.Key][]drawer.Meta

func (c cabinetDrawers) add(key, value []byte) error {
	k, err := drawerMetaCabinet(key)
	if err != nil {
		return err
	}
	d, err := decodeDrawerMeta(value)
	if err != nil {
		return err
	}
	c[k] = append(c[k], d) // keys come in start order
	return nil
}

// complete puts the drawers stored apart before the last one, which the
// entries hold.
func (c cabinetDrawers) complete(rec *records) error {
	for k, e := range rec.entries {
		if len(e.Drawers) > 1 {
			return fmt.Errorf("%w: catalog entry %v holds %d drawers", errCorrupt, k, len(e.Drawers))
		}
		if apart := c[k]; len(apart) > 0 {
			e.Drawers = append(apart, e.Drawers...)
			rec.entries[k] = e
		}
	}
	for k := range c {
		if _, ok := rec.entries[k]; !ok {
			return fmt.Errorf("%w: drawer records of %v without its catalog entry", errCorrupt, k)
		}
	}
	return nil
}
