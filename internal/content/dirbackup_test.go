package content_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
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
	n, err := docs.CopyTo(ctx, dir)
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
	if _, err := docs.CopyTo(ctx, dir); !errors.Is(err, os.ErrExist) {
		t.Fatalf("CopyTo into an existing folder: %v", err)
	}
}

// Keys come from validated bundles (UUIDs), but the folder does not rely on
// it: a key that names a path out of the folder reaches nothing there.
func TestDirStoreKeysCannotLeaveTheFolder(t *testing.T) {
	parent := t.TempDir()
	store, err := content.OpenDirStore(filepath.Join(parent, "content"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	victim := filepath.Join(parent, "victim")
	if err := os.WriteFile(victim, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, key := range []content.Key{
		{Recipient: "..", BundleID: "victim"},
		{Recipient: "../outside", BundleID: "b"},
		{Recipient: "r", BundleID: "../../victim"},
		{Recipient: parent, BundleID: "victim"},
	} {
		if staged, err := store.Create(t.Context(), key, "text/plain"); err == nil {
			_, _ = staged.Write([]byte("written"))
			if err := staged.Commit(); err == nil {
				t.Errorf("%+v: a document was stored", key)
			}
		}
		if doc, err := store.Open(t.Context(), key); err == nil {
			_ = doc.Body.Close()
			t.Errorf("%+v: a document was opened", key)
		}
		_ = store.Delete(t.Context(), key)
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "kept" {
		t.Fatalf("the file beside the folder: %q %v; want it untouched", data, err)
	}
	if _, err := os.Stat(filepath.Join(parent, "outside")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a folder was made beside the content folder: %v", err)
	}
}

// A document names the bundle it was built for: Open returns the name with
// the document, Stored with the version; one stored without a name has none.
func TestADirStoreDocumentNamesItsBundle(t *testing.T) {
	docs, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docs.Close() })
	for _, bundle := range []string{"0123456789abcdef0123456789abcdef", ""} {
		k := content.Key{Recipient: "r", BundleID: "b" + bundle, Bundle: bundle}
		contenttest.Put(t, docs, k, "text/plain", []byte("doc"))
		doc, err := docs.Open(t.Context(), content.Key{Recipient: k.Recipient, BundleID: k.BundleID})
		if err != nil {
			t.Fatal(err)
		}
		data := string(read(t, doc))
		version, stored, err := docs.Stored(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		if doc.Bundle != bundle || stored != bundle || doc.MediaType != "text/plain" || data != "doc" {
			t.Fatalf("stored for bundle %q: Open names %q (%s, %q), Stored %q", bundle, doc.Bundle, doc.MediaType, data, stored)
		}
		if v, err := docs.Version(t.Context(), k); err != nil || v != version {
			t.Fatalf("Version %q, %v; Stored's %q", v, err, version)
		}
	}
	if _, err := docs.Create(t.Context(), content.Key{Recipient: "r", BundleID: "x", Bundle: "a\nb"}, "text/plain"); err == nil {
		t.Fatal("a bundle name with a line break was taken")
	}
}

// A document stored again under an id, as long as the one removed and in
// the same tick of the filesystem's clock (a second on HFS+, two on FAT, a
// jiffy on ext4), is another version: a removal by the version read of the
// first leaves it alone.
func TestADirStoreDocumentStoredAgainInTheSameTickIsAnotherVersion(t *testing.T) {
	dir, docs, k, version := storedDocument(t)
	file := filepath.Join(dir, "r", "b")
	first, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := docs.Delete(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	contenttest.Put(t, docs, k, "text/plain", []byte("later"))
	// The clock's tick, made explicit: the later file has the first's time.
	if err := os.Chtimes(file, first.ModTime(), first.ModTime()); err != nil {
		t.Fatal(err)
	}
	removalLeaves(t, docs, k, version, "later")
}

// storedDocument opens a folder store in a temporary folder and stores a
// document under k, of version.
func storedDocument(t *testing.T) (dir string, docs *content.DirStore, k content.Key, version string) {
	t.Helper()
	dir = t.TempDir()
	docs, err := content.OpenDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = docs.Close() })
	k = content.Key{Recipient: "r", BundleID: "b", Bundle: "0123456789abcdef0123456789abcdef"}
	contenttest.Put(t, docs, k, "text/plain", []byte("first")) // as long as "later"
	version, err = docs.Version(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return dir, docs, k, version
}

// removalLeaves removes version of k and checks that the document stored
// under k is want.
func removalLeaves(t *testing.T, docs *content.DirStore, k content.Key, version, want string) {
	t.Helper()
	if err := docs.DeleteVersion(t.Context(), k, version); err != nil {
		t.Fatal(err)
	}
	content.OnDirStoreStep(docs, nil)
	doc, err := docs.Open(t.Context(), k)
	if err != nil {
		t.Fatalf("the document %q is gone: %v", want, err)
	}
	if data := string(read(t, doc)); data != want {
		t.Fatalf("stored %q, want %q", data, want)
	}
}

// A file in another format than the one this build writes (one a
// development build wrote, one cut short, one that is no document) is not
// read as a document: it names no bundle and carries nothing, so it is
// never served, and it has a version of its own, so that a peek's build
// (discard), retention and a release remove it and the bundle's document
// can be stored under its name.
func TestADirStoreFileOfAnotherFormatIsADocumentOfNoBundle(t *testing.T) {
	for name, data := range map[string]string{
		"version 2":      "messagehub-document-v2\nbundle-x\ntext/plain\nold",
		"version 1":      "messagehub-document-v1\ntext/plain\nold",
		"header cut":     "messagehub-document-v3\n0123456789abcdef0123456789abcdef\nbundle-x",
		"empty":          "",
		"not a document": "old",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "r"), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "r", "b"), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			docs, err := content.OpenDirStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = docs.Close() })
			k := content.Key{Recipient: "r", BundleID: "b", Bundle: "0123456789abcdef0123456789abcdef"}
			doc, err := docs.Open(t.Context(), k)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if body := string(read(t, doc)); doc.Bundle != "" || body != "" {
				t.Fatalf("Open names bundle %q and carries %q; want none and nothing", doc.Bundle, body)
			}
			version, bundle, err := docs.Stored(t.Context(), k)
			if err != nil || bundle != "" || version == "" {
				t.Fatalf("Stored %q %q %v; want a version and no bundle", version, bundle, err)
			}
			if v, err := docs.Version(t.Context(), k); err != nil || v != version {
				t.Fatalf("Version %q %v; Stored's %q", v, err, version)
			}
			// A version of this build's format is not the file's.
			other := content.Key{Recipient: "r", BundleID: "other"}
			contenttest.Put(t, docs, other, "text/plain", []byte("doc"))
			v3, err := docs.Version(t.Context(), other)
			if err != nil {
				t.Fatal(err)
			}
			if err := docs.DeleteVersion(t.Context(), k, v3); err != nil {
				t.Fatal(err)
			}
			if v, err := docs.Version(t.Context(), k); err != nil || v != version {
				t.Fatalf("after a removal by another version: %q %v, want %q", v, err, version)
			}
			// Retention and a release remove it by the version they read.
			asRead := func(context.Context) error { return nil }
			if err := content.Forget(docs)(t.Context(), "r", []string{"b"}, asRead); err != nil {
				t.Fatal(err)
			}
			if _, err := docs.Version(t.Context(), k); !errors.Is(err, content.ErrNotStored) {
				t.Fatalf("after retention: %v, want it removed", err)
			}
			contenttest.Put(t, docs, k, "text/plain", []byte("built"))
			doc, err = docs.Open(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			if body := string(read(t, doc)); doc.Bundle != k.Bundle || body != "built" {
				t.Fatalf("the document stored once it went: bundle %q, %q", doc.Bundle, body)
			}
		})
	}
}

