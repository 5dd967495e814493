package e2e

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// dockerBuild is the build step of the Dockerfile, which must hold it word
// for word: a static binary without cgo, so that it runs on a distroless
// static image.
const dockerBuild = `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.stampedVersion=${VERSION} -X main.stampedRevision=${REVISION} -X main.stampedTime=${CREATED}" -o /out/messagehub ./cmd/messagehub`

// The Docker engine is not available where the tests run, so this builds
// the binary the way the Dockerfile does and checks that it is static.
func TestBinaryBuildsAsTheDockerfileBuildsIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux")
	}
	root := filepath.Join("..", "..")
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), dockerBuild) {
		t.Fatalf("the Dockerfile does not build with\n  %s", dockerBuild)
	}

	out := filepath.Join(t.TempDir(), "messagehub")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const version, revision, created = "v9.9.9-test", "0123456789abcdef", "2026-11-22T00:00:00Z"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags=-s -w -X main.stampedVersion="+version+" -X main.stampedRevision="+revision+" -X main.stampedTime="+created,
		"-o", out, "./cmd/messagehub")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary needs a dynamic loader; it must be static for the distroless static image")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v dynamically", libs)
	}
	// The image's build arguments reach --version.
	if b, err := exec.CommandContext(ctx, out, "--version").CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "messagehub "+version) || !strings.Contains(string(b), "commit "+revision) || !strings.Contains(string(b), created) {
		t.Errorf("--version of the stamped binary: %v\n%s", err, b)
	}
	// It runs: -h prints the flags and exits 0.
	if b, err := exec.CommandContext(ctx, out, "-h").CombinedOutput(); err != nil || !strings.Contains(string(b), "--auth") && !strings.Contains(string(b), "-auth") {
		t.Errorf("%s -h: %v\n%s", out, err, b)
	}
}
