package content

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/lograte"
)

// Defaults of Options.
const (
	DefaultRetryMin       = 500 * time.Millisecond
	DefaultRetryMax       = time.Minute
	DefaultAttemptTimeout = 5 * time.Minute
	// DefaultMaxBuildMemory is the default of Options.MaxBuildMemory: about
	// 60 builds of small bundles, 7 of the largest at the default bundle
	// weight limit (about 16 MiB each).
	DefaultMaxBuildMemory = 256 << 20
)

// Options configures a Service.
type Options struct {
	// Providers are the domains that build documents; a bundle of another
	// domain has none (unless one was stored while it had).
	Providers map[domain.Origin]messagehubv1.BundleContentProviderClient
	// Store keeps the documents.
	Store Store
	// Pending says whether a bundle is still pending; the hub stops trying to
	// build the document of a bundle that is not.
	Pending func(ctx context.Context, recipient, bundleID string) (bool, error)
	// Holds, when set, says whether the bundle pending under bundleID holds
	// exactly these notifications: the very bundle a document is built for,
	// not a later one that took its id once it was gone. Without it Pending
	// answers by the id alone.
	Holds func(ctx context.Context, recipient, bundleID string, notificationIDs []string) (bool, error)
	// RetryMin and RetryMax bound the exponential backoff between attempts.
	RetryMin, RetryMax time.Duration
	// AttemptTimeout bounds one provider call.
	AttemptTimeout time.Duration
	Logger         *slog.Logger
	// Metrics, when set, records every provider call (telemetry.Metrics).
	Metrics ProviderMetrics
	// Lease, when set, makes instances that share the store ask a domain
	// once per bundle: only the holder of the bundle's lease asks, the others
	// wait for its document. Within one Service the peeks of a bundle share
	// one build, and the builds under one id (an earlier bundle's and a
	// later one's) share the instance's lease of it.
	Lease Lease
	// LeaseDuration is how long a lease lasts unless renewed (default
	// DefaultLeaseDuration); the holder renews it every third of it while it
	// asks, so an instance that dies holds a bundle up for this long at most.
	LeaseDuration time.Duration
	// MaxBuildMemory bounds the memory of the builds running at once
	// (default DefaultMaxBuildMemory); a peek that would start one beyond it
	// is refused with ErrTooManyBuilds.
	MaxBuildMemory int64
}

// DefaultLeaseDuration is the default of Options.LeaseDuration.
const DefaultLeaseDuration = 30 * time.Second

// Lease is how instances sharing a store take turns asking a domain
// (store.Coordination: on a store one process opens, always granted).
type Lease interface {
	// AcquireBuild takes or renews holder's lease of the bundle's build until
	// d from now. It returns who holds the lease afterwards and until when:
	// holder itself, or another holder whose lease has not expired (an empty
	// current holder: released just now, the next try may take it).
	AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (current string, until time.Time, err error)
	// ReleaseBuild gives up holder's lease; another's is left alone.
	ReleaseBuild(ctx context.Context, recipient, bundleID, holder string) error
}

// ProviderMetrics records provider calls: the domain, the outcome ("ok",
// "error", "invalid", or "not_stored" when the hub could not store the
// answer), the duration and the bytes stored; and the builds
// waiting out a backoff after a failed call (+1 as one starts, -1 as it
// ends).
type ProviderMetrics interface {
	RecordProviderCall(ctx context.Context, origin, outcome string, d time.Duration, bytes int64)
	RecordBuildBackoff(ctx context.Context, delta int64)
}

