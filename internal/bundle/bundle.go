// Package bundle holds the record of a peeked bundle: a run of positions of
// one cabinet, pending until it is dequeued (or an operator releases it).
package bundle

import (
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// State is where a bundle is in its life.
type State int

// States of a bundle.
const (
	Pending State = iota + 1
	Dequeued
	// Released: an operator gave the pending bundle up. It acknowledged
	// nothing (its notifications are cut into a new bundle); its record
	// stays until retention removes it, so that its id is never used for
	// other notifications.
	Released
)

// Record is a bundle as stored. Its notifications are positions [Start, End)
// of its cabinet; their ids are read back from the drawers when needed, so the
// record stays small however big the bundle is.
type Record struct {
	ID          string
	Origin      domain.Origin
	ContentType string
	Group       domain.PeekGroup // the group it is pending in: never ALL
	Start, End  int64
	Count       int
	Weight      int64
	// DocumentTypes are the distinct document types of its items; a store
	// keeps none (nil) when they are many (StoredDocumentTypes): they are
	// read back from the items then.
	DocumentTypes []string
	NextSeq       int64 // sequence number at End when it was known at peek time, else 0
	// Drawers, recorded at dequeue, are the runs of the cabinet's drawers
	// within [Start, End): the bundle reads back from them, so retention
	// may take those drawers out of the catalog entry (keeping it bounded)
	// while the bundle is retained. Nil: read back through the entry,
	// which then keeps them.
	Drawers    []drawer.Meta `json:",omitempty"`
	State      State
	CreatedAt  time.Time
	DequeuedAt time.Time
	ReleasedAt time.Time `json:",omitzero"`
	// Notice: the bundle's domain is told of the dequeue (BundleDequeued),
	// so Acknowledge puts a notice in the outbox in the same atomic write.
	Notice  bool `json:",omitempty"`
	Version string
}

// MaxStoredDocumentTypesBytes bounds the document types a store keeps in a
// bundle's record, counted as JSON (quotes and a comma each). A bundle may
// hold thousands of distinct 255-character types (13 MB at the default
// weight limit), which every read of its record would decode; beyond the
// bound the record keeps none and they are read back from the items.
const MaxStoredDocumentTypesBytes = 8 << 10

// StoredDocumentTypes is what a store keeps of a bundle's document types:
// all of them, or none (nil) beyond MaxStoredDocumentTypesBytes.
func StoredDocumentTypes(types []string) []string {
	n := 0
	for _, t := range types {
		if n += len(t) + 3; n > MaxStoredDocumentTypesBytes {
			return nil
		}
	}
	return types
}
