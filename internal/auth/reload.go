package auth

import (
	"crypto/sha256"
	"fmt"
	"os"
	"time"
)

// jwksFile is the key set a verifier trusts and what it knows of the file
// the keys came from.
type jwksFile struct {
	keys    *KeySet
	sum     [sha256.Size]byte // of the content the keys were parsed from
	checked time.Time         // the last look at the file
}

// load reads the file for the first time: any content differs from none.
func (f *jwksFile) load(path string, now time.Time) error {
	_, err := f.reload(path, now)
	return err
}

// reload looks at the file and, if its content differs from the one the keys
// came from, installs its keys and returns the old ones. The content is
// compared rather than the modification time or size, which a rewrite can
// leave as they were (coarse time stamps, a key of the same length). A file
// that cannot be read or parsed keeps the keys and returns the error.
func (f *jwksFile) reload(path string, now time.Time) (old *KeySet, err error) {
	f.checked = now
	data, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, fmt.Errorf("read JWKS: %w", err)
	}
	sum := sha256.Sum256(data)
	if sum == f.sum {
		return nil, nil
	}
	keys, err := ParseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("JWKS %s: %w", path, err)
	}
	old, f.keys, f.sum = f.keys, keys, sum
	return old, nil
}
