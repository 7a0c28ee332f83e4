package sink

import (
	"fmt"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestSASLRefusalNotPermanent: a connection the brokers' SASL refused is
// retried like an outage, not taken for a refusal of the messages.
func TestSASLRefusalNotPermanent(t *testing.T) {
	for _, err := range []error{
		kafka.SASLAuthenticationFailed,
		fmt.Errorf("%w: bad password", kafka.SASLAuthenticationFailed), // as kafka-go's transport reports it
		kafka.IllegalSASLState,
		kafka.UnsupportedSASLMechanism,
		kafka.WriteErrors{kafka.SASLAuthenticationFailed, nil},
	} {
		if Permanent(fmt.Errorf("wrapped: %w", err)) {
			t.Errorf("Permanent(%v) = true", err)
		}
	}
}
