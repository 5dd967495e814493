package hub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/groupcommit"
	"github.com/energydatahub/messagehub/internal/store"
)

// Group commit (internal/groupcommit): Save calls queue up; each group takes
// all that are queued (up to maxGroupNotifications) into one durable store
// write, so many small saves share one fsync and one watermark step.
const maxGroupNotifications = 20_000

type saveCall struct {
	ctx           context.Context
	notifications []domain.Notification
	done          chan saveOutcome
}

type saveOutcome struct {
	result domain.SaveResult
	err    error
}

// Save stores notifications (already validated and normalised) all or
// nothing. Once it returns without error they are visible to Peek in the
// order received; a Save acknowledged before another started is ordered
// before it.
func (r *Hub) Save(ctx context.Context, notifications []domain.Notification) (domain.SaveResult, error) {
	call := &saveCall{ctx: ctx, notifications: notifications, done: make(chan saveOutcome, 1)}
	if err := r.saves.Submit(ctx, call); err != nil {
		if errors.Is(err, groupcommit.ErrClosed) {
			err = errClosed
		}
		return domain.SaveResult{}, err
	}
	// Once queued the outcome is always awaited, so that a caller never sees
	// an error for a save that was in fact stored.
	out := <-call.done
	return out.result, out.err
}

// QueuedSaves is how many Saves wait for a group to take them: while a
// group is being written, those that the next group will share.
func (r *Hub) QueuedSaves() int { return r.saves.Queued() }

// newSaver starts the group committer. With Options.ConcurrentGroups above
// one, groups whose recipients differ are written side by side, and a Save
// naming a recipient that a group in flight writes waits for that group:
// its recipients' saves stay in order, and it does not plan against a state
// about to change (which would only conflict and plan again).
func (r *Hub) newSaver() *groupcommit.Pipeline[*saveCall] {
	return groupcommit.New(1024, groupcommit.Options[*saveCall]{
		MaxWeight:  maxGroupNotifications,
		Weight:     func(c *saveCall) int { return len(c.notifications) },
		Prepare:    r.prepareGroup,
		Concurrent: r.opts.ConcurrentGroups,
		Keys:       recipientsOf,
	})
}

// recipientsOf is the recipients a Save writes, each once.
func recipientsOf(c *saveCall) []string {
	seen := make(map[string]struct{})
	var out []string
	for _, n := range c.notifications {
		if _, ok := seen[n.Recipient]; !ok {
			seen[n.Recipient] = struct{}{}
			out = append(out, n.Recipient)
		}
	}
	return out
}

// prepareGroup plans the group and writes it, durably, then answers the
// calls.
func (r *Hub) prepareGroup(group []*saveCall) func() {
	live := group[:0:0]
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.done <- saveOutcome{err: err}
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), groupDeadline(live, time.Now()))
	defer cancel()
	outcomes := r.commitSplitting(ctx, live, func(saves []store.RecipientSave) error { return r.store.CommitSaves(ctx, saves) })
	// Committed: peeks waiting for these recipients look again now.
	r.wakes.wake(live, outcomes)
	answerSaves(live, outcomes)
	return nil
}

// groupDeadline is when a group's write must end: opTimeout from now, or
// the latest of its callers' deadlines when that is later (a large Save on a
// slow store), up to maxSaveTimeout. The hub's own deadline never cuts a
// Save short that its caller was ready to wait for.
func groupDeadline(calls []*saveCall, now time.Time) time.Time {
	deadline := now.Add(opTimeout)
	for _, c := range calls {
		if d, ok := c.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
	}
	if limit := now.Add(maxSaveTimeout); deadline.After(limit) {
		return limit
	}
	return deadline
}

