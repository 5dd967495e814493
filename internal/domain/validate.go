package domain

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Limits of the public contract.
const (
	MaxNotificationsPerSave = 10_000
	MaxContentTypeLength    = 255
	MaxWeight               = math.MaxInt32
	DefaultMaxBundleWeight  = 51_200
	// HighestMaxBundleWeight bounds the bundle weight limit an operator
	// may set: a bundle of that many notifications, each with an id and a
	// document type of its own of the longest length, is about 59 MB in a
	// Peek's answer, under the 64 MiB the server sends at most.
	HighestMaxBundleWeight = 200_000
)

// ParseUUID checks that s is a UUID in canonical 8-4-4-4-12 hex form (any case)
// and returns it in lower case. field names the value in the error.
func ParseUUID(field, s string) (string, error) {
	if len(s) != 36 {
		return "", Invalid("%s must be a UUID in 8-4-4-4-12 form, got %q", field, truncate(s))
	}
	// One pass checks the form and notes upper case: ids are usually lower
	// case already and are then returned as they are (two per notification).
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return "", Invalid("%s must be a UUID in 8-4-4-4-12 form, got %q", field, truncate(s))
			}
			continue
		}
		switch hexClass[c] {
		case hexUpper:
			upper = true
		case notHex:
			return "", Invalid("%s must be a UUID in 8-4-4-4-12 form, got %q", field, truncate(s))
		}
	}
	if upper {
		return strings.ToLower(s), nil
	}
	return s, nil
}

const (
	notHex = iota
	hexLower
	hexUpper
)

// hexClass classifies each byte for ParseUUID.
var hexClass = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			t[c] = hexLower
		case c >= 'A' && c <= 'F':
			t[c] = hexUpper
		}
	}
	return t
}()

// ParseOptionalUUID is ParseUUID for a value that may be empty.
func ParseOptionalUUID(field, s string) (string, error) {
	if s == "" {
		return "", nil
	}
	return ParseUUID(field, s)
}

// NormalizeNotifications validates a Save request and normalises its
// notifications where they are: ids and recipients in lower case, a missing
// document type set to the content type (after an error, some of them may
// be normalised).
func NormalizeNotifications(ns []Notification) error {
	if err := checkSaveSize(len(ns)); err != nil {
		return err
	}
	for i := range ns {
		if err := normalizeNotification(&ns[i]); err != nil {
			return Invalid("notification %d: %s", i, strings.TrimPrefix(err.Error(), ErrInvalidArgument.Error()+": "))
		}
	}
	return nil
}

func checkSaveSize(n int) error {
	if n == 0 {
		return Invalid("a save needs at least one notification")
	}
	if n > MaxNotificationsPerSave {
		return Invalid("a save holds at most %d notifications, got %d", MaxNotificationsPerSave, n)
	}
	return nil
}

func normalizeNotification(n *Notification) error {
	var err error
	if n.ID, err = ParseUUID("id", n.ID); err != nil {
		return err
	}
	if n.Recipient, err = ParseUUID("recipient", n.Recipient); err != nil {
		return err
	}
	if !n.Origin.Valid() {
		return Invalid("origin must be a defined domain, got %d", n.Origin)
	}
	if err = checkTypeName("content_type", n.ContentType); err != nil {
		return err
	}
	if n.DocumentType == "" {
		n.DocumentType = n.ContentType
	} else if err = checkTypeName("document_type", n.DocumentType); err != nil {
		return err
	}
	if n.Weight < 1 || n.Weight > MaxWeight {
		return Invalid("weight must be 1..%d, got %d", MaxWeight, n.Weight)
	}
	return nil
}

// checkTypeName enforces 1..255 characters of [A-Za-z0-9._:-]. The
// characters are checked first: they are one byte each, so that only then
// is the length in bytes the length in characters the message names.
func checkTypeName(field, s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-') {
			return Invalid("%s may only hold [A-Za-z0-9._:-], got %q", field, truncate(s))
		}
	}
	if len(s) == 0 || len(s) > MaxContentTypeLength {
		return Invalid("%s must be 1..%d characters, got %d", field, MaxContentTypeLength, len(s))
	}
	return nil
}

// ValidateContentType enforces a content type's rule (1..255 characters of
// [A-Za-z0-9._:-]).
func ValidateContentType(s string) error { return checkTypeName("content_type", s) }

// ValidatePeekGroup rejects values outside the PeekGroup enum.
func ValidatePeekGroup(g PeekGroup) error {
	if !g.Valid() {
		return Invalid("group must be a defined peek group, got %d", g)
	}
	return nil
}

func isAlnum(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// truncate keeps error messages short when a client sends something huge. It
// cuts at the start of a character, so that the message does not show a
// character cut in two as bytes the client did not send.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
