// Package adversary keeps the attacks found against MessageHub as regression
// tests against the real binary: each attack is run at a hub started for it
// (built once by TestMain, on 127.0.0.1:0, a temporary data directory and
// the embedded store), and each asserts the hub's answer and how much its
// peak resident memory grew over what it held idle, against the budget
// stated in the README (its paragraph "Memory budget").
//
// The binary is built without the race detector even under `go test -race`:
// the budget is the shipped binary's, and the race detector multiplies a
// process's memory several times.
package adversary

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/test/hubproc"
)

// budget is the most any attack of this package may make the hub hold over
// its idle resident memory, with the default flags: the README states it.
const budget = 512 << 20

const (
	startTimeout = 60 * time.Second // a loaded machine starts the hub slowly
	callTimeout  = 60 * time.Second // only keeps a broken hub from hanging a test
	exitTimeout  = 15 * time.Second // the hub exits within 15 s of SIGTERM (README)
)

// hubBinary is the messagehub executable TestMain builds.
var hubBinary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	// The hubs run with the defaults: no setting of the environment (make
	// test sets MESSAGEHUB_HTTP_ADDR) nor a garbage collector's tuning may
	// change what is measured.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "MESSAGEHUB_") || name == "GOGC" || name == "GOMEMLIMIT" {
			_ = os.Unsetenv(name)
		}
	}
	dir, err := os.MkdirTemp("", "messagehub-adversary-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "adversary:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if hubBinary, err = hubproc.Build(ctx, dir, false); err != nil {
		fmt.Fprintln(os.Stderr, "adversary:", err)
		return 1
	}
	return m.Run()
}

// TestAttacks runs each attack found so far at a hub of its own, one after
// the other: the machine's cores are the hub's, not another attack's.
func TestAttacks(t *testing.T) {
	for _, a := range []struct {
		name   string
		attack func(*testing.T)
	}{
		{"HTTP Save body of more than one JSON document", httpSaveBodyOfMoreThanOneDocument},
		{"malformed gRPC Save", malformedGRPCSave},
		{"Saves of millions of empty notifications with JWT", manyEmptyNotificationsWithJWT},
		{"gzip bomb", gzipBomb},
		{"HPACK header bomb", headerBomb},
		{"silent connections filling max-connections", silentConnections},
		{"unread gRPC Peek answers", unreadGRPCPeekAnswers},
		{"unread HTTP content peeks", unreadContentPeeks},
		{"unread HTTP Peek answers", unreadHTTPPeekAnswers},
		{"concurrent pollers of one recipient while saving", concurrentPollersOfOneRecipient},
	} {
		t.Run(a.name, a.attack)
	}
}

// hub is a running messagehub with a gRPC client of its own.
type hub struct {
	*hubproc.Process
	grpcAddr, httpAddr string
	dir                string   // its data directory
	args               []string // its flags beyond addresses and directory
	conn               *grpc.ClientConn
	client             messagehubv1.MessageHubClient
	health             healthpb.HealthClient
}

var httpAddrRE = regexp.MustCompile(`"msg":"listening".*"http_addr":"([^"]+)"`)

// startHub starts the binary on free loopback ports with a fresh data
// directory and extra flags, and kills it when the test ends.
func startHub(t *testing.T, extra ...string) *hub {
	t.Helper()
	return startHubIn(t, t.TempDir(), extra...)
}

// startHubIn is startHub on the data directory dir.
func startHubIn(t *testing.T, dir string, extra ...string) *hub {
	t.Helper()
	args := append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-dir", dir}, extra...)
	p, err := hubproc.Start(t.Context(), hubBinary, args, startTimeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &hub{Process: p, grpcAddr: p.Addr, dir: dir, args: extra}
	t.Cleanup(func() {
		h.Kill()
		if t.Failed() {
			t.Logf("messagehub log:\n%s", tail(h.Log(), 40))
		}
	})
	m := httpAddrRE.FindStringSubmatch(p.Log())
	if m == nil {
		t.Fatalf("no http_addr in the listening line:\n%s", p.Log())
	}
	h.httpAddr = m[1]
	h.conn = dial(t, h.grpcAddr)
	h.client = messagehubv1.NewMessageHubClient(h.conn)
	h.health = healthpb.NewHealthClient(h.conn)
	// The first call sets the client's connection up, so that what an
	// attack measures is the attack.
	if _, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check of a new hub: %v", err)
	}
	return h
}

// restart stops h (SIGTERM, waiting for the exit the README promises within
// 15 s) and starts the binary again on its data directory with its flags:
// what a test stored is there, and the hub holds only what it holds idle.
func (h *hub) restart(t *testing.T) *hub {
	t.Helper()
	if _, err := h.Terminate(exitTimeout); err != nil {
		t.Fatalf("stopping the hub: %v", err)
	}
	return startHubIn(t, h.dir, h.args...)
}

// dial is a gRPC client connection to addr, closed when the test ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// ctxT is a context that ends with the test, or after callTimeout.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// statusKiB reads a "VmXxx: N kB" line of /proc/<pid>/status, in bytes.
func statusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// measure runs attack at h and fails the test when the hub's peak resident
// memory during it exceeds what it held before by more than limit. It
// returns the growth.
//
// The peak (VmHWM) is reset to the current resident memory first (writing 5
// to /proc/<pid>/clear_refs), so that an earlier peak, of the start-up or of
// an earlier attack, neither hides nor counts as this one's; where the
// kernel does not allow that, the peak since the start is taken, which can
// only overstate the growth.
func measure(t *testing.T, h *hub, limit int64, attack func()) int64 {
	t.Helper()
	pid := h.Cmd.Process.Pid
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Logf("the peak cannot be reset (%v): the peak since the start counts", err)
	}
	idle := statusKiB(t, pid, "VmRSS")
	attack()
	peak := statusKiB(t, pid, "VmHWM")
	grew := max(0, peak-idle)
	t.Logf("resident memory: %.1f MiB before, peak %.1f MiB: grew by %.1f MiB (limit %d MiB; now %.1f MiB anonymous, %.1f MiB of files)",
		mib(idle), mib(peak), mib(grew), limit>>20, mib(statusKiB(t, pid, "RssAnon")), mib(statusKiB(t, pid, "RssFile")))
	if grew > limit {
		t.Errorf("the hub's peak resident memory grew by %.1f MiB, over the limit of %d MiB", mib(grew), limit>>20)
	}
	return grew
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
