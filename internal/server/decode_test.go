package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth"
)

// rawBytes is a request sent exactly as the test wrote it.
type rawBytes []byte

// rawCodec sends rawBytes as they are and receives nothing of interest: it
// lets a test put any bytes on the wire as a call's request.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawBytes))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

// invokeRaw calls method with body as its request's bytes.
func invokeRaw(ctx context.Context, conn *grpc.ClientConn, method string, body []byte) error {
	var reply rawBytes
	return conn.Invoke(ctx, method, rawBytes(body), &reply, grpc.ForceCodecV2(rawCodec{}))
}

// streamRaw opens a server-streaming call of method with body as its
// request's bytes and returns how it ends.
func streamRaw(ctx context.Context, conn *grpc.ClientConn, method string, body []byte) error {
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := s.SendMsg(rawBytes(body)); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		var reply rawBytes
		if err := s.RecvMsg(&reply); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Bytes that are not the method's request message are the client's error:
// INVALID_ARGUMENT saying what is wrong, not INTERNAL, and nothing reaches
// the hub.
func TestMalformedRequestsAreInvalidArgument(t *testing.T) {
	save, err := proto.Marshal(&messagehubv1.SaveRequest{Notifications: notifications(2)})
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{
		"truncated":       save[:len(save)-7],
		"garbage":         {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"a wrong type":    {0x08, 0x01}, // field 1 as a varint, where every method's field 1 has a length
		"a long length":   {0x0a, 0xff, 0xff, 0x03},
		"an end of group": {0x0c},
	}
	methods := []string{
		messagehubv1.MessageHub_Save_FullMethodName,
		messagehubv1.MessageHub_Peek_FullMethodName,
		messagehubv1.MessageHub_Dequeue_FullMethodName,
		messagehubv1.MessageHub_PeekContent_FullMethodName,
	}
	hub := &recordingHub{}
	conn, _ := testConn(t, hub)
	for _, method := range methods {
		for name, body := range bodies {
			call := invokeRaw
			if method == messagehubv1.MessageHub_PeekContent_FullMethodName {
				call = streamRaw
			}
			err := call(ctxT(t), conn, method, body)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument {
				t.Errorf("%s, %s: %v; want InvalidArgument", method, name, err)
			}
		}
	}
	if n := hub.calls(); n != 0 {
		t.Errorf("malformed requests reached the hub %d times", n)
	}
}

// allocated is how many bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A Save of a million empty notifications is 2 MiB on the wire but would
// decode to a million structs (over 100 MiB). Its credentials are checked
// before it is read, and a domain's Save is refused for its count before it
// is decoded: neither costs much more memory than its bytes on the wire.
func TestASaveOfManyEmptyNotificationsIsRefusedBeforeItIsDecoded(t *testing.T) {
	is, checkTokens := withTestTokens(t)
	hub := &recordingHub{}
	conn, _ := testConn(t, hub, checkTokens)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+token)
	}
	// A Save whose every notification is empty: field 1, length 0.
	const count = 1 << 20
	body := bytes.Repeat([]byte{0x0a, 0x00}, count)
	// Warm the connection up, so that its own buffers are not counted.
	if err := invokeRaw(ctxT(t), conn, messagehubv1.MessageHub_Save_FullMethodName, nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a first call: %v", err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"without a token", ctxT(t), codes.Unauthenticated},
		{"with an actor's token", as(is.RS256(t, is.Claims(recipient, auth.RoleActor))), codes.PermissionDenied},
		{"with a domain's token", as(is.RS256(t, is.Claims(uuidN(7), auth.RoleDomain))), codes.InvalidArgument},
	} {
		var err error
		n := allocated(func() { err = invokeRaw(tc.ctx, conn, messagehubv1.MessageHub_Save_FullMethodName, body) })
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
		t.Logf("%s: %v, %.1f MiB allocated for %.1f MiB on the wire", tc.name, status.Code(err), float64(n)/(1<<20), float64(len(body))/(1<<20))
		if limit := uint64(8 * len(body)); n > limit {
			t.Errorf("%s: %d bytes allocated, want at most %d (8 times the request)", tc.name, n, limit)
		}
	}
	if n := hub.calls(); n != 0 {
		t.Errorf("refused saves reached the hub %d times", n)
	}
}