// Service serves bundles' documents: from the store when there, else by
// asking the bundle's domain once, in the background, until it succeeds or
// the bundle is no longer pending.
type Service struct {
	opts Options

	holder string // this Service's name on leases

	// memory bounds the builds running at once (Options.MaxBuildMemory):
	// each holds its bundle through every backoff, as long as the bundle is
	// pending, and its provider's answer a chunk at a time, so builds of
	// many recipients' bundles while their domain is down or slow would
	// otherwise grow without bound. Refusals are logged at warn, at most
	// once a second: actors peeking again in a loop must not flood the log.
	memory   *semaphore.Weighted
	refusals lograte.Limiter

	mu       sync.Mutex
	building map[Key]*build
	leases   map[Key]*idLease // by recipient and bundle id (no Bundle)

	ctx  context.Context // ends at Close
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// idLease is this Service's share of the lease of one bundle id. The lease
// names the instance, and the builds of an earlier and a later bundle under
// the id run here at once (a build is the bundle's): every attempt that
// holds the lease counts, and only the last to end releases it, else the
// first to end would let another instance take the lease and ask the
// domain for the bundle still being asked for here.
type idLease struct {
	// mu is held across the store's calls that take the lease for an
	// attempt or release it, so that a release never drops the lease
	// another build just took. Renewals go without: while one runs, its
	// attempt counts, and nothing releases the lease.
	mu      sync.Mutex
	holding int // attempts holding the lease (under mu)
	users   int // callers of withLease on it (under Service.mu)
}

// build is one bundle's document being asked for; done closes when the
// document is stored or the hub gives up on it.
type build struct {
	done chan struct{}
	err  error
	// asked hears of every peek that finds the build running: one that
	// comes while the build backs off after failed attempts cuts the wait
	// short, so a domain that has recovered is asked again when an actor
	// wants the document, not only when the backoff (up to RetryMax) ends.
	asked chan struct{}
}

// NewService returns a Service; Close stops its background work.
func NewService(opts Options) *Service {
	opts.RetryMin = cmp.Or(opts.RetryMin, DefaultRetryMin)
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	opts.AttemptTimeout = cmp.Or(opts.AttemptTimeout, DefaultAttemptTimeout)
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.LeaseDuration = cmp.Or(opts.LeaseDuration, DefaultLeaseDuration)
	opts.MaxBuildMemory = cmp.Or(max(opts.MaxBuildMemory, 0), DefaultMaxBuildMemory)
	ctx, stop := context.WithCancel(context.Background())
	return &Service{
		opts: opts, holder: holderName(), building: map[Key]*build{}, leases: map[Key]*idLease{}, ctx: ctx, stop: stop,
		memory: semaphore.NewWeighted(opts.MaxBuildMemory), refusals: lograte.Limiter{Max: 1},
	}
}

// holderName names this Service on leases so that an operator reading
// "waiting for another instance's build" can tell which instance holds it:
// host, process and a random part (a restarted process is another holder).
func holderName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
}

// Close stops every background build and waits for them.
func (s *Service) Close() {
	s.stop()
	s.wg.Wait()
}

// ErrNotReady is Document's answer when the document is still being built
// as its caller's time ends: routine while a domain is slow (the build goes
// on, and the actor peeks again), unlike the store failing.
var ErrNotReady = fmt.Errorf("%w: document not ready", domain.ErrUnavailable)

// ErrTooManyBuilds is Document's answer when the bundle's build would take
// more memory than the builds running may hold (Options.MaxBuildMemory):
// its domain is not asked, and the actor peeks again (an ErrNotReady).
var ErrTooManyBuilds = fmt.Errorf("%w: the hub builds as many documents as its memory for them allows", ErrNotReady)

// Document returns the document of a pending bundle, asking its domain for
// it if it is not stored yet. It returns nil and no error when the bundle's
// domain has no provider and nothing is stored. When the document is not
// ready before ctx ends it returns an error wrapping ErrNotReady (a
// domain.ErrUnavailable); the build goes on. A build that does not fit in
// Options.MaxBuildMemory is not started: ErrTooManyBuilds.
//
// A document is served only for the bundle it was built for (Identity): one
// stored under the id for another bundle (an earlier one under a freed id,
// whose build stored it late) is refused, removed while this bundle is
// pending, and built again.
func (s *Service) Document(ctx context.Context, bundle *messagehubv1.Bundle) (*Document, error) {
	key := Key{Recipient: bundle.GetRecipient(), BundleID: bundle.GetId(), Bundle: Identity(bundle)}
	doc, err := s.opts.Store.Open(ctx, key)
	if err == nil && doc.Bundle != key.Bundle {
		_ = doc.Body.Close()
		err = s.discard(ctx, key, bundle)
		if err == nil {
			err = ErrNotStored
		}
	}
	if !errors.Is(err, ErrNotStored) {
		return doc, err
	}
	provider := s.opts.Providers[domain.Origin(bundle.GetOrigin())]
	if provider == nil {
		return nil, nil
	}
	b, err := s.start(key, bundle, provider)
	if err != nil {
		return nil, err
	}
	select {
	case <-b.done:
		if b.err != nil {
			return nil, b.err
		}
		doc, err := s.opts.Store.Open(ctx, key)
		if err == nil && doc.Bundle != key.Bundle {
			// Another bundle's document came back under the id: the next
			// peek removes it and builds this one's.
			_ = doc.Body.Close()
			return nil, fmt.Errorf("%w yet for bundle %s: the document under its id is another bundle's; peek again", ErrNotReady, key.BundleID)
		}
		return doc, err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w yet for bundle %s; peek again", ErrNotReady, key.BundleID)
	}
}

