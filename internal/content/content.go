// Package content gives a bundle its document: the bundle's domain builds it
// once (a BundleContentProvider), the hub stores it, and every later peek of
// the bundle is served the stored bytes. A document that is not ready within
// the caller's time keeps being built in the background, so the actor's next
// peek finds it.
package content

import (
	"context"
	"errors"
	"io"
)

// Limits of a document and of the messages that carry it.
const (
	// MaxDocumentBytes is the largest document a provider may answer (50 MiB,
	// as the original service allowed); anything larger is a provider error.
	MaxDocumentBytes = 50 << 20
	// MaxMessageBytes bounds each message streamed to a client, so that
	// clients with gRPC's default limits can read it.
	MaxMessageBytes = 1 << 20
)

// ErrNotStored means that no document is stored for the bundle.
var ErrNotStored = errors.New("no document stored")

// Key names a bundle's document. Bundle ids are unique per recipient.
type Key struct {
	Recipient string
	BundleID  string
}

// Document is a stored document, read through Body (the caller closes it).
type Document struct {
	MediaType string
	Body      io.ReadCloser
}

// Store keeps documents durably. A document becomes visible whole, at
// Commit, or never.
type Store interface {
	// Open returns the stored document of key, or ErrNotStored. ctx bounds
	// the opening; the body can be read after ctx ends, until it is closed.
	Open(ctx context.Context, key Key) (*Document, error)
	// Create stages a new document of the media type for key.
	Create(ctx context.Context, key Key, mediaType string) (Staged, error)
	// Delete removes the document of key if there is one.
	Delete(ctx context.Context, key Key) error
	// Version names the document of key as it is stored now, or returns
	// ErrNotStored: a document stored again under key (a later bundle's,
	// once the id is free) has another version.
	Version(ctx context.Context, key Key) (string, error)
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
