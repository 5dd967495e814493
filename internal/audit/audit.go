// Package audit is the audit log's model: the events that say who did what
// to which recipient's queue and when, their keys (which order them by time),
// the queries that page through one recipient's events, and Log, which
// writes them to a store: an operator's remedy at once, an actor's call in
// batches.
//
// It knows no store and no API: the store contract (internal/store) keeps
// Events, and the gRPC server decides what is recorded.
package audit

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Action is what an event records. The values are those of the API's
// AuditAction.
type Action int32

// The actions.
const (
	ActionUnspecified         Action = 0
	ActionPeek                Action = 1 // an actor's Peek that returned a bundle
	ActionPeekContent         Action = 2 // an actor's PeekContent that returned a bundle
	ActionDequeue             Action = 3 // an actor's Dequeue
	ActionReleaseBundle       Action = 4 // an operator released a pending bundle
	ActionAcknowledgeOnBehalf Action = 5 // an operator acknowledged on the actor's behalf
	ActionInspect             Action = 6 // an operator looked at the actor's queue
)

// Remedy reports whether the action changes what an actor sees: such events
// are written before the call answers, never buffered.
func (a Action) Remedy() bool {
	return a == ActionReleaseBundle || a == ActionAcknowledgeOnBehalf
}

// Event is one recorded action on one recipient's queue.
type Event struct {
	// Key is unique and orders events by time (NewKey); the stores keep
	// each recipient's events in key order.
	Key       string
	At        time.Time // kept to the millisecond
	Action    Action
	Subject   string // who: the token's subject, or "local" without authentication
	Recipient string // the actor whose queue it concerns
	BundleID  string // the bundle concerned, if any
	Detail    string // the operator's reason, or what was inspected
}

// MaxDetail bounds an event's detail, in bytes: a remedy's reason is at most
// 500 characters of up to 4 bytes each. What an acknowledgement on an
// actor's behalf did follows its reason, which is cut to leave it room.
const MaxDetail = 2000

// keyTimeDigits is the width of a key's time: unix milliseconds, zero-padded
// so that keys sort as their times do (until the year 2286).
const keyTimeDigits = 13

// A key's tail, after the time, orders the keys of one millisecond that one
// process made in the order it made them, and keeps them unique across
// instances: a counter of the keys this process made, of keyCountBits,
// which starts at a random value, then keyRandomBits of random. Keys of one
// millisecond made by different instances have no order among them.
const (
	keyCountBits  = 48
	keyRandomBits = 16
	keyTailDigits = (keyCountBits + keyRandomBits) / 4
)

// keyCount is the counter of the keys this process made.
var keyCount atomic.Uint64

func init() {
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	keyCount.Store(binary.BigEndian.Uint64(r[:]))
}

// KeyLen is the length of every key: the time, a dash, the tail.
const KeyLen = keyTimeDigits + 1 + keyTailDigits

// NewKey returns a new event key for an event at t. Of two keys of one
// millisecond that this process made, the later one sorts after (the
// counter wraps once in 2^48 keys).
func NewKey(t time.Time) string {
	var r [2]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	count := keyCount.Add(1) & (1<<keyCountBits - 1)
	tail := count<<keyRandomBits | uint64(binary.BigEndian.Uint16(r[:]))
	return fmt.Sprintf("%s-%0*x", TimeBound(t), keyTailDigits, tail)
}

// TimeBound is the key prefix of the events at t's millisecond: every key of
// an event at t or later sorts after it (or starts with it), every key of an
// earlier event before it.
func TimeBound(t time.Time) string {
	// A later time is held at the last of keyTimeDigits digits: a wider
	// number would sort by its digits, not its value, among the keys.
	ms := min(max(t.UnixMilli(), 0), maxKeyMillis)
	return fmt.Sprintf("%0*d", keyTimeDigits, ms)
}

// maxKeyMillis is the latest time a key holds, 2286-11-20.
const maxKeyMillis = 9_999_999_999_999

// ParseKey checks that key is an event key (as a page cursor comes back
// from a client) and returns its time. It takes only the characters
// NewKey writes: a time with a sign, or a tail in upper case, would sort
// where no key does.
func ParseKey(key string) (time.Time, error) {
	bad := len(key) != KeyLen || key[keyTimeDigits] != '-'
	for i := 0; i < len(key) && !bad; i++ {
		c := key[i]
		switch {
		case i == keyTimeDigits:
		case i < keyTimeDigits:
			bad = c < '0' || c > '9'
		default:
			bad = (c < '0' || c > '9') && (c < 'a' || c > 'f')
		}
	}
	if bad {
		return time.Time{}, fmt.Errorf("not an audit event key: %q", key)
	}
	ms, err := strconv.ParseInt(key[:keyTimeDigits], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("not an audit event key: %q", key)
	}
	return time.UnixMilli(ms), nil
}

// Query asks for one page of a recipient's events, in key order.
type Query struct {
	Recipient string
	// After and Before bound the keys, both exclusive: the events after
	// After (a key, a TimeBound, or empty for the first) and before Before
	// (a TimeBound; empty for no end). Range gives them from times.
	After, Before string
	// Limit is the most events returned; at least one.
	Limit int
}

// Range is the query of the events at from or later and before to (zero:
// no end), after the key cursor when it is set.
func Range(recipient string, from, to time.Time, cursor string, limit int) Query {
	q := Query{Recipient: recipient, After: TimeBound(from), Limit: limit}
	if cursor > q.After {
		q.After = cursor
	}
	if !to.IsZero() {
		q.Before = TimeBound(to)
	}
	return q
}

// Page is one page of a query's answer.
type Page struct {
	Events []Event
	// Next is the key to continue after; empty when no event of the query
	// is left.
	Next string
}

// Contains reports whether the query's range holds key.
func (q Query) Contains(key string) bool {
	return key > q.After && (q.Before == "" || key < q.Before)
}