// start returns the build of key, starting one if none is running and it
// fits in the builds' memory.
func (s *Service) start(key Key, bundle *messagehubv1.Bundle, provider messagehubv1.BundleContentProviderClient) (*build, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.building[key]; ok {
		select {
		case b.asked <- struct{}{}:
		default: // already asked
		}
		return b, nil
	}
	held, attempt := s.buildWeight(bundle)
	if !s.memory.TryAcquire(held + attempt) { // its first attempt starts at once
		if ok, suppressed := s.refusals.Allow(time.Now()); ok {
			s.opts.Logger.Warn("document build refused: the builds running take all the memory allowed them; actors peek again",
				"limit_bytes", s.opts.MaxBuildMemory, "build_bytes", held+attempt, "suppressed_since_last", suppressed)
		}
		return nil, fmt.Errorf("%w (%.1fMiB); the domain was not asked for bundle %s: peek again shortly",
			ErrTooManyBuilds, float64(s.opts.MaxBuildMemory)/(1<<20), key.BundleID)
	}
	b := &build{done: make(chan struct{}), asked: make(chan struct{}, 1)}
	s.building[key] = b
	bundle = proto.CloneOf(bundle) // the caller may reuse its message
	s.wg.Go(func() {
		b.err = s.run(key, bundle, provider, b.asked, attempt)
		s.mu.Lock()
		delete(s.building, key)
		s.mu.Unlock()
		s.memory.Release(held)
		close(b.done)
	})
	return b, nil
}

// buildWeight is what a build of bundle counts against the builds' memory:
// held from its start to its end, its copy of the bundle (about its size
// on the wire: up to about 59 MB at the highest bundle weight limit) and
// the request's encoding as it is sent (as much again); and while an
// attempt runs, the provider's largest chunk. A build waiting out a
// backoff holds no chunk, so that the builds of a domain that is down take
// only their bundles' room. The request's room is held throughout: a retry
// then needs no more than a new build's start, so retries of large bundles
// are not left out by starts of small ones. A build heavier than the whole
// budget takes all of it, so that it runs when no other does.
func (s *Service) buildWeight(bundle *messagehubv1.Bundle) (held, attempt int64) {
	held = min(2*int64(proto.Size(bundle)), s.opts.MaxBuildMemory)
	return held, min(MaxProviderChunkBytes, s.opts.MaxBuildMemory-held)
}

// errNoRoom is a retry of a build that the builds' memory has no room for
// yet: the build waits for its next retry, as after a failed attempt.
var errNoRoom = errors.New("no room in the builds' memory for an attempt yet")

