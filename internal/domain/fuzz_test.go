package domain_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Independent oracles for the validation rules, written as regular
// expressions rather than the hand-rolled loops of validate.go.
var (
	uuidRE      = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	lowerUUIDRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	typeNameRE  = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,255}$`)
)

// oracleValid says whether n obeys every rule of a notification.
func oracleValid(n domain.Notification) bool {
	return uuidRE.MatchString(n.ID) && uuidRE.MatchString(n.Recipient) &&
		n.Origin >= 1 && n.Origin <= 5 &&
		typeNameRE.MatchString(n.ContentType) &&
		(n.DocumentType == "" || typeNameRE.MatchString(n.DocumentType)) &&
		n.Weight >= 1 && n.Weight <= math.MaxInt32
}

// checkNormalized fails unless out is the normalised form of in.
func checkNormalized(t *testing.T, in, out domain.Notification) {
	t.Helper()
	if !lowerUUIDRE.MatchString(out.ID) || !lowerUUIDRE.MatchString(out.Recipient) {
		t.Fatalf("normalised ids are not lower-case canonical UUIDs: %q %q", out.ID, out.Recipient)
	}
	if !typeNameRE.MatchString(out.ContentType) || !typeNameRE.MatchString(out.DocumentType) {
		t.Fatalf("normalised types break the rules: %q %q", out.ContentType, out.DocumentType)
	}
	if !out.Origin.Valid() || out.Weight < 1 || out.Weight > math.MaxInt32 {
		t.Fatalf("normalised origin/weight break the rules: %d %d", out.Origin, out.Weight)
	}
	want := in
	want.ID, want.Recipient = strings.ToLower(in.ID), strings.ToLower(in.Recipient)
	if want.DocumentType == "" {
		want.DocumentType = want.ContentType
	}
	if out != want {
		t.Fatalf("normalised %+v to %+v, want %+v", in, out, want)
	}
}

func FuzzNormalizeNotifications(f *testing.F) {
	f.Add(validID, validRecipient, int32(1), "TimeSeries", "", true, int64(1), uint8(1), uint8(0))
	f.Add(strings.ToUpper(validID), validRecipient, int32(5), "a.b_c:d-e", "RSM-014", false, int64(math.MaxInt32), uint8(3), uint8(2))
	f.Add(validID, "not-a-uuid", int32(2), "x", "y", true, int64(7), uint8(4), uint8(1))
	f.Add(validID, validRecipient, int32(0), "TimeSeries", "", true, int64(1), uint8(2), uint8(1))
	f.Add(validID, validRecipient, int32(6), "TimeSeries", "", true, int64(1), uint8(2), uint8(1))
	f.Add(validID, validRecipient, int32(3), "", "", true, int64(1), uint8(1), uint8(0))
	f.Add(validID, validRecipient, int32(3), strings.Repeat("c", 256), "", true, int64(1), uint8(1), uint8(0))
	f.Add(validID, validRecipient, int32(4), "a/b", "a b", true, int64(1), uint8(1), uint8(0))
	f.Add(validID, validRecipient, int32(4), "ab", "é", true, int64(1), uint8(1), uint8(0))
	f.Add(validID, validRecipient, int32(4), "ab", "", true, int64(0), uint8(1), uint8(0))
	f.Add(validID, validRecipient, int32(4), "ab", "", true, int64(math.MaxInt32+1), uint8(1), uint8(0))
	f.Add(validID, validRecipient, int32(4), "ab", "", true, int64(math.MinInt64), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, id, recipient string, origin int32, contentType, documentType string, bundling bool, weight int64, size, at uint8) {
		fuzzed := domain.Notification{
			ID: id, Recipient: recipient, Origin: domain.Origin(origin), ContentType: contentType,
			DocumentType: documentType, SupportsBundling: bundling, Weight: weight,
		}
		// A save of 0..7 notifications: valid ones with the fuzzed one among them.
		in := make([]domain.Notification, int(size)%8)
		idx := -1
		for i := range in {
			in[i] = validNotification()
			in[i].ID = fmt.Sprintf("%08d-0000-4000-8000-00000000000%d", i, i)
		}
		if len(in) > 0 {
			idx = int(at) % len(in)
			in[idx] = fuzzed
		}
		before := slices.Clone(in)

		out, err := normalized(in)

		if !slices.Equal(in, before) {
			t.Fatalf("input modified: %+v, was %+v", in, before)
		}
		wantOK := len(in) > 0 && oracleValid(fuzzed)
		if err != nil {
			if out != nil {
				t.Fatalf("error %v came with %d notifications, want nil", err, len(out))
			}
			if !errors.Is(err, domain.ErrInvalidArgument) {
				t.Fatalf("error %q does not wrap ErrInvalidArgument", err)
			}
			if wantOK {
				t.Fatalf("valid save %+v rejected: %v", in, err)
			}
			if idx >= 0 && !strings.Contains(err.Error(), fmt.Sprintf("notification %d:", idx)) {
				t.Fatalf("error %q does not name notification %d", err, idx)
			}
			return
		}
		if !wantOK {
			t.Fatalf("invalid save %+v accepted", in)
		}
		if len(out) != len(in) {
			t.Fatalf("got %d notifications, want %d", len(out), len(in))
		}
		for i := range in {
			checkNormalized(t, in[i], out[i])
		}
		again, err := normalized(out)
		if err != nil {
			t.Fatalf("normalising the output again failed: %v", err)
		}
		if !slices.Equal(again, out) {
			t.Fatalf("normalising is not idempotent: %+v then %+v", out, again)
		}
	})
}

func FuzzParseUUID(f *testing.F) {
	for _, s := range []string{
		validID, strings.ToUpper(validID), "", "0f8fad5bd9cb469fa16570867728950e",
		"{0f8fad5b-d9cb-469f-a165-70867728950e}", "0f8fad5b-d9cb-469f-a165-7086772895é",
		strings.Repeat("-", 36), "0f8fad5b-d9cb-469f-a165-70867728950g",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := domain.ParseUUID("id", s)
		opt, optErr := domain.ParseOptionalUUID("id", s)
		if s == "" {
			if optErr != nil || opt != "" {
				t.Fatalf("ParseOptionalUUID(\"\") = %q, %v; want \"\", nil", opt, optErr)
			}
		} else if opt != got || (optErr == nil) != (err == nil) {
			t.Fatalf("ParseOptionalUUID(%q) = %q, %v disagrees with ParseUUID = %q, %v", s, opt, optErr, got, err)
		}
		if err != nil {
			if !errors.Is(err, domain.ErrInvalidArgument) || !strings.Contains(err.Error(), "id") {
				t.Fatalf("error %q does not wrap ErrInvalidArgument and name the field", err)
			}
			if got != "" {
				t.Fatalf("error came with a value %q", got)
			}
			if uuidRE.MatchString(s) {
				t.Fatalf("canonical UUID %q rejected: %v", s, err)
			}
			return
		}
		if !uuidRE.MatchString(s) {
			t.Fatalf("non-canonical %q accepted as %q", s, got)
		}
		if got != strings.ToLower(s) || !lowerUUIDRE.MatchString(got) {
			t.Fatalf("ParseUUID(%q) = %q, want it in lower case", s, got)
		}
		if again, err := domain.ParseUUID("id", got); err != nil || again != got {
			t.Fatalf("ParseUUID is not idempotent: %q → %q → %q, %v", s, got, again, err)
		}
	})
}

// FuzzBundleCutter offers a random run of notifications, five bytes each
// (bundling flag, weight in 1..2^31-1), to a cutter with a limit in 1..2^40
// and checks the answers against the bundling rule (domain.BundleCutter).
func FuzzBundleCutter(f *testing.F) {
	enc := func(offers ...offer) []byte {
		var out []byte
		for _, o := range offers {
			flag := byte(0)
			if o.bundling {
				flag = 1
			}
			out = append(out, flag)
			out = binary.BigEndian.AppendUint32(out, uint32(o.weight-1))
		}
		return out
	}
	f.Add(enc(b(1), b(1), b(1)), uint64(2))
	f.Add(enc(b(100), b(1)), uint64(9))
	f.Add(enc(nb(1), b(1)), uint64(51_199))
	f.Add(enc(b(1), nb(1), b(1)), uint64(51_199))
	f.Add(enc(b(math.MaxInt32), b(math.MaxInt32), b(math.MaxInt32)), uint64(1<<40-1))
	f.Add(enc(b(5), b(5), b(100), b(1)), uint64(19))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, maxSeed uint64) {
		maxWeight := int64(1 + maxSeed%(1<<40))
		var offers []offer
		for len(data) >= 5 {
			w := 1 + int64(binary.BigEndian.Uint32(data[1:5]))%math.MaxInt32
			offers = append(offers, offer{data[0]&1 == 1, w})
			data = data[5:]
		}
		c := domain.NewBundleCutter(maxWeight)
		// The model: exact arithmetic in uint64 (≤ 2^31 · 2^20 offers, no overflow).
		var modelSum uint64
		modelClosed, taken := false, 0
		for i, o := range offers {
			want := false
			switch {
			case modelClosed:
			case i == 0:
				want, modelClosed = true, !o.bundling
			case o.bundling && modelSum+uint64(o.weight) <= uint64(maxWeight):
				want = true
			default:
				modelClosed = true
			}
			if want {
				modelSum += uint64(o.weight)
				taken++
			}
			got := c.Offer(o.bundling, o.weight)
			if got != want {
				t.Fatalf("offer %d %+v (limit %d, total so far %d): got %v, want %v", i, o, maxWeight, modelSum, got, want)
			}
			if got && taken != i+1 {
				t.Fatalf("offer %d taken after an earlier refusal: taken items are not a prefix", i)
			}
			if c.Closed() != modelClosed {
				t.Fatalf("after offer %d Closed() = %v, want %v", i, c.Closed(), modelClosed)
			}
			if c.Weight() < 0 || uint64(c.Weight()) != modelSum || c.Count() != taken {
				t.Fatalf("after offer %d: count %d weight %d, want %d and %d", i, c.Count(), c.Weight(), taken, modelSum)
			}
			if c.Count() > 1 && c.Weight() > maxWeight {
				t.Fatalf("a bundle of %d weighs %d, over the limit %d", c.Count(), c.Weight(), maxWeight)
			}
		}
	})
}
