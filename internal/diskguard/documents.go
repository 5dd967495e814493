package diskguard

import (
	"context"

	"github.com/energydatahub/messagehub/internal/content"
)

// documentBytes is what a document takes beyond its bytes: its header
// line and the rest of its last block.
const documentBytes = 4 << 10

// Documents returns next with the guard in front of new documents: they
// are new data on the store's volume, and must not eat the space kept for
// the store's small writes. A document is refused below the reserve when
// it is created and at every write that would take it there, each write
// counting its bytes as it is staged, so that documents built at once
// cannot fill the volume between two looks. A refused build is retried
// with backoff. Serving and deleting stored documents pass unguarded.
func Documents(next content.Store, g *Guard) content.Store {
	return guardedDocuments{Store: next, g: g}
}

type guardedDocuments struct {
	content.Store
	g *Guard
}

// Create implements content.Store.
func (d guardedDocuments) Create(ctx context.Context, key content.Key, mediaType string) (content.Staged, error) {
	if err := d.g.take(documentBytes, d.g.reserve); err != nil {
		return nil, err
	}
	staged, err := d.Store.Create(ctx, key, mediaType)
	d.g.give(documentBytes, err == nil)
	if err != nil {
		return nil, err
	}
	return &guardedStaged{Staged: staged, g: d.g}, nil
}

type guardedStaged struct {
	content.Staged
	g *Guard
}

// Write takes p's bytes before they are staged: a write that would leave
// less than the reserve is refused, and the document is then aborted by
// its builder. Bytes staged count as written until the next look, even
// when the document is aborted: that look sees them freed.
func (s *guardedStaged) Write(p []byte) (int, error) {
	n := uint64(len(p))
	if err := s.g.take(n, s.g.reserve); err != nil {
		return 0, err
	}
	written, err := s.Staged.Write(p)
	s.g.give(n, true)
	return written, err
}