// commitSplitting commits the calls with write. When the store or a
// cabinet's bound refuses the group as too large, or for want of space (the
// disk guard's room above its reserve, a Cosmos DB logical partition at its
// 20 GB: a refusal that may be one call's alone), each half is committed on
// its own, down to the call that does not fit, which fails alone; order is
// kept. Each outcome carries its call's error.
func (r *Hub) commitSplitting(ctx context.Context, live []*saveCall, write func([]store.RecipientSave) error) []saveOutcome {
	outcomes, err := r.commitGroup(ctx, live, write)
	var u *unloadable
	var failed *store.RecipientsFailedError
	if errors.As(err, &failed) && errors.Is(err, domain.ErrUnavailable) {
		u = &unloadable{err: err, recipients: make(map[string]bool)}
		for _, rcpt := range failed.Recipients {
			u.recipients[rcpt] = true
		}
	}
	if u != nil || errors.As(err, &u) {
		if outcomes, ok := r.commitWithout(ctx, live, u, write); ok {
			return outcomes
		}
	}
	if (errors.Is(err, store.ErrTooLarge) || errors.Is(err, domain.ErrCabinetFull) || errors.Is(err, domain.ErrStorageFull)) && len(live) > 1 {
		half := len(live) / 2
		return append(r.commitSplitting(ctx, live[:half], write), r.commitSplitting(ctx, live[half:], write)...)
	}
	if err != nil {
		outcomes = make([]saveOutcome, len(live))
		for i := range outcomes {
			outcomes[i] = saveOutcome{err: err}
		}
	}
	return outcomes
}

// unloadable is a plan that could not load some of its recipients, or a
// write refused because of theirs alone (store.RecipientsFailedError), each
// unavailable: nothing was written, so the calls that name none of them may
// be planned and committed on their own.
type unloadable struct {
	err        error
	recipients map[string]bool
}

func (u *unloadable) Error() string { return u.err.Error() }
func (u *unloadable) Unwrap() error { return u.err }

// commitWithout fails the calls naming a recipient that could not be loaded
// or written with its error and commits the others, so that one unavailable
// partition fails only the Saves that name it. It reports false when every
// call names one.
func (r *Hub) commitWithout(ctx context.Context, live []*saveCall, u *unloadable, write func([]store.RecipientSave) error) ([]saveOutcome, bool) {
	outcomes := make([]saveOutcome, len(live))
	var rest []*saveCall
	var at []int
	for i, c := range live {
		if slices.ContainsFunc(c.notifications, func(n domain.Notification) bool { return u.recipients[n.Recipient] }) {
			outcomes[i] = saveOutcome{err: u.err}
			continue
		}
		rest = append(rest, c)
		at = append(at, i)
	}
	if len(rest) == 0 {
		return nil, false
	}
	for j, o := range r.commitSplitting(ctx, rest, write) {
		outcomes[at[j]] = o
	}
	return outcomes, true
}

func answerSaves(calls []*saveCall, outcomes []saveOutcome) {
	for i, c := range calls {
		c.done <- outcomes[i]
	}
}

// commitGroup plans the calls and writes them with write, replanning after
// conflicts; it returns each call's outcome.
func (r *Hub) commitGroup(ctx context.Context, live []*saveCall, write func([]store.RecipientSave) error) ([]saveOutcome, error) {
	// Ids are assumed new: the store checks them as it writes, and names
	// those that exist so that the next attempt counts them as duplicates or
	// rejects their saves. New ids, the common case, cost one lookup each.
	stored := make(map[string]store.IDRecord)
	// The first plan may rest on loads that lag other instances' writes
	// (store.MayLag): every write of a save is conditional on the versions
	// it was planned on, so a stale plan is a conflict, and the next plan
	// loads fresh. A plan reads the head and the entries alone
	// (store.CatalogOnly).
	lagging := true
	// The first plan has half the group's time when one recipient's loads
	// could fail some of the Saves and not the others: a recipient whose
	// partition does not answer by then (throttled, unavailable) fails the
	// Saves that name it, and the others have the rest of the time.
	firstPlan, cancel := ctx, context.CancelFunc(func() {})
	if separable(live) {
		deadline, _ := ctx.Deadline()
		firstPlan, cancel = context.WithDeadlineCause(ctx, time.Now().Add(time.Until(deadline)/2), errSplitPoint)
	}
	defer cancel()
	return retry(ctx, func() ([]saveOutcome, error) {
		load := []store.LoadOption{store.CatalogOnly}
		planCtx := ctx
		if lagging {
			load = append(load, store.MayLag)
			planCtx = firstPlan
		}
		outcomes, saves, err := r.planGroup(planCtx, live, stored, load...)
		if errors.Is(err, errPlanCut) {
			// The split point passed between two loads: no recipient held
			// the plan up.
			outcomes, saves, err = r.planGroup(ctx, live, stored, load...)
		}
		if errors.Is(err, domain.ErrCabinetFull) && lagging {
			// A lagging load may still show drawers that another
			// instance's sweep took out of the entry; a refusal is no
			// conflict, so nothing would read again: only a fresh load
			// refuses.
			outcomes, saves, err = r.planGroup(ctx, live, stored, store.CatalogOnly)
		}
		lagging = false
		if err != nil || len(saves) == 0 {
			return outcomes, err
		}
		err = write(saves)
		var exist *store.IDsExistError
		if errors.As(err, &exist) {
			maps.Copy(stored, exist.Records)
		}
		return outcomes, err
	})
}

