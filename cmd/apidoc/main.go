// Command apidoc completes the OpenAPI document of the HTTP gateway
// (`make generate` runs it after buf). protoc-gen-openapiv2 describes the
// routes of the HTTP rules only; this adds what internal/gateway serves on
// top (the per-group peek routes, /healthz, the 204, 405 and 413 answers,
// every error with its body, the MessageId header spelled as sent), writes
// the OpenAPI 2 document, and converts it to OpenAPI 3 with kin-openapi,
// validating both on the way.
//
//	go run ./cmd/apidoc gen/openapi/messagehub.swagger.json gen/openapi
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: apidoc <generated swagger.json> <output folder>")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1]) //nolint:gosec // a build tool reading the file it is told to
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
	v2, v3, err := documents(raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
	for name, data := range map[string][]byte{"openapi2.json": v2, "openapi3.json": v3} {
		if err := os.WriteFile(filepath.Join(os.Args[2], name), data, 0o600); err != nil { //nolint:gosec // the folder it is told to write
			fmt.Fprintln(os.Stderr, "apidoc:", err)
			os.Exit(1)
		}
	}
}

// documents completes the generated document and returns it as OpenAPI 2
// and 3 JSON.
func documents(raw []byte) (v2, v3 []byte, err error) {
	var doc openapi2.T
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, nil, fmt.Errorf("read the generated document: %w", err)
	}
	if err := complete(&doc); err != nil {
		return nil, nil, err
	}
	doc3, err := openapi2conv.ToV3(&doc)
	if err != nil {
		return nil, nil, fmt.Errorf("convert to OpenAPI 3: %w", err)
	}
	if err := doc3.Validate(context.Background()); err != nil {
		return nil, nil, fmt.Errorf("the OpenAPI 3 document is not valid: %w", err)
	}
	if v2, err = json.MarshalIndent(&doc, "", "  "); err != nil {
		return nil, nil, err
	}
	if v3, err = json.MarshalIndent(doc3, "", "  "); err != nil {
		return nil, nil, err
	}
	return append(v2, '\n'), append(v3, '\n'), nil
}

// errorAnswers are the gateway's error answers (grpc-gateway's mapping plus
// its own 405 and 413), each with the JSON error body.
var errorAnswers = map[string]string{
	"400": "INVALID_ARGUMENT (a malformed request, an unknown JSON field or enum name) or FAILED_PRECONDITION.",
	"401": "UNAUTHENTICATED: no valid bearer token (with --auth jwt); WWW-Authenticate: Bearer.",
	"403": "PERMISSION_DENIED: the token's role may not make this call, or an actor named another recipient.",
	"404": "NOT_FOUND: no such pending bundle of this recipient (Dequeue), or an unknown route.",
	"405": "Another method than the route's; the Allow header lists the right ones.",
	"409": "ALREADY_EXISTS: a notification id used with other content, or a bundle id already used.",
	"413": "The request body is over 33 MiB (a declared Content-Length over it is refused before the body is read).",
	"429": "RESOURCE_EXHAUSTED: the hub's data volume is nearly full (saves are refused below --min-free-disk, every write below half of it: a peek that would cut a new bundle, a dequeue, a remedy), or a Save's cabinet is full.",
	"503": "UNAVAILABLE: the hub cannot answer now (stopping, or its store is unreachable); retry.",
}

// answersOf lists, per operation, the error answers it can give.
var answersOf = map[string][]string{
	"MessageHub_Save":    {"400", "401", "403", "405", "409", "413", "429", "503"},
	"MessageHub_Peek":    {"400", "401", "403", "405", "409", "413", "429", "503"},
	"MessageHub_Dequeue": {"400", "401", "403", "404", "405", "413", "429", "503"},
	// The admin routes (the admin role).
	"Admin_GetBacklog":        {"400", "401", "403", "405", "413", "503"},
	"Admin_PreviewNextBundle": {"400", "401", "403", "405", "413", "503"},
	"Admin_TraceNotification": {"400", "401", "403", "405", "413", "503"},
	"Admin_ListRecipients":    {"400", "401", "403", "405", "413", "503"},
	"Admin_GetBacklogHistory": {"400", "401", "403", "405", "413", "503"},
	// The remedies and the backup change state.
	"Admin_ReleaseBundle":       {"400", "401", "403", "404", "405", "413", "429", "503"},
	"Admin_AcknowledgeOnBehalf": {"400", "401", "403", "404", "405", "413", "429", "503"},
	"Admin_ListAuditEvents":     {"400", "401", "403", "405", "413", "503"},
	"Admin_Backup":              {"400", "401", "403", "405", "413", "503"},
}

