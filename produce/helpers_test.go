package produce

import (
	"compress/gzip"
	"io"
	"os"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
)

// bundledInput is the recorded input of the README's replay.
const bundledInput = "../testdata/requests.jsonl.gz"

// readBundledInput returns the bundled input, uncompressed.
func readBundledInput(t testing.TB) []byte {
	t.Helper()
	f, err := os.Open(bundledInput)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readPartition reads every message of one partition of a topic, up to its
// last offset when called.
func readPartition(t testing.TB, addr, topic string, partition int) []kafka.Message {
	t.Helper()
	return kafkatest.ReadPartition(t, addr, topic, partition, time.Minute)
}

// readMessages reads the first n messages of one partition of a topic,
// waiting up to a minute for them to arrive.
func readMessages(t testing.TB, addr, topic string, partition, n int) []kafka.Message {
	t.Helper()
	return kafkatest.ReadMessages(t, nil, addr, topic, partition, n, time.Minute)
}

// testClient is a client of the broker at addr.
func testClient(t testing.TB, addr string, timeout time.Duration) *kafka.Client {
	conns := &kafka.Transport{}
	t.Cleanup(conns.CloseIdleConnections)
	return &kafka.Client{Addr: kafka.TCP(addr), Transport: conns, Timeout: timeout}
}
