package auth_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/auth"
)

func TestRefusedHTTPCredentialsAreLoggedAtInfoButNotFlooded(t *testing.T) {
	var logs bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	check := auth.LogRefusals(slog.New(slog.NewJSONHandler(&logs, nil)), func() time.Time { return clock },
		func(v []string) error {
			if len(v) == 0 {
				return errors.New("missing bearer token")
			}
			return nil
		})
	for range 100 { // within one second of the clock
		if check(nil, "192.0.2.7:41000") == nil {
			t.Fatal("a missing token passed")
		}
	}
	if err := check([]string{"Bearer good"}, "192.0.2.7:41000"); err != nil {
		t.Fatalf("a good token: %v", err)
	}
	if n := strings.Count(logs.String(), "refused for its credentials"); n != auth.RefusalsPerSecond {
		t.Fatalf("%d info lines for 100 refusals within a second, want %d:\n%s", n, auth.RefusalsPerSecond, logs.String())
	}
	clock = clock.Add(time.Second)
	logs.Reset()
	_ = check(nil, "192.0.2.7:41000")
	if !strings.Contains(logs.String(), `"suppressed_since_last":90`) || !strings.Contains(logs.String(), `"level":"INFO"`) {
		t.Fatalf("the next second's line does not count the 90 held back at info: %s", logs.String())
	}
	if !strings.Contains(logs.String(), `"client":"192.0.2.7:41000"`) {
		t.Fatalf("the line does not name the client: %s", logs.String())
	}
}
