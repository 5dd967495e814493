package domain

import (
	"errors"
	"fmt"
	"strings"
)

// Domain errors. The transport maps each to one status code in one place;
// callers test them with errors.Is.
var (
	// ErrInvalidArgument: the request is malformed; nothing was changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotificationConflict: a notification id is already used for different content.
	ErrNotificationConflict = errors.New("notification id already used with different content")
	// ErrBundleIDInUse: the recipient already used this bundle id for another bundle.
	ErrBundleIDInUse = errors.New("bundle id already used")
	// ErrOtherBundlePending: a different bundle is pending in the group asked for.
	ErrOtherBundlePending = errors.New("another bundle is pending")
	// ErrNotFound: the bundle does not exist for this recipient or was already dequeued.
	ErrNotFound = errors.New("not found")
	// ErrStorageFull: saves are refused while the data volume is nearly full.
	ErrStorageFull = errors.New("storage full")
	// ErrCabinetFull: a Save would need more drawers in one cabinet than its
	// catalog entry may list; the recipient must dequeue first.
	ErrCabinetFull = errors.New("cabinet full")
	// ErrUnavailable: the store is closed or cannot serve right now; retrying may help.
	ErrUnavailable = errors.New("unavailable")
	// ErrUnauthenticated: the caller presented no valid credentials.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the caller is known but may not do this.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrStoreRefuses: the store refuses the service's own requests (its
	// credentials, permissions or account settings); an operator must act.
	ErrStoreRefuses = errors.New("store refuses the service")
	// ErrNotSupported: the configured store cannot do this (an operation
	// its database covers by other means).
	ErrNotSupported = errors.New("not supported by this store")
)

// Invalid wraps ErrInvalidArgument with a message that says what is wrong.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Private is an error whose text names the hub's infrastructure in parts
// (the requests a store sent and its answers, network addresses): Error is
// the whole text, which the hub's own log keeps; Public is the same text
// with those parts left out, which is all a client may read (PublicText).
type Private struct {
	Err    error
	Public string
}

func (p *Private) Error() string { return p.Err.Error() }
func (p *Private) Unwrap() error { return p.Err }

// PublicText is err's text as a client may read it: the text of every
// Private error within it replaced by its Public text. Wrapping keeps a
// wrapped error's text whole, so the replacement holds however deep the
// Private error lies.
func PublicText(err error) string {
	text := err.Error()
	var walk func(error)
	walk = func(e error) {
		switch e := e.(type) { //nolint:errorlint // the walk looks at every error of the tree itself
		case *Private:
			text = strings.ReplaceAll(text, e.Error(), e.Public)
		case interface{ Unwrap() error }:
			if inner := e.Unwrap(); inner != nil {
				walk(inner)
			}
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	return text
}
