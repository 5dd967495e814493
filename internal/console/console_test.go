package console_test

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/energydatahub/messagehub/internal/console"
)

// answer is what the handler answered: status, headers and body.
type answer struct {
	StatusCode int
	Header     http.Header
}

func get(h http.Handler, path string, header http.Header) (answer, string) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Header()}, rec.Body.String()
}

// The page is served at /console and /console/, its assets with their
// types; every answer, a 404 too, carries the policy that forbids external
// sources and inline code.
func TestServesThePageAndItsAssets(t *testing.T) {
	h := console.Handler()
	for _, path := range []string{"/console", "/console/", "/console/index.html"} {
		resp, body := get(h, path, nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if !strings.Contains(body, `<script type="module" src="/console/console.js">`) {
			t.Fatalf("GET %s: no module script in %s", path, body)
		}
	}
	for path, contentType := range map[string]string{
		"/console/console.js": "text/javascript; charset=utf-8", "/console/api.js": "text/javascript; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
	} {
		resp, body := get(h, path, nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != contentType || body == "" {
			t.Fatalf("GET %s: %d %q, %d bytes", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
	for _, path := range []string{"/console/", "/console/nothing.js", "/console/static/console.js", "/console/../go.mod"} {
		resp, _ := get(h, path, nil)
		if path != "/console/" && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", path, resp.StatusCode)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
			t.Fatalf("GET %s: Content-Security-Policy %q", path, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("GET %s: no nosniff", path)
		}
	}
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(console.ContentSecurityPolicy, directive) {
			t.Fatalf("the policy lacks %q: %s", directive, console.ContentSecurityPolicy)
		}
	}
	if strings.Contains(console.ContentSecurityPolicy, "unsafe") || strings.Contains(console.ContentSecurityPolicy, "http") {
		t.Fatalf("the policy allows inline code or another origin: %s", console.ContentSecurityPolicy)
	}
}

// An asset the browser has is revalidated, not sent again.
func TestAnUnchangedAssetIsNotModified(t *testing.T) {
	h := console.Handler()
	resp, _ := get(h, "/console/console.js", nil)
	etag := resp.Header.Get("ETag")
	if etag == "" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, resp.Header.Get("Cache-Control"))
	}
	resp, body := get(h, "/console/console.js", http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Fatalf("revalidation: %d, %d bytes", resp.StatusCode, len(body))
	}
}

// The assets name no other origin (the SVG namespace is a name, not a
// source), and the page holds no inline script or style, which the policy
// would block anyway.
func TestTheAssetsLoadNothingFromElsewhere(t *testing.T) {
	origin := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)<script>|<style|\sstyle=|\son[a-z]+=|javascript:`)
	files, err := fs.Glob(console.Assets(), "*")
	if err != nil || len(files) < 5 {
		t.Fatalf("assets: %v, %v", files, err)
	}
	for _, name := range files {
		body, err := fs.ReadFile(console.Assets(), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range origin.FindAllString(string(body), -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s names another origin: %s", name, m)
			}
		}
		if m := inline.FindString(string(body)); m != "" {
			t.Errorf("%s has inline code: %q", name, m)
		}
	}
}
