package driver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riskstream/riskstream/kafkaio"
)

// TestCheckpointClockDue: a checkpoint is due once an interval has passed
// since the last one, whenever the loop asks, and the next is due an
// interval after it was taken, not after it was first due.
func TestCheckpointClockDue(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	c := newCheckpointClock(time.Second, start)
	defer c.stop()
	for _, step := range []struct {
		at   time.Duration // since start
		want bool
	}{
		{0, false},
		{999 * time.Millisecond, false},
		{1500 * time.Millisecond, true}, // due since 1s, asked late
		{2 * time.Second, false},        // next due at 2.5s
		{2499 * time.Millisecond, false},
		{2500 * time.Millisecond, true},
		{2500 * time.Millisecond, false},
		{10 * time.Second, true},
	} {
		if got := c.due(start.Add(step.at)); got != step.want {
			t.Fatalf("due at +%v = %v, want %v", step.at, got, step.want)
		}
	}
}

// TestCheckpointClockWakes: the timer wakes an idle loop an interval after
// the last checkpoint.
func TestCheckpointClockWakes(t *testing.T) {
	c := newCheckpointClock(20*time.Millisecond, time.Now())
	defer c.stop()
	for range 2 {
		select {
		case <-c.timer.C:
		case <-time.After(5 * time.Second):
			t.Fatal("the timer did not fire")
		}
		if !c.due(time.Now()) {
			t.Fatal("woken before the checkpoint was due")
		}
	}
}

