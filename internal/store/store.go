// Package store is the contract between the hub's algorithm and the
// databases it runs on: the records a recipient has, the conditional writes
// that change them, the outbox of dequeue notices and the coordination of
// instances that share a database. Backends live in its sub-packages
// (pebble, cosmos); storetest is the suite every backend passes.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// ErrConflict is returned by a Store when a conditional write finds that a
// record changed since it was read (an etag mismatch) or already exists; the
// hub also reports it when a read lacks what the records read before it say
// exists (a replica behind the one that answered first), so that it never
// skips what it did not read. The hub reloads and retries; it never reaches
// callers.
var ErrConflict = errors.New("store: conflicting write")

// ErrNotHolder is a write that only a lease's holder may make, refused
// because the writer does not hold the lease: another took it over (the
// writer stalled past its lease) or it was given up. What the writer holds
// is older than what the new holder writes, so it must not replace it.
var ErrNotHolder = errors.New("store: the lease is not the writer's")

// ErrTooLarge is a write the store refused as beyond its limits (request or
// document size, operations per request). It is no conflict: the same
// write fails again. Group commit splits a group that meets it, so that one
// caller's save that does not fit fails alone.
var ErrTooLarge = errors.New("store: write beyond the store's limits")

// IDsExistError is how CommitSaves reports notification ids that are
// already stored: all of them, with their records, and nothing written. It
// is a conflict: the caller reclassifies those ids and tries again.
type IDsExistError struct {
	Records map[string]IDRecord
}

func (e *IDsExistError) Error() string {
	return fmt.Sprintf("store: %d notification ids already exist", len(e.Records))
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *IDsExistError) Unwrap() error { return ErrConflict }

// RecipientsFailedError is how CommitSaves may report a refusal that the
// writes of some recipients alone caused (their partitions unavailable or
// throttled), the others' writes having gone through or been cancelled
// for it: nothing was stored, and a save of the other recipients alone
// need not fail the same way.
type RecipientsFailedError struct {
	Recipients []string
	Err        error
}

func (e *RecipientsFailedError) Error() string { return e.Err.Error() }

func (e *RecipientsFailedError) Unwrap() error { return e.Err }

// Head is a recipient's sequence counter and watermark. Sequence numbers up
// to NextSeq-1 are handed out; readers ignore anything above Watermark.
type Head struct {
	NextSeq   int64
	Watermark int64
	Version   string
}

// RecipientState is everything that answers "what is pending or next for this
// recipient?".
type RecipientState struct {
	Head    Head
	Entries []catalog.Entry
	Cursors []catalog.Cursor
	Pending []bundle.Record // bundles peeked and not yet dequeued
	// Idle says the store answered a load with MayBeIdle from the mark
	// MarkIdle left at the recipient's current head: nothing is pending
	// and nothing waits, so Entries, Cursors and Pending were not read
	// and are empty. Head is the head as stored.
	Idle bool
	// HeldFor is how long from the load until the first lease ends of a
	// save that holds the recipient's notifications out of sight (a
	// reservation, Cosmos DB); zero when none does. The save's process
	// may have died: then only a load after that settles it, and no Save
	// wakes the peeks waiting to see what it held back.
	HeldFor time.Duration
}

// LoadOption lets a caller of LoadRecipient take a cheaper reading of the
// recipient's state when it can do with less.
type LoadOption struct {
	kind   loadKind
	bundle string // OwnBundle's
}

type loadKind int

const (
	mayBeIdle loadKind = iota + 1
	mayLag
	catalogOnly
	ownBundle
)

var (
	// MayBeIdle lets the store answer with an Idle state when the
	// recipient was marked idle at its current head (MarkIdle), when the
	// store's own writes left it with nothing waiting at its current head
	// (a bundle of all it had waiting, created and acknowledged), or when
	// it has no head at all. Such an answer is as fresh as any other: it
	// reflects every write that succeeded before the load began.
	MayBeIdle = LoadOption{kind: mayBeIdle}
	// MayLag lets the state miss writes of other instances sharing the
	// store that succeeded before the load (this store's own writes are
	// always seen). What it holds did exist, at the versions it gives, so
	// a conditional write on them fails as ErrConflict when they are
	// stale; the caller must not conclude from such a state that a record
	// is absent.
	MayLag = LoadOption{kind: mayLag}
	// CatalogOnly says the caller plans a save and reads only the head
	// and the entries: the store may leave Cursors and Pending empty.
	CatalogOnly = LoadOption{kind: catalogOnly}
)

