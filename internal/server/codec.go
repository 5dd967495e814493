package server

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtCodec is gRPC's protobuf codec with the (un)marshalling that
// vtprotobuf generates (gen/messagehub/v1/*_vtproto.pb.go) for the
// service's own messages: a Save of 1,000 notifications is decoded without
// protobuf's reflection. Other messages (health, reflection) go through the
// default codec.
type vtCodec struct{ fallback encoding.CodecV2 }

func newVTCodec() vtCodec { return vtCodec{fallback: encoding.GetCodecV2(proto.Name)} }

// Codec is the codec the server uses, for clients that want the same
// (un)marshalling without reflection: grpc.ForceCodecV2(server.Codec()).
func Codec() encoding.CodecV2 { return newVTCodec() }

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