// planGroup sorts each call's notifications into duplicates (of stored ids
// known so far, or of earlier ones in the group), conflicts and new ones,
// then plans the store write of every recipient involved.
func (r *Hub) planGroup(ctx context.Context, calls []*saveCall, stored map[string]store.IDRecord, load ...store.LoadOption) ([]saveOutcome, []store.RecipientSave, error) {
	outcomes := make([]saveOutcome, len(calls))
	n := 0
	for _, c := range calls {
		n += len(c.notifications)
	}
	accepted := make(map[string]store.Fingerprint, n) // new ids of the group's calls so far
	freshByCall := make([][]domain.Notification, len(calls))
	counts := make(map[string]int)
	var recipients []string
	for i, c := range calls {
		fresh, dups, err := classify(c.notifications, stored, accepted)
		if err != nil {
			outcomes[i] = saveOutcome{err: err}
			continue
		}
		outcomes[i] = saveOutcome{result: domain.SaveResult{Saved: len(fresh), Duplicates: dups}}
		freshByCall[i] = fresh
		for _, n := range fresh {
			if counts[n.Recipient] == 0 {
				recipients = append(recipients, n.Recipient)
			}
			counts[n.Recipient]++
		}
	}
	// Each recipient's notifications in one slice of the right size: growing
	// them one append at a time would be much of what a Save allocates.
	byRecipient := make(map[string][]domain.Notification, len(recipients))
	for _, rcpt := range recipients {
		byRecipient[rcpt] = make([]domain.Notification, 0, counts[rcpt])
	}
	for _, fresh := range freshByCall {
		for _, n := range fresh {
			byRecipient[n.Recipient] = append(byRecipient[n.Recipient], n)
		}
	}
	saves := make([]store.RecipientSave, len(recipients))
	errs := make([]error, len(recipients))
	loadFailed := make([]bool, len(recipients))
	at := r.opts.Now().UnixMilli()
	plan := func(i int) {
		if errors.Is(context.Cause(ctx), errSplitPoint) {
			errs[i] = errPlanCut
			return
		}
		closeBefore := at - r.opts.Retention.Milliseconds()
		state, err := r.store.LoadRecipient(ctx, recipients[i], load...)
		if err == nil && state.Cursors == nil && slices.ContainsFunc(state.Entries, func(e catalog.Entry) bool { return openedBefore(e, closeBefore) }) {
			// Whether a last drawer this old closes depends on its
			// cabinet's cursor, which a save's load may leave out
			// (store.CatalogOnly): read with the cursors. Only a cabinet
			// whose last drawer is older than the retention costs it, once
			// a retention when its actor dequeues.
			state, err = r.store.LoadRecipient(ctx, recipients[i], withCursors(load)...)
		}
		if err != nil {
			errs[i], loadFailed[i] = err, true
			return
		}
		saves[i] = PlanSave(recipients[i], state, byRecipient[recipients[i]], accepted, r.opts.NewID, at, closeBefore)
		err = checkCabinets(state, saves[i], r.opts.MaxCabinetDrawers)
		if errors.Is(err, domain.ErrCabinetFull) {
			// A drawer closed for retention's sake is not worth a
			// refused save: the last one takes them, as it has room.
			saves[i] = PlanSave(recipients[i], state, byRecipient[recipients[i]], accepted, r.opts.NewID, at, 0)
			err = checkCabinets(state, saves[i], r.opts.MaxCabinetDrawers)
		}
		errs[i] = err
	}
	// Every Save of the group waits for this step: the recipients are
	// loaded and planned by a few workers at once (planning only reads what
	// it shares).
	workers := r.opts.PlanParallel
	if workers <= 0 {
		workers = 1
		if len(recipients) >= parallelPlanRecipients {
			workers = 2
		}
	}
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < len(recipients); i = int(next.Add(1) - 1) {
			plan(i)
		}
	}
	var wg sync.WaitGroup
	for range min(workers, len(recipients)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	var unavailable *unloadable
	cut := false
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, errPlanCut):
			cut = true
		case loadFailed[i] && (errors.Is(err, domain.ErrUnavailable) || heldUp(ctx, err)):
			if !errors.Is(err, domain.ErrUnavailable) {
				err = errHeldUp
			}
			if unavailable == nil {
				unavailable = &unloadable{err: err, recipients: make(map[string]bool)}
			}
			unavailable.recipients[recipients[i]] = true
		default:
			return nil, nil, err
		}
	}
	switch {
	case unavailable != nil:
		return nil, nil, unavailable
	case cut:
		return nil, nil, errPlanCut
	}
	return outcomes, saves, nil
}

