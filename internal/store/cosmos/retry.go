package cosmos

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// retrying resends requests that failed in transit or were answered 408,
// 449 (RetryWith: a write refused, not applied), 500, 502, 503 or 504. The SDK retries 429s itself (after
// x-ms-retry-after-ms) but not these. Every request this store sends is safe
// to repeat: reads and queries, creates (a repeat is a 409), writes
// conditional on an etag (a repeat is a 412) and deletes; a repeat can only
// show up as a conflict, which the algorithm resolves by reloading.
type retrying struct {
	next     policy.Transporter
	attempts int
	backoff  time.Duration
}

func (r retrying) Do(req *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := r.next.Do(req)
		if attempt >= r.attempts || !transient(resp, err) || req.Context().Err() != nil {
			return resp, err
		}
		if req.Body != nil && req.GetBody == nil {
			return resp, err // cannot resend the body
		}
		if resp != nil && resp.Body != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, berr
			}
			req.Body = body
		}
		pause := r.backoff<<(attempt-1) + time.Duration(rand.Int64N(int64(r.backoff)))
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(pause):
		}
	}
}

func transient(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, statusRetryWith, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// pause waits before attempt+1 of a contention loop: a random time up to
// 2 ms doubled per attempt, at most 500 ms, so that losers of a race spread
// out instead of spending request units on 412s. It reports false when ctx
// ended first.
func pause(ctx context.Context, attempt int) bool {
	ceiling := min(2*time.Millisecond<<min(attempt, 10), 500*time.Millisecond)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond):
		return true
	}
}