// OwnBundle lets the store answer, when it created the pending bundle id
// itself and has not seen it acknowledged since, with that bundle alone
// (at the version its creation left), its cabinet's cursor as that
// creation wrote it and its cabinet's entry as the load it was cut from
// read it, and nothing else (a zero Head): no read at all. Such a state
// may be stale in every way (another instance may have dequeued or
// released the bundle, or changed the entry since), so it is only for a
// write conditional on the bundle's and the cursor's versions, which then
// fails as ErrConflict; the caller must conclude nothing else from it. A
// store without that knowledge answers as the other options say.
func OwnBundle(id string) LoadOption { return LoadOption{kind: ownBundle, bundle: id} }

// OwnBundleOf returns the bundle id an OwnBundle option of opts names, or
// "" when there is none.
func OwnBundleOf(opts []LoadOption) string {
	for _, o := range opts {
		if o.kind == ownBundle {
			return o.bundle
		}
	}
	return ""
}

// Fingerprint identifies a notification's content, to tell a duplicate save
// from a conflicting one.
type Fingerprint [16]byte

// IDRecord indexes a saved notification id.
type IDRecord struct {
	ID          string
	Fingerprint Fingerprint
	DrawerID    string
}

// RecipientSave is one recipient's part of a Save: new pages, the entries and
// head as they become (Version holds the version they were read at, empty for
// records that must not exist yet) and the ids to index (which must not exist).
type RecipientSave struct {
	Recipient string
	Head      Head
	Entries   []catalog.Entry
	Pages     []drawer.Page
	IDs       []IDRecord
}

// Sweep is what retention removes for one recipient in one conditional write.
type Sweep struct {
	Recipient string
	// Bundles are the dequeued or released bundles to delete, as read: a
	// store deletes each at its Version (when set), so that a bundle of
	// the id made since (freed by another sweep or a ttl) stays.
	Bundles []bundle.Record
	Drawers []string // drawer ids whose pages and id records are deleted
	// DrawerEnds holds, for those of Drawers the catalog named when the
	// sweep read it, the positions their entry had handed out (below, a
	// freed drawer holds acknowledged runs and holes): a store that
	// deletes pages before its catalog write deletes only pages below it,
	// so that what a save appends meanwhile stays.
	DrawerEnds    map[string]int64
	Entries       []catalog.Entry // entries to replace (Version = as read)
	DeleteEntries []catalog.Entry // entries to delete with their cursors (Version = as read)
	DeleteCursors []catalog.Cursor
	// Keep lists drawers that leave the catalog now while retained
	// bundles may still read them: the store keeps their pages and names
	// them in RetentionState.Kept once Until is past the retention.
	Keep []Kept
	// Done lists the IDs of due Kept records whose drawers (in Drawers)
	// this sweep deletes; the records go in its catalog write.
	Done []string
}

