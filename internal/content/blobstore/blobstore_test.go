package blobstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/test/azuritetest"
)

var azurite *azuritetest.Server

func TestMain(m *testing.M) {
	srv, stop, err := azuritetest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	azurite = srv
	code := m.Run()
	stop()
	os.Exit(code)
}

// open returns a store on a container of its own, with small blocks so that
// a few KiB already take several.
func open(t *testing.T) *blobstore.Store {
	t.Helper()
	return openBlocks(t, 1000)
}

func openBlocks(t *testing.T, blockSize int) *blobstore.Store {
	t.Helper()
	s, err := blobstore.Open(t.Context(), blobstore.Config{
		ConnectionString: azurite.ConnectionString(),
		Container:        azuritetest.UniqueContainer("docs"),
		Provision:        true,
		BlockSize:        blockSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func key() content.Key {
	return content.Key{Recipient: "6f0c0d52-8a77-4a38-9d5e-0d1b1c5a1e01", BundleID: fmt.Sprintf("b%08x-0000-4000-8000-000000000000", rand.Uint32())}
}

func store(t *testing.T, s content.Store, k content.Key, mediaType string, data []byte) {
	t.Helper()
	w, err := s.Create(t.Context(), k, mediaType)
	if err != nil {
		t.Fatal(err)
	}
	// Odd-sized writes cross block boundaries.
	for p := data; len(p) > 0; {
		n := min(len(p), 333)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, s content.Store, k content.Key) (string, []byte) {
	t.Helper()
	doc, err := s.Open(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = doc.Body.Close() }()
	data, err := io.ReadAll(doc.Body)
	if err != nil {
		t.Fatal(err)
	}
	return doc.MediaType, data
}

func TestRoundTrip(t *testing.T) {
	s := open(t)
	for _, size := range []int{0, 1, 999, 1000, 1001, 10_500} {
		k := key()
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rand.Uint32())
		}
		mt := "application/xml; charset=utf-8"
		store(t, s, k, mt, data)
		gotType, got := read(t, s, k)
		if gotType != mt || !bytes.Equal(got, data) {
			t.Fatalf("size %d: got %q and %d bytes (equal: %v)", size, gotType, len(got), bytes.Equal(got, data))
		}
	}
}

func TestInvisibleUntilCommit(t *testing.T) {
	s := open(t)
	k := key()
	w, err := s.Create(t.Context(), k, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("x"), 2500)); err != nil { // two blocks staged
		t.Fatal(err)
	}
	if _, err := s.Open(t.Context(), k); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("before commit: %v, want ErrNotStored", err)
	}
	w.Abort()
	if _, err := s.Open(t.Context(), k); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("after abort: %v, want ErrNotStored", err)
	}
}

