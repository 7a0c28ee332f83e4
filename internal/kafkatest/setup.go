package kafkatest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// FaultsEnv gates the fault-injection suites: processes killed with
// SIGKILL many times over, brokers restarted, which take minutes. CI sets
// it.
const FaultsEnv = "RISKSTREAM_FAULTS"

// Faults reports whether the fault-injection suites run.
func Faults() bool { return os.Getenv(FaultsEnv) != "" }

// FreeAddr returns a loopback address no one listens on, for a broker or
// an HTTP server a test starts later.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// WaitMembers waits up to 30 s for the consumer group riskstream to have n
// members, and fails the test if it does not.
func WaitMembers(t testing.TB, addr string, n int) {
	t.Helper()
	client := Client(t, addr, 5*time.Second)
	var got int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := client.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: []string{"riskstream"}})
		if err != nil {
			continue
		}
		got = 0
		for _, g := range resp.Groups {
			got += len(g.Members)
		}
		if got == n {
			return
		}
	}
	t.Fatalf("the group has %d members, want %d", got, n)
}
