package content

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"strings"
)

// DirStore keeps each document in a file of its own under a folder: one
// folder per recipient, one file per bundle: a format line, the file's
// version (random, its own), the identity of the bundle it was built for,
// the media type, then the document. Only this format is read: a file of
// another (one a development build wrote, one cut short) is a document of
// no bundle holding nothing (Open). A document is written to a temporary
// file, synced, and linked into place (never over a document stored
// already; on a filesystem without hard links, renamed by a rename that
// never replaces a file), so a crash leaves either the whole document or
// none. Every access goes through an os.Root, so no path can leave the
// folder.
type DirStore struct {
	root *os.Root
	// link is root.Link; tests make it fail as on a filesystem without
	// hard links.
	link func(from, to string) error
	// linkOut is os.Link, with which a backup links a document (by its
	// path) into a folder outside this one; tests make it fail.
	linkOut func(oldname, newname string) error
	// step, when set (by tests), is called at the named steps of a
	// removal, so that a test can act between them.
	step func(string)
}

func (s *DirStore) at(step string) {
	if s.step != nil {
		s.step(step)
	}
}

const (
	fileMagic = "messagehub-document-v3\n"

	// otherFormat is the version of a file that is not a whole document of
	// fileMagic's format (one a development build wrote, or no document):
	// a version of this format is 32 hex digits, so never this one.
	otherFormat = "other-format"

	tempSuffix = ".tmp"
)

// OpenDirStore opens (creating if needed) the folder dir, and removes what a
// crash may have left half written.
func OpenDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("content folder: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("content folder: %w", err)
	}
	err = fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, tempSuffix) {
			return err
		}
		return root.Remove(path)
	})
	if err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("content folder: removing unfinished documents: %w", err)
	}
	return &DirStore{root: root, link: root.Link, linkOut: os.Link}, nil
}

// Close releases the folder.
func (s *DirStore) Close() error { return s.root.Close() }

func (s *DirStore) path(key Key) string {
	return path.Join(key.Recipient, key.BundleID)
}

// Open returns the stored document of key, or ErrNotStored. A file of
// another format is a document of no bundle with nothing in it: it is never
// served (the service serves a document only for the bundle it names), and
// its version (otherFormat) lets the service's discard, retention and a
// release remove it, so that the bundle's document can be stored under its
// name.
func (s *DirStore) Open(_ context.Context, key Key) (*Document, error) {
	f, h, err := s.open(key)
	if err != nil {
		return nil, err
	}
	if h.version == otherFormat {
		_ = f.Close()
		return &Document{Body: io.NopCloser(strings.NewReader(""))}, nil
	}
	return &Document{MediaType: h.mediaType, Bundle: h.bundle, Body: readCloser{Reader: h.body, Closer: f}}, nil
}

// header is what a document file says before the document.
type header struct {
	version, bundle, mediaType string
	body                       *bufio.Reader
}

// open opens the file of key and reads its header; the caller closes the
// file.
func (s *DirStore) open(key Key) (*os.File, header, error) {
	f, h, err := s.openFile(s.path(key))
	if err != nil && !errors.Is(err, ErrNotStored) {
		err = fmt.Errorf("document %s/%s: %w", key.Recipient, key.BundleID, err)
	}
	return f, h, err
}

// openFile opens the file at p and reads its header; the caller closes the
// file.
func (s *DirStore) openFile(p string) (*os.File, header, error) {
	f, err := s.root.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, header{}, ErrNotStored
	}
	if err != nil {
		return nil, header{}, err
	}
	h, err := readHeader(f)
	if err != nil {
		_ = f.Close()
		return nil, header{}, err
	}
	return f, h, nil
}

// readHeader reads the format line, the version, the bundle and the media
// type. A file that is not a whole header of this format (another format's,
// one cut short, an empty one) has the version otherFormat and names
// nothing; a failed read is an error.
func readHeader(f *os.File) (header, error) {
	h := header{body: bufio.NewReader(f)}
	var lines [4]string
	for i := range lines {
		l, err := h.body.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return header{}, err
		}
		if err != nil || (i == 0 && l != fileMagic) {
			return header{version: otherFormat}, nil
		}
		lines[i] = strings.TrimSuffix(l, "\n")
	}
	h.version, h.bundle, h.mediaType = lines[1], lines[2], lines[3]
	return h, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Create stages a document for key in a temporary file next to its place.
func (s *DirStore) Create(_ context.Context, key Key, mediaType string) (Staged, error) {
	if err := ValidateMediaType(mediaType); err != nil {
		return nil, err
	}
	if strings.ContainsAny(key.Bundle, "\r\n") {
		return nil, fmt.Errorf("document %s/%s: a bundle identity with a line break", key.Recipient, key.BundleID)
	}
	if err := s.root.MkdirAll(key.Recipient, 0o750); err != nil {
		return nil, err
	}
	temp := fmt.Sprintf("%s.%016x%s", s.path(key), rand.Uint64(), tempSuffix)
	f, err := s.root.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, err
	}
	w := &stagedFile{store: s, f: f, w: bufio.NewWriterSize(f, 1<<20), temp: temp, final: s.path(key)}
	version := fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	if _, err := w.w.WriteString(fileMagic + version + "\n" + key.Bundle + "\n" + mediaType + "\n"); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

