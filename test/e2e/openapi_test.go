package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The served document and the gateway agree: every documented route is
// served with its documented method (another method answers the documented
// 405 with Allow naming it), and the document is the completed one.
func TestTheServedOpenAPIDocumentDescribesTheGateway(t *testing.T) {
	h := startHTTPHub(t)
	for _, doc := range []string{"/openapi.json", "/openapi.v3.json"} {
		r := h.do(t, http.MethodGet, doc, "", nil).want(t, http.StatusOK)
		var d struct {
			Paths map[string]map[string]struct {
				Responses map[string]json.RawMessage `json:"responses"`
			} `json:"paths"`
		}
		if err := json.Unmarshal(r.body, &d); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		for _, p := range []string{"/v1/peek/timeseries", "/v1/peek/aggregations", "/v1/peek/masterdata", "/v1/peek/content", "/healthz"} {
			if d.Paths[p] == nil {
				t.Errorf("%s does not describe %s", doc, p)
			}
		}
		for path, methods := range d.Paths {
			for method, op := range methods {
				if op.Responses["405"] == nil {
					t.Errorf("%s: %s %s has no 405", doc, method, path)
				}
				wrong := http.MethodPut
				if method == "put" {
					wrong = http.MethodPatch
				}
				res := h.do(t, wrong, strings.ReplaceAll(path, "{bundleId}", newID()), "", nil)
				if res.status != http.StatusMethodNotAllowed || !strings.Contains(res.header.Get("Allow"), strings.ToUpper(method)) {
					t.Errorf("%s %s: %d, Allow %q; want 405 naming %s", wrong, path, res.status, res.header.Get("Allow"), strings.ToUpper(method))
				}
			}
		}
	}
}