// A removal by version is a look, then the removal: a document removed and
// stored again under the id between the two (another remover took the
// version looked at, and a later bundle's build stored its own) is another
// version, which the removal leaves, as it would any one stored since.
func TestADirStoreRemovalByVersionLeavesADocumentStoredAgainMeanwhile(t *testing.T) {
	_, docs, k, version := storedDocument(t)
	content.OnDirStoreStep(docs, func(step string) {
		if step == "looked" {
			content.OnDirStoreStep(docs, nil)
			if err := docs.DeleteVersion(t.Context(), k, version); err != nil {
				t.Error(err)
			}
			contenttest.Put(t, docs, k, "text/plain", []byte("later"))
		}
	})
	removalLeaves(t, docs, k, version, "later")
}

// A removal by version moves the file aside before it looks at it again,
// and the name holds nothing meanwhile: a document stored under it then
// stays, whether the file moved aside is the version removed (it goes) or
// a document stored again after the removal's look (it goes too, as it
// is never put back over one stored since, with or without hard links).
// Nothing is left aside.
func TestADirStoreRemovalByVersionLeavesADocumentStoredWhileTheFileIsAside(t *testing.T) {
	for _, c := range []struct {
		name                string
		replaced, hardLinks bool
	}{
		{"the version removed", false, true},
		{"stored again after the look", true, true},
		{"stored again after the look, without hard links", true, false},
	} {
		replaced := c.replaced
		t.Run(c.name, func(t *testing.T) {
			dir, docs, k, version := storedDocument(t)
			if !c.hardLinks {
				content.WithoutHardLinks(docs)
			}
			content.OnDirStoreStep(docs, func(step string) {
				switch step {
				case "looked":
					if replaced {
						if err := docs.Delete(t.Context(), k); err != nil {
							t.Error(err)
						}
						contenttest.Put(t, docs, k, "text/plain", []byte("stored again"))
					}
				case "aside":
					if _, err := docs.Version(t.Context(), k); !errors.Is(err, content.ErrNotStored) {
						t.Errorf("while the file is aside, its name holds %v", err)
					}
					contenttest.Put(t, docs, k, "text/plain", []byte("stored while aside"))
				}
			})
			removalLeaves(t, docs, k, version, "stored while aside")
			entries, err := os.ReadDir(filepath.Join(dir, "r"))
			if err != nil || len(entries) != 1 {
				t.Fatalf("the folder holds %v (%v), want the document alone", entries, err)
			}
		})
	}
}

