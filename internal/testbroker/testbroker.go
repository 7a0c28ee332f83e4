// Package testbroker starts the embedded broker for tests, with the
// topics the job reads and writes.
package testbroker

import (
	"testing"

	"github.com/riskstream/riskstream/broker"
)

// Start starts the embedded broker on a free loopback port, with
// partitions input partitions (topic requests) and one per output topic,
// closed when the test ends. It returns the broker's address.
func Start(t testing.TB, partitions int32) string {
	t.Helper()
	return StartAppending(t, partitions, nil)
}

// StartAppending is Start with the broker's Options.Appending hook, which
// sees when each produce request's records reach the broker.
func StartAppending(t testing.TB, partitions int32, appending func(topic string, partition int32, records int)) string {
	t.Helper()
	b, err := broker.Start(broker.Options{
		Addr:      "127.0.0.1:0",
		Topics:    map[string]int32{"requests": partitions, "decisions": 1, "heatmaps": 1, "late": 1, "dlq": 1},
		Appending: appending,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}
