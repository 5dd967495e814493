// Command market-actor is an example market actor: over plain HTTP it peeks
// its next bundle, fetches the data, and dequeues the bundle, with nothing
// but the standard library.
//
//	go run ./examples/market-actor --hub http://127.0.0.1:8080 --recipient <actor UUID>
//
// What a careful actor does:
//   - 200: a bundle. Its id is in the MessageId header. Fetch its data
//     (GET /v1/peek/content answers the bundle's document), store it, and only
//     then dequeue it. A 503 there has Retry-After: the document is being made.
//     A document cut short (a dropped connection) is fetched again: every
//     content peek of the pending bundle answers the same bytes. Write it
//     to a temporary file and rename it only once it is whole and synced.
//   - 204: nothing to deliver now. Peek with ?wait=20s (--wait): the hub holds
//     the peek until a bundle is saved for the actor or the wait is over, so
//     after a 204 peek again at once. Without a wait, back off (up to a
//     bound) and peek again.
//   - 404 on dequeue after a dequeue whose answer was lost (a timeout, a
//     dropped connection): the first dequeue went through. Carry on.
//   - 429/503: the hub is busy or stopping: back off, at least the
//     Retry-After it asks for, and retry the same call.
//
// A peek before the dequeue returns the same bundle again, so a crash
// between fetching and dequeuing loses nothing.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	hub := flag.String("hub", "http://127.0.0.1:8080", "the hub's HTTP gateway")
	recipient := flag.String("recipient", "", "this actor's id (a UUID); leave empty with --token-file: the token says who you are")
	tokenFile := flag.String("token-file", "", "file of this actor's bearer token, read at every call so that a token renewed in place is used (see make dev-tokens)")
	maxBundles := flag.Int("bundles", 100, "stop after this many bundles")
	idle := flag.Duration("idle", 2*time.Second, "stop after finding nothing for this long")
	timeout := flag.Duration("timeout", time.Minute, "how long the whole run may take")
	out := flag.String("out", "", "folder to write each bundle's document into (empty: fetched and dropped)")
	wait := flag.Duration("wait", 20*time.Second, "how long each peek may wait for a bundle (at most 30s; 0: answer at once and back off)")
	flag.Parse()
	a, err := newActor(*hub, *recipient, *tokenFile, *out, *wait)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	n, notes, err := a.run(ctx, *maxBundles, *idle)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "market-actor:", err)
		os.Exit(1)
	}
	fmt.Printf("dequeued %d bundles with %d notifications\n", n, notes)
}

// newActor is the actor of the flags: tokenFile may be empty (no token).
func newActor(hub, recipient, tokenFile, out string, wait time.Duration) (*actor, error) {
	// A call may take its wait and then the answer's own time.
	a := &actor{hub: strings.TrimSuffix(hub, "/"), recipient: recipient, out: out, wait: wait,
		web: newWeb(wait + 30*time.Second)}
	if tokenFile != "" {
		// Read now too, so that a missing or empty file is said at once.
		if _, err := readToken(tokenFile); err != nil {
			return nil, err
		}
		a.tokenFile = tokenFile
	}
	return a, nil
}

// newWeb is the actor's HTTP client: an answer's headers must come within
// answerTimeout. Its body is not bounded in time, only against stalling
// (actor.stall): a document of tens of MiB over a slow link takes minutes,
// and a bound on the whole answer would cut it off at every attempt.
func newWeb(answerTimeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = answerTimeout
	return &http.Client{Transport: t}
}

// defaultStall is how long an answer's body may send nothing before the
// call is given up on (and, for a document, asked again).
const defaultStall = 30 * time.Second

// stallGuard cancels its call when its body has sent nothing for stall.
type stallGuard struct {
	body    io.ReadCloser
	stall   time.Duration
	timer   *time.Timer
	stalled atomic.Bool
	cancel  context.CancelFunc
}

func guardStall(resp *http.Response, stall time.Duration, cancel context.CancelFunc) {
	g := &stallGuard{body: resp.Body, stall: stall, cancel: cancel}
	g.timer = time.AfterFunc(stall, func() {
		g.stalled.Store(true)
		cancel()
	})
	resp.Body = g
}

func (g *stallGuard) Read(p []byte) (int, error) {
	n, err := g.body.Read(p)
	if n > 0 {
		g.timer.Reset(g.stall)
	}
	if err != nil && !errors.Is(err, io.EOF) && g.stalled.Load() {
		err = fmt.Errorf("the answer sent nothing for %s: %w", g.stall, err)
	}
	return n, err
}

func (g *stallGuard) Close() error {
	g.timer.Stop()
	err := g.body.Close()
	g.cancel()
	return err
}

// readToken reads a bearer token from file. It is read at every call, so
// that a token renewed in place (a mounted secret, a projected
// service-account token) is used from the next call on, never an expired
// one read at the start.
func readToken(file string) (string, error) {
	data, err := os.ReadFile(file) //nolint:gosec // the operator names the file
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("token file %s is empty", file)
	}
	return token, nil
}