// run asks the provider until the document is stored, the bundle is no
// longer pending, or the service closes, backing off between attempts; a
// peek (asked) during a backoff ends it. Each attempt holds room in the
// builds' memory (attempt bytes, taken for the first by start) and gives
// it back as it ends; a retry that finds no room waits for the next.
func (s *Service) run(key Key, bundle *messagehubv1.Bundle, provider messagehubv1.BundleContentProviderClient, asked <-chan struct{}, attempt int64) error {
	log := s.opts.Logger.With("recipient", key.Recipient, "bundle", key.BundleID, "origin", bundle.GetOrigin().String())
	pause := s.opts.RetryMin
	waitingFor := "" // the other holder this build last said it waits for
	failures := 0    // attempts of this build that failed
	room := true     // holding the attempt's bytes
	giveBack := func() {
		if room {
			s.memory.Release(attempt)
			room = false
		}
	}
	defer giveBack()
	for {
		var holder string
		var until time.Time
		err := errNoRoom
		taken := time.Now() // the lease, when taken, lasts from no earlier
		if room = room || s.memory.TryAcquire(attempt); room {
			holder, until, err = s.acquire(key)
		}
		switch {
		case errors.Is(err, errNoRoom):
			log.Debug("no room in the builds' memory to ask the domain again; waiting for the next retry", "retry_in", pause)
		case err == nil && holder != s.holder:
			// Another instance asks the domain: wait for its document, as
			// often as a first attempt would be retried, and take the build
			// over once its lease expires.
			if s.stored(key) {
				return nil
			}
			if holder != "" && holder != waitingFor {
				log.Info("waiting for another instance's build of the bundle's document", "holder", holder, "until", until)
				waitingFor = holder
			}
			pause = s.opts.RetryMin
		case err == nil:
			err = s.attempt(key, bundle, provider, taken, log)
			giveBack() // keep may back off: without the answer's room
			if err == nil {
				if failures > 0 {
					log.Info("bundle document built after failed attempts", "attempts", failures+1)
				}
				return s.keep(key, bundle, log)
			}
		}
		giveBack()
		if s.ctx.Err() != nil {
			return fmt.Errorf("%w: shutting down", domain.ErrUnavailable)
		}
		if err != nil && !errors.Is(err, errNoRoom) {
			// Every peek during the backoff asks again: the first failure of
			// a build is the warning, the rest would repeat it per peek.
			failures++
			level := slog.LevelWarn
			if failures > 1 {
				level = slog.LevelDebug
			}
			log.Log(s.ctx, level, "bundle document not built; trying again (further failures of this build at debug)",
				"error", err, "retry_in", pause, "attempt", failures)
		}

		// Only a peek during this wait cuts it short, not one that came
		// while the last attempt ran.
		select {
		case <-asked:
		default:
		}
		backoff := err != nil && s.opts.Metrics != nil
		if backoff {
			s.opts.Metrics.RecordBuildBackoff(s.ctx, 1)
		}
		// Full jitter, so that many bundles failing at once do not retry in step.
		select {
		case <-s.ctx.Done():
		case <-asked:
		case <-time.After(pause/2 + rand.N(pause/2+1)):
		}
		if backoff {
			s.opts.Metrics.RecordBuildBackoff(context.WithoutCancel(s.ctx), -1)
		}
		if s.ctx.Err() != nil {
			return fmt.Errorf("%w: shutting down", domain.ErrUnavailable)
		}
		pause = min(2*pause, s.opts.RetryMax)

		pending, err := s.holds(s.ctx, key, bundle)
		if err == nil && !pending {
			log.Info("bundle no longer pending; its document is no longer asked for")
			return fmt.Errorf("%w: bundle %s is no longer pending", domain.ErrNotFound, key.BundleID)
		}
	}
}

// keep checks that the bundle whose document was just stored is still
// pending: the very bundle (Options.Holds), not a later one that took its
// id. An operator's release removes the document before the bundle is
// released, so one stored after that (the domain answered late) is removed
// here: nothing serves the document of a bundle that is not pending, and a
// released or dequeued record may leave (Cosmos DB's ttl, retention),
// freeing the id for a later bundle, which must not find this document
// under it.
//
// The document's version (and the bundle it names) is read before the
// check, and only that version, when it is this bundle's, is removed:
// while keep waits, the release's own removal or retention may take this
// document, the id may be freed and a later bundle under it may store its
// document, through another instance or this one (a build is the
// bundle's, so the later bundle's runs beside this one); that document is
// another version naming another bundle, and stays.
//
// A check that fails is made again, backing off as attempts do: taken for
// "pending", it would keep the document of a bundle released meanwhile. A
// shutdown leaves the document stored.
func (s *Service) keep(key Key, bundle *messagehubv1.Bundle, log *slog.Logger) error {
	pause := s.opts.RetryMin
	var version string // "": nothing of this bundle's stored
	for {
		v, err := s.versionOf(s.ctx, key)
		var pending bool
		if err == nil {
			pending, err = s.holds(s.ctx, key, bundle)
		}
		if err == nil && pending {
			return nil
		}
		if err == nil {
			version = v
			break
		}
		log.Debug("checking that a bundle whose document was stored is still pending failed; trying again", "error", err, "retry_in", pause)
		select {
		case <-s.ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, s.opts.RetryMax)
	}
	notPending := fmt.Errorf("%w: bundle %s is no longer pending", domain.ErrNotFound, key.BundleID)
	if version == "" {
		return notPending // removed already
	}
	// Removed until it is gone, as the check is made: nothing else removes
	// a released bundle's document on Cosmos DB.
	pause = s.opts.RetryMin
	for failures := 0; ; failures++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
		err := s.opts.Store.DeleteVersion(ctx, key, version)
		cancel()
		if err == nil {
			return notPending
		}
		if failures == 0 {
			log.Warn("removing the document of a bundle no longer pending failed; trying again", "error", err)
		}
		select {
		case <-s.ctx.Done():
			log.Warn("the document of a bundle no longer pending stays stored: shutting down", "error", err)
			return notPending
		case <-time.After(pause):
		}
		pause = min(2*pause, s.opts.RetryMax)
	}
}

