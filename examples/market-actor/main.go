// Command market-actor is an example market actor: over plain HTTP it peeks
// its next bundle, fetches the data, and dequeues the bundle, with nothing
// but the standard library.
//
//	go run ./examples/market-actor --hub http://127.0.0.1:8080 --recipient <actor UUID>
//
// What a careful actor does:
//   - 200: a bundle. Its id is in the MessageId header. Fetch the data of its
//     notifications, store it, and only then dequeue it.
//   - 204: nothing to deliver now. Wait (back off, up to a bound) and peek again.
//   - 404 on dequeue after a dequeue whose answer was lost (a timeout, a
//     dropped connection): the first dequeue went through. Carry on.
//   - 429/503: the hub is busy or stopping: back off and retry the same call.
//
// A peek before the dequeue returns the same bundle again, so a crash
// between fetching and dequeuing loses nothing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	hub := flag.String("hub", "http://127.0.0.1:8080", "the hub's HTTP gateway")
	recipient := flag.String("recipient", "", "this actor's id (a UUID); leave empty with --token-file: the token says who you are")
	tokenFile := flag.String("token-file", "", "bearer token of this actor (see make dev-tokens)")
	maxBundles := flag.Int("bundles", 100, "stop after this many bundles")
	idle := flag.Duration("idle", 2*time.Second, "stop after finding nothing for this long")
	flag.Parse()
	a := &actor{hub: strings.TrimSuffix(*hub, "/"), recipient: *recipient, web: &http.Client{Timeout: 30 * time.Second}}
	if *tokenFile != "" {
		token, err := os.ReadFile(*tokenFile) //nolint:gosec // the operator names the file
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		a.token = strings.TrimSpace(string(token))
	}
	n, notes, err := a.run(context.Background(), *maxBundles, *idle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "market-actor:", err)
		os.Exit(1)
	}
	fmt.Printf("dequeued %d bundles with %d notifications\n", n, notes)
}

type actor struct {
	hub, recipient, token string
	web                   *http.Client
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
		b, err := a.peek(ctx)
		if err != nil {
			return bundles, notifications, err
		}
		if b == nil { // 204: back off, up to a bound
			if time.Since(quietSince) >= idle {
				return bundles, notifications, nil
			}
			time.Sleep(wait)
			wait = min(2*wait, maxWait)
			continue
		}
		wait, quietSince = minWait, time.Now()
		// Here a real actor fetches the data of b.NotificationIDs and stores
		// it durably before dequeuing.
		if err := a.dequeue(ctx, b.ID); err != nil {
			return bundles, notifications, err
		}
		bundles, notifications = bundles+1, notifications+len(b.NotificationIDs)
	}
	return bundles, notifications, nil
}

func (a *actor) peek(ctx context.Context) (*bundle, error) {
	resp, err := a.call(ctx, http.MethodGet, "/v1/peek")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, nil
	case http.StatusOK:
		var b bundle
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
			return nil, err
		}
		if id := resp.Header.Get("MessageId"); id != b.ID {
			return nil, fmt.Errorf("MessageId %q is not the bundle's id %q", id, b.ID)
		}
		return &b, nil
	default:
		return nil, statusError(resp)
	}
}

// dequeue retries a dequeue whose answer was lost; a 404 after such a
// retry means the first one went through.
func (a *actor) dequeue(ctx context.Context, bundleID string) error {
	lost := false
	for attempt := 1; ; attempt++ {
		resp, err := a.call(ctx, http.MethodDelete, "/v1/dequeue/"+url.PathEscape(bundleID))
		if err != nil { // no answer: the dequeue may or may not have happened
			if attempt == 5 {
				return err
			}
			lost = true
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
			continue
		}
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode == http.StatusNotFound && lost:
			return nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && attempt < 5:
			lost = true
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		default:
			return statusError(resp)
		}
	}
}

func (a *actor) call(ctx context.Context, method, path string) (*http.Response, error) {
	u := a.hub + path
	if a.recipient != "" {
		u += "?recipient=" + url.QueryEscape(a.recipient)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	return a.web.Do(req)
}

func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return errors.New(resp.Status + ": " + strings.TrimSpace(string(body)))
}
