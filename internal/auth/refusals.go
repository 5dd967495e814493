package auth

import (
	"log/slog"
	"time"

	"github.com/energydatahub/messagehub/internal/lograte"
)

// RefusalsPerSecond bounds the info lines about refused HTTP credentials: a
// client retrying a bad token in a loop must not flood the log.
const RefusalsPerSecond = 10

// LogRefusals wraps an HTTP authentication check (Authenticate) so that
// refused credentials are logged at info, at most RefusalsPerSecond lines a
// second, each with the client's address and how many were held back
// before it. The gateway refuses such requests before they become gRPC
// calls, so the server's access log never sees them. now is the clock
// (nil: time.Now).
func LogRefusals(logger *slog.Logger, now func() time.Time, authenticate func([]string) error) func(authorization []string, client string) error {
	if now == nil {
		now = time.Now
	}
	limit := &lograte.Limiter{Max: RefusalsPerSecond}
	return func(authorization []string, client string) error {
		err := authenticate(authorization)
		if err != nil {
			if ok, held := limit.Allow(now()); ok {
				logger.Info("HTTP request refused for its credentials", "client", client, "error", err.Error(), "suppressed_since_last", held)
			}
		}
		return err
	}
}