// holds says whether the bundle pending under key's id is bundle itself
// (Options.Holds), or any bundle when the Service has no Holds.
func (s *Service) holds(ctx context.Context, key Key, bundle *messagehubv1.Bundle) (bool, error) {
	if s.opts.Holds == nil {
		if s.opts.Pending == nil {
			return false, errors.New("no check of whether a bundle is pending is configured")
		}
		return s.opts.Pending(ctx, key.Recipient, key.BundleID)
	}
	return s.opts.Holds(ctx, key.Recipient, key.BundleID, bundle.GetNotificationIds())
}

// versionOf returns the version of the document stored under key's id if
// it is the one of key's bundle, else "".
func (s *Service) versionOf(ctx context.Context, key Key) (string, error) {
	v, bundle, err := s.opts.Store.Stored(ctx, key)
	if errors.Is(err, ErrNotStored) || (err == nil && bundle != key.Bundle) {
		return "", nil
	}
	return v, err
}

// discard removes the document stored under key's id when it is another
// bundle's (or names none), but only while bundle is the one pending under
// the id: then no other bundle holds the id, and the document is a
// leftover nothing serves. Only the version looked at goes.
func (s *Service) discard(ctx context.Context, key Key, bundle *messagehubv1.Bundle) error {
	v, stored, err := s.opts.Store.Stored(ctx, key)
	if errors.Is(err, ErrNotStored) || (err == nil && stored == key.Bundle) {
		return nil
	}
	if err != nil {
		return err
	}
	held, err := s.holds(ctx, key, bundle)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w: bundle %s is no longer pending", domain.ErrNotFound, key.BundleID)
	}
	s.opts.Logger.Info("the document stored under a pending bundle's id was built for another bundle (an earlier one under the id, or it names none); it is removed and built again",
		"recipient", key.Recipient, "bundle", key.BundleID)
	return s.opts.Store.DeleteVersion(ctx, key, v)
}

// acquire takes the bundle's lease and returns who holds it and until when;
// without a Lease this Service is the only one to ask. Once this Service
// holds it, the attempt that follows releases it (release).
func (s *Service) acquire(key Key) (holder string, until time.Time, err error) {
	if s.opts.Lease == nil {
		return s.holder, time.Time{}, nil
	}
	s.withLease(key, func(l *idLease) {
		holder, until, err = s.opts.Lease.AcquireBuild(s.ctx, key.Recipient, key.BundleID, s.holder, s.opts.LeaseDuration)
		if err == nil && holder == s.holder {
			l.holding++
		}
	})
	return holder, until, err
}

// release gives up an attempt's hold of the bundle's lease, and the lease
// itself when no other attempt here holds it.
func (s *Service) release(key Key, log *slog.Logger) {
	s.withLease(key, func(l *idLease) {
		if l.holding--; l.holding > 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
		defer cancel()
		if err := s.opts.Lease.ReleaseBuild(ctx, key.Recipient, key.BundleID, s.holder); err != nil {
			log.Warn("releasing a bundle's lease failed; it expires by itself", "error", err)
		}
	})
}

// withLease runs f on this Service's share of the lease of key's bundle
// id, alone among the takes and releases of that id's lease.
func (s *Service) withLease(key Key, f func(*idLease)) {
	id := Key{Recipient: key.Recipient, BundleID: key.BundleID}
	s.mu.Lock()
	l := s.leases[id]
	if l == nil {
		l = &idLease{}
		s.leases[id] = l
	}
	l.users++
	s.mu.Unlock()

	l.mu.Lock()
	f(l)
	l.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if l.users--; l.users == 0 {
		l.mu.Lock() // free: only users take it
		if l.holding == 0 {
			delete(s.leases, id)
		}
		l.mu.Unlock()
	}
}

// stored reports whether the document of key's bundle is stored.
func (s *Service) stored(key Key) bool {
	_, bundle, err := s.opts.Store.Stored(s.ctx, key)
	return err == nil && bundle == key.Bundle
}