// readTokenWithin is readToken on a goroutine of its own, given up on when
// ctx ends: a read that does not end (the file on a network file system
// whose server stopped answering) holds the run no longer than --timeout,
// and the process ends the read when it exits.
func readTokenWithin(ctx context.Context, file string) (string, error) {
	type read struct {
		token string
		err   error
	}
	done := make(chan read, 1)
	go func() {
		token, err := readToken(file)
		done <- read{token, err}
	}()
	select {
	case r := <-done:
		return r.token, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("token file %s not read: %w", file, ctx.Err())
	}
}

type actor struct {
	hub, recipient string
	tokenFile      string        // the bearer token's file, read at every call; empty: no token
	out            string        // folder the documents are written to; empty: read and dropped
	wait           time.Duration // how long a peek may wait for a bundle (?wait=)
	web            *http.Client
	stall          time.Duration // how long an answer's body may send nothing; zero: defaultStall
}

// bundle is the part of a peeked bundle this actor uses.
type bundle struct {
	ID              string   `json:"id"`
	NotificationIDs []string `json:"notificationIds"`
}

// run peeks, fetches and dequeues until maxBundles are done or nothing has
// come for idle.
func (a *actor) run(ctx context.Context, maxBundles int, idle time.Duration) (bundles, notifications int, err error) {
	const minWait, maxWait = 100 * time.Millisecond, 5 * time.Second
	wait := minWait
	quietSince := time.Now()
	for bundles < maxBundles {
		// The wait never runs past the idle bound.
		peekWait := max(min(a.wait, idle-time.Since(quietSince)), 0)
		asked := time.Now()
		b, err := a.peek(ctx, peekWait)
		if err != nil {
			return bundles, notifications, err
		}
		if b == nil { // 204
			if time.Since(quietSince) >= idle {
				return bundles, notifications, nil
			}
			if peekWait > 0 && time.Since(asked) >= peekWait {
				continue // the hub waited: peek again at once
			}
			// No wait, or a hub that did not wait (one shutting down, or
			// one without long polls): back off, up to a bound.
			if err := sleep(ctx, wait); err != nil {
				return bundles, notifications, err
			}
			wait = min(2*wait, maxWait)
			continue
		}
		wait, quietSince = minWait, time.Now()
		// Fetch the data and store it durably before dequeuing: a crash
		// in between peeks the same bundle again.
		if err := a.fetch(ctx, b.ID); err != nil {
			return bundles, notifications, err
		}
		if err := a.dequeue(ctx, b.ID); err != nil {
			return bundles, notifications, err
		}
		bundles, notifications = bundles+1, notifications+len(b.NotificationIDs)
	}
	return bundles, notifications, nil
}

// attempts bounds the tries of one call that found the hub busy or got no
// answer.
const attempts = 5

// peek returns the next bundle, or nil on 204 (after the hub waited up to
// wait for one). A peek changes nothing, so a busy hub (429, 503) or a lost
// answer is simply asked again.
func (a *actor) peek(ctx context.Context, wait time.Duration) (*bundle, error) {
	for attempt := 1; ; attempt++ {
		b, retryAfter, retry, err := a.peekOnce(ctx, wait)
		if !retry || attempt == attempts {
			return b, err
		}
		if err := sleep(ctx, max(backoff(attempt), retryAfter)); err != nil {
			return nil, err
		}
	}
}

// peekOnce peeks once; retry says whether asking again may help, and
// retryAfter is the pause the hub asked for (zero if none).
func (a *actor) peekOnce(ctx context.Context, wait time.Duration) (b *bundle, retryAfter time.Duration, retry bool, err error) {
	query := url.Values{}
	if wait > 0 {
		query.Set("wait", wait.Round(time.Millisecond).String())
	}
	resp, err := a.call(ctx, http.MethodGet, "/v1/peek", query)
	if err != nil {
		return nil, 0, ctx.Err() == nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, 0, false, nil
	case http.StatusOK:
		b = new(bundle)
		if err := json.NewDecoder(resp.Body).Decode(b); err != nil {
			return nil, 0, true, err
		}
		if id := resp.Header.Get("MessageId"); id != b.ID {
			return nil, 0, false, fmt.Errorf("MessageId %q is not the bundle's id %q", id, b.ID)
		}
		return b, 0, false, nil
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return nil, retryAfterOf(resp), true, statusError(resp)
	default:
		return nil, 0, false, statusError(resp)
	}
}

