package groupcommit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// The next group is prepared while the previous one is still finishing, and
// groups finish in the order they were prepared.
func TestNextGroupIsPreparedWhileThePreviousFinishes(t *testing.T) {
	release := make(chan struct{})
	prepared := make(chan int, 10)
	var mu sync.Mutex
	var finished []int
	p := New(16, Options[int]{
		Ahead: 2,
		Prepare: func(group []int) func() {
			prepared <- group[0]
			return func() {
				if group[0] == 1 {
					<-release // group 1 is slow to become durable
				}
				mu.Lock()
				finished = append(finished, group...)
				mu.Unlock()
			}
		},
	})
	ctx := context.Background()
	if err := p.Submit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, prepared, 1)
	if err := p.Submit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, prepared, 2) // while group 1 is still finishing
	close(release)
	p.Close()
	if !slices.Equal(finished, []int{1, 2}) {
		t.Fatalf("finished in order %v", finished)
	}
}

func waitFor(t *testing.T, prepared chan int, want int) {
	t.Helper()
	select {
	case got := <-prepared:
		if got != want {
			t.Fatalf("prepared group %d, want %d", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("group %d was not prepared", want)
	}
}

// Requests queued while a group is prepared form the next group, up to the
// weight limit; the one that would exceed it starts the group after.
func TestRequestsQueuedMeanwhileShareAGroupUpToTheWeightLimit(t *testing.T) {
	started, block := make(chan struct{}), make(chan struct{})
	var groups [][]int
	p := New(16, Options[int]{
		MaxWeight: 10,
		Weight:    func(n int) int { return n },
		Prepare: func(group []int) func() {
			if group[0] == 0 {
				close(started)
				<-block
			}
			groups = append(groups, slices.Clone(group))
			return nil
		},
	})
	ctx := context.Background()
	_ = p.Submit(ctx, 0)
	<-started
	if n := p.Queued(); n != 0 {
		t.Fatalf("%d queued once the first group is taken, want 0", n)
	}
	for _, n := range []int{3, 4, 2, 5, 20} {
		if err := p.Submit(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Queued(); n != 5 {
		t.Fatalf("%d queued while the first group is prepared, want 5", n)
	}
	close(block)
	p.Close()
	want := [][]int{{0}, {3, 4, 2}, {5}, {20}}
	if !slices.EqualFunc(groups, want, slices.Equal) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
}

// Flush returns only once every group prepared before it has finished.
func TestFlushWaitsForEarlierGroupsToFinish(t *testing.T) {
	var finished []int
	started := make(chan struct{})
	var p *Pipeline[int]
	p = New(4, Options[int]{
		Prepare: func(group []int) func() {
			if group[0] == 1 {
				close(started)
			}
			if group[0] == 2 {
				p.Flush()
				if !slices.Equal(finished, []int{1}) {
					t.Errorf("after Flush, finished %v", finished)
				}
			}
			return func() {
				time.Sleep(10 * time.Millisecond)
				finished = append(finished, group[0])
			}
		},
	})
	ctx := context.Background()
	_ = p.Submit(ctx, 1)
	<-started
	_ = p.Submit(ctx, 2)
	p.Close()
	if !slices.Equal(finished, []int{1, 2}) {
		t.Fatalf("finished %v", finished)
	}
}

func TestSubmitAfterCloseFails(t *testing.T) {
	p := New(1, Options[int]{Prepare: func([]int) func() { return nil }})
	p.Close()
	p.Close() // twice is fine
	if err := p.Submit(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}

func TestSubmitGivesUpWhenTheContextEnds(t *testing.T) {
	block, preparing := make(chan struct{}), make(chan struct{}, 1)
	p := New(0, Options[int]{Prepare: func([]int) func() { preparing <- struct{}{}; <-block; return nil }})
	defer p.Close()
	defer close(block)
	_ = p.Submit(context.Background(), 1) // taken by the collector, which blocks
	// Once its group is being prepared, nothing takes a request: a second
	// sent before that could still join the first's group.
	<-preparing
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Submit(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit with a full queue: %v", err)
	}
}
