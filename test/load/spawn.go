package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/energydatahub/messagehub/test/hubproc"
)

const (
	buildTimeout = 10 * time.Minute
	startTimeout = 60 * time.Second
	stopTimeout  = 15 * time.Second // the hub exits within 15 s of SIGTERM (README)
	keepLogLines = 50
)

// serverBuilder builds ./cmd/messagehub once per run of the tool.
type serverBuilder struct {
	dir, bin string
}

func (b *serverBuilder) binary(ctx context.Context, prebuilt string, log logFunc) (string, error) {
	if prebuilt != "" {
		return prebuilt, nil
	}
	if b.bin != "" {
		return b.bin, nil
	}
	dir, err := os.MkdirTemp("", "messagehub-load-bin-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	log("building messagehub into %s", dir)
	bin, err := hubproc.Build(ctx, dir, false)
	if err != nil {
		return "", err
	}
	b.bin = bin
	return bin, nil
}

func (b *serverBuilder) cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// server is a messagehub process started by the tool.
type server struct {
	*hubproc.Process
	dataDir  string
	keep     bool          // the data dir was given: leave it
	startup  time.Duration // from starting the process to its listening
	rssStart float64       // MiB resident once it listens, -1 if unknown
	cpuStart float64       // CPU seconds it had used when the scenario began, -1 if unknown
}

// spawnServer starts bin on 127.0.0.1:0 with dataDir (a fresh temporary one
// when empty) and waits for it to log the address it listens on.
func spawnServer(ctx context.Context, bin string, maxBundleWeight int64, dataDir string, log logFunc) (*server, error) {
	keep := dataDir != ""
	if !keep {
		var err error
		if dataDir, err = os.MkdirTemp("", "messagehub-load-data-"); err != nil {
			return nil, err
		}
	}
	// Its HTTP gateway must not take a fixed port either.
	args := []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-dir", dataDir}
	if maxBundleWeight > 0 {
		args = append(args, "--max-bundle-weight", strconv.FormatInt(maxBundleWeight, 10))
	}
	log("spawning %s %s", bin, strings.Join(args, " "))
	t0 := time.Now()
	p, err := hubproc.Start(ctx, bin, args, startTimeout, func(line string) { log("hub: %s", line) })
	if err != nil {
		if !keep {
			_ = os.RemoveAll(dataDir)
		}
		return nil, err
	}
	s := &server{Process: p, dataDir: dataDir, keep: keep, startup: time.Since(t0)}
	s.rssStart = s.rssMiB()
	return s, nil
}

// begin notes the CPU the hub has used before the scenario.
func (s *server) begin() { s.cpuStart = s.cpuSeconds() }

// report adds what the tool saw of the hub process: its start-up time (with
// -data-dir, that of opening an existing store), resident memory at start
// and now, and the CPU it used during the scenario (also per notification
// saved, where the scenario saves): with the tool on the same CPUs, the
// hub's own cost is steadier from run to run than its throughput.
func (s *server) report(res *Result) {
	res.add("hub_startup_s", s.startup.Seconds())
	if s.rssStart >= 0 {
		res.add("hub_rss_start_mib", s.rssStart)
	}
	if rss := s.rssMiB(); rss >= 0 {
		res.add("hub_rss_end_mib", rss)
	}
	if cpu := s.cpuSeconds(); cpu >= 0 && s.cpuStart >= 0 {
		res.add("hub_cpu_s", cpu-s.cpuStart)
		if saved, ok := res.Metric("notifications_saved"); ok && saved > 0 {
			res.add("hub_cpu_us_per_notification", (cpu-s.cpuStart)*1e6/saved)
		}
		if done, ok := res.Metric("requests_done"); ok && done > 0 {
			res.add("hub_cpu_us_per_request", (cpu-s.cpuStart)*1e6/done)
		}
	}
}

// cpuSeconds reads the process's user and system CPU time from /proc
// (Linux, in clock ticks of 1/100 s); -1 where there is none.
func (s *server) cpuSeconds() float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.Cmd.Process.Pid))
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after it. utime and stime are fields 14 and 15 of the line.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return -1
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (utime + stime) / clockTicksPerSecond
}

// clockTicksPerSecond is Linux's USER_HZ, the unit of /proc's CPU times.
const clockTicksPerSecond = 100

// rssMiB reads the process's resident set size from /proc (Linux); -1 where
// there is none.
func (s *server) rssMiB() float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return -1
}

// logTail is the end of the hub's log, shown when it fails.
func (s *server) logTail() string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-keepLogLines):], "\n")
}

// stop sends SIGTERM, waits for a clean exit (killing it after stopTimeout)
// and removes the data dir unless it was given.
func (s *server) stop() error {
	defer func() {
		if !s.keep {
			_ = os.RemoveAll(s.dataDir)
		}
	}()
	_, err := s.Terminate(stopTimeout)
	switch {
	case errors.Is(err, hubproc.ErrStillRunning):
		return fmt.Errorf("%w; killed", err)
	case err != nil:
		return fmt.Errorf("messagehub exited with %w after SIGTERM\n%s", err, s.logTail())
	}
	return nil
}
