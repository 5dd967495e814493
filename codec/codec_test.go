package codec

import (
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

func saveRequest(n int) *messagehubv1.SaveRequest {
	req := &messagehubv1.SaveRequest{}
	for i := range n {
		req.Notifications = append(req.Notifications, &messagehubv1.DataAvailable{
			Id: uuid.NewString(), Recipient: uuid.NewString(), Origin: messagehubv1.Domain_DOMAIN_CHARGES,
			ContentType: "rsm-014", DocumentType: "rsm-014", SupportsBundling: i%2 == 0, Weight: int64(i + 1),
		})
	}
	return req
}

// The generated code reads and writes the same bytes as protobuf's own, for
// small messages and for ones large enough to use pooled buffers.
func TestVTCodecAgreesWithProtobuf(t *testing.T) {
	c := newVTCodec()
	for _, n := range []int{1, 1000} {
		req := saveRequest(n)
		data, err := c.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var fromProto messagehubv1.SaveRequest
		if err := proto.Unmarshal(data.Materialize(), &fromProto); err != nil || !proto.Equal(&fromProto, req) {
			t.Fatalf("%d notifications: protobuf reads back something else (%v)", n, err)
		}
		data.Free()
		var got messagehubv1.SaveRequest
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &got); err != nil || !proto.Equal(&got, req) {
			t.Fatalf("%d notifications: the codec reads protobuf's bytes as something else (%v)", n, err)
		}
	}
	// Messages without generated code go through the default codec.
	healthRoundTrip(t, c)
}

// BenchmarkDecodeSave1000: decoding a Save of 1,000 notifications as the
// server receives it, with the generated code (vt) and with protobuf's
// reflection (proto); see docs/performance.md.
func BenchmarkDecodeSave1000(b *testing.B) {
	data, err := proto.Marshal(saveRequest(1000))
	if err != nil {
		b.Fatal(err)
	}
	vt := newVTCodec()
	for name, c := range map[string]interface {
		Unmarshal(mem.BufferSlice, any) error
	}{"vt": vt, "proto": vt.fallback} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var req messagehubv1.SaveRequest
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Registered in gRPC's place, as the load tool does, a codec made after
// that still hands messages without generated code to protobuf's, not to
// itself (which would recurse for ever).
func TestACodecMadeAfterRegisteringItFallsBackToProtobuf(t *testing.T) {
	before := encoding.GetCodecV2(grpcproto.Name)
	encoding.RegisterCodecV2(New())
	defer encoding.RegisterCodecV2(before)
	c := newVTCodec()
	if _, ok := c.fallback.(vtCodec); ok {
		t.Fatal("the codec falls back to itself")
	}
	healthRoundTrip(t, c)
}

// BenchmarkEncodeSave1000: encoding a Save of 1,000 notifications as a
// client sends it, with the generated code (vt) and with protobuf's
// reflection (proto).
func BenchmarkEncodeSave1000(b *testing.B) {
	req := saveRequest(1000)
	vt := newVTCodec()
	for name, c := range map[string]encoding.CodecV2{"vt": vt, "proto": vt.fallback} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

// healthRoundTrip checks that c writes and reads back a message without
// generated code (a health response).
func healthRoundTrip(t *testing.T, c encoding.CodecV2) {
	t.Helper()
	health := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	data, err := c.Marshal(health)
	if err != nil {
		t.Fatal(err)
	}
	var back healthpb.HealthCheckResponse
	if err := c.Unmarshal(data, &back); err != nil || back.Status != health.Status {
		t.Fatalf("health response: %v %v", back.Status, err)
	}
}