// Store is the persistence the algorithm needs. Writes are conditional on
// the versions the caller read and report ErrConflict when they no longer
// hold; each write is atomic: a refused one leaves nothing of what it was
// to write (a refused save may use up sequence numbers and positions, as
// gaps). Of writes racing on one record, at most one succeeds. storetest
// checks every promise.
type Store interface {
	// LoadRecipient returns the recipient's state; a recipient never seen has
	// a zero Head and nothing else. Without options the state reflects
	// every write that succeeded before the call, whichever instance made
	// it; opts may ask for a cheaper one (MayBeIdle, MayLag).
	LoadRecipient(ctx context.Context, recipient string, opts ...LoadOption) (RecipientState, error)
	// MarkIdle records, at head's version, that a load without MayLag of
	// the recipient found nothing pending and nothing waiting: no pending
	// bundle, every cabinet's positions acknowledged, and a watermark of
	// head.NextSeq-1 (no save under way). Later loads with MayBeIdle may
	// then answer Idle until the head changes, which every save does when
	// it reserves its sequence numbers; so a mark can never hide what a
	// later save stores. The mark is a hint: it is written only while the
	// head is still at head.Version, a store may keep none, and a caller
	// ignores its failure (nothing changed, or the mark is there).
	MarkIdle(ctx context.Context, recipient string, head Head) error
	// ReadDrawer returns up to limit items of a drawer with from ≤ position <
	// to, in position order (a drawer.ReadFunc); none of a drawer never
	// written. The hub reads only positions its catalog's runs hold.
	ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error)
	// ReadDrawerLatest is ReadDrawer answered from every write that
	// succeeded before the call, whichever instance made it: where
	// ReadDrawer may lag behind another instance's pages (Cosmos DB), this
	// read never does, and may cost more. The hub asks it only to tell a
	// position whose save has not written it yet from one a read missed.
	ReadDrawerLatest(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error)
	// LookupIDs returns the records of those ids that are stored; the others
	// are left out.
	LookupIDs(ctx context.Context, ids []string) (map[string]IDRecord, error)
	// CommitSaves writes the saves of several recipients all or nothing. A
	// head or entry not at the version read is ErrConflict; ids that already
	// exist make it fail with *IDsExistError naming all of them. Refused,
	// none of its notifications or ids is stored, for any recipient; a
	// refusal that some recipients' writes alone caused may name them
	// (*RecipientsFailedError).
	CommitSaves(ctx context.Context, saves []RecipientSave) error
	// BundleExists reports whether the recipient has a bundle with this id,
	// pending, dequeued or released.
	BundleExists(ctx context.Context, recipient, bundleID string) (bool, error)
	// CreateBundle stores a new pending bundle, provided no bundle of its id
	// exists, no bundle is pending in its group and the cabinet's cursor is
	// still at cursor.Version (empty: no cursor stored yet).
	CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error
	// Acknowledge marks a pending bundle dequeued (rec holds the new state and
	// the version read) and writes the cabinet's cursor, both conditionally.
	Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error
	// ReleaseBundle gives up a pending bundle (rec holds the new state,
	// Released with its ReleasedAt, and the version read), conditionally on
	// that version: it is no longer pending, its group may have a new
	// bundle, the cabinet's cursor stays where it is and no notice is
	// written. Its record stays, listed by DequeuedBundles until retention
	// removes it, so that its id stays used (BundleExists, CreateBundle).
	ReleaseBundle(ctx context.Context, recipient string, rec bundle.Record) error
	// Recipients calls fn for every recipient with stored state, for retention.
	Recipients(ctx context.Context, fn func(recipient string) error) error
	// DequeuedBundles returns the recipient's bundles that are no longer
	// pending, dequeued and released (State tells them apart), for
	// retention.
	DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error)
	// ApplySweep removes what retention found, conditionally: when an entry
	// or cursor it names changed, it is ErrConflict and removes nothing
	// but pages of Drawers below their DrawerEnds (acknowledged and due, or
	// of holes, deleted before the catalog write by a store that needs that
	// order).
	ApplySweep(ctx context.Context, sweep Sweep) error
	// Close releases the store.
	Close() error

	Backup

	Outbox
	Coordination
	Retention
	Figures
	AuditLog
}

// Retention is the part of a Store that tells retention where to look, so
// that a pass costs what is due or changed, not what is stored.
type Retention interface {
	// DueRecipients calls fn once for every recipient with a dequeued
	// bundle dequeued before dueBefore (its retention ran out) or, when
	// since is not zero, at or after since (dequeued since the last pass:
	// its catalog may hold acknowledged drawers to let go), and with a
	// released bundle released before dueBefore unless the store removes
	// those by itself when their retention runs out (they keep no drawer).
	// It reads an index of those times: a recipient with nothing in either
	// range costs nothing, however much it retains.
	DueRecipients(ctx context.Context, dueBefore, since time.Time, fn func(recipient string) error) error
	// LoadRetention reads what retention's visit of a recipient decides on:
	// its catalog entries and cursors, and the dequeued and released
	// bundles DueRecipients names it for (dequeued or released before
	// dueBefore, or at or after since when since is not zero), never those
	// retained in between: a visit costs what is due or new, not what the
	// recipient retains.
	LoadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (RetentionState, error)
	// BundlesAsRead is nil when every one of bundles (the recipient's
	// dequeued and released records a visit read) is stored at the Version
	// read, as the latest write of each left it, whichever instance made
	// it; ErrConflict when one was deleted or replaced since: its id may
	// have been freed and taken by a later bundle. Retention asks it before
	// removing what is kept elsewhere under those ids (their documents).
	BundlesAsRead(ctx context.Context, recipient string, bundles []bundle.Record) error
}

// RetentionState is what LoadRetention reads of a recipient.
type RetentionState struct {
	Entries []catalog.Entry
	Cursors []catalog.Cursor
	Bundles []bundle.Record // dequeued or released, due or new (State tells them apart)
	// DueBefore, when after the dueBefore asked, is the cutoff the store
	// applied instead: the recipient's retained bundles would otherwise
	// outgrow what the store holds for one recipient, so those dequeued
	// before it go before their retention (Bundles and Kept include them).
	DueBefore time.Time
	// Kept are the drawers out of the catalog whose retention is over:
	// those a sweep kept (Sweep.Keep) until a time before dueBefore, or
	// that only expired bundles name.
	Kept []Kept
}

