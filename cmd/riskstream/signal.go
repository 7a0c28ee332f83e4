package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// notifyStop returns a context cancelled at the first SIGINT or SIGTERM:
// the job stops fetching, flushes its outputs and writes a final
// checkpoint. A second signal calls exit at once with 128 plus its number,
// whatever the job is waiting for (a broker, a disk): the job ends without
// the final checkpoint and the next run resumes from the last one. stop
// releases the signals.
func notifyStop(parent context.Context, stderr io.Writer, exit func(code int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			slog.Info("stopping after a final checkpoint; a second signal stops at once", "signal", sig)
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			fmt.Fprintf(stderr, "riskstream: %v again: exiting without a final checkpoint; the next run resumes from the last one\n", sig)
			code := 1
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			exit(code)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// notifyReload returns a channel that receives when the process gets
// SIGHUP, the conventional "reload your configuration", and a function
// that stops it. A signal that comes while one is pending is merged with
// it.
func notifyReload() (<-chan struct{}, func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sigs:
				select {
				case reload <- struct{}{}:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return reload, func() {
		signal.Stop(sigs)
		close(done)
	}
}
