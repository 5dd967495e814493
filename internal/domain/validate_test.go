package domain_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
)

const (
	validID        = "0f8fad5b-d9cb-469f-a165-70867728950e"
	validRecipient = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	typeCharset    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
)

// normalized normalises a copy of in, leaving in as it is.
func normalized(in []domain.Notification) ([]domain.Notification, error) {
	out := slices.Clone(in)
	if err := domain.NormalizeNotifications(out); err != nil {
		return nil, err
	}
	return out, nil
}

// validNotification is a notification that passes every rule.
func validNotification() domain.Notification {
	return domain.Notification{
		ID:               validID,
		Recipient:        validRecipient,
		Origin:           domain.OriginTimeSeries,
		ContentType:      "TimeSeries.Hourly",
		DocumentType:     "RSM-012",
		SupportsBundling: true,
		Weight:           1,
	}
}

// mustBeInvalid fails unless err reports an invalid argument whose message
// holds every one of wantInMessage.
func mustBeInvalid(t *testing.T, err error, wantInMessage ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one wrapping domain.ErrInvalidArgument")
	}
	if !errors.Is(err, domain.ErrInvalidArgument) {
		t.Fatalf("error %q does not wrap domain.ErrInvalidArgument", err)
	}
	for _, want := range wantInMessage {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestContractLimitsAreThoseOfTheDesign(t *testing.T) {
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"a save holds at most 10,000 notifications", domain.MaxNotificationsPerSave, 10_000},
		{"a content type is at most 255 characters", domain.MaxContentTypeLength, 255},
		{"a weight is at most 2^31-1", domain.MaxWeight, 1<<31 - 1},
		{"the default bundle weight limit is 51,200", domain.DefaultMaxBundleWeight, 51_200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %d, want %d", tt.got, tt.want)
			}
		})
	}
}

func TestParseUUIDAcceptsTheCanonicalFormInAnyCaseAndLowersIt(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"a lower-case uuid is returned as is", validID, validID},
		{"an upper-case uuid is lowered", strings.ToUpper(validID), validID},
		{"a mixed-case uuid is lowered", "0F8fAd5B-d9Cb-469F-A165-70867728950E", validID},
		{"the nil uuid is accepted", "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"},
		{"the max uuid is accepted and lowered", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "ffffffff-ffff-ffff-ffff-ffffffffffff"},
		{"a uuid of any version and variant is accepted", "01234567-89ab-cdef-0123-456789abcdef", "01234567-89ab-cdef-0123-456789abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := domain.ParseUUID("id", tt.in)
			if err != nil {
				t.Fatalf("ParseUUID(%q) failed: %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseUUID(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseUUIDRejectsEverythingButTheCanonicalForm(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"an empty string is rejected", ""},
		{"32 hex digits without dashes are rejected", "0f8fad5bd9cb469fa16570867728950e"},
		{"braces are rejected", "{0f8fad5b-d9cb-469f-a165-70867728950e}"},
		{"a urn prefix is rejected", "urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"},
		{"a non-hex letter is rejected", "0f8fad5b-d9cb-469f-a165-70867728950g"},
		{"an upper-case non-hex letter is rejected", "0F8FAD5B-D9CB-469F-A165-70867728950G"},
		{"a dash moved by one is rejected", "0f8fad5bd-9cb-469f-a165-70867728950e"},
		{"an underscore in place of a dash is rejected", "0f8fad5b_d9cb-469f-a165-70867728950e"},
		{"one character too few is rejected", "0f8fad5b-d9cb-469f-a165-70867728950"},
		{"one character too many is rejected", "0f8fad5b-d9cb-469f-a165-70867728950ee"},
		{"a leading space is rejected", " 0f8fad5b-d9cb-469f-a165-70867728950"},
		{"a trailing newline is rejected", "0f8fad5b-d9cb-469f-a165-70867728950\n"},
		{"a dash instead of a hex digit is rejected", "0f8fad5b-d9cb-469f-a165-7086772895-e"},
		{"a multi-byte character of the right byte length is rejected", "0f8fad5b-d9cb-469f-a165-7086772895é"},
		{"a full-width digit is rejected", "0f8fad5b-d9cb-469f-a165-708677289８"},
		{"a NUL byte is rejected", "0f8fad5b-d9cb-469f-a165-70867728950\x00"},
		{"36 dashes are rejected", strings.Repeat("-", 36)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := domain.ParseUUID("bundle_id", tt.in)
			mustBeInvalid(t, err, "bundle_id")
			if got != "" {
				t.Errorf("ParseUUID(%q) returned %q alongside its error, want \"\"", tt.in, got)
			}
		})
	}
}

