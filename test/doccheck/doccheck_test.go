// Package doccheck checks the repository's documents against its code.
package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// skipDirs are folders whose documents are not the project's own, or
// hold nothing tracked.
var skipDirs = map[string]bool{"node_modules": true, ".git": true, ".bin": true, "data": true, "dev-auth": true}

// cited matches a test or benchmark named in a document: TestX, TestX/Sub
// (a subtest of TestX), TestX… (every test whose name begins so), or a
// pattern after -run or -bench (go test runs the tests whose names it
// matches). A name after "func " is an example's own definition, and one in
// angle brackets a placeholder (<TestName>), not citations.
var cited = regexp.MustCompile(`(func |<|-run[ =]'?|-bench[ =]'?)?\b((?:Test|Benchmark)[A-Z][A-Za-z0-9_]*)((?:/[A-Za-z0-9_]+)*)(…|\.\.\.)?`)

var (
	defined = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark)[A-Za-z0-9_]+)\(`)
	subtest = regexp.MustCompile(`\.Run\("([A-Za-z0-9_]+)"`)
)

// TestEveryTestTheDocumentsNameExists: a document that sends a reader to a
// test (to see what is checked, or to run it) must name one that exists, or
// the reader finds nothing and the claim it backs is unchecked.
func TestEveryTestTheDocumentsNameExists(t *testing.T) {
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository root is not at %s: %v", root, err)
	}
	tests, subtests := map[string]bool{}, map[string]bool{}
	var docs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Suites of subtests (storetest) are in files that are not tests.
		for _, m := range subtest.FindAllStringSubmatch(string(src), -1) {
			subtests[m[1]] = true
		}
		if strings.HasSuffix(path, "_test.go") {
			for _, m := range defined.FindAllStringSubmatch(string(src), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 || len(tests) == 0 {
		t.Fatalf("found %d documents and %d tests under %s", len(docs), len(tests), root)
	}
	names := make([]string, 0, len(tests))
	for name := range tests {
		names = append(names, name)
	}
	sort.Strings(names)
	hasPrefix := func(prefix string) bool {
		i := sort.SearchStrings(names, prefix)
		return i < len(names) && strings.HasPrefix(names[i], prefix)
	}
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, m := range cited.FindAllStringSubmatch(line, -1) {
				before, name, subs, prefix := m[1], m[2], m[3], m[4] != ""
				prefix = prefix || strings.HasPrefix(before, "-") // -run X: every test whose name holds X
				rel, _ := filepath.Rel(root, doc)
				switch {
				case before == "func " || before == "<":
				case prefix && !hasPrefix(name):
					t.Errorf("%s:%d names %s (a prefix or a -run pattern), but no test's name begins so", rel, i+1, name)
				case !prefix && !tests[name]:
					t.Errorf("%s:%d names %s, which no _test.go file defines", rel, i+1, name)
				default:
					for _, sub := range strings.Split(strings.TrimPrefix(subs, "/"), "/") {
						if sub != "" && !subtests[sub] {
							t.Errorf("%s:%d names %s%s, but no t.Run names the subtest %q", rel, i+1, name, subs, sub)
						}
					}
				}
			}
		}
	}
}