// Delete removes the document of key; a missing one is not an error.
func (s *DirStore) Delete(_ context.Context, key Key) error {
	err := s.root.Remove(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Version is the version written in the file's header: a document stored
// again is another file with another version, even one as long as the
// first and written in the same tick of the filesystem's clock.
func (s *DirStore) Version(ctx context.Context, key Key) (string, error) {
	version, _, err := s.Stored(ctx, key)
	return version, err
}

// Stored is the version and the bundle named in the file's header, read
// in one look.
func (s *DirStore) Stored(_ context.Context, key Key) (version, bundle string, err error) {
	f, h, err := s.open(key)
	if err != nil {
		return "", "", err
	}
	_ = f.Close()
	return h.version, h.bundle, nil
}

// DeleteVersion removes the file if it is still version. A look at the
// name, then a removal of the name, would take a document removed and
// stored again under it in between (a late build's removal and a later
// bundle's peek both remove a document, and the later bundle's build
// stores its own). So the file found version at the look is moved aside,
// under a name of its own, and what was moved is looked at again: it goes
// if it is version, else it is put back (place), never over a document
// stored under the name meanwhile (that one stays, and the moved one
// goes: the service serves a document only for the bundle it names, and
// builds a missing one). While a file is aside, which takes a rename and
// a look, its name holds nothing; the name of a file that is version
// holds nothing after the removal anyway.
func (s *DirStore) DeleteVersion(ctx context.Context, key Key, version string) error {
	now, err := s.Version(ctx, key)
	if errors.Is(err, ErrNotStored) || (err == nil && now != version) {
		return nil
	}
	if err != nil {
		return err
	}
	s.at("looked")
	final := s.path(key)
	// A crash leaves the file aside, a temporary file that the next open
	// removes.
	aside := fmt.Sprintf("%s.%016x.removed%s", final, rand.Uint64(), tempSuffix)
	if err := s.root.Rename(final, aside); errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	} else if err != nil {
		return err
	}
	s.at("aside")
	f, h, err := s.openFile(aside)
	if err == nil {
		_ = f.Close()
		if h.version == version {
			return s.root.Remove(aside)
		}
	}
	back := s.place(aside, final)
	if back == nil {
		back = syncDir(s.root, path.Dir(final))
	}
	if err == nil {
		err = back
	}
	if err != nil {
		return fmt.Errorf("document %s/%s: %w", key.Recipient, key.BundleID, err)
	}
	return nil
}

type stagedFile struct {
	store       *DirStore
	f           *os.File
	w           *bufio.Writer
	temp, final string
	done        bool
}

func (s *stagedFile) Write(p []byte) (int, error) { return s.w.Write(p) }

// Commit syncs the file, links it into place and syncs the folder, so the
// document survives a crash once Commit returns.
func (s *stagedFile) Commit() error {
	if s.done {
		return errors.New("document already committed or aborted")
	}
	err := s.w.Flush()
	if err == nil {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.place()
	}
	if err == nil {
		err = syncDir(s.store.root, path.Dir(s.final))
	}
	if err != nil {
		s.Abort()
		return fmt.Errorf("storing document: %w", err)
	}
	s.done = true
	return nil
}

// place makes the synced temporary file the document: a hard link under
// the document's name, which fails when a document is stored there
// already. That one stays, as Blob Storage's conditional commit leaves it,
// and the commit counts as done: two builds under one id may run at once
// on this instance (an earlier bundle's, whose bundle went, and a later
// bundle's), and the late answer must not take the place of a document
// that may have been served; the service never serves a document for
// another bundle than the one it names.
func (s *stagedFile) place() error { return s.store.place(s.temp, s.final) }

// place links the file at from under the name to, unless a file is there
// already, and removes from. On a filesystem without hard links (FAT,
// exFAT, an SMB share such as Azure Files) the link fails otherwise, and
// from is renamed to to by a rename that never replaces a file, which
// keeps a document whole or absent, and never over another.
func (s *DirStore) place(from, to string) error {
	err := s.link(from, to)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		rerr := renameNoReplace(s.root, from, to)
		if rerr == nil {
			return nil
		}
		if !errors.Is(rerr, fs.ErrExist) {
			return errors.Join(err, rerr)
		}
	}
	// The file is in place (or another one is): a temporary file left by a
	// failed removal goes when the folder is next opened.
	_ = s.root.Remove(from)
	return nil
}

// Abort discards an uncommitted document.
func (s *stagedFile) Abort() {
	if s.done {
		return
	}
	s.done = true
	_ = s.f.Close()
	_ = s.store.root.Remove(s.temp)
}

func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	return syncClose(d)
}
