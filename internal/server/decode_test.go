package server

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
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
