package server

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// MessageHub's requests are decoded by the server itself, inside the
// interceptor chain, rather than by gRPC before it:
//
//   - gRPC answers any error of the codec with INTERNAL ("failed to unmarshal
//     the received message"), while bytes that are not the method's message
//     are the client's error, INVALID_ARGUMENT;
//   - gRPC decodes a unary request before the first interceptor runs, so
//     that refusals of the credentials would come after the request was
//     decoded, however much memory that took;
//   - refusals go through the access log and the one error mapping.
//
// The gRPC codec hands such requests over as their bytes (wireMessage); the
// MessageHub methods are registered with handlers that defer reading the
// request (deferDecoding), and decodeUnary (unary calls) or decodeStream
// (PeekContent) read and decode it at their place in the chain.

// wireMessage is a request as received: its bytes, not yet decoded.
type wireMessage struct{ buf mem.Buffer }

func (w *wireMessage) bytes() []byte { return w.buf.ReadOnlyData() }
func (w *wireMessage) free()         { w.buf.Free() }

// serverCodec is the codec of codec.New, except that it hands a
// wireMessage the received bytes as they are.
type serverCodec struct{ encoding.CodecV2 }

func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	if h, ok := v.(*heldAnswer); ok {
		return marshalHeld(c.CodecV2, h)
	}
	return c.CodecV2.Marshal(v)
}

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*wireMessage); ok {
		if w.buf != nil {
			// A second message of a unary call, which gRPC refuses.
			w.buf.Free()
		}
		// gRPC frees data once Unmarshal returns; the wireMessage keeps its
		// own reference (or copy, for a message of several buffers).
		w.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// unreadable is how the server records a request gRPC could not read. gRPC
// has answered the client already, with its own status, INTERNAL for bytes
// that are not the one message of the call (none, a second one, a message
// cut short, a compressed flag without an encoding, data that does not
// inflate): that is the client's error, INVALID_ARGUMENT, and one that
// inflates past its bound (compress.go) RESOURCE_EXHAUSTED, so that neither
// is logged or counted as a fault of the server. Other statuses (too
// large, cancelled) stay as they are.
func unreadable(err error) error {
	st, ok := status.FromError(err)
	switch {
	case !ok || st.Code() != codes.Internal:
		return err
	case strings.Contains(st.Message(), inflateRefusal):
		return status.Error(codes.ResourceExhausted, st.Message())
	default:
		return fmt.Errorf("%w: the request could not be read: %s", domain.ErrInvalidArgument, st.Message())
	}
}

// vtUnmarshaler is what vtprotobuf generates for MessageHub's messages.
type vtUnmarshaler interface{ UnmarshalVT([]byte) error }

// decodeRequest reads the request with recv (gRPC's) and decodes it into
// into. A request that is not a valid message of its type is
// domain.ErrInvalidArgument. A Save takes its place in saves (nil: not
// bounded) before it is decoded; release gives it back.
func decodeRequest(recv func(any) error, into any, saves *saveBudget) (release func(), err error) {
	var w wireMessage
	if err := recv(&w); err != nil {
		return nil, unreadable(err)
	}
	defer w.free()
	n, err := checkCounts(w.bytes(), into)
	if err != nil {
		return nil, err
	}
	release = func() {}
	if _, ok := into.(*messagehubv1.SaveRequest); ok && saves != nil {
		if release, err = saves.take(len(w.bytes()), n); err != nil {
			return nil, err
		}
	}
	m, ok := into.(proto.Message)
	if !ok {
		release()
		return nil, fmt.Errorf("decode a request of type %T: not a protobuf message", into)
	}
	if vt, ok := into.(vtUnmarshaler); ok {
		err = vt.UnmarshalVT(w.bytes())
	} else {
		err = proto.Unmarshal(w.bytes(), m)
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("%w: the request is not a valid %s message: %w",
			domain.ErrInvalidArgument, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return release, nil
}

// checkCounts refuses a request with more repeated elements than its method
// accepts before it is decoded: decoding allocates a struct for each
// element, so an element of 2 bytes on the wire (an empty notification)
// costs about 60 times its size in memory, and a Save within the message
// size limit could make the server allocate gigabytes only to refuse it.
// It returns a Save's count of notifications (0 for other requests).
func checkCounts(b []byte, into any) (int, error) {
	if _, ok := into.(*messagehubv1.SaveRequest); !ok {
		return 0, nil
	}
	const notificationsField = 1
	n := countField(b, notificationsField, domain.MaxNotificationsPerSave+1)
	if n > domain.MaxNotificationsPerSave {
		return 0, fmt.Errorf("%w: a save holds at most %d notifications, got more", domain.ErrInvalidArgument, domain.MaxNotificationsPerSave)
	}
	return n, nil
}

// countField counts the top-level occurrences of field in the protobuf
// message b, stopping at limit. It does not allocate. Bytes it cannot parse
// end the count: decoding reports them.
func countField(b []byte, field uint64, limit int) int {
	n := 0
	for len(b) > 0 && n < limit {
		tag, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return n
		}
		num, typ := tag>>3, protowire.Type(tag&7)
		k2 := protowire.ConsumeFieldValue(protowire.Number(num), typ, b[k:])
		if k2 < 0 {
			return n
		}
		if num == field {
			n++
		}
		b = b[k+k2:]
	}
	return n
}

// pendingRequest is a unary call's request that the generated handler asked
// for but that has not been read yet.
type pendingRequest struct {
	recv func(any) error // gRPC's: reads the request into its argument
	into any             // the generated handler's empty request
}

type pendingKey struct{}

// deferDecoding wraps a generated unary handler so that its request is not
// read before the interceptors run: the handler gets its empty request at
// once, and decodeUnary fills it in.
func deferDecoding(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		p := &pendingRequest{recv: dec}
		ctx = context.WithValue(ctx, pendingKey{}, p)
		resp, err := h(srv, ctx, func(into any) error { p.into = into; return nil }, interceptor)
		if err != nil {
			return resp, err
		}
		return holdAnswer(ctx, resp)
	}
}

// decodeUnary reads and decodes a request deferDecoding left unread. A
// Save holds its place in saves until its call returns. Requests of other
// services (health, reflection) arrive decoded.
func decodeUnary(saves *saveBudget) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p, ok := ctx.Value(pendingKey{}).(*pendingRequest); ok && p.into == req && p.recv != nil {
			recv := p.recv
			p.recv = nil // read once
			release, err := decodeRequest(recv, req, saves)
			if err != nil {
				return nil, err
			}
			defer release()
		}
		return handler(ctx, req)
	}
}

// decodeStream makes a streaming MessageHub call (PeekContent) decode its
// requests as decodeUnary does. It must come before the authorizer's
// interceptor, which checks (and rewrites) the decoded request.
func decodeStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/"+ServiceName+"/") {
			return handler(srv, ss)
		}
		return handler(srv, decodingStream{ss})
	}
}

type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error {
	// No Save is a stream: nothing to bound.
	_, err := decodeRequest(s.ServerStream.RecvMsg, m, nil)
	if err == nil {
		noteRequest(s.Context(), m)
	}
	return err
}

// RegisterService registers impl for desc on srv (a server of
// NewGRPCServer) with deferDecoding around every unary handler, as
// MessageHub is: a service registered otherwise (the Admin service) would
// have its requests read and decoded by gRPC before the caller's token is
// checked, and a malformed one answered INTERNAL.
func RegisterService(srv grpc.ServiceRegistrar, desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		d.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: deferDecoding(m.Handler)}
	}
	srv.RegisterService(&d, impl)
}
