//go:build !unix

package cosmostest

// fileLock is a no-op where flock(2) is not available: concurrent first installs may race
// there; run `npm ci` in test/cosmostest/server once by hand instead.
type fileLock struct{}

func lockFileAt(string, bool) (*fileLock, error) { return &fileLock{}, nil }

func (*fileLock) unlock() {}
