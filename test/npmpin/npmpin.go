// Package npmpin installs the pinned npm packages a test harness runs (the
// package.json and package-lock.json of one folder) with `npm ci`, once per
// checkout and change of those files, safely when several test binaries
// start at once.
package npmpin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Package is a harness folder and the package in it the tests run.
type Package struct {
	Dir     string // holds package.json and package-lock.json
	Name    string // the package run, e.g. "azurite"
	Version string // its pinned version, checked after every install
	For     string // what it is for, for error messages
}

const (
	installTimeout = 5 * time.Minute
	stampFile      = ".messagehub-npmpin.stamp"
	lockFile       = ".install.lock"
)

// Ensure returns holding a shared lock on the install, with node_modules
// matching the package files; it runs npm ci under an exclusive lock when
// they do not. Release once node has loaded its modules, so that no npm ci
// replaces them meanwhile.
func (p Package) Ensure() (release func(), err error) {
	want, err := p.stamp()
	if err != nil {
		return nil, err
	}
	lockPath := filepath.Join(p.Dir, lockFile)
	for range 3 {
		l, err := lockFileAt(lockPath, false)
		if err != nil {
			return nil, err
		}
		if p.installed(want) {
			return l.unlock, nil
		}
		l.unlock()
		x, err := lockFileAt(lockPath, true)
		if err != nil {
			return nil, err
		}
		if !p.installed(want) {
			err = p.npmCI(want)
		}
		x.unlock()
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("node_modules keeps changing under us (another process running npm ci?)")
}

// stamp names the package files' contents: an install made from other
// contents is redone.
func (p Package) stamp() (string, error) {
	h := sha256.New()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(p.Dir, name)) //nolint:gosec // the harness's own folder
		if err != nil {
			return "", fmt.Errorf("read %s: %w", name, err)
		}
		h.Write([]byte(name + "\x00"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (p Package) installed(want string) bool {
	got, err := os.ReadFile(filepath.Join(p.Dir, "node_modules", stampFile)) //nolint:gosec // the harness's own folder
	if err != nil || strings.TrimSpace(string(got)) != want {
		return false
	}
	b, err := os.ReadFile(filepath.Join(p.Dir, "node_modules", filepath.FromSlash(p.Name), "package.json")) //nolint:gosec // the harness's own folder
	var pkg struct{ Version string }
	return err == nil && json.Unmarshal(b, &pkg) == nil && pkg.Version == p.Version
}

func (p Package) npmCI(want string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npm is not on PATH; it installs %s for %s", p.Name, p.For)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error") //nolint:gosec // npm from PATH, fixed arguments
	cmd.Dir = p.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci in %s failed (%w; the first run needs the npm registry):\n%s", p.Dir, err, out.String())
	}
	if _, err := os.Stat(filepath.Join(p.Dir, "node_modules", filepath.FromSlash(p.Name), "package.json")); err != nil {
		return fmt.Errorf("npm ci in %s did not install %s", p.Dir, p.Name)
	}
	tmp := filepath.Join(p.Dir, "node_modules", stampFile+".tmp")
	if err := os.WriteFile(tmp, []byte(want+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(p.Dir, "node_modules", stampFile))
}