var (
	// errSplitPoint ends a group's first plan halfway through the group's
	// time (commitGroup).
	errSplitPoint = errors.New("hub: half the save group's time is spent planning")
	// errPlanCut is a plan that stopped at the split point between loads.
	errPlanCut = errors.New("hub: the save group's plan stopped at its split point")
	// errHeldUp is what a Save gets whose recipient's load did not end by
	// the split point.
	errHeldUp = fmt.Errorf("%w: the store did not answer for a recipient of this save within half the time of the group it was written in (a throttled or unavailable partition); send it again", domain.ErrUnavailable)
)

// heldUp says whether a load failed with err because the group's first plan
// reached its split point while it waited for the store.
func heldUp(ctx context.Context, err error) bool {
	return errors.Is(context.Cause(ctx), errSplitPoint) && errors.Is(err, context.DeadlineExceeded)
}

// separable says whether some recipient of the calls is not named by all
// of them: an unavailable one may then fail some calls and not others.
func separable(calls []*saveCall) bool {
	named := make(map[string]int)
	for _, c := range calls {
		for _, rcpt := range recipientsOf(c) {
			named[rcpt]++
		}
	}
	for _, n := range named {
		if n < len(calls) {
			return true
		}
	}
	return false
}

// parallelPlanRecipients is the fewest recipients a group is planned for by
// two workers when Options.PlanParallel leaves it to the hub.
const parallelPlanRecipients = 32

// classify returns the notifications of one Save that are new, and how many
// are duplicates of stored ones, of earlier saves in the group or of earlier
// ones in the same Save; it adds the new ones' fingerprints to accepted. The
// same id with other content fails the whole Save, and adds nothing.
func classify(ns []domain.Notification, stored map[string]store.IDRecord, accepted map[string]store.Fingerprint) ([]domain.Notification, int, error) {
	fresh := make([]domain.Notification, 0, len(ns))
	dups := 0
	for _, n := range ns {
		fp := fingerprint(n)
		prev, found := accepted[n.ID]
		if !found {
			var rec store.IDRecord
			rec, found = stored[n.ID]
			prev = rec.Fingerprint
		}
		switch {
		case !found:
			accepted[n.ID] = fp
			fresh = append(fresh, n)
		case prev == fp:
			dups++
		default:
			for _, f := range fresh {
				delete(accepted, f.ID)
			}
			return nil, 0, fmt.Errorf("%w: %s", domain.ErrNotificationConflict, n.ID)
		}
	}
	return fresh, dups, nil
}