// attempt asks the provider once, holding the lease (if any) taken when
// taken was: it renews the lease while the provider answers, stops asking
// if the lease is lost, and releases it at the end, however it ends.
func (s *Service) attempt(key Key, bundle *messagehubv1.Bundle, provider messagehubv1.BundleContentProviderClient, taken time.Time, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.AttemptTimeout)
	defer cancel()
	if s.opts.Lease != nil {
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			s.renew(ctx, cancel, key, taken, log)
		}()
		defer func() {
			cancel()
			<-renewed
			s.release(key, log)
		}()
		// The holder before us may have stored the document just before we
		// took its expired or released lease.
		if s.stored(key) {
			return nil
		}
	}
	// Another bundle's document under the id would stand in the way of
	// this one's (a document is never replaced).
	if err := s.discard(ctx, key, bundle); err != nil {
		return err
	}
	start := time.Now()
	size, err := fetch(ctx, provider, s.opts.Store, key, bundle)
	if s.opts.Metrics != nil {
		outcome := "ok"
		switch {
		case errors.Is(err, errProvider):
			outcome = "invalid"
		case errors.Is(err, errNotStored):
			outcome = "not_stored"
		case err != nil:
			outcome = "error"
		}
		s.opts.Metrics.RecordProviderCall(s.ctx, bundle.GetOrigin().String(), outcome, time.Since(start), size)
	}
	if err == nil {
		log.Debug("bundle document stored", "bytes", size)
	}
	return err
}

// renew keeps the lease, taken when taken was, until ctx ends. A lease
// found taken cancels the attempt, whose document (if any) the store keeps
// from replacing another; so does a lease not renewed while a third of it
// is left (the store failing): it may expire unrenewed, and another
// instance that takes it then asks the domain too. A lease lasts from no
// earlier than its take or renewal was sent, so that is when it counts from.
func (s *Service) renew(ctx context.Context, cancel context.CancelFunc, key Key, taken time.Time, log *slog.Logger) {
	d := s.opts.LeaseDuration
	stopAt := taken.Add(d - d/3)
	wait := d / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(wait, time.Until(stopAt))):
		}
		sent := time.Now()
		rctx, rcancel := context.WithDeadline(ctx, stopAt)
		holder, _, err := s.opts.Lease.AcquireBuild(rctx, key.Recipient, key.BundleID, s.holder, d)
		rcancel()
		switch {
		case err == nil && holder != s.holder:
			log.Warn("a bundle's lease was taken over while its domain was asked; this attempt stops", "holder", holder)
			cancel()
			return
		case err == nil:
			stopAt, wait = sent.Add(d-d/3), d/3
		case ctx.Err() != nil:
			return
		case !time.Now().Before(stopAt):
			log.Warn("a bundle's lease could not be renewed while its domain was asked; this attempt stops before the lease can expire and another instance ask the domain too", "error", err)
			cancel()
			return
		default:
			wait = d / 12 // a failed renewal is tried again sooner
		}
	}
}

// Forget returns what retention and an operator's release call
// (hub.Options.ForgetBundles) to remove the documents of the recipient's
// bundles. A document goes only as it was stored before asRead confirmed
// that the bundles under the ids are still as the caller read them
// (retention: the records it read; a release: the bundle pending, then
// none): a caller that read a bundle, then stalled while the bundle went,
// its id was freed and a later bundle under it stored its own document,
// finds that out and removes nothing; and a document stored again after
// the confirmation is another version, which DeleteVersion leaves alone.
// So a later bundle's document is never removed, and its domain is not
// asked for it again. A nil asRead is refused, removing nothing.
func Forget(store Store) func(ctx context.Context, recipient string, bundleIDs []string, asRead func(context.Context) error) error {
	return func(ctx context.Context, recipient string, bundleIDs []string, asRead func(context.Context) error) error {
		if asRead == nil {
			return errors.New("removing bundles' documents without a check that the bundles are as read: nothing removed")
		}
		versions := make(map[string]string, len(bundleIDs))
		for _, id := range bundleIDs {
			v, err := store.Version(ctx, Key{Recipient: recipient, BundleID: id})
			switch {
			case errors.Is(err, ErrNotStored):
			case err != nil:
				return fmt.Errorf("reading the document of bundle %s: %w", id, err)
			default:
				versions[id] = v
			}
		}
		if len(versions) == 0 {
			return nil // nothing stored: no need to ask whose it is
		}
		if err := asRead(ctx); err != nil {
			return err
		}
		for _, id := range bundleIDs {
			v, ok := versions[id]
			if !ok {
				continue
			}
			if err := store.DeleteVersion(ctx, Key{Recipient: recipient, BundleID: id}, v); err != nil {
				return fmt.Errorf("removing the document of bundle %s: %w", id, err)
			}
		}
		return nil
	}
}
