// Package cosmostest gives tests a real Cosmos DB (SQL API) protocol endpoint on 127.0.0.1
// without a cloud account or Docker: the npm package @vercel/cosmosdb-server 1.0.1 started
// through cosmos-shim.js, which fixes what that server gets wrong for the azcosmos Go SDK.
//
// The first use installs the server with `npm ci` from the committed package-lock.json into
// test/cosmostest/server/node_modules (guarded by a file lock, so concurrent `go test`
// processes do not race), then every Start launches its own node process on a free port and
// stops it at cleanup. Node.js (>= 20) and npm must be on PATH; if they are not, Start fails
// the test (it never skips).
//
// One server per test binary (StartMain from TestMain) is the cheap way to use it; give every
// test its own database or container (UniqueID) because the server is shared.
// See README.md in this directory for what the server can and cannot do.
package cosmostest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/test/npmpin"
)

// EmulatorKey is the well-known Cosmos DB emulator account key. The test server does not
// check keys or signatures; the SDK just needs a syntactically valid key to sign with.
const EmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// ServerPackageVersion is the exact @vercel/cosmosdb-server version the shim is written for.
const ServerPackageVersion = "1.0.1"

const (
	serverPackage = "@vercel/cosmosdb-server"
	startTimeout  = 20 * time.Second
)

// Server is one running test server process.
type Server struct {
	// Endpoint is the account endpoint for azcosmos, e.g. "http://127.0.0.1:39017/".
	Endpoint string
	// Key is the account key to use with azcosmos.NewKeyCredential (EmulatorKey).
	Key string
	// Port is the TCP port the server listens on (127.0.0.1 only).
	Port int
	// Options is what the server enforces.
	Options Options

	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *tailBuffer
	exited   chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// Options selects what the server enforces beyond the protocol, as real Cosmos DB does (see
// README.md "Faithful mode"). The zero value enforces nothing.
type Options struct {
	// Limits: 413 for a request or item over 2 MB, 400 for a batch over 100 operations or over
	// more than one partition key, 400 for a query request over 512 KB.
	Limits bool
	// Charges: x-ms-request-charge from the README's cost model instead of a constant 1.
	Charges bool
	// RUPerSecond is every container's throughput (0 = unlimited). A container created with
	// provisioned (or autoscale max) throughput, or set by SetThroughput, uses that instead.
	// Requests beyond it get 429 with x-ms-retry-after-ms and x-ms-substatus 3200.
	RUPerSecond float64
	// TTL: defaultTtl on the container and ttl on items expire items.
	TTL bool
	// Lag serves each read as of a random moment up to Lag in the past (replica lag), unless
	// its x-ms-session-token names a later write. LagFixed makes every read lag exactly Lag.
	Lag      time.Duration
	LagFixed bool
	// Seed seeds the lag's random numbers (0 = 1), so a test's reads are reproducible.
	Seed uint32
	// Consistency is the account's default consistency level ("" = "Session").
	Consistency string
	// Ranges is the number of partition key ranges (physical partitions) a new container
	// starts with (0 = 1). Each has its own LSN, session-token segment and share of the
	// container's throughput (at most 10,000 RU/s); Split splits one while clients run.
	Ranges int
	// Serverless makes the account a serverless one: a container created with throughput
	// (x-ms-offer-throughput or autoscale settings) is refused 400, as Cosmos DB does.
	Serverless bool
}

// Faithful is everything real Cosmos enforces: limits, charges by Microsoft's published rules,
// 400 RU/s per container (the smallest manual throughput; a container created with throughput
// of its own gets that) spread over two partition key ranges that each throttle on their own,
// TTL and up to 200 ms of replica lag. Every Cosmos test runs against it by default.
func Faithful() Options {
	return Options{Limits: true, Charges: true, RUPerSecond: 400, TTL: true, Lag: 200 * time.Millisecond, Ranges: 2}
}

// Default is what Start and StartMain enforce: everything Faithful does (see README.md),
// or what COSMOSTEST_OPTIONS names when it is set (e.g.
// "limits,charges,ttl,ru=400,lag=200ms", "faithful" or "none"; for trying a feature on the
// whole suite without editing tests).
func Default() Options {
	if env := os.Getenv("COSMOSTEST_OPTIONS"); env != "" {
		o, err := ParseOptions(env)
		if err != nil {
			panic(err)
		}
		return o
	}
	return Faithful()
}

// ParseOptions reads a comma-separated option list: faithful, none, limits, charges, ttl,
// ru=<RU/s>, lag=<duration>, lagfixed, seed=<n>, consistency=<level>, ranges=<n>, serverless.
func ParseOptions(list string) (Options, error) {
	var o Options
	for _, f := range strings.Split(list, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		var err error
		switch strings.ToLower(k) {
		case "", "none":
		case "faithful":
			o = Faithful()
		case "limits":
			o.Limits = true
		case "charges":
			o.Charges = true
		case "ttl":
			o.TTL = true
		case "lagfixed":
			o.LagFixed = true
		case "ru":
			o.RUPerSecond, err = strconv.ParseFloat(v, 64)
		case "lag":
			o.Lag, err = time.ParseDuration(v)
		case "seed":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			o.Seed = uint32(n)
		case "consistency":
			o.Consistency = v
		case "ranges":
			o.Ranges, err = strconv.Atoi(v)
		case "serverless":
			o.Serverless = true
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return Options{}, fmt.Errorf("cosmostest: option %q: %w", f, err)
		}
	}
	return o, nil
}

func (o Options) arg() string {
	m := map[string]any{
		"limits": o.Limits, "charges": o.Charges, "ruPerSecond": o.RUPerSecond, "ttl": o.TTL,
		"lagMs": o.Lag.Milliseconds(), "lagFixed": o.LagFixed, "seed": o.Seed, "ranges": max(1, o.Ranges),
		"serverless": o.Serverless,
	}
	if o.Consistency != "" {
		m["consistency"] = o.Consistency
	}
	b, _ := json.Marshal(m) //nolint:errchkjson // plain map of scalars
	return string(b)
}

// Start installs the server if needed, starts it on a free port with Default options and
// registers its stop with t.Cleanup. It fails the test (t.Fatal) when node or npm is missing
// or the server does not come up within 20 s.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Default())
}

