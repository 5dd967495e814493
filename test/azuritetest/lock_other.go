//go:build !unix

package azuritetest

// fileLock is a no-op where flock(2) is not available: run `npm ci` in
// test/azuritetest/server once by hand there.
type fileLock struct{}

func lockFileAt(string, bool) (*fileLock, error) { return &fileLock{}, nil }

func (*fileLock) unlock() {}
