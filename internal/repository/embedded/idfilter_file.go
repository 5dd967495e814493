package embedded

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/zeebo/xxh3"
)

// Building the id filter scans every stored id: seconds with millions of
// them. So Close saves the filter in a file beside the data, then writes a
// token naming that file into the database as its very last write. Open uses
// the file only if the database holds the same token, and deletes the token
// (durably) before anything else is written: after a crash, or any write
// since the save, the token is gone and the filter is built by the scan.
const idFilterFile = "idfilter"

// filterTokenKey holds the token of the saved filter (a prefix of its own).
var filterTokenKey = []byte{prefixFilterToken}

const idFilterMagic = "messagehub idfilter 1 (blocked bloom)\n"

// openIDFilter loads the saved filter if it is valid, else builds one.
func (s *Store) openIDFilter(dir string) error {
	t0 := time.Now()
	f, err := s.loadIDFilter(dir)
	if err != nil {
		s.logger.Warn("the saved id filter is not usable; indexing the stored ids", "err", err)
	}
	if f == nil {
		return s.buildIDFilter()
	}
	if !s.readOnly {
		if err := s.db.Delete(filterTokenKey, pebble.Sync); err != nil {
			return err
		}
	}
	s.ids = *f
	s.logger.Info("stored ids loaded", "ids", f.count, "took", time.Since(t0).Round(time.Millisecond).String())
	return nil
}

// loadIDFilter returns the saved filter, or nil when there is none that
// matches the database.
func (s *Store) loadIDFilter(dir string) (*idFilter, error) {
	token, ok, err := s.get(filterTokenKey)
	if err != nil || !ok {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, idFilterFile)) //nolint:gosec // the operator's data directory
	if err != nil {
		return nil, err
	}
	head := len(idFilterMagic) + len(token) + 16
	if len(data) < head+8 || string(data[:len(idFilterMagic)]) != idFilterMagic {
		return nil, errors.New("not an id filter file")
	}
	body, sum := data[:len(data)-8], binary.BigEndian.Uint64(data[len(data)-8:])
	if xxh3.Hash(body) != sum {
		return nil, errors.New("checksum mismatch")
	}
	if !bytes.Equal(body[len(idFilterMagic):len(idFilterMagic)+len(token)], token) {
		return nil, nil // saved by an earlier Close: the data changed since
	}
	meta := body[head-16 : head]
	filter, err := decodeBlockedBloom(body[head:])
	if err != nil {
		return nil, err
	}
	return &idFilter{
		filter:   filter,
		capacity: uint(binary.BigEndian.Uint64(meta[:8])),
		count:    uint(binary.BigEndian.Uint64(meta[8:])),
	}, nil
}

// saveIDFilter writes the filter to its file (durably), then its token to
// the database. Nothing may be written to the database after it.
func (s *Store) saveIDFilter(dir string) error {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	buf := make([]byte, 0, len(idFilterMagic)+len(token)+16+8+len(s.ids.filter.blocks)*64+8)
	buf = append(buf, idFilterMagic...)
	buf = append(buf, token...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(s.ids.capacity))
	buf = binary.BigEndian.AppendUint64(buf, uint64(s.ids.count))
	buf = s.ids.filter.appendTo(buf)
	buf = binary.BigEndian.AppendUint64(buf, xxh3.Hash(buf))
	if err := writeFileSync(filepath.Join(dir, idFilterFile), buf); err != nil {
		return err
	}
	return s.db.Set(filterTokenKey, token, pebble.Sync)
}

// writeFileSync replaces path with data durably: a temporary file, synced,
// renamed over it, and the folder synced.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600) //nolint:gosec // the operator's data directory
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
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