// StartWith is Start with explicit options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	srv, err := start(opts)
	if err != nil {
		t.Fatalf("cosmostest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cosmostest: server output (tail):\n%s", srv.out.String())
		}
		srv.Stop()
	})
	return srv
}

// StartMain is Start for TestMain, where there is no testing.TB: it returns the server and
// a stop function to call after m.Run, or an error (print it and os.Exit(1); do not skip).
//
//	func TestMain(m *testing.M) {
//		srv, stop, err := cosmostest.StartMain()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		testServer = srv
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
func StartMain() (*Server, func(), error) {
	return StartMainWith(Default())
}

// StartMainWith is StartMain with explicit options.
func StartMainWith(opts Options) (*Server, func(), error) {
	srv, err := start(opts)
	if err != nil {
		return nil, func() {}, fmt.Errorf("cosmostest: %w", err)
	}
	return srv, srv.Stop, nil
}

// Stop kills the server process and waits for it. It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
		}
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
		}
		if s.stdin != nil {
			_ = s.stdin.Close()
		}
	})
}

// SetThroughput sets the RU/s of one container (0 = unlimited) and refills its budget.
func (s *Server) SetThroughput(db, container string, ruPerSecond float64) error {
	return s.control("throughput", map[string]any{"db": db, "coll": container, "ruPerSecond": ruPerSecond})
}

// AdvanceClock moves the server's clock forward by d: items' _ts, TTL expiry, throughput
// refill and replica lag all follow it (TTL tests without sleeping).
func (s *Server) AdvanceClock(d time.Duration) error {
	return s.control("clock", map[string]any{"advanceMs": d.Milliseconds()})
}

// Range is one live partition key range of a container, as the server holds it.
type Range struct {
	ID      string   `json:"id"`
	Min     string   `json:"min"`
	Max     string   `json:"max"`
	Parents []string `json:"parents"`
	LSN     int64    `json:"lsn"`
	// RUPerSecond is the range's share of the container's throughput (0 = unlimited).
	RUPerSecond float64 `json:"ruPerSecond"`
}

// Split splits a live partition key range of the container in two, as Cosmos DB does when a
// physical partition grows (rangeID "" picks the range holding the most documents), and
// returns the children's ids. Clients keep running: a request that addresses the parent
// range by id afterwards gets 410 with substatus 1002 (PartitionKeyRangeGone), and
// the pkranges feed lists the children with their parent.
func (s *Server) Split(db, container, rangeID string) ([]string, error) {
	var out struct {
		Children []string `json:"children"`
	}
	err := s.controlInto("split", map[string]any{"db": db, "coll": container, "range": rangeID}, &out)
	return out.Children, err
}

// Ranges returns the container's live partition key ranges.
func (s *Server) Ranges(db, container string) ([]Range, error) {
	var out struct {
		Ranges []Range `json:"ranges"`
	}
	err := s.controlInto("ranges", map[string]any{"db": db, "coll": container}, &out)
	return out.Ranges, err
}

