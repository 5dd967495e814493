package doccheck

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/energydatahub/messagehub/internal/app"
)

// helpFlag is one flag as `messagehub --help` prints it: its name, its
// environment variable and its default ("" when it has none).
type helpFlag struct{ name, env, def string }

var (
	helpEnv     = regexp.MustCompile(`\(env (MESSAGEHUB_[A-Z0-9_]+)\)`)
	helpDefault = regexp.MustCompile(`\(default "?(.*?)"?\)$`)
	rowFlag     = regexp.MustCompile("`--([a-z0-9-]+)`")
	rowEnv      = regexp.MustCompile("`(MESSAGEHUB_[A-Z0-9_]+)`")
)

// binaryFlags are the flags of the binary, read from its --help.
func binaryFlags(t *testing.T) []helpFlag {
	t.Helper()
	var help strings.Builder
	if _, err := app.ParseConfig([]string{"--help"}, func(string) string { return "" }, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseConfig(--help) = %v, want flag.ErrHelp", err)
	}
	var flags []helpFlag
	var usage []string
	done := func() {
		if len(flags) == 0 {
			return
		}
		text := strings.Join(usage, " ")
		f := &flags[len(flags)-1]
		if m := helpEnv.FindStringSubmatch(text); m != nil {
			f.env = m[1]
		}
		if m := helpDefault.FindStringSubmatch(text); m != nil {
			f.def = m[1]
		}
		usage = nil
	}
	for _, line := range strings.Split(help.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "  -"); ok {
			done()
			flags = append(flags, helpFlag{name: strings.Fields(name)[0]})
			continue
		}
		usage = append(usage, strings.TrimSpace(line))
	}
	done()
	if len(flags) < 10 {
		t.Fatalf("read %d flags from --help:\n%s", len(flags), help.String())
	}
	return flags
}

// flagRow is a row of a document's table of flags, for one of the flags it
// names.
type flagRow struct {
	envs []string
	def  string
	line int
}

// flagRows reads the rows of the flags tables of a document (those whose
// first cell begins with a `--flag`), by flag.
func flagRows(t *testing.T, doc string) map[string]flagRow {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]flagRow{}
	for i, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("%s:%d: a row of a flags table without its four columns", doc, i+1)
		}
		for _, m := range rowFlag.FindAllStringSubmatch(cells[1], -1) {
			r := flagRow{def: strings.Trim(strings.TrimSpace(cells[3]), "`"), line: i + 1}
			for _, e := range rowEnv.FindAllStringSubmatch(cells[2], -1) {
				r.envs = append(r.envs, e[1])
			}
			rows[m[1]] = r
		}
	}
	return rows
}

// TestTheFlagsTablesAreTheBinarysFlags: operations.md promises one table of
// every flag, with its variable and default, the same list --help prints;
// the README's table of the common ones must agree with it.
func TestTheFlagsTablesAreTheBinarysFlags(t *testing.T) {
	flags := binaryFlags(t)
	for _, doc := range []string{"docs/operations.md", "README.md"} {
		rows := flagRows(t, doc)
		binary := map[string]bool{}
		for _, f := range flags {
			binary[f.name] = true
			r, ok := rows[f.name]
			switch {
			case !ok:
				if doc == "docs/operations.md" {
					t.Errorf("--%s is not in the flags table of %s", f.name, doc)
				}
			case f.env != "" && !slices.Contains(r.envs, f.env):
				t.Errorf("%s:%d: --%s is read from %s, the table says %v", doc, r.line, f.name, f.env, r.envs)
			case r.def != f.def:
				t.Errorf("%s:%d: --%s defaults to %q, the table says %q", doc, r.line, f.name, f.def, r.def)
			}
		}
		for name, r := range rows {
			if !binary[name] {
				t.Errorf("%s:%d: the flags table names --%s, which the binary does not take", doc, r.line, name)
			}
		}
	}
}