func TestEveryByteIsAcceptedAsAUUIDDigitExactlyWhenItIsHex(t *testing.T) {
	const hex = "0123456789abcdefABCDEF"
	for _, at := range []int{0, 7, 9, 14, 19, 24, 35} {
		for c := 0; c < 256; c++ {
			s := []byte(validID)
			s[at] = byte(c)
			got, err := domain.ParseUUID("id", string(s))
			if strings.IndexByte(hex, byte(c)) >= 0 {
				if err != nil || got != strings.ToLower(string(s)) {
					t.Errorf("byte %#x at %d: got %q, %v; want it accepted and lowered", c, at, got, err)
				}
			} else if err == nil {
				t.Errorf("byte %#x at %d accepted, want rejected", c, at)
			}
		}
	}
}

func TestParseUUIDKeepsItsErrorShortForAHugeInput(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	_, err := domain.ParseUUID("recipient", huge)
	mustBeInvalid(t, err, "recipient")
	if len(err.Error()) > 300 {
		t.Errorf("error is %d bytes long, want it truncated to a short message", len(err.Error()))
	}
}

func TestParseOptionalUUIDAllowsOnlyEmptyOrCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{"an empty value is allowed and stays empty", "", "", false},
		{"a canonical value is lowered", strings.ToUpper(validID), validID, false},
		{"a blank value is not empty and is rejected", " ", "", true},
		{"a malformed value is rejected", "not-a-uuid", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := domain.ParseOptionalUUID("bundle_id", tt.in)
			if tt.wantErr {
				mustBeInvalid(t, err, "bundle_id")
			} else if err != nil {
				t.Fatalf("ParseOptionalUUID(%q) failed: %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseOptionalUUID(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestNormalizeNotificationsAcceptsEveryValidShape(t *testing.T) {
	tests := []struct {
		name   string
		modify func(n *domain.Notification)
		want   func(n *domain.Notification) // expected change relative to the input
	}{
		{"a plain valid notification is returned unchanged", func(*domain.Notification) {}, func(*domain.Notification) {}},
		{"an upper-case id is lowered", func(n *domain.Notification) { n.ID = strings.ToUpper(validID) }, func(n *domain.Notification) { n.ID = validID }},
		{"an upper-case recipient is lowered", func(n *domain.Notification) { n.Recipient = strings.ToUpper(validRecipient) }, func(n *domain.Notification) { n.Recipient = validRecipient }},
		{"a missing document type defaults to the content type", func(n *domain.Notification) { n.DocumentType = "" }, func(n *domain.Notification) { n.DocumentType = n.ContentType }},
		{"a one-character content type is accepted", func(n *domain.Notification) { n.ContentType = "x" }, func(*domain.Notification) {}},
		{"a 255-character content type is accepted", func(n *domain.Notification) { n.ContentType = strings.Repeat("a", 255) }, func(*domain.Notification) {}},
		{"a content type of every allowed character is accepted", func(n *domain.Notification) { n.ContentType = typeCharset }, func(*domain.Notification) {}},
		{"a 255-character document type is accepted", func(n *domain.Notification) { n.DocumentType = strings.Repeat("Z", 255) }, func(*domain.Notification) {}},
		{"a document type of every allowed character is accepted", func(n *domain.Notification) { n.DocumentType = typeCharset }, func(*domain.Notification) {}},
		{"the case of a content type is kept", func(n *domain.Notification) { n.ContentType = "MiXeD" }, func(*domain.Notification) {}},
		{"weight 1 is accepted", func(n *domain.Notification) { n.Weight = 1 }, func(*domain.Notification) {}},
		{"weight 2^31-1 is accepted", func(n *domain.Notification) { n.Weight = math.MaxInt32 }, func(*domain.Notification) {}},
		{"a notification that does not support bundling is accepted", func(n *domain.Notification) { n.SupportsBundling = false }, func(*domain.Notification) {}},
		{"origin charges is accepted", func(n *domain.Notification) { n.Origin = domain.OriginCharges }, func(*domain.Notification) {}},
		{"origin market roles is accepted", func(n *domain.Notification) { n.Origin = domain.OriginMarketRoles }, func(*domain.Notification) {}},
		{"origin metering points is accepted", func(n *domain.Notification) { n.Origin = domain.OriginMeteringPoints }, func(*domain.Notification) {}},
		{"origin aggregations is accepted", func(n *domain.Notification) { n.Origin = domain.OriginAggregations }, func(*domain.Notification) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := validNotification()
			tt.modify(&in)
			want := in
			tt.want(&want)
			out, err := normalized([]domain.Notification{in})
			if err != nil {
				t.Fatalf("NormalizeNotifications failed: %v", err)
			}
			if len(out) != 1 || out[0] != want {
				t.Errorf("NormalizeNotifications = %+v, want [%+v]", out, want)
			}
		})
	}
}

func TestNormalizeNotificationsRejectsEveryBrokenRuleAndNamesTheNotificationAndField(t *testing.T) {
	tests := []struct {
		name      string
		modify    func(n *domain.Notification)
		wantField string
	}{
		{"an empty id is rejected", func(n *domain.Notification) { n.ID = "" }, "id"},
		{"a malformed id is rejected", func(n *domain.Notification) { n.ID = "0f8fad5bd9cb469fa16570867728950e" }, "id"},
		{"an empty recipient is rejected", func(n *domain.Notification) { n.Recipient = "" }, "recipient"},
		{"a malformed recipient is rejected", func(n *domain.Notification) { n.Recipient = "GLN:5790000000000" }, "recipient"},
		{"an unspecified origin is rejected", func(n *domain.Notification) { n.Origin = domain.OriginUnspecified }, "origin"},
		{"an origin above the enum is rejected", func(n *domain.Notification) { n.Origin = domain.OriginAggregations + 1 }, "origin"},
		{"a negative origin is rejected", func(n *domain.Notification) { n.Origin = -1 }, "origin"},
		{"an empty content type is rejected", func(n *domain.Notification) { n.ContentType = "" }, "content_type"},
		{"a 256-character content type is rejected", func(n *domain.Notification) { n.ContentType = strings.Repeat("a", 256) }, "content_type"},
		{"a content type with a space is rejected", func(n *domain.Notification) { n.ContentType = "time series" }, "content_type"},
		{"a content type with a slash is rejected", func(n *domain.Notification) { n.ContentType = "application/xml" }, "content_type"},
		{"a content type with a non-ASCII letter is rejected", func(n *domain.Notification) { n.ContentType = "måling" }, "content_type"},
		{"a content type with a NUL byte is rejected", func(n *domain.Notification) { n.ContentType = "a\x00b" }, "content_type"},
		{"a 256-character document type is rejected", func(n *domain.Notification) { n.DocumentType = strings.Repeat("d", 256) }, "document_type"},
		{"a document type with a comma is rejected", func(n *domain.Notification) { n.DocumentType = "a,b" }, "document_type"},
		{"a document type with a space is rejected", func(n *domain.Notification) { n.DocumentType = " " }, "document_type"},
		{"weight 0 is rejected", func(n *domain.Notification) { n.Weight = 0 }, "weight"},
		{"a negative weight is rejected", func(n *domain.Notification) { n.Weight = -1 }, "weight"},
		{"weight 2^31 is rejected", func(n *domain.Notification) { n.Weight = math.MaxInt32 + 1 }, "weight"},
		{"the largest int64 weight is rejected", func(n *domain.Notification) { n.Weight = math.MaxInt64 }, "weight"},
		{"the smallest int64 weight is rejected", func(n *domain.Notification) { n.Weight = math.MinInt64 }, "weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []domain.Notification{validNotification(), validNotification(), validNotification(), validNotification()}
			tt.modify(&in[2])
			out, err := normalized(in)
			mustBeInvalid(t, err, "notification 2", tt.wantField)
			if out != nil {
				t.Errorf("NormalizeNotifications returned %d notifications alongside its error, want nil", len(out))
			}
			if n := strings.Count(err.Error(), domain.ErrInvalidArgument.Error()); n != 1 {
				t.Errorf("error %q repeats %q %d times, want once", err, domain.ErrInvalidArgument, n)
			}
		})
	}
}

