package client

import (
	"testing"
	"time"
)

// A field given is kept and a zero one takes its default; a MaxBackoff
// below the default InitialBackoff caps the pauses, the first as well.
func TestRetryPolicyDefaultsKeepTheFieldsGiven(t *testing.T) {
	for _, c := range []struct {
		name     string
		in, want RetryPolicy
	}{
		{"zero", RetryPolicy{}, RetryPolicy{MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, AttemptTimeout: 30 * time.Second}},
		{"a cap below the default first pause", RetryPolicy{MaxBackoff: 20 * time.Millisecond},
			RetryPolicy{MaxAttempts: 5, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, AttemptTimeout: 30 * time.Second}},
		{"a first pause over the default cap", RetryPolicy{InitialBackoff: 10 * time.Second},
			RetryPolicy{MaxAttempts: 5, InitialBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, AttemptTimeout: 30 * time.Second}},
		{"a cap below the first pause given", RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 200 * time.Millisecond},
			RetryPolicy{MaxAttempts: 5, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, AttemptTimeout: 30 * time.Second}},
	} {
		if got := c.in.withDefaults(); got != c.want {
			t.Errorf("%s: %+v gives %+v, want %+v", c.name, c.in, got, c.want)
		}
	}
}
