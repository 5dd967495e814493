// Package codec is gRPC's protobuf codec with the (un)marshalling that
// vtprotobuf generates for MessageHub's messages. The hub serves with it,
// and the client and the load tool call with it: a Save of 1,000
// notifications is encoded and decoded without protobuf's reflection.
package codec

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtCodec uses the code vtprotobuf generates (gen/messagehub/v1/*_vtproto.pb.go)
// for the service's own messages. Other messages (health, reflection) go
// through the default codec.
type vtCodec struct{ fallback encoding.CodecV2 }

func newVTCodec() vtCodec {
	fallback := encoding.GetCodecV2(proto.Name)
	if vt, ok := fallback.(vtCodec); ok {
		// This codec was registered in gRPC's place (as the load tool
		// does): fall back to what it fell back to, not to itself.
		fallback = vt.fallback
	}
	return vtCodec{fallback: fallback}
}

// New returns the codec. Its name is "proto", so a peer that does not use
// it reads and writes the same messages: grpc.ForceServerCodecV2(codec.New())
// on a server, grpc.ForceCodecV2(codec.New()) on a client's calls.
func New() encoding.CodecV2 { return newVTCodec() }

type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

func (c vtCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT(*buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal copies what it keeps (the generated code is not the "unsafe"
// variant), so the received buffers can go back to their pool.
func (c vtCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.UnmarshalVT(buf.ReadOnlyData())
}

func (vtCodec) Name() string { return proto.Name }
