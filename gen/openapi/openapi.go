// Package openapi embeds the OpenAPI documents of the HTTP gateway:
// protoc-gen-openapiv2's document (messagehub.swagger.json), completed by
// cmd/apidoc with what internal/gateway adds (openapi2.json) and converted to
// OpenAPI 3 (openapi3.json), all written by `make generate`. This file is the
// only one here written by hand.
package openapi

import _ "embed"

// Document is the OpenAPI 2 (Swagger) document, served at /openapi.json.
//
//go:embed openapi2.json
var Document []byte

// DocumentV3 is the same API as OpenAPI 3, served at /openapi.v3.json.
//
//go:embed openapi3.json
var DocumentV3 []byte