// Kept is a set of drawers out of the catalog kept for retained bundles
// until the last of those is due.
type Kept struct {
	ID string // the store's; empty in a Sweep that keeps them
	// Cabinet is the entry they leave, in a Sweep: the store records them
	// in the write that changes that entry, never apart from it.
	Cabinet catalog.Key
	Until   time.Time // when the last bundle that reads from them was dequeued
	Drawers []string
}

// Figures is the part of a Store that keeps the backlog figures: computed
// by one instance at a time from a recount of every recipient
// (ScanBacklog, under the figures lease), stored, and read by every
// instance and by the admin calls in one read each (ReadFigures).
type Figures interface {
	// ScanBacklog calls fn once for every recipient with catalog entries,
	// cursors or pending bundles, with what it has: a recount of
	// everything, for the figures' holder only. Cost is what it cost the
	// store in its own unit (request units on Cosmos DB; 0 where reading
	// is local), so that the holder can pace recounts by it.
	ScanBacklog(ctx context.Context, fn func(RecipientRecords) error) (cost float64, err error)
	// ChangedBacklog returns the recipients whose catalog entries, cursors
	// or bundles changed since cursor, each with its records as they are
	// now (none when it has nothing left), and the cursor to go on from. A
	// store may name more recipients than changed; with All set it names
	// every recipient with records, and the others have none. The empty
	// cursor is the present: the answer holds its cursor and nothing else.
	ChangedBacklog(ctx context.Context, cursor string) (BacklogChanges, error)
	// WriteFigures stores the figures' totals and the parts named,
	// replacing the last; the other parts stay as they were. Only holder,
	// the holder of the figures lease, writes them: ErrNotHolder, and
	// nothing written, once another took the lease over or it was given up.
	WriteFigures(ctx context.Context, holder string, f BacklogFigures, parts FigureParts) error
	// ReadFigures returns the figures last written, with the parts asked
	// for (the totals always); zero figures when none were written.
	ReadFigures(ctx context.Context, parts FigureParts) (BacklogFigures, error)
	// HoldFiguresLease takes the figures lease for holder until d from
	// now, or extends it when holder has it; false when another holder's
	// lease has not run out.
	HoldFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error)
	// ReleaseFiguresLease gives the figures lease up if holder has it.
	ReleaseFiguresLease(ctx context.Context, holder string) error
}

// Backup is the part of a Store that copies it while it runs.
type Backup interface {
	// Backup writes a consistent copy of the store into dir, an absolute
	// path that must not exist yet: a store opened on dir holds every
	// write answered before the call, as a crash would have left them (a
	// write under way is there whole or not at all). A store that cannot
	// copy itself (Cosmos DB, which the account's continuous backup
	// covers) returns an error wrapping domain.ErrNotSupported and writes
	// nothing.
	Backup(ctx context.Context, dir string) error
}

// AuditLog is the part of a Store that keeps the audit log: each
// recipient's events in key order (audit.Event.Key, which orders them by
// time), for the retention period.
type AuditLog interface {
	// AppendAudit stores events of any recipients, durably when it returns
	// nil. The events of a write that failed, written again as they were
	// (all of them or their beginning, as audit.Log does), are stored once.
	// Events arrive grouped by recipient (audit.Log sorts them), which a
	// store may write as one write per recipient.
	AppendAudit(ctx context.Context, events []audit.Event) error
	// AuditEvents returns up to q.Limit of the recipient's events that
	// q.Contains, in key order, and the key to continue after when more are
	// left. Events before the last PruneAudit are never returned.
	AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error)
	// PruneAudit removes (or, where the store expires them by itself,
	// hides at once) every event before the time.
	PruneAudit(ctx context.Context, before time.Time) error
}

// Notice says that a dequeued bundle's domain is still to be told of it.
type Notice struct {
	Recipient, BundleID string
	// Origin is the bundle's domain.
	Origin     domain.Origin
	DequeuedAt time.Time
}

