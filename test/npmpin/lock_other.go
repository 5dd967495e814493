//go:build !unix

package npmpin

// fileLock is a no-op where flock(2) is not available: concurrent first installs may race
// there; run `npm ci` in the harness folder once by hand instead.
type fileLock struct{}

func lockFileAt(string, bool) (*fileLock, error) { return &fileLock{}, nil }

func (*fileLock) unlock() {}