// peekGroups are the per-group peek routes of internal/gateway.
var peekGroups = []struct{ path, group, id string }{
	{"/v1/peek/timeseries", "PEEK_GROUP_TIME_SERIES", "MessageHub_PeekTimeSeries"},
	{"/v1/peek/aggregations", "PEEK_GROUP_AGGREGATIONS", "MessageHub_PeekAggregations"},
	{"/v1/peek/masterdata", "PEEK_GROUP_MASTER_DATA", "MessageHub_PeekMasterData"},
}

func complete(doc *openapi2.T) error {
	used := map[string]bool{"Health": true}
	for _, item := range doc.Paths {
		for _, op := range item.Operations() {
			op.Summary = withoutLintDirectives(op.Summary)
			op.Description = withoutLintDirectives(op.Description)
			for _, tag := range op.Tags {
				used[tag] = true
			}
			codes, ok := answersOf[op.OperationID]
			if !ok {
				return fmt.Errorf("no error answers listed for %s", op.OperationID)
			}
			for _, code := range codes {
				op.Responses[code] = errorResponse(code)
			}
		}
	}
	// Only services with HTTP routes are described (not the provider service
	// domains implement).
	tags := doc.Tags[:0]
	for _, tag := range doc.Tags {
		if used[tag.Name] {
			tag.Description = withoutLintDirectives(tag.Description)
			tags = append(tags, tag)
		}
	}
	doc.Tags = tags

	peek := doc.Paths["/v1/peek"]
	if peek == nil || peek.Get == nil {
		return fmt.Errorf("the generated document has no GET /v1/peek")
	}
	ok := peek.Get.Responses["200"]
	if header, found := ok.Headers["Messageid"]; found { // protoc-gen-openapiv2 canonicalises it
		delete(ok.Headers, "Messageid")
		ok.Headers["MessageId"] = header
	}
	if ok.Headers["MessageId"] == nil {
		return fmt.Errorf("GET /v1/peek has no MessageId header")
	}
	peek.Get.Responses["204"] = &openapi2.Response{Description: "Nothing to deliver now (no body)."}
	if err := waitAsDuration(peek.Get); err != nil {
		return err
	}

	for _, g := range peekGroups {
		op := *peek.Get
		op.OperationID = g.id
		op.Summary = "Peek of group " + g.group + ": GET /v1/peek?group=" + g.group + "."
		op.Parameters = nil
		for _, p := range peek.Get.Parameters {
			if p.Name != "group" {
				op.Parameters = append(op.Parameters, p)
			}
		}
		doc.Paths[g.path] = &openapi2.PathItem{Get: &op}
	}

	var peekContent openapi2.PathItem
	if err := json.Unmarshal([]byte(`{"get": {
		"operationId": "MessageHub_PeekContent",
		"summary": "The bundle's document itself: PeekContent over HTTP.",
		"description": "Picks the bundle exactly as GET /v1/peek does (same parameters, rules and errors) and answers its document, built once by the bundle's domain and stored by the hub: every repeated peek answers the same bytes. The Content-Type is the document's media type; a bundle of a domain without document provider is answered as the bundle itself, application/vnd.messagehub.bundle+json. 503 with Retry-After while the domain has not answered within the hub's content timeout: the hub keeps building the document, so peek again.",
		"tags": ["MessageHub"],
		"produces": ["*/*"],
		"responses": {
			"200": {"description": "The document (or the bundle, see the description).", "schema": {"type": "file"},
				"headers": {"MessageId": {"type": "string", "description": "The id of the bundle; Dequeue names it."}}},
			"204": {"description": "Nothing to deliver now (no body)."},
			"503": {"description": "UNAVAILABLE: the document is not ready yet (or the hub cannot answer now); retry after Retry-After seconds.",
				"schema": {"$ref": "#/definitions/rpcStatus"},
				"headers": {"Retry-After": {"type": "integer", "description": "Seconds to wait before peeking again."}}}
		}}}`), &peekContent); err != nil {
		return err
	}
	peekContent.Get.Parameters = peek.Get.Parameters
	for _, code := range []string{"400", "401", "403", "405", "409", "413", "429"} {
		peekContent.Get.Responses[code] = errorResponse(code)
	}
	doc.Paths["/v1/peek/content"] = &peekContent

	var health openapi2.PathItem
	if err := json.Unmarshal([]byte(`{"get": {
		"operationId": "Healthz",
		"summary": "Health of the hub (gRPC health, overall status); needs no token.",
		"tags": ["Health"],
		"security": [],
		"responses": {
			"200": {"description": "Serving.", "schema": {"$ref": "#/definitions/healthStatus"}},
			"503": {"description": "Not serving (starting or stopping).", "schema": {"$ref": "#/definitions/healthStatus"}}
		}}}`), &health); err != nil {
		return err
	}
	health.Get.Responses["405"] = errorResponse("405")
	doc.Paths["/healthz"] = &health
	for path, version := range map[string]string{"/openapi.json": "2", "/openapi.v3.json": "3"} {
		var item openapi2.PathItem
		if err := json.Unmarshal([]byte(`{"get": {
			"operationId": "OpenAPI`+version+`",
			"summary": "This document as OpenAPI `+version+` (JSON); needs no token.",
			"tags": ["OpenAPI"],
			"security": [],
			"produces": ["application/json"],
			"responses": {"200": {"description": "The document.", "schema": {"type": "object"}}}}}`), &item); err != nil {
			return err
		}
		item.Get.Responses["405"] = errorResponse("405")
		doc.Paths[path] = &item
	}
	var status openapi2.SchemaRef
	if err := json.Unmarshal([]byte(`{"type": "object", "properties": {"status": {"type": "string", "enum": ["SERVING", "NOT_SERVING"]}}}`), &status); err != nil {
		return err
	}
	doc.Definitions["healthStatus"] = &status
	return nil
}

