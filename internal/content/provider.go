package content

import (
	"context"
	"errors"
	"fmt"
	"io"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// errProvider marks an answer the hub will not store: retried, never served.
var errProvider = errors.New("provider error")

// errNotStored marks an answer the hub could not store (the disk guard's
// reserve, the store failing): the provider answered, and is not to blame.
var errNotStored = errors.New("the document could not be stored")

// ValidateMediaType accepts any non-empty media type, parameters included,
// that is safe to send as an HTTP header value: printable ASCII only, with
// no space before or after it, which a header value loses (a document
// stored under it would be served with another media type, or none, and
// Blob Storage authenticates the header it reads trimmed, so a request
// signed with its spaces fails).
func ValidateMediaType(mediaType string) error {
	if mediaType == "" {
		return fmt.Errorf("%w: no media type", errProvider)
	}
	if len(mediaType) > 1024 {
		return fmt.Errorf("%w: media type of %d bytes", errProvider, len(mediaType))
	}
	if mediaType[0] == ' ' || mediaType[len(mediaType)-1] == ' ' {
		return fmt.Errorf("%w: media type %q with a space before or after it", errProvider, mediaType)
	}
	for i := range len(mediaType) {
		if c := mediaType[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: media type with byte %#x", errProvider, c)
		}
	}
	return nil
}

// fetch asks provider for the bundle's document and stages it in store,
// chunk by chunk, so that a 50 MiB document is never held in memory. The
// document is committed only when the stream ended well, within the limit
// and with a media type.
func fetch(ctx context.Context, provider messagehubv1.BundleContentProviderClient, store Store, key Key, bundle *messagehubv1.Bundle) (size int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the provider's stream on any early return
	stream, err := provider.CreateBundleContent(ctx, &messagehubv1.CreateBundleContentRequest{Bundle: bundle})
	if err != nil {
		return 0, err
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("%w: no media type (the stream was empty)", errProvider)
	}
	if err != nil {
		return 0, err
	}
	if err := ValidateMediaType(first.GetMediaType()); err != nil {
		return 0, err
	}
	staged, err := store.Create(ctx, key, first.GetMediaType())
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotStored, err)
	}
	defer staged.Abort()
	for chunk := first; ; {
		size += int64(len(chunk.GetData()))
		if size > MaxDocumentBytes {
			return 0, fmt.Errorf("%w: document over %d bytes", errProvider, MaxDocumentBytes)
		}
		if _, err := staged.Write(chunk.GetData()); err != nil {
			return 0, fmt.Errorf("%w: %w", errNotStored, err)
		}
		chunk, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if err := staged.Commit(); err != nil {
		return 0, fmt.Errorf("%w: %w", errNotStored, err)
	}
	return size, nil
}