// fetch gets the document of the pending bundle (GET /v1/peek/content: the
// domain's document, or the bundle itself when the domain has none) and
// writes it to the out folder, if any. The hub answers 503 with Retry-After
// while the domain is still building the document.
func (a *actor) fetch(ctx context.Context, bundleID string) error {
	for attempt := 1; ; attempt++ {
		resp, err := a.call(ctx, http.MethodGet, "/v1/peek/content", nil)
		if err != nil {
			if attempt == attempts || ctx.Err() != nil {
				return err
			}
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			continue
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			if id := resp.Header.Get("MessageId"); id != bundleID {
				_ = resp.Body.Close()
				return fmt.Errorf("the content peek answered bundle %q, not %q: is another poller dequeuing?", id, bundleID)
			}
			body := &bodyReader{r: resp.Body}
			err := a.store(bundleID, resp.Header.Get("Content-Type"), body)
			_ = resp.Body.Close()
			if err == nil || body.err == nil || attempt == attempts || ctx.Err() != nil {
				return err
			}
			// The answer was cut short (a dropped connection): every
			// content peek of the pending bundle answers the same bytes,
			// so ask again.
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		case (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) && attempt < attempts:
			wait := max(backoff(attempt), retryAfterOf(resp))
			_ = resp.Body.Close()
			if err := sleep(ctx, wait); err != nil {
				return err
			}
		default:
			err := statusError(resp)
			_ = resp.Body.Close()
			return err
		}
	}
}

// bodyReader remembers a failed read of an answer's body, so that a body
// cut short is told apart from a failed write of the document.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// store keeps a bundle's document: a real actor writes it to its own
// system, durably, before it dequeues. The document is written to a
// temporary file and renamed to the bundle's name only once it is whole
// and synced, and the folder is synced after the rename, so the bundle's
// name never holds part of a document (an answer cut short, a crash while
// writing) and a dequeued bundle's document survives a crash.
func (a *actor) store(bundleID, mediaType string, body io.Reader) error {
	if a.out == "" {
		_, err := io.Copy(io.Discard, body)
		return err
	}
	f, err := os.CreateTemp(a.out, "."+bundleID+"-*.part")
	if err != nil {
		return err
	}
	if err := writeSynced(f, body); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(a.out, bundleID+extensionOf(mediaType))); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return syncDir(a.out)
}

// writeSynced copies body into f, syncs and closes it.
func writeSynced(f *os.File, body io.Reader) error {
	_, err := io.Copy(f, body)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // the folder the operator gave
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func extensionOf(mediaType string) string {
	switch {
	case strings.Contains(mediaType, "json"):
		return ".json"
	case strings.Contains(mediaType, "xml"):
		return ".xml"
	default:
		return ""
	}
}

// dequeue retries a dequeue whose answer was lost; a 404 after such a
// retry means the first one went through. An attempt that was never sent
// explains no 404.
func (a *actor) dequeue(ctx context.Context, bundleID string) error {
	lost := false
	for attempt := 1; ; attempt++ {
		resp, err := a.call(ctx, http.MethodDelete, "/v1/dequeue/"+url.PathEscape(bundleID), nil)
		if err != nil { // no answer: if it was sent, the dequeue may have happened
			if attempt == attempts || ctx.Err() != nil {
				return err
			}
			lost = lost || !errors.Is(err, errNotSent)
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			continue
		}
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode == http.StatusNotFound && lost:
			return nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && attempt < attempts:
			// A 503 may come from a proxy after the hub did the work.
			lost = true
			if err := sleep(ctx, max(backoff(attempt), retryAfterOf(resp))); err != nil {
				return err
			}
		default:
			return statusError(resp)
		}
	}
}

// retryAfterOf is the pause a busy answer (429, 503) asks for in its
// Retry-After header, in seconds; zero if it asks for none.
func retryAfterOf(resp *http.Response) time.Duration {
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// backoff is the pause before the next try: exponential from 200 ms, with
// jitter so that many actors do not retry in step.
func backoff(attempt int) time.Duration {
	d := 200 * time.Millisecond << (attempt - 1)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d, or less if ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errNotSent marks a call that failed before its request was written (a
// connection refused, a token file that cannot be read): the hub never
// had it, so it changed nothing.
var errNotSent = errors.New("request not sent")

// call makes one request; a body that sends nothing for the stall bound
// ends it (guardStall).
func (a *actor) call(ctx context.Context, method, path string, query url.Values) (*http.Response, error) {
	if query == nil {
		query = url.Values{}
	}
	if a.recipient != "" {
		query.Set("recipient", a.recipient)
	}
	u := a.hub + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	ctx, cancel := context.WithCancel(ctx)
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	if a.tokenFile != "" {
		token, err := readTokenWithin(ctx, a.tokenFile)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := a.web.Do(req)
	if err != nil {
		cancel()
		if !wrote.Load() {
			err = fmt.Errorf("%w: %w", errNotSent, err)
		}
		return nil, err
	}
	guardStall(resp, cmp.Or(a.stall, defaultStall), cancel)
	return resp, nil
}

func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return errors.New(resp.Status + ": " + strings.TrimSpace(string(body)))
}
