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
	"github.com/energydatahub/messagehub/internal/repository"
)

func answered(status int) error { return &azcore.ResponseError{StatusCode: status} }

// kind is what the repository makes of an error.
type kind int

const (
	plain kind = iota // neither: a failure it passes on
	conflict
	unavailable
	tooLargeKind
)

func kindOf(err error) kind {
	switch {
	case errors.Is(err, repository.ErrConflict) && errors.Is(err, domain.ErrUnavailable):
		return -1 // both: never right
	case errors.Is(err, repository.ErrConflict):
		return conflict
	case errors.Is(err, domain.ErrUnavailable):
		return unavailable
	case errors.Is(err, repository.ErrTooLarge):
		return tooLargeKind
	}
	return plain
}

// Every status the store meets maps to the error the repository acts on,
// and the SDK's error stays inside for callers that look at the status.
func TestStoreErrorMapsStatuses(t *testing.T) {
	cases := []struct {
		status int
		want   kind
	}{
		{http.StatusNotFound, conflict},
		{http.StatusConflict, conflict},
		{http.StatusPreconditionFailed, conflict},
		{statusRetryWith, conflict},
		{http.StatusTooManyRequests, unavailable},
		{http.StatusRequestTimeout, unavailable},
		{http.StatusInternalServerError, unavailable},
		{http.StatusBadGateway, unavailable},
		{http.StatusServiceUnavailable, unavailable},
		{http.StatusGatewayTimeout, unavailable},
		{http.StatusBadRequest, plain},
		{http.StatusUnauthorized, plain},
		{http.StatusForbidden, plain},
		{http.StatusRequestEntityTooLarge, tooLargeKind},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			in := fmt.Errorf("read head: %w", answered(c.status))
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
	if got := storeError(io.ErrUnexpectedEOF); kindOf(got) != plain || got.Error() != io.ErrUnexpectedEOF.Error() {
		t.Fatalf("a transport error changed to %v", got)
	}
	// Mapped once, never wrapped again.
	once := storeError(answered(http.StatusPreconditionFailed))
	if again := storeError(once); again.Error() != once.Error() {
		t.Fatalf("mapped twice: %v", again)
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
