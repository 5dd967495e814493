package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"

	"github.com/energydatahub/messagehub/internal/domain"
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
	p, ok := v.(proto.Message)
	if !ok {
		if err := d.DecoderWrapper.Decode(v); err != nil {
			return err
		}
		return onlyWhiteSpace(io.MultiReader(d.Buffered(), d.body))
	}
	var raw json.RawMessage
	if err := d.Decoder.Decode(&raw); err != nil {
		return err
	}
	if err := onlyWhiteSpace(io.MultiReader(d.Buffered(), d.body)); err != nil {
		return err
	}
	// A message of many tiny notifications ({} is three bytes) would decode
	// to gigabytes before validation counts them: they are counted first.
	if n := countElements(raw, "notifications", domain.MaxNotificationsPerSave+1); n > domain.MaxNotificationsPerSave {
		return fmt.Errorf("a save holds at most %d notifications, got more", domain.MaxNotificationsPerSave)
	}
	return d.Unmarshal(raw, p)
}

// countElements counts the elements of the array that is field's value in
// the JSON object doc, up to limit: it stops there, so counting costs the
// same however long the array is. A document of another shape counts 0 and
// is left to the message's own decoding to refuse.
func countElements(doc []byte, field string, limit int) int {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return 0
		}
		if key != field {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return 0
			}
			continue
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return 0
		}
		n := 0
		for dec.More() && n < limit {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return n
			}
			n++
		}
		return n
	}
	return 0
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
