package gateway

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictQuery is grpc-gateway's query parser, except that a parameter naming
// no field of the request is refused (400) instead of ignored: a misspelt
// `grop=` must not turn a peek of one group into a peek of all.
type strictQuery struct{ runtime.DefaultQueryParser }

func (q *strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	for key := range values {
		if !hasField(msg.ProtoReflect().Descriptor(), key) {
			return fmt.Errorf("unknown query parameter %q: %s takes %s",
				key, msg.ProtoReflect().Descriptor().Name(), fieldNames(msg.ProtoReflect().Descriptor()))
		}
	}
	return q.DefaultQueryParser.Parse(msg, values, filter)
}

// hasField reports whether key (a field's proto or JSON name, dotted into
// nested messages) names a field of md.
func hasField(md protoreflect.MessageDescriptor, key string) bool {
	path := strings.Split(key, ".")
	for i, name := range path {
		fd := md.Fields().ByTextName(name)
		if fd == nil {
			fd = md.Fields().ByJSONName(name)
		}
		if fd == nil {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		if md = fd.Message(); md == nil {
			return false
		}
	}
	return false
}

// fieldNames lists md's fields by their JSON names, for error messages.
func fieldNames(md protoreflect.MessageDescriptor) string {
	names := make([]string, md.Fields().Len())
	for i := range names {
		names[i] = md.Fields().Get(i).JSONName()
	}
	return strings.Join(names, ", ")
}