// On a filesystem without hard links a document is still stored whole or
// not at all, and never over one stored already: a second build's commit
// under the id counts as done and leaves the first document, as with hard
// links; once that one is removed, the next is stored.
func TestADirStoreWithoutHardLinksNeverStoresOverADocument(t *testing.T) {
	dir, docs, k, version := storedDocument(t)
	content.WithoutHardLinks(docs)
	contenttest.Put(t, docs, k, "text/plain", []byte("other"))
	if v, err := docs.Version(t.Context(), k); err != nil || v != version {
		t.Fatalf("after a second commit: version %q %v, want the first's %q", v, err, version)
	}
	doc, err := docs.Open(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if data := string(read(t, doc)); data != "first" {
		t.Fatalf("stored %q, want the first document", data)
	}
	if err := docs.DeleteVersion(t.Context(), k, version); err != nil {
		t.Fatal(err)
	}
	if _, err := docs.Version(t.Context(), k); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("after its removal: %v", err)
	}
	contenttest.Put(t, docs, k, "text/plain", []byte("later"))
	removalLeaves(t, docs, k, version, "later")
	if entries, err := os.ReadDir(filepath.Join(dir, "r")); err != nil || len(entries) != 1 {
		t.Fatalf("the folder holds %v (%v), want the document alone", entries, err)
	}
}

// commitDocument stores body as the document of key.
func commitDocument(t *testing.T, docs *content.DirStore, key content.Key, body string) {
	t.Helper()
	doc, err := docs.Create(context.Background(), key, "application/xml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(doc, body); err != nil {
		t.Fatal(err)
	}
	if err := doc.Commit(); err != nil {
		t.Fatal(err)
	}
}

// A backup onto a filesystem that cannot hard-link the documents copies
// them, whatever the link's error: a filesystem without hard links answers
// EOPNOTSUPP (ENOTSUP, the same number on Linux) or EPERM, one at its link
// limit EMLINK, another volume EXDEV (ERROR_NOT_SAME_DEVICE on Windows).
func TestCopyToCopiesWhatItCannotLink(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.EMLINK, syscall.EXDEV, syscall.EPERM} {
		t.Run(errno.Error(), func(t *testing.T) {
			docs, err := content.OpenDirStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer docs.Close()
			content.SetBackupLink(docs, func(oldname, newname string) error {
				return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errno}
			})
			key := content.Key{Recipient: uuid.NewString(), BundleID: uuid.NewString()}
			commitDocument(t, docs, key, "<stored/>")
			dir := filepath.Join(t.TempDir(), "content")
			if n, err := docs.CopyTo(context.Background(), dir); err != nil || n <= 0 {
				t.Fatalf("CopyTo with links failing with %v: %d bytes, %v", errno, n, err)
			}
			copied, err := content.OpenDirStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer copied.Close()
			got, err := copied.Open(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(got.Body)
			_ = got.Body.Close()
			if string(body) != "<stored/>" {
				t.Fatalf("the copy serves %q", body)
			}
		})
	}
}

// A backup whose context ends stops copying the documents: the copy held
// at one document while the context is cancelled copies none after it,
// returns the context's error and leaves no folder behind.
func TestCopyToStopsWhenItsContextEnds(t *testing.T) {
	docs, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer docs.Close()
	recipient := uuid.NewString()
	for range 5 {
		commitDocument(t, docs, content.Key{Recipient: recipient, BundleID: uuid.NewString()}, "<stored/>")
	}
	held, release := make(chan struct{}), make(chan struct{})
	var links int
	content.SetBackupLink(docs, func(oldname, newname string) error {
		links++
		if links == 1 {
			close(held)
			<-release
		}
		return os.Link(oldname, newname)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(t.TempDir(), "content")
	done := make(chan error, 1)
	go func() {
		_, err := docs.CopyTo(ctx, dir)
		done <- err
	}()
	<-held
	cancel()
	close(release)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("CopyTo cancelled at its first document: %v", err)
	}
	if links != 1 {
		t.Fatalf("%d documents linked, %d after the context ended; want none after", links, links-1)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a cancelled copy left %s: %v", dir, err)
	}
}
