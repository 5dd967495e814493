package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/internal/server"
)

// waitParam is a peek's long poll over HTTP: a Go duration such as 20s, which
// the gateway turns into PeekRequest.wait_ms. The field's own names are
// refused, so that HTTP has the one spelling its documents name.
const waitParam = "wait"

// takeWait removes the wait from q and returns it in milliseconds (0 when
// absent).
func takeWait(q url.Values) (uint32, error) {
	for _, name := range []string{"waitMs", "wait_ms"} {
		if q.Has(name) {
			return 0, fmt.Errorf("unknown query parameter %q: a peek's wait is %s=<duration>, e.g. %s=20s", name, waitParam, waitParam)
		}
	}
	if !q.Has(waitParam) {
		return 0, nil
	}
	values := q[waitParam]
	q.Del(waitParam)
	if len(values) != 1 {
		return 0, fmt.Errorf("query parameter %q given %d times", waitParam, len(values))
	}
	d, err := time.ParseDuration(values[0])
	if err != nil {
		return 0, fmt.Errorf("query parameter %q: %q is not a duration such as 20s or 1500ms", waitParam, values[0])
	}
	if d < 0 || d > server.MaxWait {
		return 0, fmt.Errorf("query parameter %q: %s is not between 0s and the most a peek may wait, %s", waitParam, d, server.MaxWait)
	}
	return uint32(d.Milliseconds()), nil //nolint:gosec // at most 30,000
}

// peekWait serves a peek route with its wait turned into wait_ms; a bad wait,
// or a malformed query, is 400.
func peekWait(mux *runtime.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Not r.URL.Query, which leaves a malformed pair out: the query is
		// re-encoded for grpc-gateway, which would then not see it, and a
		// peek of one group whose group is spoilt would peek every group.
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(mux, w, r, http.StatusBadRequest, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		if !q.Has(waitParam) && !q.Has("waitMs") && !q.Has("wait_ms") {
			next.ServeHTTP(w, r)
			return
		}
		ms, err := takeWait(q)
		if err != nil {
			writeError(mux, w, r, http.StatusBadRequest, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		q.Set("waitMs", strconv.FormatUint(uint64(ms), 10))
		r = r.Clone(r.Context())
		r.URL.RawQuery = q.Encode()
		next.ServeHTTP(w, r)
	})
}
