package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// scenarios maps each name of scenarioNames to its implementation.
var scenarios = map[string]func(context.Context, *env) (*Result, error){
	"save-batch":   saveBatch,
	"save-single":  saveSingle,
	"drain":        drain,
	"peek-full":    peekFull,
	"dequeue-rate": dequeueRate,
	"backlog":      backlog,
	"call-floor":   callFloor,
}

// env is what a scenario runs with.
type env struct {
	cfg       Config
	clients   []messagehubv1.MessageHubClient
	health    []healthpb.HealthClient // on the same connections as clients
	maxWeight int64                   // the hub's bundle weight limit, as far as the tool knows
	log       logFunc
}

func (e *env) client(worker int) messagehubv1.MessageHubClient {
	return e.clients[worker%len(e.clients)]
}

// warmUp makes one cheap call on every connection, so that connecting is not
// measured and an unreachable hub is reported at once.
func (e *env) warmUp(ctx context.Context) error {
	for _, c := range e.clients {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
		_, err := c.Peek(cctx, &messagehubv1.PeekRequest{Recipient: uuid.NewString(), Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// cabinet is an (origin, content type) pair, with the document type its
// notifications carry (the content type + "Document").
type cabinet struct {
	origin       messagehubv1.Domain
	contentType  string
	documentType string
}

var saveCabinets = []cabinet{
	{messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries", "TimeSeriesDocument"},
	{messagehubv1.Domain_DOMAIN_CHARGES, "ChargeLinks", "ChargeLinksDocument"},
	{messagehubv1.Domain_DOMAIN_AGGREGATIONS, "Aggregations", "AggregationsDocument"},
}

// gen makes random ids quickly (crypto/rand per id would cost the load tool
// CPU the hub needs on a small machine). One per goroutine.
type gen struct{ r *rand.Rand }

func newGen() *gen {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	return &gen{rand.New(rand.NewChaCha8(seed))}
}

// id returns a random (version 4) UUID in canonical form.
func (g *gen) id() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], g.r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], g.r.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return uuid.UUID(b).String()
}

func notification(id, recipient string, c cabinet, bundling bool, weight int64) *messagehubv1.DataAvailable {
	return &messagehubv1.DataAvailable{
		Id:               id,
		Recipient:        recipient,
		Origin:           c.origin,
		ContentType:      c.contentType,
		DocumentType:     c.documentType,
		SupportsBundling: bundling,
		Weight:           weight,
	}
}

// saveBatch makes batch new notifications of weight 1, each for a random
// cabinet and a random recipient or, with spread, for the recipients in turn
// starting from a random one (1,000 over 100 recipients: 10 each).
func (g *gen) saveBatch(recipients []string, batch int, spread bool) []*messagehubv1.DataAvailable {
	return g.refillBatch(nil, recipients, batch, spread)
}

// refillBatch is saveBatch into the messages of ns, which it reuses (a
// request may be reused once its call has returned: gRPC has encoded it).
func (g *gen) refillBatch(ns []*messagehubv1.DataAvailable, recipients []string, batch int, spread bool) []*messagehubv1.DataAvailable {
	if len(ns) != batch {
		ns = make([]*messagehubv1.DataAvailable, batch)
		for i := range ns {
			ns[i] = &messagehubv1.DataAvailable{}
		}
	}
	first := g.r.IntN(len(recipients))
	for i, n := range ns {
		r := recipients[g.r.IntN(len(recipients))]
		if spread {
			r = recipients[(first+i)%len(recipients)]
		}
		c := saveCabinets[g.r.IntN(len(saveCabinets))]
		n.Id, n.Recipient = g.id(), r
		n.Origin, n.ContentType, n.DocumentType = c.origin, c.contentType, c.documentType
		n.SupportsBundling, n.Weight = true, 1
	}
	return ns
}

// recipients returns n recipients for the save and backlog scenarios: new
// random ones or, with -recipient-seed, the first n of the seed's sequence
// (the same in every run), so that a run can save for the recipients that
// an earlier backlog run filled.
func (e *env) recipients(n int) []string {
	if e.cfg.RecipientSeed == 0 {
		return newRecipients(n)
	}
	r := rand.New(rand.NewPCG(e.cfg.RecipientSeed, 0))
	rs := make([]string, n)
	for i := range rs {
		var u uuid.UUID
		binary.LittleEndian.PutUint64(u[:8], r.Uint64())
		binary.LittleEndian.PutUint64(u[8:], r.Uint64())
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
		rs[i] = u.String()
	}
	return rs
}

func newRecipients(n int) []string {
	rs := make([]string, n)
	for i := range rs {
		rs[i] = uuid.NewString()
	}
	return rs
}

// preload saves total notifications (made by mk from their index) in Saves
// of up to 10,000, from a few goroutines, within cfg.PrepTimeout. It is not
// measured.
func (e *env) preload(ctx context.Context, total int, mk func(g *gen, i int) *messagehubv1.DataAvailable) error {
	const workers = 4
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PrepTimeout)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			g := newGen()
			for ctx.Err() == nil {
				from := int(next.Add(maxPerSave)) - maxPerSave
				if from >= total {
					return
				}
				ns := make([]*messagehubv1.DataAvailable, 0, min(maxPerSave, total-from))
				for i := from; i < total && i < from+maxPerSave; i++ {
					ns = append(ns, mk(g, i))
				}
				cctx, ccancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
				resp, err := e.client(w).Save(cctx, &messagehubv1.SaveRequest{Notifications: ns})
				ccancel()
				if err == nil && int(resp.GetSaved()) != len(ns) {
					err = fmt.Errorf("saved %d of %d (%d duplicates)", resp.GetSaved(), len(ns), resp.GetDuplicates())
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("pre-load: %w", err)
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pre-load of %d notifications: %w (see -prep-timeout)", total, err)
	}
	return nil
}

func saveBatch(ctx context.Context, e *env) (*Result, error) {
	return saveLoad(ctx, e, e.cfg.Batch, cmpOr(e.cfg.Concurrency, 8))
}

func saveSingle(ctx context.Context, e *env) (*Result, error) {
	return saveLoad(ctx, e, 1, cmpOr(e.cfg.Concurrency, 64))
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// saveLoad runs closed-loop Saves of batch notifications from concurrency
// workers until cfg.Duration has passed or cfg.Requests were sent. Each
// notification goes to a random cabinet and to a random recipient or, with
// cfg.Spread, to the recipients in turn from a random one.
func saveLoad(ctx context.Context, e *env, batch, concurrency int) (*Result, error) {
	res := newResult(map[string]any{
		"batch": batch, "concurrency": concurrency, "duration": e.cfg.Duration.String(),
		"requests": e.cfg.Requests, "recipients": e.cfg.Recipients, "conns": e.cfg.Conns,
		"spread": e.cfg.Spread, "recipient_seed": e.cfg.RecipientSeed,
	})
	recipients := e.recipients(e.cfg.Recipients)
	var saved atomic.Int64
	run := e.closedLoop(ctx, concurrency, func(w int) (func(), func(context.Context) error) {
		g := newGen()
		c := e.client(w)
		// One request per worker, refilled for every Save: making new ones
		// cost the tool CPU (and garbage) the hub needs.
		req := &messagehubv1.SaveRequest{}
		refill := func() { req.Notifications = g.refillBatch(req.Notifications, recipients, batch, e.cfg.Spread) }
		save := func(cctx context.Context) error {
			resp, err := c.Save(cctx, req)
			if err == nil && int(resp.GetSaved()) != batch {
				err = fmt.Errorf("saved %d of %d (%d duplicates)", resp.GetSaved(), batch, resp.GetDuplicates())
			}
			if err == nil {
				saved.Add(int64(batch))
			}
			return err
		}
		return refill, save
	})
	res.add("notifications_per_s", rate(saved.Load(), run.elapsed))
	run.report(res)
	res.add("notifications_saved", float64(saved.Load()))
	return res, ctx.Err()
}

// backlog saves cfg.Notifications notifications spread evenly over
// cfg.Recipients new recipients, in Saves of 10,000 from 4 workers, and
// leaves them undelivered: with -data-dir, it builds the backlog that later
// runs on the same directory measure with.
func backlog(ctx context.Context, e *env) (*Result, error) {
	total := e.cfg.Notifications
	res := newResult(map[string]any{"notifications": total, "recipients": e.cfg.Recipients, "conns": e.cfg.Conns, "recipient_seed": e.cfg.RecipientSeed})
	recipients := e.recipients(e.cfg.Recipients)
	e.log("backlog: saving %d notifications over %d recipients", total, len(recipients))
	t0 := time.Now()
	// Each Save of 10,000 goes to 100 recipients (100 each), the next Save
	// to the next 100: as domains publish, and the fastest way to fill.
	const perSave = 100
	err := e.preload(ctx, total, func(g *gen, i int) *messagehubv1.DataAvailable {
		r := (i/maxPerSave*perSave + i%perSave) % len(recipients)
		return notification(g.id(), recipients[r], saveCabinets[i%len(saveCabinets)], true, 1)
	})
	if err != nil {
		return nil, err
	}
	res.add("notifications_per_s", rate(int64(total), time.Since(t0)))
	res.add("notifications_saved", float64(total))
	res.add("elapsed_s", time.Since(t0).Seconds())
	return res, nil
}

// drain pre-loads cfg.Notifications notifications spread evenly over one
// cabinet of each of concurrency recipients, weighted so that a bundle holds
// cfg.BundleSize of them, then times concurrency workers (one per recipient)
// peeking and dequeuing until everything is delivered.
func drain(ctx context.Context, e *env) (*Result, error) {
	concurrency := cmpOr(e.cfg.Concurrency, 8)
	total := e.cfg.Notifications
	weight := max(1, e.maxWeight/int64(e.cfg.BundleSize))
	res := newResult(map[string]any{
		"concurrency": concurrency, "notifications": total, "bundle_size": e.cfg.BundleSize,
		"weight": weight, "duration": e.cfg.Duration.String(), "conns": e.cfg.Conns,
	})
	recipients := newRecipients(concurrency)
	c := saveCabinets[0]
	e.log("drain: pre-loading %d notifications of weight %d", total, weight)
	t0 := time.Now()
	err := e.preload(ctx, total, func(g *gen, i int) *messagehubv1.DataAvailable {
		return notification(g.id(), recipients[i%concurrency], c, true, weight)
	})
	if err != nil {
		return nil, err
	}
	res.add("preload_notifications_per_s", rate(int64(total), time.Since(t0)))
	e.log("drain: pre-loaded in %s; draining", time.Since(t0).Round(time.Millisecond))

	var errs errorLog
	var delivered, bundles atomic.Int64
	peeks := make([][]time.Duration, concurrency)
	dequeues := make([][]time.Duration, concurrency)
	start := time.Now()
	deadline := start.Add(e.cfg.Duration)
	var wg sync.WaitGroup
	for w, r := range recipients {
		wg.Go(func() {
			cl := e.client(w)
			// Bounded in count too: a bundle holds at least one notification.
			for range total/concurrency + 2 {
				if ctx.Err() != nil || !time.Now().Before(deadline) {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
				t := time.Now()
				pr, err := cl.Peek(cctx, &messagehubv1.PeekRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
				peeks[w] = append(peeks[w], time.Since(t))
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("peek: %w", err))
					return
				}
				b := pr.GetBundle()
				if b == nil {
					return
				}
				cctx, cancel = context.WithTimeout(ctx, e.cfg.CallTimeout)
				t = time.Now()
				_, err = cl.Dequeue(cctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: b.GetId()})
				dequeues[w] = append(dequeues[w], time.Since(t))
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("dequeue: %w", err))
					return
				}
				delivered.Add(int64(len(b.GetNotificationIds())))
				bundles.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := delivered.Load(); n > int64(total) || (n < int64(total) && elapsed < e.cfg.Duration && errs.n.Load() == 0) {
		errs.add(fmt.Errorf("delivered %d notifications, pre-loaded %d", n, total))
	}
	res.add("notifications_per_s", rate(delivered.Load(), elapsed))
	res.add("bundles_per_s", rate(bundles.Load(), elapsed))
	res.add("mean_bundle_size", float64(delivered.Load())/float64(max(bundles.Load(), 1)))
	res.add("drained_fraction", float64(delivered.Load())/float64(total))
	res.addLatencies("peek", flatten(peeks))
	res.addLatencies("dequeue", flatten(dequeues))
	res.add("elapsed_s", elapsed.Seconds())
	errs.fill(res)
	return res, ctx.Err()
}

func flatten(parts [][]time.Duration) []time.Duration {
	var out []time.Duration
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// peekFull times the Peek that cuts a full bundle of about cfg.PeekSize
// notifications from one cabinet (with more waiting behind it), then the
// repeated Peek that returns the same pending bundle. Each round is followed
// by an untimed Dequeue and a refill. The weight of each notification is the
// hub's limit divided by cfg.PeekSize: 1 for the default 51,200.
func peekFull(ctx context.Context, e *env) (*Result, error) {
	weight := max(1, e.maxWeight/int64(e.cfg.PeekSize))
	size := int(e.maxWeight / weight) // what one bundle holds
	if size > 1_000_000 {
		return nil, fmt.Errorf("a bundle of %d notifications is more than this tool handles; set -max-bundle-weight", size)
	}
	res := newResult(map[string]any{"bundle_size": size, "weight": weight, "repeat": e.cfg.Repeat, "duration": e.cfg.Duration.String()})
	r := uuid.NewString()
	c := saveCabinets[0]
	fill := func(n int) error {
		return e.preload(ctx, n, func(g *gen, _ int) *messagehubv1.DataAvailable {
			return notification(g.id(), r, c, true, weight)
		})
	}
	e.log("peek-full: pre-loading %d notifications", 2*size)
	if err := fill(2 * size); err != nil {
		return nil, err
	}
	var errs errorLog
	var peeks, repeeks []time.Duration
	cl := e.client(0)
	deadline := time.Now().Add(e.cfg.Duration)
	for i := range e.cfg.Repeat {
		if ctx.Err() != nil || (i > 0 && !time.Now().Before(deadline)) {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
		t := time.Now()
		pr, err := cl.Peek(cctx, &messagehubv1.PeekRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
		d := time.Since(t)
		if err == nil {
			t = time.Now()
			var again *messagehubv1.PeekResponse
			again, err = cl.Peek(cctx, &messagehubv1.PeekRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
			repeeks = append(repeeks, time.Since(t))
			if err == nil && again.GetBundle().GetId() != pr.GetBundle().GetId() {
				err = fmt.Errorf("second peek returned bundle %q, first %q", again.GetBundle().GetId(), pr.GetBundle().GetId())
			}
		}
		cancel()
		if err == nil && len(pr.GetBundle().GetNotificationIds()) != size {
			err = fmt.Errorf("bundle holds %d notifications, want %d", len(pr.GetBundle().GetNotificationIds()), size)
		}
		if err != nil {
			errs.add(err)
			break
		}
		peeks = append(peeks, d)
		cctx, cancel = context.WithTimeout(ctx, e.cfg.CallTimeout)
		_, err = cl.Dequeue(cctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: pr.GetBundle().GetId()})
		cancel()
		if err == nil {
			err = fill(size)
		}
		if err != nil {
			errs.add(err)
			break
		}
	}
	res.addLatencies("peek", peeks)
	res.addLatencies("repeek", repeeks)
	errs.fill(res)
	return res, ctx.Err()
}

// dequeueRate prepares one pending bundle (of one notification) for each of
// cfg.Rate × cfg.Duration recipients: it saves and peeks them, untimed. Then at
// cfg.Rate ticks per second (open loop: a tick does not wait for earlier ones)
// it takes the next prepared bundle, peeks it again (untimed; the hub returns
// the pending bundle) and times its Dequeue.
func dequeueRate(ctx context.Context, e *env) (*Result, error) {
	const maxInFlight = 4096
	ticks := max(1, int(float64(e.cfg.Rate)*e.cfg.Duration.Seconds()))
	res := newResult(map[string]any{"rate": e.cfg.Rate, "duration": e.cfg.Duration.String(), "conns": e.cfg.Conns})
	recipients := newRecipients(ticks)
	c := saveCabinets[1]
	e.log("dequeue-rate: preparing %d bundles", ticks)
	t0 := time.Now()
	err := e.preload(ctx, ticks, func(g *gen, i int) *messagehubv1.DataAvailable {
		return notification(g.id(), recipients[i], c, true, 1)
	})
	if err != nil {
		return nil, err
	}
	bundleIDs, err := e.peekAll(ctx, recipients)
	if err != nil {
		return nil, err
	}
	e.log("dequeue-rate: prepared in %s", time.Since(t0).Round(time.Millisecond))

	var errs errorLog
	var mu sync.Mutex
	var peeks, dequeues []time.Duration
	var skipped int64
	inFlight := make(chan struct{}, maxInFlight)
	tick := func(i int) {
		defer func() { <-inFlight }()
		r, id := recipients[i], bundleIDs[i]
		cl := e.client(i)
		cctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
		defer cancel()
		t := time.Now()
		pr, err := cl.Peek(cctx, &messagehubv1.PeekRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL, BundleId: id})
		dp := time.Since(t)
		if err == nil && pr.GetBundle().GetId() != id {
			err = fmt.Errorf("got bundle %q, want the prepared %s", pr.GetBundle().GetId(), id)
		}
		if err != nil {
			errs.add(fmt.Errorf("peek: %w", err))
			return
		}
		t = time.Now()
		_, err = cl.Dequeue(cctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: id})
		dd := time.Since(t)
		if err != nil {
			errs.add(fmt.Errorf("dequeue: %w", err))
			return
		}
		mu.Lock()
		peeks, dequeues = append(peeks, dp), append(dequeues, dd)
		mu.Unlock()
	}
	interval := time.Second / time.Duration(e.cfg.Rate)
	var wg sync.WaitGroup
	start := time.Now()
	for n := range ticks {
		if ctx.Err() != nil {
			break
		}
		if wait := time.Until(start.Add(time.Duration(n) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case inFlight <- struct{}{}:
			wg.Go(func() { tick(n) })
		default:
			skipped++ // too many calls outstanding: the hub is not keeping up
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.add("target_rps", float64(e.cfg.Rate))
	res.add("achieved_rps", rate(int64(len(dequeues)), elapsed))
	res.addLatencies("dequeue", dequeues)
	res.addLatencies("peek", peeks)
	res.add("skipped_ticks", float64(skipped))
	errs.fill(res)
	return res, ctx.Err()
}

// peekAll peeks (group ALL) every recipient once, from a few goroutines, and
// returns the id of the bundle each got. It is not measured.
func (e *env) peekAll(ctx context.Context, recipients []string) ([]string, error) {
	const workers = 16
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PrepTimeout)
	defer cancel()
	ids := make([]string, len(recipients))
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(recipients) {
					return
				}
				cctx, ccancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
				pr, err := e.client(w).Peek(cctx, &messagehubv1.PeekRequest{Recipient: recipients[i], Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
				ccancel()
				if err == nil && pr.GetBundle() == nil {
					err = errors.New("nothing to peek")
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("preparing bundles: recipient %s: %w", recipients[i], err)
					}
					mu.Unlock()
					cancel()
					return
				}
				ids[i] = pr.GetBundle().GetId()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("preparing %d bundles: %w (see -prep-timeout)", len(recipients), err)
	}
	return ids, nil
}
