// Package content gives a bundle its document: the bundle's domain builds it
// once (a BundleContentProvider), the hub stores it, and every later peek of
// the bundle is served the stored bytes. A document that is not ready within
// the caller's time keeps being built in the background, so the actor's next
// peek finds it.
package content

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// Limits of a document and of the messages that carry it.
const (
	// MaxDocumentBytes is the largest document a provider may answer (50 MiB,
	// as the original service allowed); anything larger is a provider error.
	MaxDocumentBytes = 50 << 20
	// MaxMessageBytes bounds each message streamed to a client, so that
	// clients with gRPC's default limits can read it.
	MaxMessageBytes = 1 << 20
	// MaxProviderChunkBytes is the most of the document one message of a
	// provider's answer may carry (gRPC's default, provider.proto): what
	// one build's answer may hold in memory at once.
	MaxProviderChunkBytes = 4 << 20
	// MaxProviderMessageBytes is the largest message of a provider's answer
	// the hub takes: a chunk of MaxProviderChunkBytes with the longest media
	// type (1,024 bytes) and their fields' tags and lengths, so that a
	// chunk of the whole 4 MiB is not refused for its framing.
	MaxProviderMessageBytes = MaxProviderChunkBytes + 2<<10
)

// ErrNotStored means that no document is stored for the bundle.
var ErrNotStored = errors.New("no document stored")

// Key names a bundle's document. Bundle ids are unique per recipient while
// the bundle's record is kept; once it is gone a later bundle may take the
// id.
type Key struct {
	Recipient string
	BundleID  string
	// Bundle is the identity of the bundle the document is built for
	// (Identity): Create stores it with the document, Open returns the one
	// stored (Document.Bundle). The other methods name the document by
	// Recipient and BundleID alone.
	Bundle string
}

// Document is a stored document, read through Body (the caller closes it).
type Document struct {
	MediaType string
	// Bundle is the identity of the bundle the document was built for
	// (Key.Bundle at Create); "" for a document stored without one.
	Bundle string
	Body   io.ReadCloser
}

// Identity names a bundle beyond its id: a hash of everything its domain
// is asked a document for (id, recipient, origin, content type, document
// types, notification ids, weight). A later bundle under a freed id holds
// other notifications, so another identity; one that holds the same is
// asked for the same document.
func Identity(b *messagehubv1.Bundle) string {
	h := sha256.New()
	field := func(s string) {
		_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		_, _ = h.Write([]byte(s))
	}
	field(b.GetId())
	field(b.GetRecipient())
	field(b.GetOrigin().String())
	field(b.GetContentType())
	_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b.GetDocumentTypes()))))
	for _, t := range b.GetDocumentTypes() {
		field(t)
	}
	_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b.GetNotificationIds()))))
	for _, id := range b.GetNotificationIds() {
		field(id)
	}
	_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(b.GetWeight())))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Store keeps documents durably. A document becomes visible whole, at
// Commit, or never.
type Store interface {
	// Open returns the stored document of key, or ErrNotStored. ctx bounds
	// the opening; the body can be read after ctx ends, until it is closed.
	// Closing the body while a Read waits ends that Read.
	Open(ctx context.Context, key Key) (*Document, error)
	// Create stages a new document of the media type for key.
	Create(ctx context.Context, key Key, mediaType string) (Staged, error)
	// Delete removes the document of key if there is one.
	Delete(ctx context.Context, key Key) error
	// Version names the document of key as it is stored now, or returns
	// ErrNotStored: a document stored again under key (a later bundle's,
	// once the id is free) has another version.
	Version(ctx context.Context, key Key) (string, error)
	// Stored returns Version and the identity of the bundle the document
	// was built for (Document.Bundle) in one look, without the document.
	Stored(ctx context.Context, key Key) (version, bundle string, err error)
	// DeleteVersion removes the document of key if it is still version;
	// one that is gone or stored again since is left alone, and no error.
	DeleteVersion(ctx context.Context, key Key, version string) error
}

// Staged is a document being written. Commit makes it durable and visible;
// Abort (harmless after Commit) discards it.
type Staged interface {
	io.Writer
	Commit() error
	Abort()
}
