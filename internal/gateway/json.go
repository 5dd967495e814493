package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// oneDocumentJSON is grpc-gateway's JSON marshaler with a decoder that takes
// a request body as exactly one JSON document. grpc-gateway's own decoder
// stops after the first value, so a body of two documents, or of one
// followed by garbage, would be saved as its first document alone.
type oneDocumentJSON struct{ *runtime.JSONPb }

func (j oneDocumentJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return oneDocumentDecoder{
		DecoderWrapper: runtime.DecoderWrapper{Decoder: json.NewDecoder(r), UnmarshalOptions: j.UnmarshalOptions},
		body:           r,
	}
}

type oneDocumentDecoder struct {
	runtime.DecoderWrapper
	body io.Reader
}

// Decode decodes the first document into v and then reads the rest of the
// body, which may only be white space. It reads the rest as a stream, so a
// long tail costs no memory (the body's limit still bounds it).
func (d oneDocumentDecoder) Decode(v any) error {
	if err := d.DecoderWrapper.Decode(v); err != nil {
		return err
	}
	return onlyWhiteSpace(io.MultiReader(d.Buffered(), d.body))
}

// onlyWhiteSpace reads r to its end and fails at its first byte that is not
// JSON white space.
func onlyWhiteSpace(r io.Reader) error {
	var buf [512]byte
	for {
		n, err := r.Read(buf[:])
		for _, c := range buf[:n] {
			switch c {
			case ' ', '\t', '\r', '\n':
			default:
				return fmt.Errorf("invalid character %q after the JSON document: a request body holds exactly one document", c)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
