package pebble

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/zeebo/xxh3"
)

// Building the id index scans every stored id: seconds with millions of
// them. So Close saves the index in a file beside the data, then writes a
// token naming that file into the database as its very last write. Open uses
// the file only if the database holds the same token, and deletes the token
// (durably) before anything else is written: after a crash, or any write
// since the save, the token is gone and the index is built by the scan.
const idIndexFile = "idfilter"

// filterTokenKey holds the token of the saved index (a prefix of its own).
var filterTokenKey = []byte{prefixFilterToken}

const idIndexMagic = "messagehub idfilter 2 (id index)\n"

// openIDIndex loads the saved index if it is valid, else builds one, and
// finds the last group numbered.
func (s *Store) openIDIndex(dir string) error {
	_, last, err := s.groupSpan()
	if err != nil {
		return err
	}
	s.lastGroup = last
	t0 := time.Now()
	x, err := s.loadIDIndex(dir)
	if err != nil {
		s.logger.Warn("the saved id index is not usable; indexing the stored ids", "err", err)
	}
	// The token goes whether or not the file was used: a file that could
	// not be read now (a read error) may read again at a later Open, which
	// after this store's writes and a crash must not load it.
	if !s.readOnly {
		if err := s.db.Delete(filterTokenKey, pebble.Sync); err != nil {
			if x != nil {
				freeSlots(x.slots)
			}
			return err
		}
	}
	if x == nil {
		return s.buildIDIndex()
	}
	s.ids = x
	s.logger.Info("stored ids loaded", "ids", x.count, "took", time.Since(t0).Round(time.Millisecond).String())
	return nil
}

// loadIDIndex returns the saved index, or nil when there is none that
// matches the database. The file is read in pieces straight into the
// table: read whole first, it would double the memory a start needs.
func (s *Store) loadIDIndex(dir string) (*idIndex, error) {
	token, ok, err := s.get(filterTokenKey)
	if err != nil || !ok {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, idIndexFile)) //nolint:gosec // the operator's data directory
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	file := bufio.NewReaderSize(f, 1<<20)
	sum := xxh3.New()
	r := io.TeeReader(file, sum)
	head := make([]byte, len(idIndexMagic)+len(token))
	if _, err := io.ReadFull(r, head); err != nil || string(head[:len(idIndexMagic)]) != idIndexMagic {
		return nil, errors.New("not an id index file of this version")
	}
	if !bytes.Equal(head[len(idIndexMagic):], token) {
		return nil, nil // saved by an earlier Close: the data changed since
	}
	x, err := readIDIndex(r, uint64(max(info.Size()-int64(len(head))-16, 0))/8) //nolint:gosec // not negative
	if err != nil {
		return nil, err
	}
	var want [8]byte
	_, err = io.ReadFull(file, want[:])
	if err == nil && binary.BigEndian.Uint64(want[:]) != sum.Sum64() {
		err = errors.New("checksum mismatch")
	}
	if _, extra := file.ReadByte(); err == nil && extra == nil {
		err = errors.New("data after the checksum")
	}
	if err != nil {
		freeSlots(x.slots)
		return nil, err
	}
	return x, nil
}

// saveIDIndex writes the index to its file (durably), then its token to
// the database. Nothing may be written to the database after it.
func (s *Store) saveIDIndex(dir string) error {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	err := writeFileSync(filepath.Join(dir, idIndexFile), func(w io.Writer) error {
		sum := xxh3.New()
		body := io.MultiWriter(w, sum)
		if _, err := io.WriteString(body, idIndexMagic); err != nil {
			return err
		}
		if _, err := body.Write(token); err != nil {
			return err
		}
		if err := s.ids.writeTo(body); err != nil {
			return err
		}
		_, err := w.Write(binary.BigEndian.AppendUint64(nil, sum.Sum64()))
		return err
	})
	if err != nil {
		return err
	}
	return s.db.Set(filterTokenKey, token, pebble.Sync)
}

// writeFileSync replaces path with what write writes, durably: a temporary
// file, synced, renamed over it, and the folder synced.
func writeFileSync(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600) //nolint:gosec // the operator's data directory
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	err = cmp.Or(err, f.Close()) // closed whatever failed before
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
