package cosmos

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
)

// statusRetryWith is Cosmos DB's 449: a write met a transient conflict.
const statusRetryWith = 449

// statusError is the store error a Cosmos DB status stands for, or nil when
// it stands for none. This is the one mapping; requests and batch
// operations both go through it.
//   - 404, 409, 412, 449: the record a conditional write relied on is gone,
//     exists already or changed (or a replica lags): the repository reloads
//     and retries.
//   - 429, 408, 500, 502, 503, 504: still throttled or unavailable after
//     the transport's and the SDK's retries: the caller may try again later.
//
// Anything else (400, 401, 403, 413, ...) is this store's or the operator's
// mistake and stays as it is.
func statusError(status int) error {
	switch status {
	case http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed, statusRetryWith:
		return repository.ErrConflict
	case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return domain.ErrUnavailable
	}
	return nil
}

// storeError maps a failed request to the store's errors. The SDK's error
// stays wrapped, so that isStatus still sees its status.
func storeError(err error) error {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || errors.Is(err, repository.ErrConflict) || errors.Is(err, domain.ErrUnavailable) {
		return err // not an answer, or mapped already
	}
	if mapped := statusError(re.StatusCode); mapped != nil {
		return fmt.Errorf("%w: %w", mapped, err)
	}
	return err
}

// batchError maps a batch's outcome to the store's errors: the request's
// failure, else the operation that made the batch fail (the first one not
// answering 424, which only says another operation failed).
func batchError(resp azcosmos.TransactionalBatchResponse, err error) error {
	if err != nil {
		return storeError(err)
	}
	if resp.Success {
		return nil
	}
	for _, r := range resp.OperationResults {
		if r.StatusCode == http.StatusFailedDependency || r.StatusCode < 300 {
			continue
		}
		if mapped := statusError(int(r.StatusCode)); mapped != nil {
			return fmt.Errorf("%w: batch operation answered %d", mapped, r.StatusCode)
		}
		break
	}
	return fmt.Errorf("cosmos: transactional batch failed: %+v", statusCodes(resp))
}

func statusCodes(resp azcosmos.TransactionalBatchResponse) []int32 {
	var codes []int32
	for _, r := range resp.OperationResults {
		codes = append(codes, r.StatusCode)
	}
	return codes
}
