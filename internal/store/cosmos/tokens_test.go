package cosmos

import "testing"

func TestSessionTokensMergeByRangeKeepingTheNewest(t *testing.T) {
	tests := []struct {
		name   string
		tokens []string
		want   string
	}{
		{"one token", []string{"0:-1#5"}, "0:-1#5"},
		{"the newer of one range wins, whatever the order", []string{"0:-1#7", "0:-1#5"}, "0:-1#7"},
		{"ranges are kept apart", []string{"0:-1#5,1:-1#3", "0:-1#7"}, "0:-1#7,1:-1#3"},
		{"region parts ride along", []string{"2:1#10#3=8", "2:1#9#3=9"}, "2:1#10#3=8"},
		{"the old format", []string{"0:12", "0:9"}, "0:12"},
		{"empty and malformed segments are dropped", []string{"", "junk", "0:-1#4"}, "0:-1#4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mergeTokens(tt.tokens...); got != tt.want {
				t.Errorf("mergeTokens(%q) = %q, want %q", tt.tokens, got, tt.want)
			}
		})
	}
}