// errorResponse is the answer of one error code: its description, the JSON
// error body, and the headers the gateway sends with it.
// waitAsDuration documents the long poll as the gateway takes it: wait, a
// Go duration such as 20s, which internal/gateway turns into the request's
// wait_ms (the one spelling it accepts).
func waitAsDuration(op *openapi2.Operation) error {
	for _, p := range op.Parameters {
		if p.Name == "waitMs" {
			p.Name = "wait"
			p.Type = &openapi3.Types{"string"}
			p.Format = ""
			p.Description = "Optional long poll: how long the call may wait for a bundle when none is ready, " +
				"a duration such as 20s or 1500ms, at most 30s (more is 400). Absent or 0s answers at once. " +
				"A waiting call answers as soon as a bundle is ready (a save for the recipient wakes it), " +
				"else 204 when the wait is over."
			return nil
		}
	}
	return fmt.Errorf("GET /v1/peek has no waitMs parameter")
}

func errorResponse(code string) *openapi2.Response {
	var r openapi2.Response
	_ = json.Unmarshal([]byte(`{"schema": {"$ref": "#/definitions/rpcStatus"}}`), &r) // a constant document
	r.Description = errorAnswers[code]
	switch code {
	case "401":
		r.Headers = map[string]*openapi2.Header{"WWW-Authenticate": {Parameter: openapi2.Parameter{
			Type: &openapi3.Types{"string"}, Description: `Bearer realm="messagehub": a bearer token is required.`}}}
	case "405":
		r.Headers = map[string]*openapi2.Header{"Allow": {Parameter: openapi2.Parameter{
			Type: &openapi3.Types{"string"}, Description: "The methods of the route, e.g. \"GET, HEAD\"."}}}
	}
	return &r
}

// withoutLintDirectives drops the buf lint directives that proto comments
// carry into summaries.
func withoutLintDirectives(s string) string {
	var keep []string
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "buf:lint:ignore") {
			keep = append(keep, line)
		}
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}
