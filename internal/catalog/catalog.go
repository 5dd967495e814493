// Package catalog holds a recipient's catalog: one entry per cabinet listing
// its drawers, and one cursor per cabinet saying how far it is acknowledged.
// Saves own entries and dequeues own cursors, so the two never write the same
// record.
package catalog

import "github.com/energydatahub/messagehub/internal/drawer"
import "github.com/energydatahub/messagehub/internal/domain"

// Entry is a cabinet's drawers, written by Save.
type Entry struct {
	Origin      domain.Origin
	ContentType string
	Drawers     []drawer.Meta // in position order; fully acknowledged ones are swept away
	Total       int64         // positions handed out so far
	Version     string        // store version; empty when not yet stored
}

// Cursor is how far a cabinet is acknowledged, written by Dequeue.
type Cursor struct {
	Origin      domain.Origin
	ContentType string
	Acked       int64 // positions before this are acknowledged
	HeadSeq     int64 // sequence number at Acked when known, else 0
	Version     string
}

// Key identifies a cabinet within one recipient.
type Key struct {
	Origin      domain.Origin
	ContentType string
}

// Key returns the entry's cabinet key.
func (e Entry) Key() Key { return Key{e.Origin, e.ContentType} }

// Key returns the cursor's cabinet key.
func (c Cursor) Key() Key { return Key{c.Origin, c.ContentType} }
