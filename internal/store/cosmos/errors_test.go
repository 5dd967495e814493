package cosmos

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

func answered(status int) error { return answeredSub(status, 0) }

// answeredSub is an answer with x-ms-substatus sub, to a request of the
// saves container.
func answeredSub(status, sub int) error {
	req, _ := http.NewRequest(http.MethodGet, "http://cosmos/dbs/d/colls/saves/docs/x", nil)
	h := http.Header{}
	if sub != 0 {
		h.Set("x-ms-substatus", fmt.Sprint(sub))
	}
	return &azcore.ResponseError{StatusCode: status, RawResponse: &http.Response{StatusCode: status, Header: h, Request: req}}
}

// kind is what the repository makes of an error.
type kind int

const (
	plain kind = iota // neither: a failure it passes on
	conflict
	unavailable
	tooLargeKind
	storageFull
	refused
)

func kindOf(err error) kind {
	switch {
	case errors.Is(err, store.ErrConflict) && errors.Is(err, domain.ErrUnavailable):
		return -1 // both: never right
	case errors.Is(err, store.ErrConflict):
		return conflict
	case errors.Is(err, domain.ErrUnavailable):
		return unavailable
	case errors.Is(err, store.ErrTooLarge):
		return tooLargeKind
	case errors.Is(err, domain.ErrStorageFull):
		return storageFull
	case errors.Is(err, domain.ErrStoreRefuses):
		return refused
	}
	return plain
}

// Every status the store meets maps to the error the repository acts on,
// and the SDK's error stays inside for callers that look at the status.
func TestStoreErrorMapsStatuses(t *testing.T) {
	cases := []struct {
		status, sub int
		want        kind
	}{
		{http.StatusNotFound, 0, conflict},
		{http.StatusConflict, 0, conflict},
		{http.StatusPreconditionFailed, 0, conflict},
		// A 404/1002 says no replica caught up yet, not that the item is
		// missing; a 449 is a write refused: neither is a conflict.
		{http.StatusNotFound, substatusReadSessionNotAvailable, unavailable},
		{statusRetryWith, 0, unavailable},
		{http.StatusTooManyRequests, 3200, unavailable},
		{http.StatusRequestTimeout, 0, unavailable},
		{http.StatusInternalServerError, 0, unavailable},
		{http.StatusBadGateway, 0, unavailable},
		{http.StatusServiceUnavailable, 0, unavailable},
		{http.StatusGatewayTimeout, 0, unavailable},
		// 410 after a split or a partition's move (1002 range gone, 1007
		// and 1008 completing them): the SDK retries it a few times only.
		{http.StatusGone, 1002, unavailable},
		{http.StatusGone, 1007, unavailable},
		{http.StatusBadRequest, 0, plain},
		{http.StatusUnauthorized, 0, plain},
		{http.StatusForbidden, substatusPartitionFull, storageFull},
		{http.StatusForbidden, 0, refused},
		{http.StatusForbidden, 5301, refused},
		{http.StatusRequestEntityTooLarge, 0, tooLargeKind},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.status, "/", c.sub), func(t *testing.T) {
			in := fmt.Errorf("read head: %w", answeredSub(c.status, c.sub))
			for what, got := range map[string]error{
				"request": storeError(in),
				"batch":   batchError(azcosmos.TransactionalBatchResponse{}, in),
			} {
				if k := kindOf(got); k != c.want {
					t.Fatalf("%s: %v is of kind %d, want %d", what, got, k, c.want)
				}
				if c.want == plain && got.Error() != in.Error() {
					t.Fatalf("%s: changed to %v, want it unchanged", what, got)
				}
				if (c.want == storageFull || c.want == refused) && !strings.Contains(got.Error(), "container saves") {
					t.Fatalf("%s: %v does not name the container", what, got)
				}
				if !isStatus(got, c.status) {
					t.Fatalf("%s: the status %d is lost in %v", what, c.status, got)
				}
			}
		})
	}
}

func TestStoreErrorLeavesOtherErrorsAlone(t *testing.T) {
	if storeError(nil) != nil {
		t.Fatal("nil mapped to an error")
	}
	ours := errors.New("an error of this code")
	if got := storeError(ours); !errors.Is(got, ours) || got.Error() != ours.Error() {
		t.Fatalf("an error that is no request's changed to %v", got)
	}
	// A request that got no answer may have applied: UNAVAILABLE, resent.
	if got := storeError(io.ErrUnexpectedEOF); !errors.Is(got, domain.ErrUnavailable) || !errors.Is(got, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut connection mapped to %v, want unavailable", got)
	}
	// Mapped once, never wrapped again.
	for _, err := range []error{answered(http.StatusPreconditionFailed), io.EOF} {
		once := storeError(err)
		if again := storeError(once); again.Error() != once.Error() {
			t.Fatalf("mapped twice: %v", again)
		}
	}
}

// A failed batch is mapped by the operation that made it fail: the first
// one not answering 424.
func TestBatchErrorMapsTheFailingOperation(t *testing.T) {
	batch := func(codes ...int32) azcosmos.TransactionalBatchResponse {
		var resp azcosmos.TransactionalBatchResponse
		for _, c := range codes {
			resp.OperationResults = append(resp.OperationResults, azcosmos.TransactionalBatchResult{StatusCode: c})
		}
		return resp
	}
	cases := []struct {
		name  string
		codes []int32
		want  kind
	}{
		{"etag mismatch after others", []int32{424, 412, 424}, conflict},
		{"create of an existing id", []int32{409, 424}, conflict},
		{"replace of a missing item", []int32{424, 424, 404}, conflict},
		{"throttled operation", []int32{424, 429}, unavailable},
		{"item too large", []int32{424, 413, 424}, tooLargeKind},
		{"a bad operation first", []int32{400, 409}, plain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := batchError(batch(c.codes...), nil)
			if err == nil {
				t.Fatal("a failed batch answered no error")
			}
			if k := kindOf(err); k != c.want {
				t.Fatalf("%v is of kind %d, want %d", err, k, c.want)
			}
			if c.want == plain && !strings.Contains(err.Error(), fmt.Sprint(c.codes)) {
				t.Fatalf("%v does not name the operations' statuses %v", err, c.codes)
			}
		})
	}
	ok := batch(200, 201)
	ok.Success = true
	if err := batchError(ok, nil); err != nil {
		t.Fatalf("a successful batch answered %v", err)
	}
}