// Outbox is the part of a Store that keeps notices: Acknowledge of a record
// with Notice set writes one in the same atomic write, and they stay
// until removed, across crashes. They are found through an index of their
// own, by domain, without scanning anything else.
type Outbox interface {
	// Notices returns up to limit notices of the given domains (every
	// notice carries one: OriginUnspecified has none), oldest first as far
	// as the store can order them; a domain left out costs nothing, however
	// many notices it has, so a failing domain does not hold up the others.
	// A call that cannot list every notice leaves the next to go on after
	// the ones it listed, wrapping round to the first at the end: every
	// notice comes up within about ⌈backlog / limit⌉ calls, however many
	// before it the caller leaves in the outbox.
	Notices(ctx context.Context, origins []domain.Origin, limit int) ([]Notice, error)
	// RemoveNotices removes delivered notices; missing ones are no error.
	RemoveNotices(ctx context.Context, notices []Notice) error
	// NoticeBacklog counts the notices and says when the oldest was made.
	NoticeBacklog(ctx context.Context) (n int, oldest time.Time, err error)
	// DequeuedBundle reads one dequeued bundle's record (a point read, so
	// telling a domain costs the same however many bundles the recipient
	// retains); domain.ErrNotFound when there is none (a released bundle
	// is none).
	DequeuedBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error)
}

// Coordination is the part of a Store that lets the instances sharing it
// take turns: one sweeps at a time, one asks a domain for a bundle's
// document. A store only one process opens embeds Solo.
type Coordination interface {
	// HoldSweepLease takes the sweep lease for holder until d from now, or
	// extends it when holder has it; false when another holder's lease has
	// not run out.
	HoldSweepLease(ctx context.Context, holder string, d time.Duration) (bool, error)
	// ReleaseSweepLease gives the lease up if holder has it, so that
	// another instance need not wait for it to run out.
	ReleaseSweepLease(ctx context.Context, holder string) error
	// LowPriority marks ctx so that the store's requests made with it are
	// the first to be throttled when the store is busy.
	LowPriority(ctx context.Context) context.Context
	// AcquireBuild takes or renews holder's lease of a bundle's document
	// build until d from now, and returns who holds it afterwards and until
	// when: holder itself, or another holder whose lease has not expired
	// (empty: released just now). It is content.Lease.
	AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (current string, until time.Time, err error)
	// ReleaseBuild gives up holder's lease of the build; another's is left
	// alone.
	ReleaseBuild(ctx context.Context, recipient, bundleID, holder string) error
	// RingBell tells the other instances sharing the store that saves for
	// these recipients committed, so that their peeks waiting for them look
	// again (ReadBells). The hub rings after a group commit; a bell that is
	// lost only delays those peeks, to the end of their wait at most.
	RingBell(ctx context.Context, recipients []string) error
	// ReadBells returns the recipients of the bells other instances rang
	// after cursor, and of those a store rings by itself for every
	// instance when it makes notifications visible outside a Save (a
	// recipient may come more than once, and a bell more than once), and
	// the cursor to read from next. The empty cursor starts
	// at the present: the first call returns a cursor and no recipients. A
	// failed read leaves cursor valid, so the next call from it misses
	// nothing.
	ReadBells(ctx context.Context, cursor string) (recipients []string, next string, err error)
}

// Solo is the Coordination of a store that one process opens: every lease
// is its own at once, and there is nobody to yield to.
type Solo struct{}

// HoldSweepLease implements Coordination: always held.
func (Solo) HoldSweepLease(context.Context, string, time.Duration) (bool, error) { return true, nil }

// ReleaseSweepLease implements Coordination.
func (Solo) ReleaseSweepLease(context.Context, string) error { return nil }

// LowPriority implements Coordination: ctx as it is.
func (Solo) LowPriority(ctx context.Context) context.Context { return ctx }

// AcquireBuild implements Coordination: holder holds it, with no end.
func (Solo) AcquireBuild(_ context.Context, _, _, holder string, _ time.Duration) (string, time.Time, error) {
	return holder, time.Time{}, nil
}

// ReleaseBuild implements Coordination.
func (Solo) ReleaseBuild(context.Context, string, string, string) error { return nil }

// RingBell implements Coordination: there is nobody else to tell.
func (Solo) RingBell(context.Context, []string) error { return nil }

// ReadBells implements Coordination: nobody else rings.
func (Solo) ReadBells(_ context.Context, cursor string) ([]string, string, error) {
	return nil, cursor, nil
}

// HoldFiguresLease implements Figures: always held.
func (Solo) HoldFiguresLease(context.Context, string, time.Duration) (bool, error) { return true, nil }

// ReleaseFiguresLease implements Figures.
func (Solo) ReleaseFiguresLease(context.Context, string) error { return nil }
