package main

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// loopRun is what a closed-loop run measured.
type loopRun struct {
	latencies []time.Duration // of the calls that succeeded
	elapsed   time.Duration
	toolCPU   float64 // seconds of this process's CPU during the run; -1 if unknown
	errs      errorLog
}

// closedLoop runs concurrency workers, each made by worker from its index,
// until cfg.Duration has passed, ctx ends or cfg.Requests calls were made.
// A worker's prepare runs untimed before each call; its call is timed, with
// cfg.CallTimeout as its deadline.
func (e *env) closedLoop(ctx context.Context, concurrency int, worker func(w int) (prepare func(), call func(context.Context) error)) *loopRun {
	run := &loopRun{}
	var issued atomic.Int64
	samples := make([][]time.Duration, concurrency)
	cpu0 := toolCPUSeconds()
	start := time.Now()
	deadline := start.Add(e.cfg.Duration)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			prepare, call := worker(w)
			// The calls' contexts hang from one of the worker's own, not
			// all from ctx, whose list of children every call of every
			// worker would otherwise lock and change twice.
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			for wctx.Err() == nil && time.Now().Before(deadline) {
				if e.cfg.Requests > 0 && issued.Add(1) > int64(e.cfg.Requests) {
					return
				}
				prepare()
				cctx, cancel := context.WithTimeout(wctx, e.cfg.CallTimeout)
				t0 := time.Now()
				err := call(cctx)
				d := time.Since(t0)
				cancel()
				if err != nil {
					run.errs.add(err)
					continue
				}
				samples[w] = append(samples[w], d)
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	if cpu1 := toolCPUSeconds(); cpu0 >= 0 && cpu1 >= 0 {
		run.toolCPU = cpu1 - cpu0
	} else {
		run.toolCPU = -1
	}
	for _, s := range samples {
		run.latencies = append(run.latencies, s...)
	}
	return run
}

// report adds the run's call rate, latencies, calls, the tool's CPU per call
// (to set beside the hub's, on the same machine) and its errors.
func (run *loopRun) report(res *Result) {
	done := len(run.latencies)
	res.add("requests_per_s", rate(int64(done), run.elapsed))
	res.addLatencies("latency", run.latencies)
	res.add("requests_done", float64(done))
	if run.toolCPU >= 0 && done > 0 {
		res.add("tool_cpu_us_per_request", run.toolCPU*1e6/float64(done))
	}
	res.add("elapsed_s", run.elapsed.Seconds())
	run.errs.fill(res)
}

// toolCPUSeconds is the user and system CPU time this process has used; -1
// where the system does not tell.
func toolCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