func TestEveryByteIsAcceptedInATypeNameExactlyWhenItIsInTheCharset(t *testing.T) {
	for b := 0; b < 256; b++ {
		allowed := strings.IndexByte(typeCharset, byte(b)) >= 0
		for _, field := range []string{"content_type", "document_type"} {
			n := validNotification()
			s := "a" + string([]byte{byte(b)}) + "z"
			if field == "content_type" {
				n.ContentType = s
			} else {
				n.DocumentType = s
			}
			_, err := normalized([]domain.Notification{n})
			if allowed && err != nil {
				t.Errorf("%s with byte %#x rejected: %v", field, b, err)
			}
			if !allowed {
				if err == nil {
					t.Errorf("%s with byte %#x accepted, want rejected", field, b)
				} else if !errors.Is(err, domain.ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
					t.Errorf("%s with byte %#x: error %q does not wrap ErrInvalidArgument and name the field", field, b, err)
				}
			}
		}
	}
}

func TestNormalizeNotificationsEnforcesOneToTenThousandPerSave(t *testing.T) {
	tests := []struct {
		name    string
		count   int
		nilIn   bool
		wantErr bool
	}{
		{"a nil save is rejected", 0, true, true},
		{"an empty save is rejected", 0, false, true},
		{"a save of one is accepted", 1, false, false},
		{"a save of 10,000 is accepted", 10_000, false, false},
		{"a save of 10,001 is rejected", 10_001, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in []domain.Notification
			if !tt.nilIn {
				in = make([]domain.Notification, tt.count)
				for i := range in {
					in[i] = validNotification()
				}
			}
			out, err := normalized(in)
			if tt.wantErr {
				mustBeInvalid(t, err)
				if out != nil {
					t.Errorf("got %d notifications alongside the error, want nil", len(out))
				}
				return
			}
			if err != nil {
				t.Fatalf("normalized(%d) failed: %v", tt.count, err)
			}
			if len(out) != tt.count {
				t.Errorf("got %d notifications, want %d", len(out), tt.count)
			}
		})
	}
}