// TestRunSources: each source's fetches go to its own Take, in the order
// each channel brought them, and Finished ends the loop with no error.
func TestRunSources(t *testing.T) {
	var chans [MaxSources]chan kafkaio.Fetch
	var sources []Source
	took := make([][]int32, MaxSources)
	for i := range chans {
		chans[i] = make(chan kafkaio.Fetch, 10)
		for p := range 5 {
			chans[i] <- kafkaio.Fetch{Partition: int32(10*i + p)}
		}
		sources = append(sources, Source{Fetched: chans[i], Take: func(f kafkaio.Fetch) error {
			took[i] = append(took[i], f.Partition)
			return nil
		}})
	}
	err := Run(context.Background(), Options{Sources: sources, Finished: func() bool {
		return len(took[0])+len(took[1])+len(took[2]) == 3*5
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range chans {
		if want := []int32{int32(10 * i), int32(10*i + 1), int32(10*i + 2), int32(10*i + 3), int32(10*i + 4)}; !slices.Equal(took[i], want) {
			t.Errorf("source %d took %v, want %v", i, took[i], want)
		}
	}
}

// TestRunHeld: while the input is not held, the sources marked Held and
// the tick wait and the others are taken; once Held's channel says it
// changed, they are taken again.
func TestRunHeld(t *testing.T) {
	input, other := make(chan kafkaio.Fetch, 1), make(chan kafkaio.Fetch, 1)
	held, changed := false, make(chan struct{})
	var steps []string
	input <- kafkaio.Fetch{}
	other <- kafkaio.Fetch{}
	err := Run(context.Background(), Options{
		Sources: []Source{
			{Fetched: input, Held: true, Take: func(kafkaio.Fetch) error { steps = append(steps, "input"); return nil }},
			{Fetched: other, Take: func(kafkaio.Fetch) error {
				steps = append(steps, "other")
				held = true
				close(changed) // the group is back
				return nil
			}},
		},
		Held:         func() (bool, <-chan struct{}) { return held, changed },
		TickInterval: time.Millisecond,
		Tick: func(time.Time) error {
			if !held {
				t.Error("ticked while the input was not held")
			}
			return nil
		},
		Finished: func() bool { return len(steps) == 2 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"other", "input"}; !slices.Equal(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
}

// TestRunEnds: a step's error ends the loop with it, and the end of the
// loop's context with what Stop returns.
func TestRunEnds(t *testing.T) {
	mail := make(chan Mail, 1)
	failed := errors.New("the store failed")
	mail <- func() error { return failed }
	if err := Run(context.Background(), Options{Mail: mail}); !errors.Is(err, failed) {
		t.Fatalf("mail failed: %v, want %v", err, failed)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := errors.New("stopped after a final checkpoint")
	if err := Run(ctx, Options{Stop: func() error { return stopped }}); !errors.Is(err, stopped) {
		t.Fatalf("stopped: %v, want %v", err, stopped)
	}
}

// TestRunMailClosed: closing the mail ends the loop with no error, once
// every step sent before it has run, in order.
func TestRunMailClosed(t *testing.T) {
	mail := make(chan Mail, 3)
	var ran []int
	for i := range 3 {
		mail <- func() error { ran = append(ran, i); return nil }
	}
	close(mail)
	if err := Run(context.Background(), Options{Mail: mail}); err != nil {
		t.Fatalf("mail closed: %v, want no error", err)
	}
	if want := []int{0, 1, 2}; !slices.Equal(ran, want) {
		t.Fatalf("steps %v, want %v", ran, want)
	}
}

// TestRunCheckpoints: a checkpoint runs after the step during which its
// interval passed, never within one, and the tick is told when the next
// is due.
func TestRunCheckpoints(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	fetched := make(chan kafkaio.Fetch, 3)
	for range 3 {
		fetched <- kafkaio.Fetch{}
	}
	var steps []string
	err := Run(context.Background(), Options{
		Sources: []Source{{Fetched: fetched, Take: func(kafkaio.Fetch) error {
			steps = append(steps, "take")
			now = now.Add(600 * time.Millisecond)
			return nil
		}}},
		CheckpointInterval: time.Second,
		Checkpoint: func() error {
			steps = append(steps, "checkpoint")
			return nil
		},
		Finished: func() bool { return len(steps) == 4 },
		Now:      func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	// At 600 ms, 1.2 s (due: the next at 2.2 s), 1.8 s.
	if want := []string{"take", "take", "checkpoint", "take"}; !slices.Equal(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}

	// The tick hears of the next checkpoint.
	start := time.Now()
	var next time.Time
	err = Run(context.Background(), Options{
		TickInterval: time.Millisecond, Tick: func(n time.Time) error { next = n; return nil },
		CheckpointInterval: time.Hour, Checkpoint: func() error { return nil },
		Finished: func() bool { return !next.IsZero() },
	})
	if err != nil || next.Sub(start) < 59*time.Minute || next.Sub(start) > 61*time.Minute {
		t.Fatalf("tick told the next checkpoint is at %v, %v after the start (%v), want an hour", next, next.Sub(start), err)
	}
}

// TestValidate: options the loop cannot run are refused, each named.
func TestValidate(t *testing.T) {
	c := make(chan kafkaio.Fetch)
	take := func(kafkaio.Fetch) error { return nil }
	o := Options{
		Sources:      []Source{{Fetched: c, Take: take, Held: true}, {Fetched: c}, {Fetched: c, Take: take}, {Fetched: c, Take: take}},
		Tick:         func(time.Time) error { return nil },
		Checkpoint:   func() error { return nil },
		TickInterval: 0,
	}
	err := o.Validate()
	for _, want := range []string{"4 sources, at most 3", "source 1 needs", "source 0 waits", "a tick every 0s", "a checkpoint every 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q", err, want)
		}
	}
}

// TestRunWorked: Worked is told each step's time, its checkpoint
// included, and not the time the loop waited for it.
func TestRunWorked(t *testing.T) {
	var clock atomic.Int64 // ms
	clock.Store(1_000_000)
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	fetched := make(chan kafkaio.Fetch)
	go func() {
		fetched <- kafkaio.Fetch{}
		time.Sleep(20 * time.Millisecond) // the loop waits in its select
		clock.Add(60_000)
		fetched <- kafkaio.Fetch{}
	}()
	var worked []time.Duration
	err := Run(context.Background(), Options{
		Sources: []Source{{Fetched: fetched, Take: func(kafkaio.Fetch) error {
			clock.Add(300)
			return nil
		}}},
		CheckpointInterval: 500 * time.Millisecond,
		Checkpoint:         func() error { clock.Add(50); return nil },
		Worked:             func(took time.Duration) { worked = append(worked, took) },
		Finished:           func() bool { return len(worked) == 2 },
		Now:                now,
	})
	if err != nil {
		t.Fatal(err)
	}
	// 300 ms; then, a minute later, 300 ms and the checkpoint then due,
	// 50 ms.
	if want := []time.Duration{300 * time.Millisecond, 350 * time.Millisecond}; !slices.Equal(worked, want) {
		t.Fatalf("worked %v, want %v", worked, want)
	}
}
