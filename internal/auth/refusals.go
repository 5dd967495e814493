package auth

import (
	"errors"
	"log/slog"
	"time"

	"github.com/energydatahub/messagehub/internal/lograte"
)

// RefusalsPerSecond bounds the info lines about refused HTTP credentials: a
// client retrying a bad token in a loop must not flood the log.
const RefusalsPerSecond = 10

// LogRefusals wraps an HTTP check of credentials (Admit) so that refused
// credentials are logged at info, at most RefusalsPerSecond lines a second,
// each with the call asked for, the client's address, the token's subject
// when it was verified, and how many were held back before it. The gateway
// refuses such requests before they become gRPC calls, so the server's
// access log never sees them. now is the clock (nil: time.Now).
func LogRefusals(logger *slog.Logger, now func() time.Time, admit func(method string, authorization []string) error) func(method string, authorization []string, client string) error {
	if now == nil {
		now = time.Now
	}
	limit := &lograte.Limiter{Max: RefusalsPerSecond}
	return func(method string, authorization []string, client string) error {
		err := admit(method, authorization)
		if err != nil {
			if ok, held := limit.Allow(now()); ok {
				attrs := []any{"method", method, "client", client}
				var refusal *Refusal
				if errors.As(err, &refusal) {
					attrs = append(attrs, "subject", refusal.Subject())
				}
				logger.Info("HTTP request refused for its credentials", append(attrs, "error", err.Error(), "suppressed_since_last", held)...)
			}
		}
		return err
	}
}