func TestNormalizeNotificationsKeepsRequestOrder(t *testing.T) {
	in := make([]domain.Notification, 50)
	for i := range in {
		in[i] = validNotification()
		in[i].ID = fmt.Sprintf("%08X-0000-4000-8000-%012d", i, i)
		in[i].Weight = int64(i + 1)
	}
	out, err := normalized(in)
	if err != nil {
		t.Fatalf("NormalizeNotifications failed: %v", err)
	}
	for i := range out {
		if want := strings.ToLower(in[i].ID); out[i].ID != want || out[i].Weight != int64(i+1) {
			t.Errorf("out[%d] = %s weight %d, want %s weight %d", i, out[i].ID, out[i].Weight, want, i+1)
		}
	}
}

func TestNormalizeNotificationsNeverModifiesItsInput(t *testing.T) {
	tests := []struct {
		name string
		in   []domain.Notification
	}{
		{"a valid save that needs normalising", func() []domain.Notification {
			a, b := validNotification(), validNotification()
			a.ID, a.Recipient, a.DocumentType = strings.ToUpper(validID), strings.ToUpper(validRecipient), ""
			b.ID = strings.ToUpper(b.ID)
			return []domain.Notification{a, b}
		}()},
		{"an invalid save whose first notification needs normalising", func() []domain.Notification {
			a, b := validNotification(), validNotification()
			a.ID, a.DocumentType = strings.ToUpper(validID), ""
			b.Weight = 0
			return []domain.Notification{a, b}
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.in)
			out, _ := normalized(tt.in)
			if !slices.Equal(tt.in, before) {
				t.Fatalf("input changed:\n got  %+v\n want %+v", tt.in, before)
			}
			if len(out) > 0 {
				out[0].ID = "changed"
				if tt.in[0].ID == "changed" {
					t.Errorf("the output shares its backing array with the input")
				}
			}
		})
	}
}

func TestValidatePeekGroupAcceptsExactlyTheEnum(t *testing.T) {
	tests := []struct {
		name    string
		group   domain.PeekGroup
		wantErr bool
	}{
		{"unspecified is accepted (it means all)", domain.GroupUnspecified, false},
		{"all is accepted", domain.GroupAll, false},
		{"time series is accepted", domain.GroupTimeSeries, false},
		{"aggregations is accepted", domain.GroupAggregations, false},
		{"master data is accepted", domain.GroupMasterData, false},
		{"a value above the enum is rejected", domain.GroupMasterData + 1, true},
		{"a negative value is rejected", -1, true},
		{"the largest int32 is rejected", math.MaxInt32, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := domain.ValidatePeekGroup(tt.group)
			if tt.wantErr {
				mustBeInvalid(t, err, "group")
			} else if err != nil {
				t.Errorf("ValidatePeekGroup(%d) failed: %v", tt.group, err)
			}
		})
	}
}
