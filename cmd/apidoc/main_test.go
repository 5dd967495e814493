package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/energydatahub/messagehub/gen/openapi"
)

// The committed documents are what `make generate` makes of the committed
// plugin output: nobody edited them by hand, and they are not stale.
func TestTheEmbeddedDocumentsAreReproduced(t *testing.T) {
	raw, err := os.ReadFile("../../gen/openapi/messagehub.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	v2, v3, err := documents(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v2, openapi.Document) || !bytes.Equal(v3, openapi.DocumentV3) {
		t.Fatal("gen/openapi differs from what cmd/apidoc makes: run make generate")
	}
}

// The OpenAPI 3 document is valid and describes every route the gateway
// serves, with every answer a client must handle.
func TestTheDocumentDescribesTheGateway(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openapi.DocumentV3)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("not a valid OpenAPI 3 document: %v", err)
	}
	want := map[string]map[string][]string{ // path → method → answers
		"/v1/notifications":      {"POST": {"200", "400", "401", "403", "405", "409", "413", "429", "503"}},
		"/v1/peek":               {"GET": {"200", "204", "400", "401", "403", "405", "409", "413", "429", "503"}},
		"/v1/peek/timeseries":    {"GET": {"200", "204", "400", "401", "403", "405", "409", "413", "429", "503"}},
		"/v1/peek/aggregations":  {"GET": {"200", "204", "400", "401", "403", "405", "409", "413", "429", "503"}},
		"/v1/peek/masterdata":    {"GET": {"200", "204", "400", "401", "403", "405", "409", "413", "429", "503"}},
		"/v1/peek/content":       {"GET": {"200", "204", "400", "401", "403", "405", "409", "413", "429", "503"}},
		"/v1/dequeue/{bundleId}": {"DELETE": {"200", "400", "401", "403", "404", "405", "413", "429", "503"}},
		"/healthz":               {"GET": {"200", "405", "503"}},
		"/openapi.json":          {"GET": {"200", "405"}},
		"/openapi.v3.json":       {"GET": {"200", "405"}},
	}
	for path, methods := range want {
		item := doc.Paths.Find(path)
		if item == nil {
			t.Errorf("%s is not described", path)
			continue
		}
		for method, codes := range methods {
			op := item.GetOperation(method)
			if op == nil {
				t.Errorf("%s %s is not described", method, path)
				continue
			}
			for _, code := range codes {
				r := op.Responses.Value(code)
				if r == nil {
					t.Errorf("%s %s: no %s answer", method, path, code)
					continue
				}
				if code >= "400" && path != "/healthz" && r.Value.Content.Get("application/json") == nil {
					t.Errorf("%s %s: the %s answer has no JSON error body", method, path, code)
				}
				// The headers the gateway sends with an answer are named.
				if header := map[string]string{"401": "WWW-Authenticate", "405": "Allow"}[code]; header != "" && r.Value.Headers[header] == nil {
					t.Errorf("%s %s: the %s answer does not name its %s header", method, path, code, header)
				}
			}
		}
	}
	peek := doc.Paths.Find("/v1/peek").Get
	if peek.Responses.Value("200").Value.Headers["MessageId"] == nil {
		t.Error("the peek's 200 does not name the MessageId header as it is sent")
	}
	if len(peek.Responses.Value("204").Value.Content) != 0 {
		t.Error("the peek's 204 has a body")
	}
	for _, p := range doc.Paths.Find("/v1/peek/timeseries").Get.Parameters {
		if p.Value.Name == "group" {
			t.Error("a per-group peek route takes a group")
		}
	}
	if doc.Paths.Find("/v1/peek/content").Get.Responses.Value("503").Value.Headers["Retry-After"] == nil {
		t.Error("the content peek's 503 does not say Retry-After")
	}
	if bytes.Contains(openapi.Document, []byte("buf:lint")) {
		t.Error("lint directives leaked into the document")
	}
}