func (s *Server) control(name string, body any) error {
	return s.controlInto(name, body, nil)
}

func (s *Server) controlInto(name string, body, answer any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := http.Post(s.Endpoint+"_shim/"+name, "application/json", bytes.NewReader(b)) //nolint:gosec,noctx // our own server on 127.0.0.1
	if err != nil {
		return fmt.Errorf("cosmostest: %s: %w", name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cosmostest: %s: %s: %s", name, resp.Status, out)
	}
	if answer != nil {
		if err := json.Unmarshal(out, answer); err != nil {
			return fmt.Errorf("cosmostest: %s: %w", name, err)
		}
	}
	return nil
}

var idSeq atomic.Uint64

// UniqueID returns a name that is unique within this process and across processes started
// at the same time (prefix-pid-nanotime-seq), for databases and containers on a shared server.
func UniqueID(prefix string) string {
	return fmt.Sprintf("%s-%d-%x-%d", prefix, os.Getpid(), time.Now().UnixNano()&0xffffffff, idSeq.Add(1))
}

// ServerDir returns the directory holding package.json, package-lock.json and cosmos-shim.js.
func ServerDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "server")
		if fileExists(filepath.Join(dir, "cosmos-shim.js")) {
			return dir, nil
		}
	}
	// Built with -trimpath or moved: find the module root from the working directory.
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fileExists(filepath.Join(dir, "go.mod")) {
			d := filepath.Join(dir, "test", "cosmostest", "server")
			if fileExists(filepath.Join(d, "cosmos-shim.js")) {
				return d, nil
			}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", errors.New("cannot find test/cosmostest/server/cosmos-shim.js (run the tests from inside the repository)")
}

func start(opts Options) (*Server, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node (Node.js >= 20) is not on PATH; it is required to run the Cosmos DB test server (see test/cosmostest/README.md)")
	}
	dir, err := ServerDir()
	if err != nil {
		return nil, err
	}
	release, err := npmpin.Package{Dir: dir, Name: serverPackage, Version: ServerPackageVersion, For: "the Cosmos DB test server"}.Ensure()
	if err != nil {
		return nil, err
	}
	// The shared lock is held until node has loaded its modules, so that no concurrent
	// `npm ci` (which takes the lock exclusively) deletes node_modules under it.
	defer release()
	return launch(node, dir, opts)
}

var readyLine = regexp.MustCompile(`Ready to accept HTTPS? connections at [^\s:]+:(\d+)`)

func launch(node, dir string, opts Options) (*Server, error) {
	// --require exit-with-parent.js: node exits when its stdin (our pipe) closes, so a test
	// binary that is killed does not leave a server behind. --port 0: the OS picks a free
	// port and the shim prints it, so there is no window in which another process takes it.
	cmd := exec.Command(node, "--require", "./exit-with-parent.js", "cosmos-shim.js", //nolint:gosec // node on PATH running our shim with the test's own options
		"--host", "127.0.0.1", "--port", "0", "--no-ssl", "--faithful", opts.arg())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	s := &Server{Key: EmulatorKey, Options: opts, cmd: cmd, stdin: stdin, out: &tailBuffer{max: 64 << 10}, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		_ = pw.Close()
		close(s.exited)
	}()
	portc := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.out.WriteLine(line)
			if m := readyLine.FindStringSubmatch(line); m != nil {
				if p, err := strconv.Atoi(m[1]); err == nil {
					select {
					case portc <- p:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	deadline := time.Now().Add(startTimeout)
	fail := func(format string, a ...any) (*Server, error) {
		s.Stop()
		return nil, fmt.Errorf("%s\nserver output:\n%s", fmt.Sprintf(format, a...), s.out.String())
	}
	select {
	case p := <-portc:
		s.Port = p
	case <-s.exited:
		return fail("the test server exited during start-up (%v)", s.waitErr)
	case <-time.After(time.Until(deadline)):
		return fail("the test server did not report its port within %v", startTimeout)
	}
	s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d/", s.Port)

	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(s.Endpoint)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				hc.CloseIdleConnections()
				return s, nil
			}
			err = fmt.Errorf("GET / answered %s", resp.Status)
		}
		select {
		case <-s.exited:
			return fail("the test server exited during start-up (%v)", s.waitErr)
		default:
		}
		if time.Now().After(deadline) {
			return fail("the test server at %s did not answer GET / within %v: %v", s.Endpoint, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// tailBuffer keeps the last max bytes of line-oriented output.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) WriteLine(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, line...)
	t.b = append(t.b, '\n')
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
