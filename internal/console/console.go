// Package console is the operators' console in the browser: static pages
// (HTML, CSS and JavaScript modules, embedded in the binary) served under
// /console by the HTTP gateway. The pages hold no data: every figure comes
// from the Admin routes under /admin/v1, called from the browser with the
// operator's bearer token, so the console sees and may do exactly what its
// token may through the API.
//
// The assets are answered with a Content-Security-Policy that lets a page
// load scripts, styles, images and data from the hub only: no external
// source, no inline script or style, no frames.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Path is where the console is served; the page is also served at Path+"/".
const Path = "/console"

// ContentSecurityPolicy is the policy of every answer of the console: only
// the hub itself as a source (data: for the page's empty icon), nothing
// inline, no frames, no forms posted elsewhere.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// contentTypes are the types of the assets by extension, fixed here rather
// than taken from the host's MIME tables: a module script must be answered
// as JavaScript, and the browser is told not to guess (nosniff).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
}

// assets are the console's files: index.html and what it loads.
func assets() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("console: " + err.Error())
	}
	return sub
}

// asset is one embedded file, read once.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console: the page at Path and Path+"/", its assets at
// Path+"/<name>"; anything else under Path is 404. It answers GET and HEAD
// (the caller routes other methods away).
func Handler() http.Handler {
	files := load()
	return WithHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		name := strings.TrimPrefix(r.URL.Path, Path)
		if name == "" || name == "/" {
			name = "/index.html"
		}
		a, ok := files[name]
		if !ok {
			http.Error(w, "not found: the console has no "+r.URL.Path, http.StatusNotFound)
			return
		}
		h.Set("Content-Type", a.contentType)
		// Assets change only with the binary: the browser revalidates
		// each time and gets 304 while the hub is the same.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	}))
}

// WithHeaders gives every answer of next the console's security headers:
// its Content-Security-Policy, nosniff and no referrer. The caller wraps
// whatever it answers under Path with it (a method not served, too).
func WithHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// load reads the embedded files, keyed by their path under Path.
func load() map[string]asset {
	files := map[string]asset{}
	err := fs.WalkDir(assets(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(assets(), p)
		if err != nil {
			return err
		}
		contentType, ok := contentTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("%s: no content type for its extension", p)
		}
		sum := sha256.Sum256(body)
		files["/"+p] = asset{
			body:        body,
			contentType: contentType,
			etag:        `"` + hex.EncodeToString(sum[:16]) + `"`,
		}
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a broken build.
		panic("console: reading the embedded assets: " + err.Error())
	}
	return files
}