// PlanSave numbers one recipient's new notifications from its head, files
// them into its cabinets' drawers and moves the watermark past them. fps
// holds the notifications' fingerprints, for the id index. A cabinet's last
// drawer opened before closeBefore (unix milliseconds; 0: none) takes no
// more once some of it is acknowledged (closes). Exported for the store
// contract suite, which plans writes exactly as the repository does.
func PlanSave(recipient string, state store.RecipientState, ns []domain.Notification, fps map[string]store.Fingerprint, newID func() string, at, closeBefore int64) store.RecipientSave {
	head := state.Head
	seq := max(head.NextSeq, 1)
	entries := make(map[catalog.Key]catalog.Entry, len(state.Entries))
	for _, e := range state.Entries {
		entries[e.Key()] = e
	}
	var order []catalog.Key
	items := make(map[catalog.Key][]drawer.Item)
	for _, n := range ns {
		k := catalog.Key{Origin: n.Origin, ContentType: n.ContentType}
		e, ok := entries[k]
		if !ok {
			e = catalog.Entry{Origin: n.Origin, ContentType: n.ContentType}
		}
		if _, ok := items[k]; !ok {
			order = append(order, k)
		}
		items[k] = append(items[k], drawer.Item{
			Pos: e.Total, Seq: seq, ID: n.ID, DocumentType: n.DocumentType,
			SupportsBundling: n.SupportsBundling, Weight: n.Weight,
		})
		e.Total++
		seq++
		entries[k] = e
	}
	save := store.RecipientSave{Recipient: recipient, IDs: make([]store.IDRecord, 0, len(ns))}
	for _, k := range order {
		e := entries[k]
		var pages []drawer.Page
		if closes(e, state.Cursors, closeBefore) {
			e.Drawers, pages = drawer.AppendClosing(e.Drawers, items[k], newID, at)
		} else {
			e.Drawers, pages = drawer.Append(e.Drawers, items[k], newID, at)
		}
		save.Entries = append(save.Entries, e)
		save.Pages = append(save.Pages, pages...)
		for _, p := range pages {
			for _, it := range p.Items {
				save.IDs = append(save.IDs, store.IDRecord{ID: it.ID, Fingerprint: fps[it.ID], DrawerID: p.DrawerID})
			}
		}
	}
	head.NextSeq = seq
	head.Watermark = seq - 1
	save.Head = head
	return save
}

// closes says whether a cabinet's last drawer takes no more notifications:
// opened before closeBefore (0: never), with some of it acknowledged.
// Retention removes a drawer once all of it is acknowledged; a last drawer
// of a cabinet never drained when a sweep visits it (its actor always a
// notification or more behind) would take saves until it is full, keeping
// the acknowledged notifications in it, and their ids, for good. Closed,
// it goes once the actor has caught up past it. A drawer none of which is
// acknowledged frees nothing when closed: an actor that does not dequeue
// does not fill its cabinet's bound with a drawer a retention.
func closes(e catalog.Entry, cursors []catalog.Cursor, closeBefore int64) bool {
	if !openedBefore(e, closeBefore) {
		return false
	}
	c := slices.IndexFunc(cursors, func(c catalog.Cursor) bool { return c.Key() == e.Key() })
	return c >= 0 && cursors[c].Acked > lastDrawersFirstRun(e).Start
}

// openedBefore says whether the cabinet's last drawer was opened before
// closeBefore (0: never).
func openedBefore(e catalog.Entry, closeBefore int64) bool {
	return closeBefore != 0 && len(e.Drawers) > 0 && lastDrawersFirstRun(e).FirstAt < closeBefore
}

// lastDrawersFirstRun is the first run of the cabinet's last drawer; e has
// a drawer.
func lastDrawersFirstRun(e catalog.Entry) drawer.Meta {
	lastID := e.Drawers[len(e.Drawers)-1].ID
	return e.Drawers[slices.IndexFunc(e.Drawers, func(d drawer.Meta) bool { return d.ID == lastID })]
}

// withCursors is a save's load options without store.CatalogOnly.
func withCursors(load []store.LoadOption) []store.LoadOption {
	return slices.DeleteFunc(slices.Clone(load), func(o store.LoadOption) bool { return o == store.CatalogOnly })
}

// fingerprint hashes everything a notification says except its id with
// xxh3's 128-bit hash: fast, and strong enough to tell a duplicate from a
// conflicting save by trusted callers (no one forges collisions here).
func fingerprint(n domain.Notification) store.Fingerprint {
	var buf [256]byte
	h := xxh3.Hash128(appendContent(buf[:0], n))
	var fp store.Fingerprint
	binary.BigEndian.PutUint64(fp[:8], h.Hi)
	binary.BigEndian.PutUint64(fp[8:], h.Lo)
	return fp
}

// appendContent appends what a fingerprint covers, each string preceded by
// its length so that no two contents read alike.
func appendContent(b []byte, n domain.Notification) []byte {
	for _, s := range []string{n.Recipient, n.ContentType, n.DocumentType} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(n.Origin))
	b = binary.BigEndian.AppendUint64(b, uint64(n.Weight)) //nolint:gosec // a weight is positive
	if n.SupportsBundling {
		return append(b, 1)
	}
	return append(b, 0)
}