// A bundle has one document: a second writer (an instance whose lease ran
// out) never replaces what the first stored.
func TestFirstDocumentStands(t *testing.T) {
	s := open(t)
	k := key()
	late, err := s.Create(t.Context(), k, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	store(t, s, k, "application/json", []byte(`{"first":true}`))
	if err := late.Commit(); err != nil {
		t.Fatalf("a commit over a stored document: %v, want success", err)
	}
	if mt, data := read(t, s, k); mt != "application/json" || string(data) != `{"first":true}` {
		t.Fatalf("got %q %q, want the first document", mt, data)
	}
}

func TestDelete(t *testing.T) {
	s := open(t)
	k := key()
	store(t, s, k, "application/json", []byte("{}"))
	for range 2 { // deleting a missing document is no error
		if err := s.Delete(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Open(t.Context(), k); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("after delete: %v, want ErrNotStored", err)
	}
}

func TestRefusesNoMediaType(t *testing.T) {
	if _, err := open(t).Create(t.Context(), key(), ""); err == nil {
		t.Fatal("created a document without a media type")
	}
}

// A media type with a space before or after it is no value an HTTP
// header keeps (the service reads it trimmed, so a request signed with the
// account key fails to authenticate): it is refused as the provider's
// invalid answer, not staged to fail at every commit as the hub's own.
func TestRefusesAMediaTypeWithSpacesAround(t *testing.T) {
	s := open(t)
	for _, mt := range []string{" text/plain", "text/plain ", " "} {
		w, err := s.Create(t.Context(), key(), mt)
		if err != nil {
			continue
		}
		_, _ = w.Write([]byte("<doc/>"))
		err = w.Commit()
		t.Errorf("media type %q: taken (its commit: %v); want it refused", mt, err)
	}
}

func TestMissingContainer(t *testing.T) {
	_, err := blobstore.Open(context.Background(), blobstore.Config{
		ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer("none"),
	})
	if err == nil {
		t.Fatal("opened a container that does not exist without provisioning")
	}
}

// A content peek's deadline bounds the wait for a document, not its
// streaming: the body reads on after the context of Open ended.
func TestTheBodyOutlivesTheContextOfOpen(t *testing.T) {
	s := openBlocks(t, 1<<20)
	k := key()
	data := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	store(t, s, k, "application/octet-stream", data)
	ctx, cancel := context.WithCancel(t.Context())
	doc, err := s.Open(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	got, err := io.ReadAll(doc.Body)
	_ = doc.Body.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d of %d bytes after the context ended: %v", len(got), len(data), err)
	}
	if _, err := s.Open(ctx, k); err == nil {
		t.Fatal("opened a document with a context that had ended")
	}
}

// A removal on a version read before removes that document only: one
// stored again under the key since (a later bundle's) stays.
func TestDeleteVersionSparesADocumentStoredAgain(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	k := key()
	if _, err := s.Version(ctx, k); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("version of no document: %v, want ErrNotStored", err)
	}
	store(t, s, k, "text/plain", []byte("first"))
	first, err := s.Version(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	store(t, s, k, "text/plain", []byte("later"))
	if err := s.DeleteVersion(ctx, k, first); err != nil {
		t.Fatal(err)
	}
	later, err := s.Version(ctx, k)
	if err != nil || later == first {
		t.Fatalf("after a removal of the first version: %q, %v; want the later document, another version", later, err)
	}
	if err := s.DeleteVersion(ctx, k, later); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Version(ctx, k); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("after a removal of the version stored: %v, want ErrNotStored", err)
	}
	if err := s.DeleteVersion(ctx, k, later); err != nil {
		t.Fatalf("a removal of a document gone: %v", err)
	}
}

// A document names the bundle it was built for: Open returns the name with
// the document, Stored with the etag; one stored without a name has none.
func TestADocumentNamesItsBundle(t *testing.T) {
	s := open(t)
	for _, bundle := range []string{"0123456789abcdef0123456789abcdef", ""} {
		k := key()
		k.Bundle = bundle
		store(t, s, k, "text/plain", []byte("doc"))
		doc, err := s.Open(t.Context(), content.Key{Recipient: k.Recipient, BundleID: k.BundleID})
		if err != nil {
			t.Fatal(err)
		}
		_ = doc.Body.Close()
		version, stored, err := s.Stored(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		if doc.Bundle != bundle || stored != bundle {
			t.Fatalf("stored for bundle %q: Open names %q, Stored %q", bundle, doc.Bundle, stored)
		}
		if v, err := s.Version(t.Context(), k); err != nil || v != version {
			t.Fatalf("Version %q, %v; Stored's %q", v, err, version)
		}
	}
}

// A document is staged a block (4 MiB) at a time, and one smaller than a
// block holds its own size, not a block's: each build whose domain is
// streaming its document holds its staged document, and many builds of
// small documents at once (actors peeking at the same time) must not hold
// 4 MiB each.
func TestAStagedSmallDocumentDoesNotHoldAWholeBlock(t *testing.T) {
	s := openBlocks(t, 4<<20)
	const documents = 8
	data := bytes.Repeat([]byte("<small/>"), 1000)
	keys := make([]content.Key, documents)
	staged := make([]content.Staged, documents)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range staged {
		keys[i] = key()
		w, err := s.Create(t.Context(), keys[i], "application/xml")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		staged[i] = w
	}
	runtime.ReadMemStats(&after)
	if held := after.TotalAlloc - before.TotalAlloc; held > documents<<20 {
		t.Fatalf("staging %d documents of %d bytes took %d bytes, over 1 MiB each", documents, len(data), held)
	}
	for i, w := range staged {
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, got := read(t, s, keys[i]); !bytes.Equal(got, data) {
			t.Fatalf("document %d: %d bytes stored, want %d", i, len(got), len(data))
		}
	}
}

// A SAS connection string's signature is a credential. The error of a
// request that got no answer (Go's url.Error) names the request's URL,
// query and all, and the hub logs such errors (a start that fails, a
// document not built or not read): they must not carry the signature.
func TestAnErrorWithoutAnswerDoesNotCarryTheSASSignature(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := lis.Addr().String()
	_ = lis.Close()
	const signature = "c2lnbmF0dXJlLW9mLXRoZS1zYXM"
	_, err = blobstore.Open(t.Context(), blobstore.Config{
		ConnectionString: "BlobEndpoint=http://" + refused + "/devstoreaccount1;SharedAccessSignature=sv=2022-11-02&ss=b&srt=co&sp=rwdlac&se=2030-01-01T00:00:00Z&sig=" + signature,
		Container:        "docs",
		Provision:        true,
	})
	if err == nil {
		t.Fatal("opened a store on an address that refuses connections")
	}
	if strings.Contains(err.Error(), signature) {
		t.Errorf("the error carries the SAS signature: %v", err)
	}
	if !strings.Contains(err.Error(), refused) {
		t.Errorf("the error does not name the address: %v", err)
	}
}
