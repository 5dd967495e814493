package content_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/content"
)

// CopyTo copies the stored documents, which a folder store opened on the
// copy serves, and leaves out a document still being written.
func TestCopyToCopiesStoredDocumentsOnly(t *testing.T) {
	docs, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer docs.Close()
	ctx := context.Background()
	stored := content.Key{Recipient: uuid.NewString(), BundleID: uuid.NewString()}
	staged := content.Key{Recipient: stored.Recipient, BundleID: uuid.NewString()}
	doc, err := docs.Create(ctx, stored, "application/xml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(doc, "<stored/>"); err != nil {
		t.Fatal(err)
	}
	if err := doc.Commit(); err != nil {
		t.Fatal(err)
	}
	unfinished, err := docs.Create(ctx, staged, "application/xml")
	if err != nil {
		t.Fatal(err)
	}
	defer unfinished.Abort()

	dir := filepath.Join(t.TempDir(), "content")
	n, err := docs.CopyTo(dir)
	if err != nil || n <= 0 {
		t.Fatalf("CopyTo: %d bytes, %v", n, err)
	}
	copied, err := content.OpenDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	got, err := copied.Open(ctx, stored)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	_ = got.Body.Close()
	if string(body) != "<stored/>" || got.MediaType != "application/xml" {
		t.Fatalf("the copy serves %q (%s)", body, got.MediaType)
	}
	if _, err := copied.Open(ctx, staged); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("a document being written was copied: %v", err)
	}
	if _, err := docs.CopyTo(dir); !errors.Is(err, os.ErrExist) {
		t.Fatalf("CopyTo into an existing folder: %v", err)
	}
}
